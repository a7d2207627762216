"""Fault tests with real processes: a job always finishes, with the exact culprit, and nothing
stored is lost or duplicated, when

1. a whole worker is killed (SIGKILL of its process group) mid-trial: its trial re-runs after
   the heartbeat timeout (10 s here), not the broker's visibility timeout (1 h, left as is), or,
   in a side-by-side block, the block is abandoned and the job re-planned as soon;
   the build of every trial forks a `setsid` grandchild that holds stdout, and none survives;
2. Redis is restarted mid-job without persistence (every queued message lost), and a job is
   submitted while it is down;
3. the database is cut off for 12 s (a TCP proxy drops every connection), longer than the
   heartbeat timeout, so every running trial's heartbeat is stale when it comes back: the API
   answers 503 with Retry-After and no driver text, workers keep their results until they can
   store them;
4. a job is cancelled while its trial runs: the trial's processes are gone within 5 s.

Each bisects a three-commit repository with one planted step (tests/fault_support.py) on the CPU.
`python bench/faults.py` runs them and prints the table of bench/RESULTS.md.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psycopg
import pytest

from perfbisect.kernels.harness.contain import tree as proctree
from tests.e2e_support import database_url, wait_for_job
from tests.fault_support import (
    BUILD_COMMAND,
    GOOD_INDEX,
    PLANTED_INDEX,
    RedisServer,
    Stack,
    TcpProxy,
    bisect_body,
    finished,
    make_step_repo,
    record_fault,
    register_and_submit,
    service_stack,
    wait_until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.faults]


@pytest.fixture(scope="module")
def step_repo(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("faults") / "stepkern"
    make_step_repo(path)
    return path

ESCAPING_BUILD = f"{BUILD_COMMAND} && (setsid sh -c 'sleep 600' &) && echo built"
REDIS_STOPPED_S = 3
DB_CUT_S = 12  # > HEARTBEAT_TIMEOUT_S of fault_support.HEALING (10 s)


def snapshot(stack: Stack, job_id: int) -> dict[int, tuple[str, dict]]:
    return {t["id"]: (t["status"], t["measurements"]) for t in finished(stack.trials(job_id))}


def measurement_rows(database_url: str, job_id: int) -> tuple[int, int]:
    """(rows, distinct trial x case) of the job's measurements, straight from the database."""
    with psycopg.connect(database_url) as conn:
        return conn.execute("SELECT count(*), count(DISTINCT (m.trial_id, m.case_id)) FROM measurements m "
                            "JOIN trials t ON t.id = m.trial_id WHERE t.job_id = %s", (job_id,)).fetchone()


def check_job(stack: Stack, job_id: int, before: dict[int, tuple[str, dict]], database_url: str) -> dict:
    """The job succeeded with exactly the planted culprit, nothing is in flight, nothing stored
    before the fault changed, and no measurement row is duplicated. Returns the figures."""
    job = wait_for_job(stack.base, job_id, timeout_s=600, log=stack.log)
    assert job["status"] == "succeeded", (job, stack.log.read_text()[-4000:])
    pos = {sha: i for i, sha in enumerate(job["revision_shas"])}
    spans = [(pos[c["first_sha"]], pos[c["last_sha"]]) for c in job["culprits"] if c["kind"] == "performance"]
    trials = stack.trials(job_id)
    ratios = "; ".join(f"{pos[t['sha']]}#{t['id']}:{m['ratio']:.4f}" for t in sorted(trials, key=lambda t: t["id"])
                       for m in t["measurements"].values() if m["ratio"])  # what a wrong culprit was decided on
    assert spans == [(PLANTED_INDEX - GOOD_INDEX, PLANTED_INDEX - GOOD_INDEX)], f"{spans}: revision#trial:ratio {ratios}"
    assert not [t for t in trials if t["status"] in ("pending", "running")]
    now = {t["id"]: (t["status"], t["measurements"]) for t in trials}
    lost = sum(1 for trial_id, stored in before.items() if now.get(trial_id) != stored)
    rows, distinct = measurement_rows(database_url, job_id)
    assert lost == 0 and rows == distinct == sum(len(t["measurements"]) for t in trials)
    return {"trials": len(trials), "rerun": sum(t["attempts"] > 1 for t in trials), "lost": lost,
            "duplicated": rows - distinct}


def sandbox_processes(home: Path) -> list[int]:
    prefix = str(home.resolve() / "sandbox")
    return [p.pid for p in proctree.all_processes()
            if not p.zombie and (proctree.marker_of(p.pid) or "").startswith(prefix)]


def test_a_killed_worker_trial_reruns_within_the_heartbeat_timeout(step_repo: Path, tmp_path: Path) -> None:
    redis_server = RedisServer(tmp_path / "redis")
    redis_server.start()
    try:
        with service_stack(tmp_path, "kill", redis_server.url) as stack:
            job_id = register_and_submit(stack, step_repo, ESCAPING_BUILD)
            wait_until(lambda: len(finished(stack.trials(job_id))) >= 2
                       and [t for t in stack.trials(job_id) if t["status"] == "running" and t["worker_host"]],
                       300, "two stored trials and one running")
            before = snapshot(stack, job_id)
            for _ in range(3):  # a trial takes ~0.4 s: the chosen one may finish just before the kill
                running = next(t for t in stack.trials(job_id) if t["status"] == "running" and t["worker_host"])
                pool_pid = int(running["worker_host"].rsplit("-", 1)[1])
                worker = next(w for w in stack.workers if w.pid == os.getpgid(pool_pid))
                killed_at = time.monotonic()
                os.killpg(worker.pid, signal.SIGKILL)  # the main process and its pool: a node dying
                worker.wait()
                stack.start_worker()  # its replacement (an orchestrator's restart) sweeps what it left
                # What it was running when it died stays `running` under its host: the trial chosen,
                # or the next one it took if that one finished in between (none if it was idle).
                victim = next((t for t in stack.trials(job_id)
                               if t["status"] == "running" and t["worker_host"] == running["worker_host"]), None)
                if victim:
                    break
                wait_until(lambda: [t for t in stack.trials(job_id) if t["status"] == "running" and t["worker_host"]],
                           120, "a running trial to kill")
            assert victim, "three killed workers were each between trials"
            victim_now = lambda: next(t for t in stack.trials(job_id) if t["id"] == victim["id"])  # noqa: E731
            wait_until(lambda: victim_now()["status"] != "running" or victim_now()["attempts"] >= 2, 120,
                       "the dead worker's trial to be sent again")
            requeued_s = time.monotonic() - killed_at
            if victim["block"] is None:
                wait_until(lambda: victim_now()["attempts"] >= 2, 120, "the killed trial to re-run")
            else:  # a side-by-side block never ends on another worker: abandoned, its pair measured anew
                wait_until(lambda: victim_now()["status"] == "cancelled", 120, "the block to be abandoned")
            recover_s = time.monotonic() - killed_at  # includes waiting behind the trials queued before it
            figures = check_job(stack, job_id, before, stack.env["DATABASE_URL"])
            assert recover_s < 120
            assert sandbox_processes(stack.home) == []  # no harness, no escaped grandchild survived
    finally:
        redis_server.kill()
    record_fault({"fault": "worker SIGKILLed mid-trial (+ escaping setsid grandchild in every build)",
                  "detect_s": round(requeued_s, 1), "recover_s": round(recover_s, 1), **figures})


def test_a_redis_restart_loses_messages_and_every_job_still_finishes(step_repo: Path, tmp_path: Path) -> None:
    redis_server = RedisServer(tmp_path / "redis")
    redis_server.start()
    try:
        with service_stack(tmp_path, "redis", redis_server.url) as stack:
            job_id = register_and_submit(stack, step_repo)
            wait_until(lambda: len(finished(stack.trials(job_id))) >= 2, 300, "two stored trials")
            before = snapshot(stack, job_id)
            redis_server.kill()
            submitted_while_down = stack.post("/api/jobs/bisect", stack_job_body(stack, job_id))
            assert submitted_while_down.status_code == 202, submitted_while_down.text
            time.sleep(REDIS_STOPPED_S)
            redis_server.start()
            restarted_at = time.monotonic()
            stored = len(before)
            wait_until(lambda: len(finished(stack.trials(job_id))) > stored, 180, "progress after the restart")
            recover_s = time.monotonic() - restarted_at
            figures = check_job(stack, job_id, before, stack.env["DATABASE_URL"])
            second = check_job(stack, submitted_while_down.json()["id"], {}, stack.env["DATABASE_URL"])
    finally:
        redis_server.kill()
    record_fault({"fault": f"Redis killed and restarted after {REDIS_STOPPED_S} s, no persistence "
                           "(+ a job submitted while it was down)",
                  "recover_s": round(recover_s, 1), **{k: figures[k] + second[k] for k in figures}})


def stack_job_body(stack: Stack, job_id: int) -> dict:
    """A second job over the same range as `job_id`, asking for a different smallest effect: the same
    request while the first is open would be answered with the first job (200), not a new one."""
    shas = stack.get(f"/api/jobs/{job_id}").json()["revision_shas"]
    return bisect_body(shas[0], shas[-1]) | {"min_effect": 0.1}


def test_a_database_cut_answers_503_and_loses_no_result(step_repo: Path, tmp_path: Path) -> None:
    redis_server = RedisServer(tmp_path / "redis")
    redis_server.start()
    proxy = TcpProxy(("127.0.0.1", 5432))
    try:
        direct = database_url("perfbisect_fault_db")  # the database service_stack makes
        via_proxy = direct.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}")
        with service_stack(tmp_path, "db", redis_server.url, database_url=via_proxy) as stack:
            job_id = register_and_submit(stack, step_repo)
            wait_until(lambda: len(finished(stack.trials(job_id))) >= 2, 300, "two stored trials")
            before = snapshot(stack, job_id)
            proxy.cut()
            cut_at = time.monotonic()
            during = stack.get(f"/api/jobs/{job_id}")
            health = stack.get("/healthz")
            assert during.status_code == 503 and during.headers.get("retry-after")
            assert during.json()["detail"] == "database unavailable, retry later"
            assert health.status_code == 503 and health.json()["database"] == "database unavailable"
            time.sleep(max(0.0, DB_CUT_S - (time.monotonic() - cut_at)))
            proxy.restore()
            restored_at = time.monotonic()
            stored = len(before)
            wait_until(lambda: stack.get(f"/api/jobs/{job_id}").status_code == 200
                       and len(finished(stack.trials(job_id))) > stored, 180, "progress after the cut")
            recover_s = time.monotonic() - restored_at
            assert stack.get("/healthz").status_code == 200  # recovered by itself
            figures = check_job(stack, job_id, before, direct)
    finally:
        proxy.close()
        redis_server.kill()
    record_fault({"fault": f"database cut for {DB_CUT_S} s (TCP proxy drops every connection)",
                  "recover_s": round(recover_s, 1), **figures})


def test_cancel_kills_the_running_trial_within_5_seconds(step_repo: Path, tmp_path: Path) -> None:
    redis_server = RedisServer(tmp_path / "redis")
    redis_server.start()
    slow_build = f"{BUILD_COMMAND} && (setsid sh -c 'sleep 600' &) && sleep 600"
    try:
        with service_stack(tmp_path, "cancel", redis_server.url, workers=1) as stack:
            job_id = register_and_submit(stack, step_repo, slow_build)
            wait_until(lambda: sandbox_processes(stack.home), 120, "a running build")
            cancelled = stack.post(f"/api/jobs/{job_id}/cancel")
            assert cancelled.status_code == 200, cancelled.text
            cancelled_at = time.monotonic()
            wait_until(lambda: not sandbox_processes(stack.home), 5, "the trial's processes to be killed", 0.1)
            gone_s = time.monotonic() - cancelled_at
            wait_until(lambda: all(t["status"] == "cancelled" for t in stack.trials(job_id)), 30, "cancelled trials")
            slots = stack.home / "sandbox"
            # the slot's directory stays (its fork server has it mounted), emptied
            wait_until(lambda: not any(any(p.iterdir()) for p in slots.glob("*/slot-*") if p.is_dir()), 10,
                       "the slot to be wiped")
    finally:
        redis_server.kill()
    record_fault({"fault": "job cancelled while its trial builds (sleep 600 + escaped grandchild)",
                  "recover_s": round(gone_s, 1), "trials": 1, "rerun": 0, "lost": 0, "duplicated": 0})
