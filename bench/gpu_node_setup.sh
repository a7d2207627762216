# Sourced by the bench/gpu_session*.sh scripts on a GPU node with no network: the service stack
# from the cp312 wheels in .whl, bubblewrap from its Debian package, and what the node runs.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p /tmp/bw && dpkg -x .whl/bubblewrap_*.deb /tmp/bw
export PYTHONPATH="$PWD:/tmp/site" PATH="/tmp/bw/usr/bin:$PATH"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton, sys; print('torch', torch.__version__, 'triton', triton.__version__, 'python', sys.version.split()[0])"
bwrap --version
