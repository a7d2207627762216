"""What every `perfbisect` command shares: the user-facing errors, the exit codes and how a command
ends, the database preparation, and the options that several commands take (as asv's
commands/common_args.py).

This module imports nothing else of the CLI, and nothing of the service at import time, so every
command module can import it and `perfbisect --help` stays fast (bench/cli_startup.py)."""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Optional

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from perfbisect.service.jobs.schemas import JobRead

# How long a CLI that exits waits for the work its process queued (embedded).
SETTLE_S = 30.0

# Exit codes of `perfbisect bisect`, `show` and `demo`, for scripts and CI (README, "Outcomes and
# exit codes"). The job's outcome decides; `--fail-on` makes a verdict itself an exit code.
OK = 0  # the job completed with a verdict for every case
REGRESSION = 1  # --fail-on regression (or change) and the verdict says so
USAGE = 2  # bad input, an unreachable API, broker or database: nothing was judged
FAILED = 3  # some case could not be measured (build, import, CUDA missing, ...), or the job failed
INCONCLUSIVE = 4  # every case measured, some not decided (too noisy, trial cap)
CANCELLED = 5
RUNNING = 6  # `show` of a job that has not finished: no verdict yet
INTERRUPTED = 130  # Ctrl-C (the shell's convention: 128 + SIGINT)


@functools.cache
def console() -> Console:
    """Where the CLI's messages go: stderr, one message one line (no wrapping at 80 columns).
    Made on first use, so that `perfbisect --help` does not import rich."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


class CLIError(Exception):
    """A message for the user; the CLI prints it and exits 2."""


class Interrupted(Exception):
    """Ctrl-C while following job `job_id`; `message` says what became of the job."""

    def __init__(self, job_id: int, message: str) -> None:
        super().__init__(message)
        self.job_id, self.message = job_id, message


class FailOn(str, Enum):
    never = "never"
    regression = "regression"
    change = "change"  # a regression or an improvement


def exit_code(job: JobRead, fail_on: FailOn = FailOn.never) -> int:
    """The exit code a job's outcome (or status) asks for."""
    if job.status == "cancelled":
        return CANCELLED
    if job.status in ("queued", "running"):
        return RUNNING
    if job.kind in ("attribute", "localize"):  # no per-case outcome: its status says it all
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


def validation_message(exc) -> str:
    """A pydantic ValidationError as the API words it: 'field: message; ...', without pydantic's
    'Value error, ' prefix (the message is the schema's own)."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def exit_with(code: int) -> NoReturn:
    """Exit with `code` once the in-process queue has run what this process queued (an attribution
    just enqueued, its trials, a finished job's notifications): exiting under a running task cut
    it off and dropped its follow-ups. Bounded by SETTLE_S, after which what is left is said."""
    dispatch = sys.modules.get("perfbisect.dispatch")  # not imported: nothing was queued (and Celery stays unloaded)
    if dispatch is not None and not dispatch.settle(SETTLE_S):
        console().print(f"[yellow]note:[/yellow] the work queued in this process was not done after "
                      f"{SETTLE_S:g} s; `perfbisect show ID --follow` (or `perfbisect serve`) resumes what is left")
    raise typer.Exit(code)


def fail(message: str, code: int = USAGE) -> NoReturn:
    console().print(f"[red]error:[/red] {message}")
    exit_with(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """One clear line and a non-zero exit for what the user can fix, never a traceback: bad
    input, an unreachable API, broker or database (2), Ctrl-C (130, after cancelling or detaching)."""
    from sqlalchemy.exc import OperationalError  # sqlalchemy only for the commands that open the database

    try:
        yield
    except CLIError as exc:
        fail(str(exc))
    except Interrupted as exc:
        console().print(f"[yellow]interrupted:[/yellow] {exc.message}")
        raise typer.Exit(INTERRUPTED) from None
    except OperationalError as exc:
        from perfbisect.service.settings import get_settings

        where = get_settings().sqlalchemy_url.split("@")[-1]
        fail(f"cannot open the database at {where}: {str(exc.orig).strip().splitlines()[0]}")


def prepare_database() -> None:
    """The embedded SQLite database migrates itself; PostgreSQL is migrated by `db upgrade`."""
    from sqlalchemy.engine import make_url

    from perfbisect.service.migrate import sqlite_at_head, upgrade
    from perfbisect.service.settings import get_settings

    url = get_settings().sqlalchemy_url
    if url.startswith("sqlite") and not sqlite_at_head(Path(make_url(url).database or "")):
        get_settings().home.mkdir(parents=True, exist_ok=True)
        upgrade()


def validated(model: type, **fields: Any):
    """The request model, or a CLIError with the API's own validation messages. An option left
    out (None) takes the request's default, from Settings (PERFBISECT_DEFAULT_MIN_EFFECT)."""
    from pydantic import ValidationError

    try:
        return model(**{name: value for name, value in fields.items() if value is not None})
    except ValidationError as exc:
        raise CLIError(validation_message(exc)) from None


# The options several commands take.
SuiteOpt = Annotated[Optional[str], typer.Option(help="gemm, attention, rmsnorm or file:path/in/repo.py")]
SuiteFileOpt = Annotated[Optional[Path], typer.Option(
    "--suite-file", help="a suite file on this machine (kept outside the repository), applied to every revision")]
SetOpt = Annotated[Optional[str], typer.Option("--benchmark-set", help="a benchmark set registered on the repository")]
TargetOpt = Annotated[Optional[str], typer.Option(help="module:function inside the repository")]
ShapeOpt = Annotated[Optional[list[str]], typer.Option(help="repeatable, e.g. M=8192,N=8192,K=8192,dtype=bf16")]
BuildOpt = Annotated[Optional[str], typer.Option(
    help="build command, when registering a path ({build_dir}: a per-revision install directory, {python})")]
ImportRootOpt = Annotated[Optional[str], typer.Option(
    help="directory on sys.path, relative to the repository (src, or .perfbisect-build), when registering a path")]
EnvOpt = Annotated[Optional[list[str]], typer.Option(help="repeatable KEY=VALUE for builds and trials, when registering a path")]
ApiOpt = Annotated[Optional[str], typer.Option(envvar="PERFBISECT_API_URL", help="use this API server")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the result as JSON")]
FailOnOpt = Annotated[FailOn, typer.Option(help="exit 1 when the verdict is a regression (or any change)")]
WideOpt = Annotated[bool, typer.Option(help="one table row per case, wider than 100 columns")]
DeviceClassOpt = Annotated[str, typer.Option(
    help="the queue whose workers measure it: cpu, cuda, or a GPU model such as h200 (one of "
         "PERFBISECT_DEVICE_CLASSES)")]
MinEffectOpt = Annotated[Optional[float], typer.Option(
    help="the smallest relative step worth naming, e.g. 0.02 for 2%: smaller steps read as unchanged "
         "(default: the service's PERFBISECT_DEFAULT_MIN_EFFECT, 0.02)", show_default=False)]
MetricOpt = Annotated[str, typer.Option(
    help="ratio: each revision's time over a control kernel's in the same process (steady under drifting "
         "clocks); raw: the case's own metric")]


def read_suite_file(path: Path) -> dict[str, str]:
    """{suite: label, suite_source: text} of a local suite file. Raises CLIError."""
    try:
        content = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"cannot read --suite-file {path}: {exc}") from exc
    return {"suite": re.sub(r"[^A-Za-z0-9_.-]", "-", path.name).lstrip(".-") or "suite.py", "suite_source": content}


def benchmarks_of(suite: str | None, suite_file: Path | None, target: str | None,
                  shapes: list[str] | None) -> list[dict[str, Any]] | None:
    """The request's benchmarks (None when none of the options is given: a benchmark set names them)."""
    if suite is None and suite_file is None and target is None and not shapes:
        return None
    if (suite is None) == (suite_file is None):
        raise CLIError("give one of --suite or --suite-file (or --benchmark-set instead of both)")
    if target is None or not shapes:
        raise CLIError("give --target and at least one --shape with the suite")
    found = read_suite_file(suite_file) if suite_file is not None else {"suite": suite}
    return [{**found, "target": target, "shapes": shapes}]


def parse_env(items: list[str] | None) -> dict[str, str] | None:
    """--env KEY=VALUE items as a dict (None when none is given). Raises CLIError."""
    if not items:
        return None
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CLIError(f"--env takes KEY=VALUE, not {item!r}")
        env[key] = value
    return env
