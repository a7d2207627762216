#!/usr/bin/env bash
# The twentieth session's GPU run (helper D; device tool, the service stack as cp312 wheels in
# .whl from bench/gpu_wheels.sh, Liger's rebuilt history in .real/liger from bench/real_history.py):
#   descent   the demo's attention bisect under required namespaces, with its descent into minicc
#             (issue 44: the nineteenth session's child found no step, minicc was placed where
#             minikern does not import it; bench/gpu_bisect.sh now places it at minicc/)
#   evidence  the compiled-code and kernel evidence of #924 and #930 on every case each moves
#             (issue 43: the gemm kernel's delta read "+0.025 us per call" on one case)
#   liger     Liger-Kernel #1250..#1266 with --localize and --evidence (issue 43: the hunk of a real
#             library's culprit, and its kernel and compiled code)
#   tests     tests/kernels/test_gpu.py
#   bash bench/gpu_session20.sh OUTDIR [PART ...]      # default: every part, in the order above
set -uo pipefail
out=${1:-/tmp/gpu20}; shift || true
parts=${*:-descent evidence liger tests}
mkdir -p "$out"
source bench/gpu_node_setup.sh
run() { echo "== $*"; local s=$(date +%s); "$@"; local rc=$?; echo "== rc=$rc in $(( $(date +%s) - s )) s"; }
work=/tmp/g20; mkdir -p $work && chmod 755 $work   # the sandbox user must traverse the homes
export PYTHONUNBUFFERED=1
for part in $parts; do
  case $part in
    descent)
      PERFBISECT_SANDBOX_NAMESPACES=required run timeout 330 bash bench/gpu_bisect.sh $work/bisect 2>&1 | tee "$out/descent.txt"
      (export PERFBISECT_HOME=$work/bisect/home; for job in 2 3; do
         python3 -m perfbisect.cli.main show $job --wide 2>&1 || true; done) | tee -a "$out/descent.txt"
      cp $work/bisect/gpu_bisect.json "$out/" 2>/dev/null ;;
    evidence)
      PERFBISECT_HOME=$work/evidence-home run timeout 300 python3 bench/evidence_demo.py --device cuda \
        --json "$out/evidence.json" 2>&1 | tee "$out/evidence.txt" ;;
    liger)
      GOOD=542daf6157 BAD=07188518c2 BISECT_TIMEOUT=${LIGER_TIMEOUT:-300} PERFBISECT_HOME=$work/liger-home \
        EXTRA="--env TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1 --localize --evidence" \
        run bash bench/liger_bisect.sh .real/liger $work/liger 2>&1 | tail -n 400 > "$out/liger.txt"
      tail -n 60 "$out/liger.txt"
      cp $work/liger/show.txt "$out/liger_show.txt" 2>/dev/null
      cp $work/liger/show.json "$out/liger_show.json" 2>/dev/null
      PERFBISECT_HOME=$work/liger-home python3 -m perfbisect.cli.main show 2 --wide > "$out/liger_job2.txt" 2>&1
      PERFBISECT_HOME=$work/liger-home python3 bench/job_phases.py 2 >> "$out/liger_job2.txt" 2>&1
      tail -n 40 "$out/liger_job2.txt" ;;
    tests)
      run python3 -m pytest -q -p no:cacheprovider --confcutdir=tests/kernels tests/kernels/test_gpu.py 2>&1 | tail -n 5 ;;
  esac
done
true
