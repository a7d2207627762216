#!/usr/bin/env bash
# The twelfth session's GPU run (device tool, `carry: [".whl", ".real"]`; .whl from
# bench/gpu_wheels.sh, .real/liger from bench/real_history.py as in bench/RESULTS.md): one
# real-library range, Liger-Kernel #1247..#1266, on a quiet GPU and then with a co-tenant
# hammering the same GPU for part of the run (issue 23: same culprits as on a quiet GPU).
#   bash bench/gpu_session12.sh liger OUTDIR     # quiet, then a co-tenant for the first COTENANT_S
#   bash bench/gpu_session12.sh shared OUTDIR    # the co-tenant run only (after the set-aside rule)
set -uo pipefail
part=$1; out=${2:-/tmp/gpu12}; mkdir -p "$out"
source bench/gpu_node_setup.sh
run() { echo "== $*"; local s=$(date +%s); "$@"; echo "== rc=$? in $(( $(date +%s) - s )) s"; }
work=/tmp/g12; mkdir -p $work && chmod 755 $work   # the sandbox user must traverse the homes
shas=($(git -C .real/liger rev-list --first-parent --reverse HEAD))
export GOOD=${shas[26]} BAD=${shas[39]} EXTRA="--env TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1"
if [ "$part" = liger ] || [ "$part" = shared ]; then
  [ "$part" = liger ] && BISECT_TIMEOUT=220 PERFBISECT_HOME=$work/quiet-home run bash bench/liger_bisect.sh .real/liger $work/quiet
  python3 bench/gpu_cotenant.py --seconds "${COTENANT_S:-120}" --busy 5 20 --idle 5 20 > $work/cotenant.log 2>&1 &
  BISECT_TIMEOUT=${SHARED_TIMEOUT:-300} PERFBISECT_HOME=$work/shared-home run bash bench/liger_bisect.sh .real/liger $work/shared
  wait
  tr '\n' ' ' < $work/cotenant.log; echo
  for d in quiet shared; do cp $work/$d/show.json "$out/liger-$d.json" 2>/dev/null; cp $work/$d/show.txt "$out/liger-$d.txt" 2>/dev/null; done
fi
