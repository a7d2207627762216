#!/usr/bin/env bash
# A 64-commit range with one large step, bisected through the service on one GPU, embedded:
# the demo repository's commit 21 (good), 40 documentation commits, the demo's fast-math drop
# in attention (its commit 22, -20%/-25% on the H200), 23 more documentation commits.
#   bash bench/gpu_bisect64.sh OUTDIR
set -euo pipefail
out=${1:-/tmp/perfbisect-gpu-bisect64}
mkdir -p "$out"
export PERFBISECT_HOME="$out/home" PYTHONPATH="$PWD:${PYTHONPATH:-}"
python3 -m perfbisect.cli.main demo-repo "$out/minikern" >/dev/null
shas=($(git -C "$out/minikern" rev-list --first-parent --reverse HEAD))
git clone -q "$out/minikern" "$out/long"
cd "$out/long"
git -c advice.detachedHead=false checkout -q -b long "${shas[21]}"
note() { echo "note $1" >> NOTES.md; git add NOTES.md; git -c user.name=bench -c user.email=bench@example.com commit -qm "docs: note $1"; }
for i in $(seq 1 40); do note "$i"; done
git -c user.name=bench -c user.email=bench@example.com cherry-pick "${shas[22]}" >/dev/null
for i in $(seq 41 63); do note "$i"; done
good=${shas[21]}; bad=$(git rev-parse HEAD)
echo "range: $(git rev-list --count "$good..$bad") commits after $good"
cd - >/dev/null
policy=$(python3 -c "import json; from perfbisect.kernels.demo import DEMO_GPU_POLICY as p; print(json.dumps(p))")
start=$(date +%s)
python3 -m perfbisect.cli.main bisect --repo "$out/long" --good "$good" --bad "$bad" \
  --suite attention --target minikern.attention:attention \
  --shape B=2,H=32,S=1024,D=128,causal=false,dtype=bf16 --shape B=2,H=32,S=4096,D=128,causal=false,dtype=bf16 \
  --device-class cuda --min-effect 0.02 --build "{python} -m compileall -q minikern" --policy "$policy" \
  --json > "$out/gpu_bisect64.json" || true
echo "wall_s=$(( $(date +%s) - start ))"
python3 -m perfbisect.cli.main show 1 2>/dev/null || true
python3 bench/job_phases.py 1 || true
