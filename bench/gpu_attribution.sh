#!/usr/bin/env bash
# Attribution of the demo's planted interacting pair on one GPU, embedded (SQLite, in-process
# tasks): bisect the demo repository's commits 2..7 on RMSNorm (#905 launches the rows in grids
# of 1024, #908 checks the weight with two host round trips per launch), which names both, then
# the attribution job that follows measures the head with #905, #908 and both reverted, side by
# side with it, and prints what each costs at the head and their interaction. Run from the
# repository root on a GPU node, the service stack on PYTHONPATH (as for bench/gpu_bisect.sh):
#   bash bench/gpu_attribution.sh OUTDIR
set -euo pipefail
out=${1:-/tmp/perfbisect-gpu-attribution}
mkdir -p "$out"
export PERFBISECT_HOME="$out/home" PYTHONPATH="$PWD:${PYTHONPATH:-}"
python3 -m perfbisect.cli.main demo-repo "$out/minikern" >/dev/null
shas=($(git -C "$out/minikern" rev-list --first-parent --reverse HEAD))
policy=$(python3 -c "import json; from perfbisect.kernels.demo import DEMO_GPU_POLICY as p; print(json.dumps(p))")
start=$(date +%s)
python3 -m perfbisect.cli.main bisect --repo "$out/minikern" --good "${shas[2]}" --bad "${shas[7]}" \
  --suite rmsnorm --target minikern.rmsnorm:rms_norm \
  --shape M=16384,N=8192,dtype=bf16 --shape M=4096,N=8192,dtype=bf16 \
  --device-class cuda --min-effect 0.02 --build "{python} -m compileall -q minikern" --policy "$policy" \
  --attribute --json > "$out/gpu_attribution.json" || true
echo "wall_s=$(( $(date +%s) - start ))"
python3 -m perfbisect.cli.main show 1 2>/dev/null || true   # the bisect, with the attribution section
python3 -m perfbisect.cli.main show 2 2>/dev/null || true   # the attribution job itself
python3 - "$out/gpu_attribution.json" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))
for case in (job.get("attribution") or {}).get("cases", []):
    print(case["case"], "| verdict:", case["verdict"], "|", case["words"])
PY
