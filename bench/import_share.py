"""How much of a trial goes to importing a heavy pure-Python library, without and with the
suite's PRELOAD (kernels/harness/preload.py): sympy's source (from this interpreter's install,
without its bytecode) committed as a repository, a calls/s suite kept outside it, N trials of
one revision each way.

    python bench/import_share.py --trials 4

Every trial runs with PYTHONDONTWRITEBYTECODE=1: a worker checks a revision out clean
(`git clean -fdx`) before each trial, so each one compiles the library's bytecode afresh, as
here. "import share" is the child's import phase (the target and what it pulls in) over the
trial process's wall time; the preloading server's own start (its one import per revision) is
printed apart, and the wall of all N trials includes it.
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfbisect.kernels.harness.caches import revision_caches  # noqa: E402
from perfbisect.kernels.harness.launch import stop_servers  # noqa: E402
from perfbisect.kernels.harness.runner import run_harness  # noqa: E402

SUITE = '''
PRELOAD = ["sympy"]
METRIC = "kcall/s"
METRIC_SCALE = 1e3
TOLERANCE = 0.0


def make_inputs(params, device, generator):
    import sympy
    x, y = sympy.symbols("x y")
    return ((x + y) ** params["n"],)


def work(params):
    return 1


def reference(inputs, params):
    import sympy
    return sympy.expand(inputs[0])


def control(inputs, params):
    return sum(i * i for i in range(20000))
'''
POLICY = {"min_samples": 10, "max_samples": 30, "max_time_s": 2.0, "warmup": 3}


def sympy_repo(base: Path) -> tuple[Path, str]:
    import sympy

    repo = base / "sympy-repo"
    shutil.copytree(Path(sympy.__file__).parent, repo / "sympy",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@example.invalid"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", f"sympy {sympy.__version__}"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    return repo, sha


def trials(repo: Path, sha: str, cache: Path, n: int, preload: str) -> tuple[list[dict], float]:
    digest = hashlib.sha256(SUITE.encode()).hexdigest()
    spec = {"cases": [{"suite": f"source:sympy_expand.py@{digest[:12]}", "source": digest,
                       "target": "sympy:expand", "params": {"n": 12}}],
            "suite_sources": {digest: SUITE}, "device": "cpu", "policy": POLICY, "seed": 1}
    caches = revision_caches(cache, sha)
    results, started = [], time.perf_counter()
    for i in range(n):
        result = run_harness(spec, repo, env={"PYTHONDONTWRITEBYTECODE": "1"}, timeout_s=600,
                             caches=caches, launcher="fork-server", preload=preload)
        if result["status"] != "ok":
            raise SystemExit(f"trial failed: {result.get('error')}\n{result.get('log_tail')}")
        phases = result["phases"]
        print(f"  {preload:>4} trial {i}: process {phases['process']:.2f} s, start {phases['start']:.2f} s, "
              f"import {phases['import']:.2f} s "
              f"({phases['import'] / phases['process']:.0%}), preloaded {result.get('preloaded', [])}", flush=True)
        results.append(phases)
    return results, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=4)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="perfbisect-import-share-"))
    repo, sha = sympy_repo(base)
    cold = subprocess.run([sys.executable, "-B", "-c", "import time; t = time.perf_counter(); import sympy; "
                           "print(f'{time.perf_counter() - t:.2f}')"], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()
    print(f"import sympy from the repository without bytecode: {cold} s")
    for preload in ("off", "auto"):
        phases, wall = trials(repo, sha, base / f"cache-{preload}", args.trials, preload)
        stop_servers()
        share = [p["import"] / p["process"] for p in phases]
        print(f"{preload}: import share median {statistics.median(share):.1%} (range {min(share):.1%}-"
              f"{max(share):.1%}), trial process median {statistics.median(p['process'] for p in phases):.2f} s, "
              f"{args.trials} trials in {wall:.1f} s (with the server's start)")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
