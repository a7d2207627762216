"""How long the CLI takes to answer: `perfbisect --help` and `perfbisect jobs` (on an embedded
SQLite database already migrated), each run in a fresh process several times; prints the
median, fastest and slowest, and the load average they were measured under. The target is
under 1.5 s on the 2-core development machine (issue 11); torch is never imported.

    python bench/cli_startup.py --runs 5
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


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "perfbisect"), *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfbisect-startup-") as home:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        env["PERFBISECT_HOME"] = home
        timed(["jobs"], env)  # creates and migrates the SQLite file: not what is measured
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
        for args in COMMANDS:
            times = [timed(args, env) for _ in range(options.runs)]
            print(f"perfbisect {' '.join(args):<8} median {statistics.median(times):.2f} s  "
                  f"min {min(times):.2f}  max {max(times):.2f}  ({options.runs} runs)")
        print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
