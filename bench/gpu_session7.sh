#!/usr/bin/env bash
# The seventh session's H200 run, one device call: the service stack from cp312 wheels in .whl,
# bubblewrap unpacked from its Debian package (the node has no network), then the GPU tests with
# the flush self-check, the flush table, containment cost per trial (slot vs namespaces), the
# demo attention bisect, and the attribution of the planted interacting pair.
#   bash bench/gpu_session7.sh OUTDIR
set -uo pipefail
out=${1:-/tmp/gpu7}; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p /tmp/bw && dpkg -x .whl/bubblewrap_*.deb /tmp/bw
export PYTHONPATH="$PWD:/tmp/site" PATH="/tmp/bw/usr/bin:$PATH"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton, sys; print('torch', torch.__version__, 'triton', triton.__version__, 'python', sys.version.split()[0])"
bwrap --version
run() { echo "== $*"; local s=$(date +%s); "$@"; echo "== rc=$? in $(( $(date +%s) - s )) s"; }
run python3 -m pytest -q -p no:cacheprovider -s --confcutdir=tests/kernels tests/kernels/test_gpu.py
run python3 bench/flush_check.py --device cuda --repeats 3
run python3 -m perfbisect.service.cli.main doctor
run python3 bench/trial_phases.py --device cuda --cases attention --trials 6 --sandbox slot
run python3 bench/trial_phases.py --device cuda --cases attention --trials 6 --sandbox namespaces
run bash bench/gpu_bisect.sh "$out/bisect"
run bash bench/gpu_attribution.sh "$out/attr"
