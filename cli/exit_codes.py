"""Exit codes of `perfbisect bisect`, `show` and `demo`, for scripts and CI (README, "Outcomes and
exit codes"). The job's outcome decides; `--fail-on` makes a verdict itself an exit code."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI entry point imports this module: keep it light
    from perfbisect.service.jobs.schemas import JobRead

OK = 0  # the job completed with a verdict for every case
REGRESSION = 1  # --fail-on regression (or change) and the verdict says so
USAGE = 2  # bad input, an unreachable API, broker or database: nothing was judged
FAILED = 3  # some case could not be measured (build, import, CUDA missing, ...), or the job failed
INCONCLUSIVE = 4  # every case measured, some not decided (too noisy, trial cap)
CANCELLED = 5
RUNNING = 6  # `show` of a job that has not finished: no verdict yet
INTERRUPTED = 130  # Ctrl-C (the shell's convention: 128 + SIGINT)


class FailOn(str, Enum):
    never = "never"
    regression = "regression"
    change = "change"  # a regression or an improvement


def exit_code(job: JobRead, fail_on: FailOn = FailOn.never) -> int:
    if job.status == "cancelled":
        return CANCELLED
    if job.status in ("queued", "running"):
        return RUNNING
    if job.kind == "attribute":  # no per-case outcome: its status says it all
        return {"succeeded": OK, "inconclusive": INCONCLUSIVE}.get(job.status, FAILED)
    verdict = job.outcome.verdict if job.outcome else None
    if job.status == "failed" or verdict == "failed" or verdict is None:
        return FAILED
    if verdict == "inconclusive" or job.status == "inconclusive":
        return INCONCLUSIVE
    counts = job.outcome.counts
    if fail_on != FailOn.never and counts.get("regressed", 0):
        return REGRESSION
    if fail_on == FailOn.change and counts.get("improved", 0):
        return REGRESSION
    return OK
