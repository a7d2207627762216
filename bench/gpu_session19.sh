#!/usr/bin/env bash
# The nineteenth session's GPU run, one device call (`carry: [".whl"]`, .whl from
# bench/gpu_wheels.sh): the GPU tests; the compiled-code evidence of the demo's #924 (minicc's
# fast exp dropped, issue 44's bump) and #930 (bf16 BLOCK_K 64 -> 32) from each end's Triton JIT
# cache (issue 43); the first timed sample per trial now that the fork server fills Triton's
# one-off caches before it forks (issue 40); the demo's attention bisect under required
# namespaces, with its descent into minicc.
#   bash bench/gpu_session19.sh OUTDIR
set -uo pipefail
out=${1:-/tmp/gpu19}; mkdir -p "$out"
source bench/gpu_node_setup.sh
run() { echo "== $*"; local s=$(date +%s); "$@"; echo "== rc=$? in $(( $(date +%s) - s )) s"; }
work=/tmp/g19; mkdir -p $work && chmod 755 $work   # the sandbox user must traverse the homes
export PERFBISECT_HOME=$work/home; mkdir -p $PERFBISECT_HOME && chmod 755 $PERFBISECT_HOME
run python3 -m pytest -q -p no:cacheprovider --confcutdir=tests/kernels tests/kernels/test_gpu.py
run python3 bench/evidence_demo.py --device cuda --json "$out/evidence.json"
run python3 bench/trial_phases.py --device cuda --cases attention --trials 6 --sandbox namespaces --json "$out/phases-ns.json"
PERFBISECT_SANDBOX_NAMESPACES=required run timeout 240 bash bench/gpu_bisect.sh $work/bisect
cp $work/bisect/gpu_bisect.json "$out/" 2>/dev/null
true
