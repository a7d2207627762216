"""One alert per change: a second tracked branch (here on another device class, with sparser
heads) whose step holds the culprit of an alert already raised on another branch attaches to that
alert instead of raising, notifying, commenting or bisecting again; the alert lists both branches.
Real PostgreSQL and git; the harness is the edge (tests/alerts/test_loop_service.py)."""

from __future__ import annotations

from sqlalchemy import select

from perfbisect.service.alerts import service as alerts
from perfbisect.service.alerts.schemas import AlertUpdate
from perfbisect.service.models import Alert, AlertBranch, AlertStatus
from perfbisect.service.notifications import service as notifications
from perfbisect.service.tracking import service as tracking
from tests.alerts.test_loop_service import lib, measure, step_at, track  # noqa: F401 (lib: a fixture)
from tests.gitrepo import git
from tests.test_notifications import subscribe


def test_a_second_branch_reaching_an_acknowledged_culprit_attaches_and_sends_nothing(client, session, lib) -> None:
    shas, name = lib["shas"], lib["repo"].name
    subscribe(session, name, "webhook", "https://hooks.example/x", ["alert", "culprit"])
    values = step_at(lib, 8)  # 1.0 before commit 8 (#108), 0.6 from it
    git(lib["path"], "update-ref", "refs/heads/main", shas[11])
    main = track(session, lib, backfill_every=1, backfill_depth=8)  # heads 4..11
    measure(session, tracking.start_run(session, main.id).job.id, values)
    [alert_id] = alerts.detect(session, main.id).raised
    alerts.triage(session, alert_id, AlertUpdate(status="acknowledged"), "alice")
    assert session.get(Alert, alert_id).culprit_last_sha == shas[8]

    git(lib["path"], "branch", "release", shas[17])
    release = track(session, lib, branch="release", device_class="cuda", backfill_every=2, backfill_depth=17)
    measure(session, tracking.start_run(session, release.id).job.id, values)  # heads 1, 3, ..., 17
    found = alerts.detect(session, release.id)
    assert (found.raised, found.named, found.comment_alert_ids, found.bisect_job_ids) == ([], [], [], [])
    assert notifications.alerts_raised(session, found.raised) == []
    [attached] = session.scalars(select(AlertBranch).where(AlertBranch.tracked_branch_id == release.id)).all()
    assert (attached.alert_id, attached.before_sha, attached.last_sha) == (alert_id, shas[7], shas[9])
    assert session.scalars(select(Alert).where(Alert.tracked_branch_id == release.id)).all() == []

    git(lib["path"], "update-ref", "refs/heads/release", shas[19])
    measure(session, tracking.start_run(session, release.id, shas[19]).job.id, values)
    # a later detection matches the attachment: still nothing new
    again = alerts.detect(session, release.id)
    assert (again.raised, again.bisect_job_ids) == ([], [])
    assert session.scalars(select(Alert).where(Alert.tracked_branch_id == release.id)).all() == []

    listed = client.get("/api/alerts", params={"branch": "release"}).json()
    assert [a["id"] for a in listed] == [alert_id]  # the release branch's alerts hold the change it reached
    body = client.get(f"/api/alerts/{alert_id}").json()
    assert (body["branches"], body["status"]) == (["main", "release"], AlertStatus.acknowledged.value)
    assert "main, release" in client.get(f"/dashboard/alerts/{alert_id}").text


def test_two_branches_alerting_before_either_culprit_is_known_end_as_one_alert(session, lib) -> None:
    """Both branches raise (neither culprit known yet) and bisect; the second bisect to name the
    first's culprit folds its alert into the first: no second comment, no culprit notification."""
    shas, name = lib["shas"], lib["repo"].name
    subscribe(session, name, "webhook", "https://hooks.example/x", ["culprit"])
    values = step_at(lib, 8)
    git(lib["path"], "update-ref", "refs/heads/main", shas[13])
    git(lib["path"], "branch", "release", shas[17])
    main = track(session, lib, backfill_every=2, backfill_depth=12)  # heads 3, 5, ..., 13
    release = track(session, lib, branch="release", device_class="cuda", backfill_every=2, backfill_depth=16)
    raised = []
    for tracked in (main, release):
        measure(session, tracking.start_run(session, tracked.id).job.id, values)
        raised += alerts.detect(session, tracked.id).raised
    first, second = (alerts.get(session, alert_id) for alert_id in raised)
    assert (first.tracked_branch_id, second.tracked_branch_id) == (main.id, release.id)
    assert first.bisect_job_id and second.bisect_job_id

    measure(session, first.bisect_job_id, values)
    assert notifications.job_finished(session, first.bisect_job_id) != []
    assert alerts.job_finished(session, first.bisect_job_id).comment_alert_ids == [first.id]
    assert first.culprit_last_sha == shas[8]

    second_id, second_job = second.id, second.bisect_job_id
    measure(session, second_job, values)
    assert notifications.job_finished(session, second_job) == []  # told on the first alert already
    assert alerts.job_finished(session, second_job).comment_alert_ids == []
    session.expire_all()
    assert session.get(Alert, second_id) is None
    assert alerts.get(session, first.id).also_on[0].tracked_branch_id == release.id
