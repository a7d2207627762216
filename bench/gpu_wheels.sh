#!/usr/bin/env bash
# Fills .whl (ignored) with what a GPU node's stock image lacks to run the service stack
# (bench/gpu_node_setup.sh installs it there): the venv's pinned packages minus those the
# image already holds (the device tool's KINDS.md list), as cp312 manylinux wheels, plus
# Debian's bubblewrap package (the node has no network and no bwrap).
#   bash bench/gpu_wheels.sh
set -euo pipefail
have="absl-py accelerate aiofiles aiohttp anyio attrs certifi charset-normalizer click cloudpickle
filelock fsspec h11 httpcore httpx idna iniconfig jinja2 markdown-it-py markupsafe mdurl mpmath networkx
numpy nvidia-ml-py packaging pillow pip pluggy prometheus-client protobuf psutil pygments pytest
pytest-xdist execnet python-dateutil pyyaml requests rich scipy setuptools shellingham six sympy
torch triton typer typing-extensions urllib3 uvloop wheel"
skip=" $(echo $have | tr 'A-Z_' 'a-z-') "
mkdir -p .whl
pkgs=()
while IFS== read -r name ver; do
  n=$(echo "$name" | tr 'A-Z_' 'a-z-')
  case "$skip" in *" $n "*) continue;; esac
  case "$n" in nvidia-*|perfbisect|playwright|axe-*|schemathesis*|hypothesis|aiosmtpd|greenlet|pyee) continue;; esac
  pkgs+=("$name==$ver")
done < <(.venv/bin/python -m pip freeze --exclude-editable | grep '==')
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 --platform any -d .whl "${pkgs[@]}"
(cd .whl && apt-get download bubblewrap >/dev/null 2>&1 || true)
ls .whl | wc -l; du -sh .whl
