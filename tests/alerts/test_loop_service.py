"""The tracking loop's services on the real PostgreSQL and real git repositories: backfill and
runs (never measuring a head twice), detection into alerts, bisects started by alerts (at most N,
largest first), culprits attached, triage, fixes, and the push webhook and API. The harness is
the edge: trials get stored results of known values through trials.record, as a worker would."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select

from perfbisect.service.alerts import history
from perfbisect.service.alerts import service as alerts
from perfbisect.service.alerts.grouping import Step, StepGroup
from perfbisect.service.alerts.schemas import AlertUpdate
from perfbisect.service.jobs import advance
from perfbisect.service.jobs import repository as jobs_repo
from perfbisect.service.models import Alert, AlertStatus, Culprit, CulpritKind, Job, JobKind, JobStatus
from perfbisect.service.tracking import service as tracking
from perfbisect.service.tracking.schemas import TrackedBranchCreate
from perfbisect.service.trials import service as trials
from perfbisect.service.webhooks.signature import sign
from tests.factories import create_repository
from tests.gitrepo import git, make_repo

CASE = {"suite": "gemm", "target": "lib.gemm:matmul", "shapes": ["M=64,N=64,K=64,dtype=fp32"]}
CASE_NAME = "gemm M=64,N=64,K=64,dtype=fp32"
OTHER = {"suite": "gemm", "target": "lib.gemm:matmul", "shapes": ["M=128,N=128,K=128,dtype=fp32"]}
OTHER_NAME = "gemm M=128,N=128,K=128,dtype=fp32"


def result(case_values: dict[str, float | str]) -> dict:
    """A harness result as a worker stores it: a ratio per case, or 'wrong' for wrong results."""
    cases = []
    for name, value in case_values.items():
        wrong = value == "wrong"
        ratio = 1.0 if wrong else value
        cases.append({"suite": "gemm", "target": "lib.gemm:matmul", "name": name, "params": {},
                      "status": "wrong_results" if wrong else "ok", "median_ratio": ratio,
                      "metric": {"name": "TFLOP/s", "higher_is_better": True, "target": ratio, "control": 1.0}})
    return {"status": "ok", "harness_version": "1", "device": {"name": "test-cpu", "torch": "2.13"},
            "cases": cases, "wall_s": 1.0}


def measure(session, job_id: int, value_of, as_result=result) -> None:
    """Run a job's rounds, storing `as_result(value_of(sha))` (by default: {case: ratio} of this
    module's cases) for every trial it plans."""
    while True:
        planned = advance.advance(session, job_id)
        if planned.finished or not planned.trial_ids:
            break
        for trial in jobs_repo.trials_of(session, job_id):
            if trial.id in planned.trial_ids:
                trials.record(session, trial.id, as_result(value_of(trial.revision.sha)))


@pytest.fixture
def lib(tmp_path: Path, session) -> dict:
    """A 20-commit repository; main starts at commit 7, `future` holds the rest for pushes."""
    path = tmp_path / "lib"
    shas = make_repo(path, [f"change {i} (#{100 + i})" for i in range(20)])
    git(path, "branch", "future", shas[-1])
    git(path, "update-ref", "refs/heads/main", shas[7])
    repo = create_repository(session, path, name=f"lib-{uuid.uuid4().hex[:8]}")
    return {"repo": repo, "path": path, "shas": shas}


def track(session, lib, **kw):
    """A tracked branch that alerts at once (confirm_trials 0) unless `kw` says otherwise; a
    field passed as None is left to its default."""
    data = {"repository": lib["repo"].name, "benchmarks": [CASE], "backfill_every": 2, "backfill_depth": 8,
            "trials_per_head": 1, "min_magnitude": 0.1, "confirm_trials": 0, **kw}
    return tracking.create(session, TrackedBranchCreate(**{k: v for k, v in data.items() if v is not None}))


def push(session, lib, tracked, index: int, value_of):
    git(lib["path"], "update-ref", "refs/heads/main", lib["shas"][index])
    run = tracking.start_run(session, tracked.id, lib["shas"][index])
    if run.job is not None:
        measure(session, run.job.id, value_of)
    return run


def step_at(lib, index: int, before: float = 1.0, after: float = 0.6):
    jitter = [0.0, 0.01, -0.01, 0.005, -0.005]
    return lambda sha: {CASE_NAME: (before if lib["shas"].index(sha) < index else after)
                        + jitter[lib["shas"].index(sha) % 5]}


def test_backfill_measures_every_kth_commit_and_nothing_twice(session, lib) -> None:
    shas = lib["shas"]
    tracked = track(session, lib)
    run = tracking.start_run(session, tracked.id)
    assert list(run.heads) == [shas[1], shas[3], shas[5], shas[7]]
    assert run.job.kind == JobKind.track and run.job.spec.tracked_branch_id == tracked.id
    assert tracking.start_run(session, tracked.id).job is None  # the open track job measures them
    measure(session, run.job.id, lambda sha: {CASE_NAME: 1.0})
    assert session.get(Job, run.job.id).status == JobStatus.succeeded
    assert tracking.start_run(session, tracked.id).job is None  # measured with today's fingerprint
    again = push(session, lib, tracked, 9, lambda sha: {CASE_NAME: 1.0})
    assert list(again.heads) == [shas[9]]


def test_every_measured_head_is_a_point_of_the_history_at_once(client, session, lib) -> None:
    """Backfill 5 heads + 2 pushes: 7 points per case in /api/history and the overview, in
    first-parent order, with no bisect or compare covering them."""
    shas = lib["shas"]
    tracked = track(session, lib, benchmarks=[CASE, OTHER], backfill_every=1, backfill_depth=5)
    flat = lambda sha: {CASE_NAME: 1.0, OTHER_NAME: 2.0}  # noqa: E731
    measure(session, tracking.start_run(session, tracked.id).job.id, flat)
    for index in (9, 11):
        push(session, lib, tracked, index, flat)
    session.flush()
    body = client.get(f"/api/history/{lib['repo'].name}").json()
    assert [c["sha"] for c in body["commits"]] == [shas[i] for i in (3, 4, 5, 6, 7, 9, 11)]
    assert [c["index"] for c in body["commits"]] == [3, 4, 5, 6, 7, 9, 11]
    assert sorted(c["case"] for c in body["cases"]) == sorted([CASE_NAME, OTHER_NAME])
    assert all(len(c["series"][0]["points"]) == 7 for c in body["cases"])
    overview = client.get(f"/api/history/{lib['repo'].name}/overview").json()
    assert len(overview["cases"]) == 2


def test_a_step_becomes_one_alert_that_starts_a_bisect_and_gets_its_culprit(session, lib) -> None:
    shas, values = lib["shas"], step_at(lib, 10)
    tracked = track(session, lib)
    measure(session, tracking.start_run(session, tracked.id).job.id, values)
    for index in (11, 13):
        push(session, lib, tracked, index, values)
        assert alerts.detect(session, tracked.id).raised == []  # two heads after the step: not yet
    push(session, lib, tracked, 15, values)
    found = alerts.detect(session, tracked.id)
    [alert] = session.scalars(select(Alert).where(Alert.tracked_branch_id == tracked.id)).all()
    assert found.raised == [alert.id] and found.bisect_job_ids == [alert.bisect_job_id]
    assert (alert.kind.value, alert.status) == ("regression", AlertStatus.new)
    assert (alert.before_sha, alert.first_sha, alert.last_sha) == (shas[7], shas[8], shas[11])
    bisect = session.get(Job, alert.bisect_job_id)
    assert (bisect.spec.good_sha, bisect.spec.bad_sha, bisect.spec.alert_id) == (shas[7], shas[11], alert.id)

    again = alerts.detect(session, tracked.id)  # a re-detection is the same alert, and no second bisect
    assert again.raised == [alert.id] and again.bisect_job_ids == []
    assert session.scalars(select(Alert).where(Alert.tracked_branch_id == tracked.id)).all() == [alert]

    bisect.status = JobStatus.inconclusive  # another case undecided: the confirmed culprit still stands
    session.add(Culprit(job_id=bisect.id, kind=CulpritKind.performance, first_sha=shas[10], last_sha=shas[10],
                        effects={CASE_NAME: {"rel": -0.4, "ci": [-0.42, -0.38], "before": 1.0, "after": 0.6}}))
    # a larger step whose own verdict did not confirm it (the case's noise): never the alert's culprit
    session.add(Culprit(job_id=bisect.id, kind=CulpritKind.performance, first_sha=shas[9], last_sha=shas[9],
                        effects={CASE_NAME: {"rel": -0.6, "ci": [-0.7, -0.5], "before": 1.0, "after": 0.4,
                                             "confirmed": False}}))
    session.flush()
    session.expire_all()
    done = alerts.job_finished(session, bisect.id)
    assert done.comment_alert_ids == [alert.id]
    assert (alert.culprit_first_sha, alert.culprit_last_sha) == (shas[10], shas[10])
    assert alerts.job_finished(session, tracked.id * 0 + 10**9) is None  # no alert's bisect

    # heads measured later at other times (a bisect's, under load) place the step at 7..8: the
    # alert keeps the range it was bisected over, which holds its culprit
    branch = history.load(session, tracked)
    elsewhere = StepGroup(7, 8, (Step(CASE_NAME, "regression", 7, 8, -0.4, 0.001, 1.0, 0.6),))
    alerts._store(session, tracked, branch, elsewhere, alert)
    assert (alert.before_sha, alert.last_sha) == (shas[7], shas[11]) and alert.detections == 3
    alert.culprit_first_sha = None  # before its bisect names one, a re-detection narrows it
    alerts._store(session, tracked, branch, elsewhere, alert)
    assert (alert.before_sha, alert.last_sha) == (shas[7], shas[8])


def raised_alert(session, lib, values):
    """(tracked branch, alert id): a branch measured, pushed three heads past a step at 10, and
    the alert its detection raised (with a bisect started)."""
    tracked = track(session, lib)
    measure(session, tracking.start_run(session, tracked.id).job.id, values)
    for index in (11, 13, 15):
        push(session, lib, tracked, index, values)
    [alert_id] = alerts.detect(session, tracked.id).raised
    return tracked, alert_id


def test_triaged_alerts_are_not_raised_again_and_invalid_cancels_the_bisect(session, lib) -> None:
    values = step_at(lib, 10)
    tracked, alert_id = raised_alert(session, lib, values)
    alert = alerts.triage(session, alert_id, AlertUpdate(status="invalid", note="noisy runner"), "tester")
    assert alert.triaged_at is not None and alert.note == "noisy runner"
    assert session.get(Job, alert.bisect_job_id).status == JobStatus.cancelled
    push(session, lib, tracked, 17, values)
    assert alerts.detect(session, tracked.id).raised == []
    assert session.get(Alert, alert_id).status == AlertStatus.invalid


def test_at_most_max_bisects_run_and_the_largest_goes_first(session, lib) -> None:
    shas = lib["shas"]
    levels = {**{i: 1.0 for i in range(9)}, **{i: 0.8 for i in range(9, 15)}, **{i: 0.3 for i in range(15, 20)}}
    values = lambda sha: {CASE_NAME: levels[shas.index(sha)] * (1 + 0.01 * (shas.index(sha) % 3 - 1))}  # noqa: E731
    tracked = track(session, lib, max_bisects=1, backfill_every=1, backfill_depth=8)
    measure(session, tracking.start_run(session, tracked.id).job.id, values)
    for index in (10, 11, 12, 13, 16, 17, 18, 19):
        push(session, lib, tracked, index, values)
    found = alerts.detect(session, tracked.id)
    rows = {a.id: a for a in session.scalars(select(Alert).where(Alert.tracked_branch_id == tracked.id))}
    assert len(rows) == 2 and len(found.bisect_job_ids) == 1
    [bisected] = [a for a in rows.values() if a.bisect_job_id]
    assert bisected.magnitude == max(a.magnitude for a in rows.values())  # -62% before -20%
    job = session.get(Job, bisected.bisect_job_id)
    job.status = JobStatus.failed
    session.flush()
    following = alerts.job_finished(session, job.id)
    assert len(following.bisect_job_ids) == 1 and "without naming a culprit" in bisected.note


def test_an_alert_with_nothing_unmeasured_names_its_culprit_at_once(session, lib) -> None:
    values = step_at(lib, 5)
    tracked = track(session, lib, backfill_every=1, backfill_depth=8)
    measure(session, tracking.start_run(session, tracked.id).job.id, values)
    found = alerts.detect(session, tracked.id)
    [alert_id] = found.raised
    alert = session.get(Alert, alert_id)
    assert found.bisect_job_ids == [] and alert.culprit_last_sha == lib["shas"][5] == alert.culprit_first_sha
    assert found.comment_alert_ids == [alert_id]


def test_a_regression_is_fixed_when_a_later_step_restores_the_level(session, lib) -> None:
    shas = lib["shas"]
    down_up = lambda sha: {CASE_NAME: (0.6 if 4 <= shas.index(sha) < 12 else 1.0)  # noqa: E731
                           + 0.01 * (shas.index(sha) % 3 - 1)}
    tracked = track(session, lib, backfill_every=1, backfill_depth=8)
    measure(session, tracking.start_run(session, tracked.id).job.id, down_up)
    for index in range(8, 16):
        push(session, lib, tracked, index, down_up)
    alerts.detect(session, tracked.id)
    rows = sorted(session.scalars(select(Alert).where(Alert.tracked_branch_id == tracked.id)), key=lambda a: a.id)
    regression, improvement = rows
    assert regression.kind.value == "regression" and improvement.kind.value == "improvement"
    assert regression.status == AlertStatus.fixed and regression.fixed_by_id == improvement.id


def test_wrong_results_raise_an_alert(session, lib) -> None:
    shas = lib["shas"]
    values = lambda sha: {CASE_NAME: "wrong" if shas.index(sha) >= 9 else 1.0}  # noqa: E731
    tracked = track(session, lib)
    measure(session, tracking.start_run(session, tracked.id).job.id, values)
    push(session, lib, tracked, 11, values)
    [alert_id] = alerts.detect(session, tracked.id).raised
    alert = session.get(Alert, alert_id)
    assert alert.kind.value == "wrong_results" and (alert.before_sha, alert.last_sha) == (shas[7], shas[11])


def test_a_wrong_results_alerts_bisect_succeeds_and_names_its_culprit(session, lib) -> None:
    shas = lib["shas"]
    values = lambda sha: {CASE_NAME: "wrong" if shas.index(sha) >= 9 else 1.0,  # noqa: E731
                          OTHER_NAME: 1.0}
    tracked = track(session, lib, benchmarks=[CASE, OTHER])
    measure(session, tracking.start_run(session, tracked.id).job.id, values)
    push(session, lib, tracked, 11, values)
    [alert_id] = alerts.detect(session, tracked.id).raised
    alert = session.get(Alert, alert_id)
    measure(session, alert.bisect_job_id, values)
    bisect = session.get(Job, alert.bisect_job_id)
    assert bisect.status == JobStatus.succeeded, bisect.error
    [wrong] = [c for c in session.scalars(select(Culprit).where(Culprit.job_id == bisect.id))
               if c.kind == CulpritKind.correctness]
    assert (wrong.first_sha, list(wrong.effects)) == (shas[9], [CASE_NAME])  # only the case that was wrong
    session.expire_all()  # a task's fresh session
    done = alerts.job_finished(session, bisect.id)
    assert (alert.culprit_first_sha, alert.culprit_last_sha, alert.note) == (shas[9], shas[9], None)
    assert done.comment_alert_ids == [alert.id]


# --- API and webhook ------------------------------------------------------------------------

def test_track_api_validates_and_queues_the_backfill(client, session, lib, sent_tasks) -> None:
    body = {"repository": lib["repo"].name, "branch": "main", "benchmarks": [CASE]}
    created = client.post("/api/tracked-branches", json=body)
    assert created.status_code == 201, created.text
    tracked = created.json()
    assert tracked["cases"][0]["name"] == CASE_NAME
    assert sent_tasks == [("perfbisect.track_branch", (tracked["id"],))]
    assert client.post("/api/tracked-branches", json=body).status_code == 409
    bad = client.post("/api/tracked-branches", json={**body, "branch": "nope"})
    assert bad.status_code == 422 and "nope" in bad.json()["detail"]
    assert client.post("/api/tracked-branches", json={**body, "benchmarks": [{**CASE, "suite": "nosuch"}]}).status_code == 422
    assert client.post("/api/tracked-branches", json={**body, "repository": "missing"}).status_code == 404
    assert [t["id"] for t in client.get("/api/tracked-branches").json()] == [tracked["id"]]
    assert client.post(f"/api/tracked-branches/{tracked['id']}/run").status_code == 202
    assert client.delete(f"/api/tracked-branches/{tracked['id']}").status_code == 204
    assert client.get(f"/api/tracked-branches/{tracked['id']}").status_code == 404


def test_alert_api_lists_reads_and_triages(client, session, lib, sent_tasks) -> None:
    values = step_at(lib, 5)
    tracked = track(session, lib, backfill_every=1, backfill_depth=8)
    measure(session, tracking.start_run(session, tracked.id).job.id, values)
    [alert_id] = alerts.detect(session, tracked.id).raised
    listed = client.get("/api/alerts", params={"tracked_branch": tracked.id}).json()
    assert [a["id"] for a in listed] == [alert_id]
    one = client.get(f"/api/alerts/{alert_id}").json()
    assert one["culprit_exact"] and one["culprit_subject"] == "change 5 (#105)"
    assert one["cases"][0]["case"] == CASE_NAME and one["cases"][0]["rel"] < -0.3
    patched = client.patch(f"/api/alerts/{alert_id}", json={"status": "acknowledged"})
    assert patched.status_code == 200 and patched.json()["status"] == "acknowledged"
    assert ("perfbisect.detect_alerts", (tracked.id,)) in sent_tasks
    assert client.patch(f"/api/alerts/{alert_id}", json={"status": "closed"}).status_code == 422
    assert client.patch("/api/alerts/999999", json={"status": "invalid"}).status_code == 404
    assert client.get("/api/alerts", params={"status": "acknowledged"}).json()[0]["id"] == alert_id


def test_push_webhook_queues_a_run_of_the_tracked_branch(client, session, lib, sent_tasks, monkeypatch) -> None:
    from perfbisect.service.settings import get_settings

    secret = "push-secret"
    monkeypatch.setattr(get_settings(), "webhook_secret", secret)
    tracked = track(session, lib)
    url = str(lib["path"])

    def push(payload: dict):
        body = json.dumps(payload).encode()
        return client.post("/api/webhooks/github", content=body, headers={
            "X-GitHub-Event": "push", "Content-Type": "application/json", "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(secret, body)})

    payload = {"ref": "refs/heads/main", "after": lib["shas"][9], "repository": {"clone_url": url}}
    reply = push(payload)
    assert reply.status_code == 202, reply.text
    assert sent_tasks == [("perfbisect.track_branch", (tracked.id, lib["shas"][9]))]
    other = push({**payload, "ref": "refs/heads/dev"})
    assert other.status_code == 202 and "not a tracked branch" in other.json()["message"]
    bad = push({"ref": "refs/heads/main"})
    assert bad.status_code == 422 and "after" in bad.json()["detail"]
    assert len(sent_tasks) == 1


def test_beat_runs_scheduled_and_polled_branches_when_due_and_poll_only_when_moved(session, lib) -> None:
    from datetime import timedelta

    from perfbisect.service.models import utcnow

    polled = track(session, lib, trigger="poll", interval_s=600)
    pushed = track(session, lib, trigger="push", device_class="cuda")
    assert tracking.due(session, utcnow()) == [(polled.id, True)]  # never run yet
    measure(session, tracking.start_run(session, polled.id).job.id, lambda sha: {CASE_NAME: 1.0})
    assert tracking.due(session, utcnow()) == []
    assert tracking.due(session, utcnow() + timedelta(seconds=601)) == [(polled.id, True)]
    unmoved = tracking.start_run(session, polled.id, only_if_moved=True)
    assert unmoved.job is None and not unmoved.moved
    git(lib["path"], "update-ref", "refs/heads/main", lib["shas"][9])
    moved = tracking.start_run(session, polled.id, only_if_moved=True)
    assert moved.moved and list(moved.heads) == [lib["shas"][9]]
    assert pushed.trigger.value == "push"


def test_triage_stores_assignee_and_issue_with_who_when_and_a_history(client, make_client, session, lib,
                                                                        sent_tasks) -> None:
    values = step_at(lib, 5)
    tracked = track(session, lib, backfill_every=1, backfill_depth=8)
    measure(session, tracking.start_run(session, tracked.id).job.id, values)
    [alert_id] = alerts.detect(session, tracked.id).raised
    body = {"status": "investigating", "assignee": "ana", "bug": "https://github.com/acme/lib/issues/7"}
    patched = client.patch(f"/api/alerts/{alert_id}", json=body)
    assert patched.status_code == 200, patched.text
    read = patched.json()
    assert (read["status"], read["assignee"], read["bug"]) == ("investigating", "ana", body["bug"])
    assert read["triaged_by"] == client.principal.name and read["triaged_at"]
    assert client.get(f"/api/alerts/{alert_id}").json()["assignee"] == "ana"  # stored, not echoed
    # an empty value clears; a field left out is kept
    assert client.patch(f"/api/alerts/{alert_id}", json={"bug": ""}).json()["bug"] is None
    assert client.get(f"/api/alerts/{alert_id}").json()["assignee"] == "ana"
    history = client.get(f"/api/alerts/{alert_id}/changes").json()
    assert [(c["field"], c["old"], c["new"]) for c in history] == [
        ("status", "new", "investigating"), ("assignee", None, "ana"), ("bug", None, body["bug"]),
        ("bug", body["bug"], None)]
    assert {c["by"] for c in history} == {client.principal.name}
    # unknown fields and unsafe links are refused, not dropped
    assert client.patch(f"/api/alerts/{alert_id}", json={"owner": "bob"}).status_code == 422
    assert client.patch(f"/api/alerts/{alert_id}", json={"bug": "javascript:alert(1)"}).status_code == 422
    assert make_client("read").patch(f"/api/alerts/{alert_id}", json={"status": "fixed"}).status_code == 403
    assert client.get("/api/alerts", params={"assignee": "ana", "repository": lib["repo"].name,
                                             "branch": "main"}).json()[0]["id"] == alert_id
    assert client.get("/api/alerts", params={"branch": "other"}).json() == []


def test_bulk_triage_is_all_or_none(client, session, lib, sent_tasks) -> None:
    values = step_at(lib, 5)
    tracked = track(session, lib, backfill_every=1, backfill_depth=8)
    measure(session, tracking.start_run(session, tracked.id).job.id, values)
    [alert_id] = alerts.detect(session, tracked.id).raised
    missing = client.patch("/api/alerts", json={"ids": [alert_id, 999999], "status": "expected", "reason": "known"})
    assert missing.status_code == 404
    assert client.get(f"/api/alerts/{alert_id}").json()["status"] == "new"
    done = client.patch("/api/alerts", json={"ids": [alert_id], "status": "acknowledged", "assignee": "ana",
                                             "reason": "looking"})
    assert done.status_code == 200 and [(a["status"], a["assignee"]) for a in done.json()] == [("acknowledged", "ana")]
    assert client.patch("/api/alerts", json={"ids": []}).status_code == 422


def test_a_suspected_step_is_re_measured_side_by_side_before_it_alerts(session, lib) -> None:
    """confirm_trials (3 unless the branch says otherwise): the step found after three heads is
    no alert yet; its two heads (the last before it, the first after it) are measured again in
    one track job, 3 trials each, alternating; the alert comes with the detection after that
    re-measure, and only when the re-measure shows the step."""
    shas, values = lib["shas"], step_at(lib, 10)
    tracked = track(session, lib, confirm_trials=None)
    assert tracked.confirm_trials == 3
    measure(session, tracking.start_run(session, tracked.id).job.id, values)
    for index in (11, 13, 15):
        push(session, lib, tracked, index, values)
    suspected = alerts.detect(session, tracked.id)
    assert suspected.raised == [] and len(suspected.measure_job_ids) == 1
    job = session.get(Job, suspected.measure_job_ids[0])
    assert (job.kind, job.spec.remeasure.model_dump(), job.revision_shas) == (
        JobKind.track, {"before": shas[7], "after": shas[11]}, [shas[7], shas[11]])
    assert alerts.detect(session, tracked.id).measure_job_ids == []  # one re-measure, while it runs too
    measure(session, job.id, values)
    order = [t.revision.sha for t in sorted(jobs_repo.trials_of(session, job.id), key=lambda t: t.id)]
    assert order == [shas[7], shas[11]] * 3  # side by side
    found = alerts.detect(session, tracked.id)
    [alert] = session.scalars(select(Alert).where(Alert.tracked_branch_id == tracked.id)).all()
    assert found.raised == [alert.id] and (alert.before_sha, alert.last_sha) == (shas[7], shas[11])


def test_a_step_the_side_by_side_re_measure_does_not_show_never_alerts(session, lib) -> None:
    """The heads after 7 were measured while the machine was busy (20% slower); measured again
    together, heads 7 and 11 agree: no alert, and no second re-measure of the same pair."""
    shas, busy, quiet = lib["shas"], {"now": True}, step_at(lib, 99)  # quiet: 1.0 with a little jitter
    values = lambda sha: {CASE_NAME: 0.8 if busy["now"] and shas.index(sha) > 7 else quiet(sha)[CASE_NAME]}  # noqa: E731
    tracked = track(session, lib, confirm_trials=2)
    busy["now"] = False
    measure(session, tracking.start_run(session, tracked.id).job.id, values)
    busy["now"] = True
    for index in (11, 13, 15):
        push(session, lib, tracked, index, values)
    [job_id] = alerts.detect(session, tracked.id).measure_job_ids
    busy["now"] = False  # the machine is quiet while both heads are measured again
    measure(session, job_id, values)
    again = alerts.detect(session, tracked.id)
    assert again.raised == [] and again.measure_job_ids == []
    assert session.scalars(select(Alert).where(Alert.tracked_branch_id == tracked.id)).all() == []
