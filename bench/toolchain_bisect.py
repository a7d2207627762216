"""A toolchain bisect on the CPU, and its descent (issue 44): `tinyop` is a git repository tagged
1.0, 1.1 (a docstring), 2.0 and 2.1 (a comment), with a harmless commit and the regression (the
product computed three times over) between 1.1 and 2.0; its four wheels are built from the tags.
A host repository whose kernel calls it pins `tinyop==1.0` and declares it as a dependency with a
recipe that builds it from source (`pip install --no-build-isolation --target {build_dir}`).
`perfbisect bisect --toolchain` over the four versions at the host's head names tinyop 2.0, then
descends: a child bisect over tinyop's commits 1.1 .. 2.0, each built by the recipe, names the
regression. On this machine's embedded worker (PERFBISECT_HOME a fresh temp directory per run;
DATABASE_URL if set, else SQLite). Prints the commands, the report and the wall time; RUNS
repeats it (the truth: tinyop==2.0, and inside it the commit "tinyop: recompute ...").

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
from tests.test_toolchain_bisect import FAST, FAST_NOTE, SUITE  # noqa: E402
from tests.test_toolchain_descent import DEPENDENCY, HOST_BUILD, SLOW, make_host, make_tinyop, make_wheels  # noqa: E402

BIN = Path(sys.executable).parent
REGRESSION = "tinyop: recompute the product three times"
HISTORY = [("tinyop 1.0", FAST, "1.0", "1.0"),
           ("tinyop 1.1: a docstring for scale", FAST_NOTE, "1.1", "1.1"),
           ("tinyop: a pointer to the README", FAST_NOTE + "# see the README\n", "1.1", None),
           (REGRESSION, SLOW, "1.1", None),
           ("tinyop 2.0", SLOW, "2.0", "2.0"),
           ("tinyop 2.1: a comment", "# 2.1: a comment, nothing else\n" + SLOW, "2.1", "2.1")]


def setup(root: Path) -> tuple[Path, Path, Path, str]:
    """The wheelhouse, tinyop's repository, the host and the suite file; the regression's sha."""
    shas = make_tinyop(root / "tinyop", HISTORY)
    wheels = make_wheels(root / "wheelhouse", history=HISTORY)
    make_host(root / "hostlib")
    suite = root / "bench_tinyop.py"
    suite.write_text("\n".join(line[4:] for line in SUITE.splitlines()))
    return wheels, root / "tinyop", suite, shas[[h[0] for h in HISTORY].index(REGRESSION)]


def shown(args: list[str]) -> str:
    return "$ perfbisect " + " ".join(a if " " not in a and "{" not in a else repr(a) for a in args)


def main(runs: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="perfbisect-toolchain-"))
    root.chmod(0o755)
    wheels, tinyop, suite, culprit = setup(root)
    named = descended = 0
    for run in range(runs):
        home = root / f"home-{run}"
        home.mkdir(mode=0o755)
        env = {**os.environ, "PERFBISECT_HOME": str(home)}
        register = [["repo", "add", str(tinyop), "--name", "tinyop"],
                    ["repo", "add", str(root / "hostlib"), "--name", "hostlib", "--build", HOST_BUILD,
                     "--import-root", ".perfbisect-build", "--env", "OMP_NUM_THREADS=1",
                     "--dependency", json.dumps(DEPENDENCY)]]
        for args in register:
            done = subprocess.run([str(BIN / "perfbisect"), *args], env=env, cwd=root, capture_output=True, text=True,
                                  timeout=300)
            assert done.returncode == 0, done.stdout + done.stderr
            if run == 0:
                print(shown(args).replace(str(root), "<tmp>"))
        args = ["bisect", "--repo", "hostlib", "--good", "main", "--toolchain", "tinyop==1.0,1.1,2.0,2.1",
                "--wheelhouse", str(wheels), "--suite-file", str(suite), "--target", "hostlib.ops:scale",
                "--shape", "N=262144", "--min-effect", "0.3",
                "--policy", json.dumps({"max_time_s": 0.1, "min_samples": 5, "max_samples": 20})]
        started = time.monotonic()
        done = subprocess.run([str(BIN / "perfbisect"), *args], env=env, cwd=root, capture_output=True, text=True,
                              timeout=3600)
        wall = time.monotonic() - started
        ok = "first version that moves: tinyop 2.0 (after 1.1)" in done.stdout
        inside = f"tinyop 1.1 -> 2.0; inside it, tinyop {culprit[:7]} '{REGRESSION}'" in done.stdout
        named += ok
        descended += inside
        if run == 0:
            print(shown(args).replace(str(root), "<tmp>"))
            print(done.stdout.replace(str(root), "<tmp>"))
        print(f"run {run + 1}: exit {done.returncode}, {wall:.0f} s, names tinyop 2.0: {ok}, "
              f"names {culprit[:10]} inside it: {inside}")
    print(f"named the planted version in {named}/{runs} runs, the planted commit inside it in {descended}/{runs}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
