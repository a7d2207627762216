"""Child-process entry point: python -m perfbisect.kernels.harness --spec SPEC.json --out RESULT.json

Runs inside the checked-out revision (cwd = the worktree), in a fresh interpreter or forked
from the fork server (contain/zygote.py). Always writes a result file, even when the trial fails, so
the parent can tell a failure from a crash.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    entered_at, started = time.time(), time.perf_counter()
    parser = argparse.ArgumentParser(prog="python -m perfbisect.kernels.harness")
    parser.add_argument("--spec", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--repo-root", type=Path, default=Path.cwd())
    parser.add_argument("--import-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.import_dir is not None:
        import_root_first(str(args.import_dir))
    spec = json.loads(args.spec.read_text())

    from perfbisect.kernels.harness.phases import PhaseClock
    clock = PhaseClock()
    with clock.track("import"):  # torch, unless the fork server imported it already
        from perfbisect.kernels.harness.result import failure_result
        from perfbisect.kernels.harness.trial import describe_exception, run_trial
    try:
        result = run_trial(spec, args.repo_root, clock)
    except BaseException as exc:  # a trial never crashes without a result
        result = failure_result("error", describe_exception(exc))
    result["process_wall_s"] = round(time.perf_counter() - started, 3)
    result["phases"] = clock.as_dict()
    # absolute times, turned into phases by the parent (runner.py) and removed
    result["timeline"] = {"entered_at": entered_at, "first_sample_at": clock.first_sample_at}
    tmp = args.out.with_suffix(".partial")
    tmp.write_text(json.dumps(result, allow_nan=False, default=_json_default))
    os.replace(tmp, args.out)
    return 0


def import_root_first(import_dir: str) -> None:
    """The repository's import root before everything else on sys.path, the worktree included:
    `python -m` puts the cwd (the worktree) first, so a flat layout's source package (msgspec/ at
    the root, without the _core its build compiled into the import root) shadowed the built one
    and every trial failed to import it (bench/RESULTS.md, msgspec)."""
    sys.path[:] = [import_dir] + [p for p in sys.path if p != import_dir]


def _json_default(value):
    return str(value)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The result is on disk: skip the interpreter's teardown of torch and the trial's tensors
    # (1-2 s on a CPU trial), as the fork server's children do.
    os._exit(code)
