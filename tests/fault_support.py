"""Real processes and real faults for tests/test_faults.py: a redis-server of the test's own that
can be killed and restarted, a TCP proxy in front of PostgreSQL that can cut the database off,
and the whole service (API, two workers, the beat reconciler) on them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from tests.e2e_support import admin_headers, api_server, free_port, migrated_database, perfbisect, service_env, stop
from tests.gitrepo import git

# A three-commit repository whose kernel becomes 40 passes slower at commit 1: a step no load on
# a shared CI machine can hide, so the fault, not the noise, is what these tests exercise. One
# revision inside the range is enough for a bisect that must still name the culprit exactly
# (five commits: 35 trials in the killed-worker test, 64 in the Redis one; three: 17 and 38).
GOOD_INDEX, BAD_INDEX, PLANTED_INDEX = 0, 2, 1
CASE = {"suite": "file:bench/scale.py", "target": "stepkern.ops:scale", "params": {"N": 1 << 18}}
BUILD_COMMAND = "python -m compileall -q stepkern"
# Many cheap samples: a trial's median ratio must hold on a loaded shared machine.
POLICY = {"min_samples": 15, "max_samples": 31, "max_time_s": 0.5, "rel_noise": 0.02, "warmup": 2, "threads": 1}
SUITE = """
import torch

METRIC = "GB/s"

def make_inputs(params, device, generator):
    return (torch.randn(params["N"], generator=generator, device=device),)

def bytes_moved(params):
    return 2 * 4 * params["N"]

def reference(inputs, params):
    return inputs[0].double() * 2.0

def control(inputs, params):
    return inputs[0] * 2.0
"""
FAST = "def scale(x):\n    return x * 2.0\n"
SLOW = "def scale(x):\n    for _ in range(40):  # a pass per tile, left in by a refactor\n        x = x + 0.0\n    return x * 2.0\n"


def make_step_repo(path: Path) -> list[str]:
    """The fault tests' repository; returns its shas, oldest first."""
    path.mkdir(parents=True)
    (path / "bench").mkdir()
    (path / "stepkern").mkdir()
    (path / "bench" / "scale.py").write_text(SUITE)
    (path / "stepkern" / "__init__.py").write_text("")
    git(path, "init", "-q", "-b", "main")
    shas = []
    for index in range(BAD_INDEX + 1):
        (path / "stepkern" / "ops.py").write_text(SLOW if index >= PLANTED_INDEX else FAST)
        (path / "CHANGES").write_text(f"change {index}\n")
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", f"change {index} (#{100 + index})")
        shas.append(git(path, "rev-parse", "HEAD"))
    return shas
# Fast healing for tests; production defaults are in service/settings.py.
HEALING = {"PERFBISECT_HEARTBEAT_S": "1", "PERFBISECT_HEARTBEAT_TIMEOUT_S": "10",
           "PERFBISECT_RECONCILE_INTERVAL_S": "2", "PERFBISECT_REDISPATCH_AFTER_S": "5",
           "PERFBISECT_CANCEL_POLL_S": "0.5"}
if os.environ.get("PERFBISECT_FAULT_HEALING") == "production":  # bench/faults.py --production: the defaults
    HEALING = {}


class RedisServer:
    """redis-server on a free port, without persistence: a restart loses every queued message."""

    def __init__(self, workdir: Path) -> None:
        self.port, self.workdir = free_port(), workdir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(self.workdir)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(self.url, socket_connect_timeout=0.5).ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class TcpProxy:
    """Forwards 127.0.0.1:<port> to PostgreSQL; `cut()` drops every connection and refuses new
    ones (a network partition) until `restore()`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.is_cut = False
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.is_cut:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.open |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        with self.lock:
            self.open.discard(sock)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

    def cut(self) -> None:
        self.is_cut = True
        with self.lock:
            victims = list(self.open)
        for sock in victims:
            self._drop(sock)

    def restore(self) -> None:
        self.is_cut = False

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.listener.close()


@dataclass
class Stack:
    base: str
    env: dict[str, str]
    home: Path
    log: Path
    workers: list[subprocess.Popen] = field(default_factory=list)

    headers: dict[str, str] = field(default_factory=dict)  # an admin token's, made on first use

    def _auth(self) -> dict[str, str]:
        if not self.headers:
            self.headers = admin_headers(self.env)
        return self.headers

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(f"{self.base}{path}", timeout=30, headers=self._auth(), **kw)

    def post(self, path: str, body: dict | None = None) -> httpx.Response:
        return httpx.post(f"{self.base}{path}", json=body, timeout=60, headers=self._auth())

    def trials(self, job_id: int) -> list[dict]:
        return self.get(f"/api/jobs/{job_id}/trials").json()

    def start_worker(self) -> subprocess.Popen:
        worker = perfbisect("worker", "--device-class", "cpu", "--no-control", env=self.env, log=self.log)
        self.workers.append(worker)
        return worker


@contextmanager
def service_stack(tmp_path: Path, name: str, redis_url: str, *, database_url: str | None = None,
                  workers: int = 2, **extra: str):
    """Migrated database, a control worker running the beat reconciler, `workers` CPU workers
    and the API server. `database_url` reaches the migrated database another way (a proxy)."""
    migrated = migrated_database(f"perfbisect_fault_{name}")
    env = service_env(tmp_path / "home", database_url or migrated, redis_url, **{**HEALING, **extra})
    log = tmp_path / "services.log"
    with ExitStack() as stack:
        control = perfbisect("worker", "--no-trials", "--beat", env=env, log=log)
        stack.callback(stop, control)
        services = Stack("", env, tmp_path / "home", log)
        for _ in range(workers):
            services.start_worker()
        stack.callback(lambda: [stop(w, signal.SIGKILL) for w in services.workers])
        services.base = stack.enter_context(api_server(env, log))
        yield services


def register_and_submit(stack: Stack, repo: Path, build_command: str = BUILD_COMMAND) -> int:
    registered = stack.post("/api/repositories", {"name": "stepkern", "url": str(repo), "build_command": build_command})
    assert registered.status_code in (201, 409), registered.text
    shas = git(repo, "rev-list", "--first-parent", "--reverse", "HEAD").split()
    response = stack.post("/api/jobs/bisect", bisect_body(shas[GOOD_INDEX], shas[BAD_INDEX]))
    assert response.status_code == 202, response.text
    return response.json()["id"]


def bisect_body(good: str, bad: str) -> dict:
    return {"repository": "stepkern", "good": good, "bad": bad,
            "benchmarks": [{"suite": CASE["suite"], "target": CASE["target"], "shapes": [CASE["params"]]}],
            "device_class": "cpu", "min_effect": 0.15, "policy": POLICY, "workers": 2}


def wait_until(predicate, timeout_s: float, what: str, poll_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def finished(trials: list[dict]) -> list[dict]:
    return [t for t in trials if t["status"] not in ("pending", "running")]


def record_fault(row: dict) -> None:
    """Append one row of the fault table (bench/faults.py collects them) when asked to."""
    path = os.environ.get("PERFBISECT_FAULT_REPORT")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(row) + "\n")
