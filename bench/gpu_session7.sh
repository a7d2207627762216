#!/usr/bin/env bash
# The seventh session's H200 run, one device call: the service stack from cp312 wheels in .whl,
# bubblewrap unpacked from its Debian package (the node has no network), then the GPU tests with
# the flush self-check, the flush table, containment cost per trial (slot vs namespaces), the
# demo attention bisect, and the attribution of the planted interacting pair.
#   bash bench/gpu_session7.sh OUTDIR
set -uo pipefail
out=${1:-/tmp/gpu7}; mkdir -p "$out"
source bench/gpu_node_setup.sh
run() { echo "== $*"; local s=$(date +%s); "$@"; echo "== rc=$? in $(( $(date +%s) - s )) s"; }
run python3 -m pytest -q -p no:cacheprovider -s --confcutdir=tests/kernels tests/kernels/test_gpu.py
run python3 bench/flush_check.py --device cuda --repeats 3
run python3 -m perfbisect.cli.main doctor
run python3 bench/trial_phases.py --device cuda --cases attention --trials 6 --sandbox slot
run python3 bench/trial_phases.py --device cuda --cases attention --trials 6 --sandbox namespaces
run bash bench/gpu_bisect.sh "$out/bisect"
run bash bench/gpu_attribution.sh "$out/attr"
