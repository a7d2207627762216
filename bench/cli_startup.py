"""How long the CLI takes to answer: `perfbisect --help` and `perfbisect jobs` (on an embedded
SQLite database already migrated), each run in a fresh process several times; prints the
median, fastest and slowest, and the load average they were measured under. Targets: `--help`
under 0.5 s (issue 41: the CLI imports the service only in the commands that use it), `jobs`
under 1.5 s (issue 11), on the 2-core development machine; torch is never imported. Exits 1
when the median of `--help` is over its target.

    python bench/cli_startup.py --runs 5
    python bench/cli_startup.py --runs 15 --help-only   # where only typer is installed (no service stack)
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = (["--help"], ["jobs"])
HELP_TARGET_S = 0.5


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "perfbisect"), *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--help-only", action="store_true", help="time `--help` only (needs no database)")
    options = parser.parse_args()
    commands = COMMANDS[:1] if options.help_only else COMMANDS
    with tempfile.TemporaryDirectory(prefix="perfbisect-startup-") as home:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        env["PERFBISECT_HOME"] = home
        if not options.help_only:
            timed(["jobs"], env)  # creates and migrates the SQLite file: not what is measured
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
        medians = {}
        for args in commands:
            times = [timed(args, env) for _ in range(options.runs)]
            medians[args[0]] = statistics.median(times)
            print(f"perfbisect {' '.join(args):<8} median {medians[args[0]]:.2f} s  "
                  f"min {min(times):.2f}  max {max(times):.2f}  ({options.runs} runs)")
        print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if medians["--help"] >= HELP_TARGET_S:
        sys.exit(f"perfbisect --help took {medians['--help']:.2f} s, over its {HELP_TARGET_S} s target")


if __name__ == "__main__":
    main()
