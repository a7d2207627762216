"""A toolchain bisect on the CPU (issue 44): four wheels of `tinyop` (1.0, 1.1 harmless, 2.0
recomputes its result thirty times over, 2.1 harmless), a host repository whose kernel calls it,
and `perfbisect bisect --toolchain` over the versions at the host's head, on this machine's
embedded worker (PERFBISECT_HOME a fresh temp directory; DATABASE_URL if set, else SQLite).
Prints the command, its report and its wall time; RUNS repeats it (the truth: tinyop==2.0).

    .venv/bin/python bench/toolchain_bisect.py [RUNS]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.gitrepo import git  # noqa: E402
from tests.test_toolchain_bisect import OPS, SUITE, VERSIONS, write_wheel  # noqa: E402

BIN = Path(sys.executable).parent


def setup(root: Path) -> tuple[Path, Path, Path]:
    wheels = root / "wheelhouse"
    wheels.mkdir()
    for version, source in VERSIONS.items():
        write_wheel(wheels, version, source)
    host = root / "hostlib"
    (host / "hostlib").mkdir(parents=True)
    git(host, "init", "-q", "-b", "main")
    (host / "hostlib/__init__.py").write_text("")
    (host / "hostlib/ops.py").write_text(OPS)
    git(host, "add", "-A")
    git(host, "commit", "-q", "-m", "hostlib: scale through tinyop (#1)")
    suite = root / "bench_tinyop.py"
    suite.write_text("\n".join(line[4:] for line in SUITE.splitlines()))
    return wheels, host, suite


def main(runs: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="perfbisect-toolchain-"))
    root.chmod(0o755)
    wheels, host, suite = setup(root)
    named = 0
    for run in range(runs):
        home = root / f"home-{run}"
        home.mkdir(mode=0o755)
        args = ["bisect", "--repo", str(host), "--good", "main", "--toolchain", "tinyop==1.0,1.1,2.0,2.1",
                "--wheelhouse", str(wheels), "--suite-file", str(suite), "--target", "hostlib.ops:scale",
                "--shape", "N=262144", "--env", "OMP_NUM_THREADS=1", "--min-effect", "0.3",
                "--policy", json.dumps({"max_time_s": 0.1, "min_samples": 5, "max_samples": 20})]
        started = time.monotonic()
        done = subprocess.run([str(BIN / "perfbisect"), *args], env={**os.environ, "PERFBISECT_HOME": str(home)},
                              cwd=root, capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - started
        ok = "first version that moves: tinyop 2.0 (after 1.1)" in done.stdout
        named += ok
        if run == 0:
            print("$ perfbisect " + " ".join(a if " " not in a and "{" not in a else repr(a) for a in args))
            print(done.stdout.replace(str(root), "<tmp>"))
        print(f"run {run + 1}: exit {done.returncode}, {wall:.0f} s, names tinyop 2.0: {ok}")
    print(f"named the planted version in {named}/{runs} runs")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
