"""Triage needs a `triage` scope (or admin), a bulk change is recorded on every alert with who and
why, and a dismissed alert can be reopened with its bisect restarted (issue 40, item 6)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from perfbisect.queue import DETECT_ALERTS
from perfbisect.service.alerts import service as alerts
from perfbisect.service.alerts.schemas import AlertUpdate
from perfbisect.service.models import Alert, AlertChange, Job, JobStatus
from tests.alerts.test_loop_service import lib, raised_alert, step_at  # noqa: F401  (lib is a fixture)


@pytest.fixture
def alert_id(session, lib) -> int:  # noqa: F811
    return raised_alert(session, lib, step_at(lib, 10))[1]


def _twin(session, alert_id: int) -> int:
    """A second alert of the same branch, for a bulk change of two."""
    first = session.get(Alert, alert_id)
    twin = Alert(tracked_branch_id=first.tracked_branch_id, kind=first.kind, before_sha=first.before_sha,
                 first_sha=first.first_sha, last_sha=first.last_sha, comments={})
    session.add(twin)
    session.flush()
    return twin.id


@pytest.mark.parametrize(("scopes", "expected"), [((), 401), (("read",), 403), (("submit",), 403),
                                                  (("triage",), 200), (("admin",), 200)])
def test_changing_an_alert_needs_the_triage_scope(make_client, alert_id, sent_tasks, scopes, expected) -> None:
    caller = make_client(*scopes)
    single = caller.patch(f"/api/alerts/{alert_id}", json={"status": "acknowledged"})
    bulk = caller.patch("/api/alerts", json={"ids": [alert_id], "status": "invalid", "reason": "noise"})
    assert (single.status_code, bulk.status_code) == (expected, expected), (single.text, bulk.text)
    if expected != 200:
        assert make_client().get(f"/api/alerts/{alert_id}").json()["status"] == "new"  # nothing changed


def test_a_bulk_change_is_recorded_on_every_alert_with_who_and_why(session, make_client, alert_id, sent_tasks) -> None:
    triager, ids = make_client("triage"), [alert_id, _twin(session, alert_id)]
    unexplained = triager.patch("/api/alerts", json={"ids": ids, "status": "expected"})
    assert unexplained.status_code == 422 and "reason" in unexplained.text
    assert triager.patch("/api/alerts", json={"ids": ids, "status": "expected", "reason": " "}).status_code == 422
    done = triager.patch("/api/alerts", json={"ids": ids, "status": "expected", "assignee": "ana",
                                              "reason": "the new tiling is slower by design"})
    assert done.status_code == 200, done.text
    for one in ids:
        history = triager.get(f"/api/alerts/{one}/changes").json()
        assert [(c["field"], c["new"], c["by"], c["reason"]) for c in history] == [
            ("status", "expected", triager.principal.name, "the new tiling is slower by design"),
            ("assignee", "ana", triager.principal.name, "the new tiling is slower by design")]
    stored = session.scalars(select(AlertChange).where(AlertChange.alert_id.in_(ids))).all()
    assert len(stored) == 4 and {c.reason for c in stored} == {"the new tiling is slower by design"}


def test_a_dismissed_alert_reopened_gets_its_bisect_restarted(session, alert_id) -> None:
    alert = session.get(Alert, alert_id)
    first_bisect = alert.bisect_job_id
    alerts.triage(session, alert_id, AlertUpdate(status="invalid", reason="looked like noise"), "tester")
    assert session.get(Job, first_bisect).status == JobStatus.cancelled
    assert alerts.detect(session, alert.tracked_branch_id).bisect_job_ids == []  # dismissed: no bisect
    alerts.triage(session, alert_id, AlertUpdate(status="acknowledged", reason="it is real"), "tester")
    again = alerts.detect(session, alert.tracked_branch_id)
    assert alert.bisect_job_id not in (None, first_bisect) and again.bisect_job_ids == [alert.bisect_job_id]
    assert not session.get(Job, alert.bisect_job_id).status.finished
    assert alerts.job_finished(session, first_bisect) is None  # the cancelled job is no longer the alert's


def test_reopening_through_the_api_queues_the_detection_that_restarts_it(make_client, alert_id, session,
                                                                         sent_tasks) -> None:
    triager = make_client("triage")
    assert triager.patch(f"/api/alerts/{alert_id}", json={"status": "invalid"}).status_code == 200
    sent_tasks.clear()
    reopened = triager.patch(f"/api/alerts/{alert_id}", json={"status": "new", "reason": "reproduced"})
    assert reopened.status_code == 200 and reopened.json()["bisect_job_id"] is None
    assert [task for task, _ in sent_tasks] == [DETECT_ALERTS]


def test_triage_and_submit_each_include_read_and_not_each_other(make_client, alert_id) -> None:
    triager, submitter = make_client("triage"), make_client("submit")
    assert triager.post("/api/jobs/bisect", json={}).status_code == 403  # a triager submits nothing
    assert submitter.patch(f"/api/alerts/{alert_id}", json={"note": "x"}).status_code == 403
    for reader in (triager, submitter):
        assert reader.get(f"/api/alerts/{alert_id}").status_code == 200
