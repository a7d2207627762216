# The two commands of the README. Each sets up what it needs on a fresh machine.
#   make demo   - install, write the demo kernel repository, bisect it, print the culprits
#   make test   - install, make sure PostgreSQL, Redis and Chromium are there, run the test suite
# The venv's interpreter must be one the sandbox user (nobody) can run: a root worker runs the
# repository's code as that user with this interpreter. One under a private home (pyenv under
# /root, mode 0700) cannot be run by it, and the contained-trial tests would skip. So the
# system's Python 3.11 or 3.12 comes first when there is one; `make PYTHON=...` chooses another.
PYTHON ?= $(or $(firstword $(foreach p,/usr/bin/python3 /usr/local/bin/python3 python3,$(shell $(p) -c \
	'import sys, venv, ensurepip; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 12))' 2>/dev/null && echo $(p)))),python3)
VENV ?= .venv
BIN = $(VENV)/bin

.PHONY: demo test install services system-packages chromium bench wheelhouse

# The checkout's folders are mapped under `perfbisect`, so the editable install is a meta path
# finder (what keeps `kernels` from being a top-level import) and setuptools says so in a 10-line
# warning on every install: that one is silenced, nothing else is.
$(VENV)/.installed: pyproject.toml setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch==2.13.0 (CPU build) comes from constraints.txt, so no multi-GB CUDA build is pulled.
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/pip install -q -c constraints.txt -e '.[test]'
	touch $@

install: $(VENV)/.installed

demo: install system-packages
	$(BIN)/perfbisect demo

services:
	bash scripts/services.sh

# bubblewrap: builds and trials run in its namespaces (docs/containment.md)
system-packages:
	bash scripts/system_packages.sh

# Debian's Chromium for the browser tests: installed where root and apt allow, else a line says
# that the browser tests will be skipped (as in .ci/run).
chromium:
	@bash scripts/chromium.sh

# Two workers: the end-to-end tests that time real trials and recoveries (they start servers and
# workers of their own) first, the fault tests one after another on one worker and the demo
# bisects on the other, so no two demo bisects measure each other; everything else spread over
# both (tests/isolation.py, group_timed_e2e; checked by tests/test_suite_layout.py).
test: install services system-packages chromium
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not quiet" --durations=15

bench: install
	$(BIN)/python bench/bisect_accuracy.py --quick

# Offline install (GPU nodes without internet): every wheel perfbisect needs, made here and copied
# over; there `pip install --no-index --find-links wheelhouse perfbisect` (README, "Offline
# install"). EXTRAS=gpu adds triton and nvidia-ml-py. Made for this machine's platform and Python.
WHEELHOUSE ?= wheelhouse
EXTRAS ?=
wheelhouse: install
	rm -rf $(WHEELHOUSE)
	$(BIN)/pip wheel -q -c constraints.txt --no-build-isolation --wheel-dir $(WHEELHOUSE) '.$(if $(EXTRAS),[$(EXTRAS)])'
	@ls $(WHEELHOUSE) | wc -l | xargs -I{} echo "{} wheels in $(WHEELHOUSE)/"
