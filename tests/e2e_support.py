"""Real processes for end-to-end tests: a database of their own on the local PostgreSQL, a Redis
database of their own, `perfbisect serve` and `perfbisect worker` as subprocesses."""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import redis

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
BIN = Path(sys.executable).parent
# Several checkouts (or xdist workers) on one machine keep their e2e databases and Redis apart:
# PERFBISECT_TEST_NS suffixes database names, PERFBISECT_TEST_REDIS_BASE picks the Redis server.
TEST_NS = os.environ.get("PERFBISECT_TEST_NS", "")
REDIS_BASE = os.environ.get("PERFBISECT_TEST_REDIS_BASE", "redis://127.0.0.1:6379")


MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"


def database_url(name: str) -> str:
    return f"postgresql://postgres@127.0.0.1:5432/{name}{TEST_NS}"


def fresh_database(name: str, template: str = "template1") -> str:
    """An empty database `name` (a copy of `template`), made anew."""
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}{TEST_NS}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}{TEST_NS}" TEMPLATE "{template}"')
    return database_url(name)


def migrated_database(name: str) -> str:
    """A fresh database at the migrations' head: a copy (CREATE DATABASE ... TEMPLATE, a file
    copy) of a template that `perfbisect db upgrade` migrated once for these migrations, instead
    of Alembic for every stack (seconds each on a loaded machine)."""
    return fresh_database(name, template=migrated_template())


def migrated_template() -> str:
    """The template database of the migrations as they are now (its name holds their digest),
    made when missing. An advisory lock keeps concurrent test processes from making it twice; it
    gets its name only once migrated, so a half-made template is never copied."""
    digest = hashlib.sha256()
    for path in sorted(MIGRATIONS.rglob("*.py")):
        digest.update(path.relative_to(MIGRATIONS).as_posix().encode() + b"\0" + path.read_bytes())
    name = f"perfbisect_template_{digest.hexdigest()[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext('perfbisect e2e template'))")
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (f"{name}{TEST_NS}",)).fetchone() is None:
            building = fresh_database(f"{name}_building")
            subprocess.run([str(BIN / "perfbisect"), "db", "upgrade"], check=True, capture_output=True,
                           env={**os.environ, "DATABASE_URL": building})
            conn.execute(f'ALTER DATABASE "{name}_building{TEST_NS}" RENAME TO "{name}{TEST_NS}"')
        conn.execute("SELECT pg_advisory_unlock(hashtext('perfbisect e2e template'))")
    return f"{name}{TEST_NS}"


def fresh_redis(db: int) -> str:
    url = f"{REDIS_BASE}/{db}"
    redis.Redis.from_url(url).flushdb()
    return url


def traversable_home(prefix: str = "perfbisect-e2e-") -> Path:
    """A PERFBISECT_HOME the sandbox user can enter (mode 0755 under /tmp, removed at exit), so a
    root worker runs the repository's code contained, as a deployment does. Under pytest's
    tmp_path (a 0700 directory) the sandbox probe fails and the code runs as root: a build that
    only works as root (the demo's `python` found through root's PATH) would pass there."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    home.chmod(0o755)
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


ROOT_FALLBACK = "running repository code as root"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def service_env(home: Path, database_url: str | None, redis_url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(PERFBISECT_HOME=str(home), PYTHONUNBUFFERED="1", **extra)
    if database_url:
        env["DATABASE_URL"] = database_url
    if redis_url:
        env["REDIS_URL"] = redis_url
    return env


def admin_headers(env: dict[str, str]) -> dict[str, str]:
    """`perfbisect token create` on the migrated database of `env`: headers for an admin."""
    done = subprocess.run([str(BIN / "perfbisect"), "token", "create", f"e2e-{os.getpid()}-{time.time_ns()}",
                           "--scope", "admin"], env=env, check=True, capture_output=True, text=True)
    return {"Authorization": f"Bearer {done.stdout.strip().splitlines()[-1]}"}


def perfbisect(*args: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([str(BIN / "perfbisect"), *args], env=env, stdout=log.open("ab"),
                            stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextmanager
def api_server(env: dict[str, str], log: Path):
    port = free_port()
    proc = perfbisect("serve", "--port", str(port), env=env, log=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the API exited: {log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        else:
            raise RuntimeError(f"the API did not come up: {log.read_text()[-3000:]}")
        yield base
    finally:
        stop(proc)


def wait_for_job(base: str, job_id: int, timeout_s: float, log: Path | None = None) -> dict:
    """The finished job. Polled at 0.1 s, backing off to 0.5 s: a job that is done or nearly
    done returns at once, a long one costs the API two reads a second."""
    deadline = time.monotonic() + timeout_s
    pause = 0.1
    while time.monotonic() < deadline:
        job = httpx.get(f"{base}/api/jobs/{job_id}", timeout=10).json()
        if job["status"] in ("succeeded", "inconclusive", "failed", "cancelled"):
            return job
        time.sleep(pause)
        pause = min(pause * 1.5, 0.5)
    tail = log.read_text(errors="replace")[-4000:] if log is not None and log.exists() else ""
    raise AssertionError(f"job {job_id} did not finish in {timeout_s}s: {job}\n{trial_digest(base, job_id)}\n{tail}")


def trial_digest(base: str, job_id: int) -> str:
    """Trials per status and the last failures' reasons and hosts: what a stuck job's CI log needs."""
    trials = httpx.get(f"{base}/api/jobs/{job_id}/trials", timeout=30).json()
    counts: dict[str, int] = {}
    for t in trials:
        counts[t["status"]] = counts.get(t["status"], 0) + 1
    failed = [t for t in trials if t["status"] not in ("ok", "pending", "running")]
    lines = [f"trials by status: {counts}"]
    lines += [f"trial {t['id']} {t['status']} on {t['worker_host']} (attempts {t['attempts']}): "
              f"{(t.get('failure_reason') or '')[-600:]}" for t in failed[-5:]]
    return "\n".join(lines)
