"""`perfbisect track add|edit|list|run|remove|alerts`: tracked branches from the command line, on the
configured database. Embedded (no REDIS_URL), a run is carried out here, bisects included,
before the command returns; with a broker it is queued for the workers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from perfbisect.cli.common import (BuildOpt, CLIError, EnvOpt, ImportRootOpt, SetOpt, ShapeOpt, SuiteFileOpt, SuiteOpt,
                                   TargetOpt, benchmarks_of, fail, parse_env, prepare_database)
from perfbisect.service.errors import PerfbisectError

track_app = typer.Typer(help="Track branches: measure every push, raise alerts, bisect them.", no_args_is_help=True, rich_markup_mode=None)
def run_loop(tracked_id: int, head: str | None = None) -> None:
    """Queue a run of the tracked branch; embedded, carry it out (and what it starts) now."""
    from perfbisect import dispatch
    from perfbisect.queue import CONTROL_QUEUE, TRACK_BRANCH
    from perfbisect.service.settings import get_settings

    dispatch.send(TRACK_BRANCH, tracked_id, head, queue=CONTROL_QUEUE)
    if get_settings().embedded:
        dispatch.drain()


@track_app.command("add")
def add(
    repo: Annotated[str, typer.Option(help="registered repository name, or a local path to register")],
    suite: SuiteOpt = None,
    suite_file: SuiteFileOpt = None,
    benchmark_set: SetOpt = None,
    target: TargetOpt = None,
    shape: ShapeOpt = None,
    branch: str = "main",
    device_class: str = "cpu",
    trigger: Annotated[str, typer.Option(help="push (webhook), schedule or poll (Celery beat)")] = "push",
    interval: Annotated[int, typer.Option(help="seconds between scheduled or polled runs")] = 3600,
    backfill_every: Annotated[int, typer.Option(help="measure every k-th commit ...")] = 1,
    backfill_depth: Annotated[int, typer.Option(help="... of the last M first-parent commits")] = 1,
    trials: Annotated[int, typer.Option(help="trials per measured head")] = 3,
    min_magnitude: Annotated[float, typer.Option(help="smallest relative step that alerts")] = 0.05,
    max_bisects: Annotated[int, typer.Option(help="alert bisects running at once")] = 2,
    confirm_trials: Annotated[int, typer.Option(help="re-measure a suspected step's two heads side by side with "
                                                     "this many trials each before it alerts (0: alert at once)")] = 3,
    build: BuildOpt = None,
    import_root: ImportRootOpt = None,
    env: EnvOpt = None,
    policy: Annotated[Optional[str], typer.Option(help="harness sample policy as JSON")] = None,
    start: Annotated[bool, typer.Option(help="run the backfill now")] = True,
) -> None:
    """Track a branch with one benchmark (--suite or --suite-file, --target, --shape) or a benchmark
    set of the repository, on one device class."""
    from perfbisect.cli.runs import register_path  # the job machinery: not at start-up
    from perfbisect.service.db import session_scope
    from perfbisect.service.tracking import service
    from perfbisect.service.tracking.schemas import TrackedBranchCreate

    prepare_database()
    with refused():
        benchmarks = benchmarks_of(suite, suite_file, target, shape)
        if (benchmarks is None) == (benchmark_set is None):
            raise CLIError("give --suite or --suite-file with --target and --shape, or --benchmark-set")
        name = register_path(Path(repo), build, import_root=import_root, env=parse_env(env)) if Path(repo).exists() else repo
        data = TrackedBranchCreate(
            repository=name, branch=branch, benchmarks=benchmarks, benchmark_set=benchmark_set,
            device_class=device_class, trigger=trigger, interval_s=interval, backfill_every=backfill_every,
            backfill_depth=backfill_depth, trials_per_head=trials, min_magnitude=min_magnitude,
            max_bisects=max_bisects, confirm_trials=confirm_trials, policy=_policy(policy), start=start)
        with session_scope() as session:
            tracked_id = service.create(session, data).id
    print(f"tracking {branch} of {name} on {device_class} as #{tracked_id}")
    if start:
        try:
            run_loop(tracked_id)
        except PerfbisectError as exc:
            fail(exc.message)


@track_app.command("edit")
def edit(
    tracked_id: int,
    trigger: Annotated[Optional[str], typer.Option(help="push (webhook), schedule or poll (Celery beat)")] = None,
    interval: Annotated[Optional[int], typer.Option(help="seconds between scheduled or polled runs")] = None,
    suite: SuiteOpt = None,
    suite_file: SuiteFileOpt = None,
    benchmark_set: SetOpt = None,
    target: TargetOpt = None,
    shape: ShapeOpt = None,
    confirm_trials: Annotated[Optional[int], typer.Option(help="trials per side of a step's re-measure "
                                                                "before it alerts (0: alert at once)")] = None,
) -> None:
    """Change a tracked branch's trigger, interval, benchmarks (or set) or confirm trials; the
    rest stays. New benchmarks apply from the next run on."""
    from perfbisect.service.db import session_scope  # the service: not at start-up
    from perfbisect.service.tracking import service
    from perfbisect.service.tracking.schemas import TrackedBranchUpdate

    prepare_database()
    with refused():
        data = TrackedBranchUpdate(trigger=trigger, interval_s=interval, benchmarks=benchmarks_of(
            suite, suite_file, target, shape), benchmark_set=benchmark_set, confirm_trials=confirm_trials)
        with session_scope() as session:
            row = service.read(service.update(session, tracked_id, data))
    print(f"#{row.id} {row.branch}: {row.trigger}, every {row.interval_s} s, {len(row.cases)} case(s), "
          f"{row.confirm_trials} confirm trial(s)")


@contextmanager
def refused() -> Iterator[None]:
    """Bad input as one line and exit 2: pydantic's issues (each field and what is wrong with
    it), a domain error's message, a CLI error."""
    from pydantic import ValidationError  # pydantic: not at start-up

    try:
        yield
    except ValidationError as exc:
        fail("; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in exc.errors()))
    except PerfbisectError as exc:
        fail(exc.message)
    except CLIError as exc:
        fail(str(exc))


def _policy(text: str | None) -> dict | None:
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError as exc:
        raise CLIError(f"--policy is not JSON: {exc}") from exc


@track_app.command("list")
def list_tracked(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Tracked branches."""
    from perfbisect.service.db import session_scope
    from perfbisect.service.tracking import repository, service

    prepare_database()
    with session_scope() as session:
        rows = [service.read(t) for t in repository.list_all(session)]
    if as_json:
        print(json.dumps([r.model_dump(mode="json") for r in rows], indent=2))
        return
    for r in rows:
        runs = f"  last run {_when(r.last_run_at)}" + (f", next {_when(r.next_run_at)}" if r.next_run_at else "")
        print(f"#{r.id:<4} {r.repository:<24} {r.branch:<16} {r.device_class:<6} {r.trigger:<8} "
              f"{len(r.cases)} case(s)  head {(r.last_sha or '-')[:10]}{runs}")


def _when(moment) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment is not None else "never"


@track_app.command("run")
def run(tracked_id: int) -> None:
    """Measure the branch's head now (embedded: also detect, bisect and comment before returning)."""
    from perfbisect.service.db import session_scope
    from perfbisect.service.settings import get_settings
    from perfbisect.service.tracking import service

    prepare_database()
    with refused():
        with session_scope() as session:
            service.get(session, tracked_id)
        run_loop(tracked_id)
    print(f"ran #{tracked_id}" if get_settings().embedded else f"queued a run of #{tracked_id}")


@track_app.command("remove")
def remove(tracked_id: int) -> None:
    """Stop tracking (the branch's alerts go too; measurements stay)."""
    from perfbisect.service.db import session_scope
    from perfbisect.service.tracking import service

    prepare_database()
    with refused(), session_scope() as session:
        service.remove(session, tracked_id)
    print(f"removed #{tracked_id}")


NO_CULPRIT_NOTE = "bisect job "  # service.alerts.service.job_finished's note when a bisect named no culprit
LINE_WIDTH = 100  # a terminal's or a log viewer's width: `track alerts` lines never wrap


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def alert_lines(alerts: list) -> list[str]:
    """One line per alert and one per case, each at most LINE_WIDTH columns (a long culprit
    subject or case name is cut with an ellipsis; --json has them whole): what the CLI and the
    demo print."""
    lines = []
    for a in alerts:
        culprit = (a.culprit_last_sha[:10] if a.culprit_exact else
                   f"{a.culprit_first_sha[:10]}..{a.culprit_last_sha[:10]}" if a.culprit_last_sha else
                   # a finished bisect that named none leaves a note saying so: not "bisecting" forever
                   f"none: {a.note}" if a.bisect_job_id and (a.note or "").startswith(NO_CULPRIT_NOTE) else
                   "bisecting" if a.bisect_job_id else "-")
        pr = f"#{a.culprit_pr}" if a.culprit_pr else ""
        lines.append(f"alert {a.id:<3} {a.kind:<13} {a.status:<12} {a.before_sha[:10]}..{a.last_sha[:10]}  "
                     f"culprit {culprit}")
        subject = f"{pr} {a.culprit_subject or ''}".strip()
        if subject:  # a line of its own: beside the shas a subject would keep only a few characters
            lines.append(_clip(f"      {subject}", LINE_WIDTH))
        if a.kind == "broken" and a.note:  # no case of its own: what failed
            lines.append(_clip(f"      {a.note}", LINE_WIDTH))
        for c in a.cases:
            step = "wrong results" if c.rel is None else f"{c.before:.4g} -> {c.after:.4g} ({c.rel:+.1%})"
            name_width = max(LINE_WIDTH - 6 - 1 - len(step), 20)
            lines.append(_clip(f"      {_clip(c.case, name_width):<{min(52, name_width)}} {step}", LINE_WIDTH))
    return lines


@track_app.command("alerts")
def list_alerts(tracked_id: Annotated[Optional[int], typer.Argument()] = None,
                as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Alerts (of one tracked branch, or all), with their cases and culprits."""
    from perfbisect.service.db import session_scope
    from perfbisect.service.alerts import repository, views

    prepare_database()
    with session_scope() as session:
        alerts = views.alert_reads(session, repository.listing(session, tracked_id=tracked_id, limit=1000))
    if as_json:
        print(json.dumps([a.model_dump(mode="json") for a in alerts], indent=2))
    else:
        print("\n".join(alert_lines(sorted(alerts, key=lambda a: a.id))) or "no alerts")
