#!/usr/bin/env bash
# The ninth session's H200 run, one device call (`carry: [".whl"]`): the service stack from cp312
# wheels, bubblewrap from its Debian package, then the GPU tests (the fork server's start fixed
# since session 8), the flush table, and the demo's attention bisect and RMSNorm attribution as
# the sandbox user (their homes under /tmp: nobody cannot traverse /root), the bisect again with a
# co-tenant hammering the same GPU in random bursts.
#   bash bench/gpu_session9.sh OUTDIR
set -uo pipefail
out=${1:-/tmp/gpu9}; mkdir -p "$out"
source bench/gpu_node_setup.sh
run() { echo "== $*"; local s=$(date +%s); "$@"; echo "== rc=$? in $(( $(date +%s) - s )) s"; }
run python3 -m pytest -q -p no:cacheprovider -s --confcutdir=tests/kernels tests/kernels/test_gpu.py
run python3 bench/flush_check.py --device cuda --repeats 3
work=/tmp/g9; mkdir -p $work && chmod 755 $work
run bash bench/gpu_bisect.sh $work/bisect
run bash bench/gpu_attribution.sh $work/attr
python3 bench/gpu_cotenant.py --seconds 150 --busy 5 20 --idle 5 20 > $work/cotenant.log 2>&1 &
run bash bench/gpu_bisect.sh $work/bisect-cotenant
wait
cat $work/cotenant.log | tr '\n' ' '; echo
for d in bisect attr bisect-cotenant; do cp $work/$d/gpu_*.json "$out/$d.json" 2>/dev/null; done
