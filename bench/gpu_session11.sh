#!/usr/bin/env bash
# The eleventh session's GPU runs (device tool, `carry: [".whl", ".real"]`; .whl from
# bench/gpu_wheels.sh, .real/liger from bench/real_history.py as in bench/RESULTS.md), in two
# calls that each fit the tool's 10-minute limit. Side-by-side blocks are the service's default
# since the tenth session; these runs check that verdicts hold with a co-tenant hammering the
# same GPU in random bursts (issue 23), and the attribution of the planted pair (issue 25).
#   bash bench/gpu_session11.sh demo OUTDIR    # GPU tests, demo attention quiet and shared, attribution
#   bash bench/gpu_session11.sh liger OUTDIR   # Liger-Kernel #1247..#1266 quiet and shared
#   bash bench/gpu_session11.sh shared OUTDIR  # the GPU tests, the demo attention range beside the
#                                              # co-tenant with room for the service's pauses
#   bash bench/gpu_session11.sh final OUTDIR   # after the pauses became 15/30/60 s: the demo attention
#                                              # range and Liger #1247..#1266, each beside the co-tenant
set -uo pipefail
part=$1; out=${2:-/tmp/gpu11}; mkdir -p "$out"
source bench/gpu_node_setup.sh
run() { echo "== $*"; local s=$(date +%s); "$@"; echo "== rc=$? in $(( $(date +%s) - s )) s"; }
work=/tmp/g11; mkdir -p $work && chmod 755 $work   # the sandbox user must traverse the homes
cotenant() { python3 bench/gpu_cotenant.py --seconds "$1" --busy 5 20 --idle 5 20 > "$work/cotenant-$2.log" 2>&1 & }
if [ "$part" = demo ]; then
  run timeout 120 python3 -m pytest -q -p no:cacheprovider -s --confcutdir=tests/kernels tests/kernels/test_gpu.py
  run timeout 150 bash bench/gpu_bisect.sh $work/bisect
  cotenant 200 bisect
  run timeout 200 bash bench/gpu_bisect.sh $work/bisect-cotenant
  wait
  tr '\n' ' ' < $work/cotenant-bisect.log; echo
  run timeout 130 bash bench/gpu_attribution.sh $work/attr
  for d in bisect bisect-cotenant attr; do cp $work/$d/gpu_*.json "$out/$d.json" 2>/dev/null; done
elif [ "$part" = shared ]; then
  run timeout 120 python3 -m pytest -q -p no:cacheprovider -s --confcutdir=tests/kernels tests/kernels/test_gpu.py
  cotenant 240 shared
  run timeout 400 bash bench/gpu_bisect.sh $work/shared
  wait
  tr '\n' ' ' < $work/cotenant-shared.log; echo
  PERFBISECT_HOME=$work/shared/home python3 -m perfbisect.cli.main show 1 --wide
  cp $work/shared/gpu_*.json "$out/shared.json" 2>/dev/null
elif [ "$part" = final ]; then
  cotenant 200 final
  run timeout 230 bash bench/gpu_bisect.sh $work/final
  PERFBISECT_HOME=$work/final/home python3 -m perfbisect.cli.main show 1 --wide
  wait
  tr '\n' ' ' < $work/cotenant-final.log; echo
  shas=($(git -C .real/liger rev-list --first-parent --reverse HEAD))
  export GOOD=${shas[26]} BAD=${shas[39]} EXTRA="--env TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1" BISECT_TIMEOUT=260
  cotenant 260 liger
  PERFBISECT_HOME=$work/liger-home2 run bash bench/liger_bisect.sh .real/liger $work/liger-cotenant
  wait
  tr '\n' ' ' < $work/cotenant-liger.log; echo
  cp $work/final/gpu_*.json "$out/final.json"; cp $work/liger-cotenant/show.json "$out/liger-cotenant.json"
else
  shas=($(git -C .real/liger rev-list --first-parent --reverse HEAD))
  export GOOD=${shas[26]} BAD=${shas[39]} EXTRA="--env TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1" BISECT_TIMEOUT=200
  PERFBISECT_HOME=$work/liger-home run bash bench/liger_bisect.sh .real/liger $work/liger
  cotenant 300 liger
  BISECT_TIMEOUT=320 PERFBISECT_HOME=$work/liger-home2 run bash bench/liger_bisect.sh .real/liger $work/liger-cotenant
  wait
  tr '\n' ' ' < $work/cotenant-liger.log; echo
  for d in liger liger-cotenant; do cp $work/$d/show.json "$out/$d.json" 2>/dev/null; done
fi
