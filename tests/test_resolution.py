"""Nothing slow in a request (issue 22): a submission never fetches. Refs the mirror answers
exactly resolve at once; the others are accepted "resolving revisions" and the job's first task
fetches (killed past PERFBISECT_FETCH_TIMEOUT_S, one fetch per remote at a time) and resolves or
fails them. A remote that accepts connections and never answers costs one task slot, never a
request: 24 submissions to it return at once while other requests keep working, and the job
ends failed with "timed out"."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from perfbisect import dispatch
from perfbisect.queue import ADVANCE_JOB
from perfbisect.service.jobs import resolution
from perfbisect.service.models import Job, JobStatus, Repository
from perfbisect.service.settings import get_settings
from tests.gitrepo import git, make_repo

GEMM = {"suite": "gemm", "target": "minikern.gemm:matmul", "shapes": ["M=64,N=64,K=64,dtype=fp32"]}
FETCH_TIMEOUT_S = 2.0


@pytest.fixture
def hung_remote() -> str:
    """A git:// URL on 127.0.0.1 whose server accepts every connection and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(128)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"git://127.0.0.1:{server.getsockname()[1]}/kernels.git"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.fixture
def short_fetches(monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "fetch_timeout_s", FETCH_TIMEOUT_S)


def in_time(call, limit_s: float):
    """call() in a thread: its result, or a failed test when it takes longer than `limit_s`
    (on a build that fetches in the request, it hangs until the remote goes away)."""
    box: list = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(limit_s)
    assert box, f"did not return within {limit_s} s"
    return box[0], time.monotonic() - started


def test_submissions_to_a_hung_remote_return_at_once_and_other_requests_keep_working(
        client, session, hung_remote, short_fetches, sent_tasks, monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "max_open_jobs_per_token", 0)  # 24 jobs of one token
    session.add(Repository(name="hung", url=hung_remote))  # registered while it answered
    session.flush()
    body = {"repository": "hung", "good": "v1", "bad": "main", **GEMM}

    def submit_all() -> list:
        return [client.post("/api/jobs/bisect", json={**body, "min_effect": 0.02 + i / 1000}) for i in range(24)]

    responses, took = in_time(submit_all, 30)
    assert [r.status_code for r in responses] == [202] * 24, responses[0].text
    assert took < 24 * FETCH_TIMEOUT_S / 2  # none of them waited on git
    job = client.get(responses[0].json()["url"]).json()
    assert job["status"] == "queued" and job["progress"]["phase"] == "resolving revisions" and job["revision_shas"] == []
    assert client.get("/healthz").status_code == 200 and len(client.get("/api/jobs").json()) == 24
    page = client.get(f"/dashboard/jobs/{job['id']}")
    assert page.status_code == 200 and "resolving revisions" in page.text
    assert client.get(f"/api/jobs/{job['id']}/report").status_code == 200
    assert [name for name, _ in sent_tasks] == [ADVANCE_JOB] * 24  # the fetch is the task's


def test_the_task_fails_the_job_with_fetch_timed_out_and_one_fetch_runs_per_remote(
        session, hung_remote, short_fetches, client) -> None:
    session.add(Repository(name="hung", url=hung_remote))
    session.flush()
    ids = [client.post("/api/jobs/bisect", json={"repository": "hung", "good": "v1", "bad": f"main~{i}", **GEMM}
                       ).json()["id"] for i in range(2)]
    first, second = (resolution.fetch_target(session, job_id) for job_id in ids)
    stamps: dict[str, object] = {}

    def fetch(name, target) -> None:
        started = time.monotonic()
        stamps[name] = (target.mirror.fetch_once(target.since, FETCH_TIMEOUT_S), time.monotonic() - started)

    one = threading.Thread(target=fetch, args=("first", first))
    one.start()
    time.sleep(0.5)
    fetch("second", second)  # the remote is being fetched: no second fetch, no waiting
    one.join()
    busy, busy_s = stamps["second"]
    stamp, took = stamps["first"]
    assert busy is None and busy_s < 0.5
    assert FETCH_TIMEOUT_S <= took < FETCH_TIMEOUT_S + 5 and "timed out after 2 s" in stamp.error, stamp
    # the second job's task, run again: the fetch that started after it was submitted answers for it
    again, again_s = in_time(lambda: second.mirror.fetch_once(second.since, FETCH_TIMEOUT_S), 10)
    assert again == stamp and again_s < 1
    waiting = resolution.finish(session, ids[0], stamp)
    assert waiting == [ids[1]]  # the caller advances the job that found this fetch running
    failed = client.get(f"/api/jobs/{ids[0]}").json()
    assert failed["status"] == "failed", failed
    assert failed["error"] == (f"could not resolve the revisions: cannot clone {hung_remote}: timed out after 2 s "
                               "(PERFBISECT_FETCH_TIMEOUT_S)")


def test_a_ref_pushed_after_the_last_fetch_is_resolved_by_the_task(client, session, tmp_path, monkeypatch) -> None:
    path = tmp_path / "lib"
    shas = make_repo(path, ["one", "two", "three"])
    assert client.post("/api/repositories", json={"name": "lib", "url": str(path)}).status_code == 201
    exact = client.post("/api/jobs/bisect", json={"repository": "lib", "good": shas[0], "bad": shas[2], **GEMM})
    assert exact.json()["revisions"] == 3  # full shas the mirror holds: resolved in the request
    (path / "history.txt").write_text("pushed\n")
    git(path, "commit", "-qam", "four")
    git(path, "tag", "v4")
    pushed = client.post("/api/jobs/bisect", json={"repository": "lib", "good": shas[0], "bad": "v4", **GEMM})
    missing = client.post("/api/jobs/bisect", json={"repository": "lib", "good": "no-such-branch", "bad": "main",
                                                     **GEMM})
    assert pushed.status_code == missing.status_code == 202 and pushed.json()["revisions"] == 0
    for response in (pushed, missing):
        target = resolution.fetch_target(session, response.json()["id"])
        resolution.finish(session, response.json()["id"], target.mirror.fetch_once(target.since, 30))
    resolved = client.get(pushed.json()["url"]).json()
    assert resolved["status"] == "queued" and len(resolved["revision_shas"]) == 4 and "phase" not in resolved["progress"]
    assert resolved["spec"]["bad_sha"] == git(path, "rev-parse", "v4")
    failed = client.get(missing.json()["url"]).json()
    assert failed["status"] == "failed" and "ref 'no-such-branch' does not resolve" in failed["error"]
    # an identical request, once resolved, is the open job of the same revisions
    monkeypatch.setattr(get_settings(), "mirror_fresh_s", 0.0)  # as if the last fetch were old
    twin = client.post("/api/jobs/bisect", json={"repository": "lib", "good": shas[0], "bad": "main", **GEMM})
    target = resolution.fetch_target(session, twin.json()["id"])
    resolution.finish(session, twin.json()["id"], target.mirror.fetch_once(target.since, 30))
    duplicate = session.get(Job, twin.json()["id"])
    session.refresh(duplicate)
    assert duplicate.status == JobStatus.cancelled and f"the same request as job {pushed.json()['id']}" in duplicate.error


def test_embedded_tasks_resolve_in_process(tmp_path: Path, monkeypatch, hung_remote) -> None:
    """The embedded path (no broker, `make demo`): the job's advance_job task, drained in this
    process, fetches and fails the job of a hung remote."""
    from tests.test_cli_outcomes import embedded as embedded_fixture

    gen = embedded_fixture.__wrapped__(tmp_path, monkeypatch)
    next(gen)
    try:
        from perfbisect.service.auth.principal import SYSTEM
        from perfbisect.service.db import session_scope
        from perfbisect.service.jobs import service as jobs
        from perfbisect.service.jobs.schemas import BisectCreate

        monkeypatch.setattr(get_settings(), "fetch_timeout_s", FETCH_TIMEOUT_S)
        with session_scope() as session:
            session.add(Repository(name="hung", url=hung_remote))
            session.flush()
            job_id = jobs.submit_bisect(session, BisectCreate(repository="hung", good="v1", bad="main", **GEMM),
                                        SYSTEM).job.id
        dispatch.send(ADVANCE_JOB, job_id)
        _, took = in_time(dispatch.drain, 30)
        with session_scope() as session:
            job = session.get(Job, job_id)
            assert job.status == JobStatus.failed and "timed out after 2 s" in job.error, job.error
        assert took < FETCH_TIMEOUT_S + 10
    finally:
        next(gen, None)
