"""Run the fault tests (tests/test_faults.py: real API, workers, Redis, PostgreSQL and faults) and
print the table of bench/RESULTS.md: fault, time to recover, trials re-run, rows lost, duplicated.

    .venv/bin/python bench/faults.py          # about 20-25 min on the shared 2-core CI box
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as report:
        path = Path(report.name)
    env = {**os.environ, "PERFBISECT_FAULT_REPORT": str(path)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_faults.py",
                           *sys.argv[1:]], cwd=ROOT, env=env)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.unlink()
    print("\n| fault | detected (s) | recovered (s) | trials | re-run | rows lost | rows duplicated |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['fault']} | {row.get('detect_s', '')} | {row['recover_s']} | {row['trials']} | "
              f"{row['rerun']} | {row['lost']} | {row['duplicated']} |")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
