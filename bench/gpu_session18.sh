#!/usr/bin/env bash
# The eighteenth session's GPU run, one device call (`carry: [".whl"]`, .whl from
# bench/gpu_wheels.sh): after issue 40's containment (a trial's teardown by the namespace's init,
# a mount namespace and no capabilities per trial, the memory budget), the GPU tests, the doctor's
# memory line, the first timed sample per trial with and without namespaces, and the demo's
# attention bisect through the embedded service under namespaces.
#   bash bench/gpu_session18.sh OUTDIR
set -uo pipefail
out=${1:-/tmp/gpu18}; mkdir -p "$out"
source bench/gpu_node_setup.sh
run() { echo "== $*"; local s=$(date +%s); "$@"; echo "== rc=$? in $(( $(date +%s) - s )) s"; }
work=/tmp/g18; mkdir -p $work && chmod 755 $work   # the sandbox user must traverse the homes
export PERFBISECT_HOME=$work/home; mkdir -p $PERFBISECT_HOME && chmod 755 $PERFBISECT_HOME
run python3 -m pytest -q -p no:cacheprovider --confcutdir=tests/kernels tests/kernels/test_gpu.py
run python3 -m perfbisect.cli.main doctor
run python3 bench/trial_phases.py --device cuda --cases attention --trials 6 --sandbox slot --json "$out/phases-slot.json"
run python3 bench/trial_phases.py --device cuda --cases attention --trials 6 --sandbox namespaces --json "$out/phases-ns.json"
PERFBISECT_SANDBOX_NAMESPACES=required run bash bench/gpu_bisect.sh $work/bisect
cp $work/bisect/gpu_bisect.json "$out/" 2>/dev/null
ls /tmp | grep -c perfbisect-zygote || true
