#!/usr/bin/env bash
# A real bisect through the service on one GPU, embedded (SQLite, in-process tasks): the demo
# repository's commits 14..25 hold a broken import (16-18 unbuildable) and the dropped fast-math
# path in attention (22: a bump of minicc, whose own culprit the descent names). Run from the repository root on a GPU node, the service stack on
# PYTHONPATH (see bench/RESULTS.md for how it was carried to the H200):
#   bash bench/gpu_bisect.sh OUTDIR
set -euo pipefail
out=${1:-/tmp/perfbisect-gpu-bisect}
mkdir -p "$out"
export PERFBISECT_HOME="$out/home" PYTHONPATH="$PWD:${PYTHONPATH:-}"
python3 -m perfbisect.cli.main demo-repo "$out/minikern" >/dev/null
# minicc, written beside it, is the dependency #22 bumps (issue 44): registered, then declared
python3 -m perfbisect.cli.main repo add "$out/minikern.minicc" --name minicc >/dev/null
python3 -m perfbisect.cli.main repo add "$out/minikern" --name minikern --build "{python} -m compileall -q minikern" \
  --dependency '{"name": "minicc", "repository": "minicc", "path": "minicc", "pin": {"kind": "assign", "file": "minicc.pin", "key": "REV"}}' \
  >/dev/null  # placed at minicc/, where minikern imports it (the short form places it under .perfbisect-deps/)
shas=($(git -C "$out/minikern" rev-list --first-parent --reverse HEAD))
policy=$(python3 -c "import json; from perfbisect.kernels.demo import DEMO_GPU_POLICY as p; print(json.dumps(p))")
start=$(date +%s)
python3 -m perfbisect.cli.main bisect --repo minikern --good "${shas[14]}" --bad "${shas[25]}" \
  --suite attention --target minikern.attention:attention \
  --shape B=2,H=32,S=1024,D=128,causal=false,dtype=bf16 --shape B=2,H=32,S=4096,D=128,causal=false,dtype=bf16 \
  --device-class cuda --min-effect 0.02 --policy "$policy" \
  --json > "$out/gpu_bisect.json" || true
echo "wall_s=$(( $(date +%s) - start ))"
python3 -m perfbisect.cli.main show 1 2>/dev/null || true
python3 bench/job_phases.py 1 || true
