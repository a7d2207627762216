"""`perfbisect`: serve, worker, db, bisect, compare, repo, demo, measure, simulate, jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from perfbisect.cli.changepoints import changepoints
from perfbisect.cli.common import (
    CLIError, FailOn, SuiteFileOpt, benchmarks_of, console, exit_code, exit_with, fail, prepare_database, user_errors,
)
from perfbisect.cli.repo import repo_app
from perfbisect.cli.submit import BISECT_EXAMPLES, COMPARE_EXAMPLES, bisect, compare
from perfbisect.cli.suite_check import suite_app
from perfbisect.cli.tokens import app as token_app
from perfbisect.cli.track import track_app

# Plain click help, wrapped at 100 columns: rich's option tables squeezed each description into
# ~25 columns beside the type column and cut the example shapes.
app = typer.Typer(help="Automated performance-regression bisection for GPU kernel libraries.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
                  rich_markup_mode=None, context_settings={"max_content_width": 100},
                  epilog="""\b
Examples:
  perfbisect demo                  bisect the demo kernel repository on this machine
  perfbisect serve                 the API and the dashboard on http://127.0.0.1:8000/dashboard
  perfbisect bisect --help         bisect a repository of yours (examples there)
  perfbisect track add --help      measure a branch on every push and raise alerts
  perfbisect jobs                  recent jobs; `perfbisect show ID` for one""")
db_app = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(db_app, name="db")
app.command("changepoints")(changepoints)
app.add_typer(token_app, name="token")
app.add_typer(track_app, name="track")
app.add_typer(repo_app, name="repo")
app.add_typer(suite_app, name="suite")
app.command(epilog=BISECT_EXAMPLES)(bisect)
app.command(epilog=COMPARE_EXAMPLES)(compare)


@db_app.command("upgrade")
def db_upgrade(revision: str = "head") -> None:
    """Apply the migrations to DATABASE_URL (or the embedded SQLite file)."""
    from perfbisect.service.migrate import upgrade
    from perfbisect.service.settings import get_settings

    get_settings().home.mkdir(parents=True, exist_ok=True)
    upgrade(revision=revision)
    console().print(f"database at {get_settings().sqlalchemy_url.split('@')[-1]} is at {revision}")


@db_app.command("prune-samples")
def db_prune_samples(
    older_than: Annotated[Optional[int], typer.Option(
        "--older-than", min=1, help="days (default PERFBISECT_SAMPLES_RETENTION_DAYS)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="count what would be deleted, delete nothing")] = False,
) -> None:
    """Delete the raw samples of trials finished more than N days ago (of finished jobs). The
    summaries every history, report and outcome reads are kept; beat does this every hour."""
    from perfbisect.service.db import session_scope
    from perfbisect.service.settings import get_settings
    from perfbisect.service.trials import retention

    days = older_than or get_settings().samples_retention_days
    if not days:
        fail("retention is off (PERFBISECT_SAMPLES_RETENTION_DAYS=0): pass --older-than DAYS")
    with user_errors():
        if dry_run:
            with session_scope() as session:
                due = retention.due(session, retention.cutoff(days))
            console().print(f"would delete the raw samples of {due.trials} trial(s) ({due.samples} rows) "
                          f"finished over {days} days ago")
            return
        from perfbisect.workers.tasks import prune_expired_samples

        def progress(total: retention.Pruned) -> None:
            console().print(f"  {total.trials} trial(s), {total.samples} rows so far", highlight=False)

        pruned = prune_expired_samples(days, progress if console().is_terminal else None)
    console().print(f"deleted the raw samples of {pruned.trials} trial(s) ({pruned.samples} rows) finished over "
                  f"{days} days ago; measurements, case points and outcomes are kept")


@app.command()
def serve(host: str = "127.0.0.1", port: int = 8000, migrate: bool = True,
          workers: Annotated[Optional[int], typer.Option(
              help="server processes (default PERFBISECT_WEB_WORKERS, else 1 embedded and one per core)")] = None) -> None:
    """Run the REST API and the dashboard (uvicorn)."""
    import uvicorn

    from perfbisect.service.settings import get_settings

    if migrate:
        from perfbisect.service.migrate import upgrade

        get_settings().home.mkdir(parents=True, exist_ok=True)  # the embedded SQLite file lives there
        with user_errors():
            upgrade()
    settings = get_settings()
    if settings.embedded:  # no beat without a broker: this process repairs its own jobs
        from perfbisect.dispatch import start_embedded_reconciler

        start_embedded_reconciler()
    # Embedded, tasks run inside the server process: one process keeps them in one place.
    processes = workers or settings.web_workers or (1 if settings.embedded else os.cpu_count() or 1)
    from perfbisect.service.logs import uvicorn_log_config

    typer.echo(served_urls(host, port))
    uvicorn.run("perfbisect.service.api:create_served_app", factory=True, host=host, port=port, log_level="info",
                workers=processes, backlog=settings.max_in_flight * 4,
                log_config=uvicorn_log_config(settings.log_format) or uvicorn.config.LOGGING_CONFIG,
                timeout_worker_healthcheck=60)  # a loaded node may take a while to import the app


def served_urls(host: str, port: int) -> str:
    """What `serve` prints first: where a person finds the dashboard, the API and the metrics."""
    shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else (f"[{host}]" if ":" in host else host)
    base = f"http://{shown}:{port}"
    rows = [("dashboard", "/dashboard"), ("API docs", "/docs"), ("metrics", "/metrics"), ("health", "/healthz")]
    return "\n".join([f"perfbisect is serving on {base}"] + [f"  {name:<10} {base}{path}" for name, path in rows])


@app.command()
def worker(
    device_class: Annotated[str, typer.Option(help="queue to serve: cpu, cuda (NVIDIA), rocm (AMD Instinct), "
                                                   "or a GPU model")] = "cpu",
    gpu: Annotated[Optional[int], typer.Option(help="pin to this GPU (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES)")] = None,
    control: Annotated[bool, typer.Option(help="also serve the control queue (job planning)")] = True,
    trials: Annotated[bool, typer.Option(help="serve the device queue (--no-trials: a control-only worker)")] = True,
    beat: Annotated[bool, typer.Option(help="also run Celery beat: the reconciler and the scheduled and polled "
                                           "tracked branches (one per deployment, best on a control-only worker "
                                           "so it never waits behind a trial)")] = False,
    concurrency: int = 1,
    flush_check: Annotated[bool, typer.Option(help="check at start that the device matches the class and the "
                                                   "cold flush is measurably cold (GPU classes); refuse to start if not")] = True,
) -> None:
    """Run a Celery worker on REDIS_URL: one process per GPU, one trial at a time."""
    from perfbisect.service.settings import get_settings

    if get_settings().embedded:
        fail("REDIS_URL is not set: a worker needs a broker (the embedded default runs tasks in-process)")
    if gpu is not None:  # HIP reads its own variable first; both name the same GPU
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["HIP_VISIBLE_DEVICES"] = str(gpu)
    if trials:
        from perfbisect.workers.sandbox import SandboxError, sandbox_user

        try:
            sandbox_user()  # refuse to start rather than fail every trial (production), or warn
        except SandboxError as exc:
            fail(str(exc))
        console().print(containment_line())
        if flush_check and device_class != "cpu":
            ok, text = doctor_run(device_class)
            console().print(text)
            if not ok:
                fail(f"this worker cannot serve device class {device_class!r} (perfbisect doctor; --no-flush-check "
                     "skips this)")
    from perfbisect.queue import CONTROL_QUEUE, celery_app
    from perfbisect.service.logs import configure

    configure(get_settings().log_format)
    queues = ([device_class] if trials else []) + ([CONTROL_QUEUE] if control else [])
    if not queues:
        fail("--no-trials and --no-control leave this worker nothing to do")
    name = f"{device_class}{'' if gpu is None else gpu}-{os.getpid()}@%h"
    # prefork even for one process: a trial child that dies is reported (WorkerLostError) and,
    # with acks_late + reject_on_worker_lost, its message goes back to the queue.
    schedule = ["-B"] if beat else []  # its schedule file: beat_schedule_filename
    celery_app.worker_main(["worker", "-Q", ",".join(queues), "-c", str(concurrency), "-n", name,
                            "--pool", "prefork", "-l", "INFO", *schedule])


def doctor_run(device_class: str | None, device: str = "auto", flush: bool = True) -> tuple[bool, str]:
    """The device report in a fresh interpreter (a CUDA context must not live in a process that
    forks Celery's pool); (ok, text)."""
    args = [sys.executable, "-m", "perfbisect.kernels.harness.doctor", "--device", device]
    args += ["--device-class", device_class] if device_class else []
    args += [] if flush else ["--no-flush-check"]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return False, "the device check did not finish in 600 s"
    return done.returncode == 0, (done.stdout + done.stderr[-2000:]).strip()


def containment_line() -> str:
    """How this host bounds the memory of a trial's sandbox slot (workers/cgroups.py)."""
    from perfbisect.service.settings import get_settings
    from perfbisect.workers.cgroups import memory_report

    return memory_report(get_settings())


def incremental_builds() -> str:
    """Incremental builds on this host: the compiler cache, and per repository its hits, misses
    and build seconds saved (workers/buildtree.py)."""
    from perfbisect.service.settings import get_settings
    from perfbisect.workers.buildtree import doctor_lines

    return "\n".join(doctor_lines(get_settings()))


@app.command()
def doctor(
    device: Annotated[str, typer.Option(help="auto, cpu or cuda (ROCm's torch device is cuda too)")] = "auto",
    device_class: Annotated[Optional[str], typer.Option(help="check the device can serve this class")] = None,
    flush_check: Annotated[bool, typer.Option(help="time reads after the flush and after a warm read")] = True,
) -> None:
    """What this machine's device is (vendor, arch, caches, telemetry, JIT caches, suites it can run)
    and whether the cold flush is measurably cold. Exit 1 when it is not, or the class does not fit."""
    if device not in ("auto", "cpu", "cuda"):
        fail(f"--device must be auto, cpu or cuda, not {device!r}")
    ok, text = doctor_run(device_class, device, flush_check)
    print(text)
    print(containment_line())
    print(incremental_builds())
    raise typer.Exit(0 if ok else 1)


@app.command()
def demo(
    path: Annotated[Path, typer.Option(help="where to write the demo kernel repository")] = Path("var/demo/minikern"),
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "auto",
    workers: Annotated[Optional[int], typer.Option(
        help="revisions measured per round, side by side (default 1: on a CPU two trials side by side "
             "disturb each other's timing)")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    track: Annotated[bool, typer.Option("--track", help="replay the history as pushes to a tracked branch")] = False,
    evidence: Annotated[bool, typer.Option("--evidence/--no-evidence", help=(
        "profile each culprit's two ends once more and print why it got slower: the kernel, the compiled "
        "code, the autotuner's choice"))] = False,
    compiled: Annotated[bool, typer.Option("--compiled", help="a library with a C++ extension (setuptools): "
                                           "incremental builds, ccache and cost-aware probes; prints what the "
                                           "builds cost")] = False,
    plain_builds: Annotated[bool, typer.Option("--plain-builds", help="with --compiled: today's builds (each "
                                               "compiles everything) for comparison")] = False,
) -> None:
    """Write the demo kernel repository, bisect its whole history on this machine, print the culprits.

    Embedded by default; with DATABASE_URL and REDIS_URL set, the trials go to `perfbisect worker`s.
    With --track: pushes to a tracked branch raise alerts, whose bisects name the culprits.
    With --compiled: cppkern, a C++ library with one planted regression (at var/demo/cppkern)."""
    from perfbisect.cli import runs  # the job machinery: each command imports it when it runs (start-up time)

    demo_pauses()
    if plain_builds and not compiled:
        fail("--plain-builds applies to --compiled")
    if compiled:
        compiled_demo(Path("var/demo/cppkern") if path == Path("var/demo/minikern") else path, not plain_builds,
                      as_json)
        return
    if track:
        from perfbisect.cli.track_demo import demo_track

        demo_track(path, device, workers, as_json, console())
        return
    with user_errors():
        job, truth = runs.run_demo(path, device, workers, show_progress=not as_json, console=console(),
                                   evidence=evidence)
    runs.print_job(job, as_json)
    if not as_json:
        from perfbisect.cli import hunks
        from perfbisect.cli.descents import descent_truth, print_descent_truth

        evidence = hunks.evidence_of(job)
        hunks.print_why(job, evidence)
        runs.print_truth_check(job, truth)
        hunks.print_hunk_check(job, truth, evidence, path)
        print_descent_truth(descent_truth(job, truth, runs.read_local))
        print(f"\n{runs.next_step(job.id)}")
    exit_with(exit_code(job))


def compiled_demo(path: Path, incremental: bool, as_json: bool) -> None:
    """`demo --compiled`: the bisect, its truth check and what its builds cost (one JSON line
    with --json)."""
    from perfbisect.cli import runs
    from perfbisect.cli.compiled_demo import compiled_truth_check, figures_line, run_compiled_demo

    with user_errors():
        job, truth, figures = run_compiled_demo(path, incremental, show_progress=not as_json, console=console())
    check = compiled_truth_check(job, truth)
    if as_json:
        print(json.dumps({"job": job.id, "status": job.status, **figures, **check,
                          "culprits": [[c.first_sha, c.last_sha] for c in job.culprits]}))
    else:
        runs.print_job(job, False)
        print(f"\nplanted: found {check['found'] or 'none'}, missed {check['missed'] or 'none'}, "
              f"false culprits {check['false'] or 'none'}")
        print(figures_line(figures))
    exit_with(exit_code(job))


def demo_pauses() -> None:
    """The demo's pauses for a steadier machine: 5, 10 and 20 s unless PERFBISECT_UNSTEADY_PAUSE_S
    is set. A shared CPU's memory bandwidth drifts within seconds (bench/RESULTS.md: the in-demo
    RMSNorm control), so a minute's pause would not steady it; the demo shows the waiting and its
    report line without adding seven minutes."""
    from perfbisect.service.settings import get_settings

    if "PERFBISECT_UNSTEADY_PAUSE_S" not in os.environ:
        os.environ["PERFBISECT_UNSTEADY_PAUSE_S"] = "5"
        get_settings.cache_clear()


@app.command("demo-repo")
def demo_repo(path: Path) -> None:
    """Write the demo kernel repository (40+ commits with planted regressions) at PATH."""
    from perfbisect.kernels.demo import write_demo_repo

    if path.exists() and any(path.iterdir()):
        fail(f"{path} exists and is not empty")
    written = write_demo_repo(path)
    print(written)


@app.command()
def measure(
    repo: Annotated[Path, typer.Option(help="path of a git repository")],
    rev: Annotated[str, typer.Option(help="revision to measure")],
    target: str = typer.Option(...),
    case: Annotated[list[str], typer.Option(help="repeatable shape, e.g. M=512,N=512,K=512,dtype=fp32")] = ...,
    suite: Annotated[Optional[str], typer.Option(help="gemm, attention, rmsnorm or file:path/in/repo.py")] = None,
    suite_file: SuiteFileOpt = None,
    device: str = "cpu",
    build: Optional[str] = None,
    import_root: str = ".",
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Run one trial (a fresh process, cold caches, control interleaved) and print it."""
    from perfbisect.cli import runs

    with user_errors():
        if suite is None and suite_file is None:
            raise CLIError("give --suite or --suite-file")
        (bench,) = benchmarks_of(suite, suite_file, target, case)
        result = runs.run_measure(repo, rev, bench, device, build, import_root)
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        from perfbisect.kernels.report import format_result

        print(format_result(result))
    if result.get("status") != "ok":
        raise typer.Exit(1)


@app.command()
def simulate(
    history: Path,
    workers: int = 1,
    seed: int = 0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Run the real planner against a noise model (HISTORY.json, format in the README)."""
    from perfbisect.cli import runs

    try:
        result, text = runs.run_simulation(history, workers, seed)
    except CLIError as exc:
        fail(str(exc))
    print(json.dumps(result, indent=2) if as_json else text)


@app.command()
def jobs(limit: int = 20) -> None:
    """List recent jobs."""
    from perfbisect.service.db import session_scope
    from perfbisect.service.jobs import repository

    with user_errors():
        prepare_database()
        with session_scope() as session:
            for job in repository.list_jobs(session, limit=limit):
                print(job_line(job))


def job_line(job) -> str:
    """One row of `perfbisect jobs`: fixed-width columns (the longest status, "inconclusive",
    fits its column; a long repository name is cut), so rows line up whatever they hold."""
    from perfbisect.service.models import JobStatus

    status_width = max(len(s.value) for s in JobStatus)
    p = job.progress
    name = job.repository.name if len(job.repository.name) <= 24 else job.repository.name[:23] + "…"
    revisions = f"{p.get('measured', 0)}/{p.get('revisions', '?')}"
    return (f"{job.id:>5}  {job.kind.value:<8} {job.status.value:<{status_width}} {name:<24} {revisions:>9} revisions "
            f"{p.get('trials', 0):>5} trials  {len(job.culprits)} culprit(s)")


@app.command()
def show(
    job_id: int,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    api: Annotated[Optional[str], typer.Option(envvar="PERFBISECT_API_URL", help="read it from this API server")] = None,
    fail_on: Annotated[FailOn, typer.Option(help="exit 1 when the verdict is a regression (or any change)")] = FailOn.never,
    wide: Annotated[bool, typer.Option(help="one table row per case, wider than 100 columns")] = False,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="wait for the job to finish, showing its progress "
                                         "(a bar on a terminal, a line per round in a log)")] = False,
) -> None:
    """Show one job's report; the exit code is the job's (see `bisect`; 6 while it is still running)."""
    from perfbisect.cli import runs

    with user_errors():
        job = runs.watch_job(job_id, api, console()) if follow else runs.read_job(job_id, api)
    runs.print_job(job, as_json, wide=wide)
    raise typer.Exit(exit_code(job, fail_on))


@app.command()
def attribute(
    job_id: int,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    api: Annotated[Optional[str], typer.Option(envvar="PERFBISECT_API_URL", help="on this API server")] = None,
) -> None:
    """Attribute a finished bisect's culprits at its bad end (each reverted, alone and together),
    follow it, and print the bisect's report with the attribution."""
    from perfbisect.cli import runs

    with user_errors():
        job = runs.attribute_job(job_id, api, show_progress=not as_json, console=console())
    runs.print_job(job, as_json)
    exit_with(exit_code(job))


@app.command()
def cancel(
    job_id: int,
    api: Annotated[Optional[str], typer.Option(envvar="PERFBISECT_API_URL", help="cancel it on this API server")] = None,
) -> None:
    """Cancel a queued or running job: pending trials are dropped."""
    from perfbisect.cli import runs

    with user_errors():
        job = runs.cancel_job(job_id, api)
    console().print(f"job {job.id} {job.status}")


def main() -> None:  # pragma: no cover
    app(prog_name="perfbisect")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
