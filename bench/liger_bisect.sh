#!/usr/bin/env bash
# The real-library bisect of bench/RESULTS.md on one GPU, embedded (SQLite, in-process tasks):
# Liger-Kernel's fused cross entropy over a history rebuilt by bench/real_history.py (the
# src/liger_kernel layout, imported from `src`), with the suite file kept outside that history
# and fork-server trials (trusted code). Run from the repository root on a GPU node, the service
# stack on PYTHONPATH:
#   bash bench/liger_bisect.sh LIGER_REPO OUTDIR
# OUTDIR gets the bisect's output, the job's report (text and JSON), its trial phases and the
# SQLite file. BISECT_TIMEOUT (default 520 s) bounds the bisect so what it has is still printed;
# MIN_EFFECT (default 0.05) is the smallest step of the ratio to control worth naming; GOOD and
# BAD (default: the first and last commits) narrow the range, and EXTRA adds flags (e.g.
# "--env TRITON_ALLOW_NON_CONSTEXPR_GLOBALS=1", which #1266 needs on triton 3.6).
set -uo pipefail
repo=$(realpath "$1")
out=${2:-/tmp/liger-bisect}
mkdir -p "$out"
export PERFBISECT_HOME=${PERFBISECT_HOME:-/tmp/liger-home} PYTHONPATH="$PWD:${PYTHONPATH:-}"
export PERFBISECT_TRIAL_LAUNCHER=fork-server PYTHONUNBUFFERED=1
good=${GOOD:-$(git -C "$repo" rev-list --max-parents=0 HEAD)}
bad=${BAD:-$(git -C "$repo" rev-parse HEAD)}
policy=$(python3 -c "import json; from perfbisect.kernels.demo import DEMO_GPU_POLICY as p; print(json.dumps(p))")
pb="python3 -m perfbisect.cli.main"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
echo "good=$good bad=$bad policy=$policy"
start=$(date +%s)
timeout "${BISECT_TIMEOUT:-520}" $pb bisect --repo "$repo" --good "$good" --bad "$bad" \
  --suite-file bench/suites/liger_cross_entropy.py \
  --target liger_kernel.ops.cross_entropy:cross_entropy_forward \
  --shape BT=8192,V=128256,dtype=bf16 --shape BT=8192,V=128256,dtype=fp32 \
  --device-class cuda --min-effect "${MIN_EFFECT:-0.05}" --import-root src --policy "$policy" --wide ${EXTRA:-} > "$out/bisect.txt" 2>&1
echo "bisect rc=$? wall_s=$(( $(date +%s) - start ))"
cat "$out/bisect.txt"
$pb show 1 --wide > "$out/show.txt" 2>&1; echo "show rc=$?"
$pb show 1 --json > "$out/show.json" 2>&1
python3 bench/job_phases.py 1 2>&1 | tee "$out/phases.txt"
cp "$PERFBISECT_HOME/perfbisect.sqlite" "$out/" 2>/dev/null || true
