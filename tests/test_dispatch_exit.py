"""A CLI that fails on a user error while its in-process queue still has work (an attribution
just enqueued, the trials of its next round) waits for that work before it exits: the message,
exit code 2 and no traceback, and the follow-ups the running task queued still run. When the work
does not end in time, the CLI says so and exits without starting more of it. A command that ends
with its job's exit code (a finished job queues its notifications) waits the same way.

Each case is a fresh interpreter (how the queue behaves at exit is the point), embedded (no
broker): a typer command queues a task, then fails on a CLIError as a command does, or exits."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from tests.e2e_support import service_env

ROOT = Path(__file__).resolve().parent.parent

# `first` waits for its release, then queues `second`, as a planning round queues its trials.
# Released when the command fails ("drains") or exits ("exits"), or only once the CLI gave up
# waiting ("gives-up", the bound set to 0.5 s): the running task then ends, `second` must not start.
SCRIPT = textwrap.dedent("""
    import sys, threading
    from pathlib import Path

    import typer

    from perfbisect import dispatch
    from perfbisect.queue import celery_app
    from perfbisect.cli import common as cli
    from perfbisect.cli.common import CLIError

    mode, out = sys.argv[1], Path(sys.argv[2])
    release = dispatch._closed if mode == "gives-up" else threading.Event()
    cli.SETTLE_S = 0.5 if mode == "gives-up" else cli.SETTLE_S

    @celery_app.task(name="tests.first")
    def first():
        release.wait()
        with out.open("a") as f:
            f.write("first\\n")
        dispatch.send("tests.second")

    @celery_app.task(name="tests.second")
    def second():
        with out.open("a") as f:
            f.write("second\\n")

    app = typer.Typer(pretty_exceptions_enable=False)

    @app.command()
    def command() -> None:
        dispatch.send("tests.first")
        dispatch.drain_in_background()
        if mode == "exits":
            release.set()
            cli.exit_with(4)
        with cli.user_errors():
            if mode == "drains":
                release.set()
            raise CLIError("the bisect named no culprit to attribute")

    app(args=[], prog_name="perfbisect")
""")


def _run(mode: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    out = tmp_path / "ran.txt"
    env = service_env(tmp_path / "home", None, None, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode, str(out)], env=env, capture_output=True, text=True,
                          timeout=120)
    return done, out.read_text().split() if out.exists() else []


def test_a_user_error_waits_for_the_queued_work_then_exits_2(tmp_path: Path) -> None:
    done, ran = _run("drains", tmp_path)
    assert done.returncode == 2, done.stderr
    assert "error: the bisect named no culprit to attribute" in done.stderr
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr
    assert ran == ["first", "second"]  # the follow-up queued by the running task ran too


def test_a_queue_that_does_not_empty_in_time_is_named_and_left(tmp_path: Path) -> None:
    done, ran = _run("gives-up", tmp_path)
    assert done.returncode == 2, done.stderr
    assert "the work queued in this process was not done after 0.5 s" in done.stderr
    assert "error: the bisect named no culprit to attribute" in done.stderr
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr
    assert ran == ["first"]  # the running task finished; the one it queued did not start


def test_a_command_that_ends_waits_for_the_queued_work_too(tmp_path: Path) -> None:
    done, ran = _run("exits", tmp_path)
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr
    assert ran == ["first", "second"]


def test_a_closed_queue_with_work_left_lets_its_drainer_finish(monkeypatch) -> None:
    """After settle() gave up, queued and held sends never start: the drain loop ends instead of
    spinning on work that can no longer be taken."""
    from collections import deque
    from types import SimpleNamespace

    from perfbisect import dispatch
    from perfbisect.queue import RUN_TRIAL

    monkeypatch.setattr(dispatch, "get_settings", lambda: SimpleNamespace(embedded=True, embedded_workers=1))
    monkeypatch.setattr(dispatch, "_pending", deque())
    monkeypatch.setattr(dispatch, "_held", [])
    monkeypatch.setattr(dispatch, "_closed", threading.Event())
    dispatch.send(RUN_TRIAL, 7, queue="cpu")
    dispatch.send(RUN_TRIAL, 8, queue="cpu", countdown=60)
    dispatch._closed.set()
    done = threading.Thread(target=dispatch.drain, daemon=True)
    done.start()
    done.join(timeout=5)
    assert not done.is_alive()
    assert list(dispatch._pending) == [(RUN_TRIAL, (7,), "cpu")]  # left, never run
