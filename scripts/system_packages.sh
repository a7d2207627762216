#!/usr/bin/env bash
# System packages perfbisect's workers need besides Python: bubblewrap, which puts every build and
# trial in Linux namespaces (kernels/harness/contain/bwrap.py, docs/containment.md). Reuses an installed one;
# without root or apt it only says so: workers then run repository code without namespaces (and
# say so loudly at every trial; production refuses), and the tests that need them skip, naming why.
set -euo pipefail
if command -v bwrap >/dev/null; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing bubblewrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
else
  echo "bubblewrap (bwrap) is not installed and cannot be installed here: repository code will run" \
       "without namespaces and the containment tests that need them will be skipped" >&2
fi
