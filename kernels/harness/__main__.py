"""Child-process entry point: python -m kernels.harness --spec SPEC.json --out RESULT.json

Runs inside the checked-out revision (cwd = the worktree). Always writes a result
file, even when the trial fails, so the parent can tell a failure from a crash.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

_STARTED = time.perf_counter()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.harness")
    parser.add_argument("--spec", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--repo-root", type=Path, default=Path.cwd())
    args = parser.parse_args(argv)
    spec = json.loads(args.spec.read_text())

    from kernels.harness.result import failure_result
    from kernels.harness.trial import describe_exception, run_trial
    try:
        result = run_trial(spec, args.repo_root)
    except BaseException as exc:  # a trial never crashes without a result
        result = failure_result("error", describe_exception(exc))
    result["process_wall_s"] = round(time.perf_counter() - _STARTED, 3)
    tmp = args.out.with_suffix(".partial")
    tmp.write_text(json.dumps(result, allow_nan=False, default=_json_default))
    os.replace(tmp, args.out)
    return 0


def _json_default(value):
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
