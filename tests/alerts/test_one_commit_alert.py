"""An alert whose range is one commit names its culprit without a bisect, and is then seen like
any other: its step is on the history chart (the history API's steps), its row is on the
regressions page, and its culprit notification is sent. Real PostgreSQL and git; the harness is
the edge (tests/alerts/test_loop_service.py)."""

from __future__ import annotations

from sqlalchemy import select

from perfbisect.service.alerts import service as alerts
from perfbisect.service.models import Alert, Culprit, CulpritKind, Job, JobKind
from perfbisect.service.notifications import service as notifications
from perfbisect.service.notifications.models import Delivery, Event
from perfbisect.service.tracking import service as tracking
from tests.alerts.test_loop_service import CASE_NAME, lib, measure, step_at, track  # noqa: F401 (lib: a fixture)
from tests.test_notifications import subscribe


def test_a_one_commit_alert_is_on_the_chart_the_regressions_page_and_in_a_culprit_notification(
        client, session, lib) -> None:  # noqa: F811
    shas, name = lib["shas"], lib["repo"].name
    subscription = subscribe(session, name, "webhook", "https://hooks.example/x", ["alert", "culprit"])
    tracked = track(session, lib, backfill_every=1, backfill_depth=8)
    measure(session, tracking.start_run(session, tracked.id).job.id, step_at(lib, 5))
    found = alerts.detect(session, tracked.id)
    [alert_id] = found.raised
    alert = session.get(Alert, alert_id)
    assert found.bisect_job_ids == [] and found.named == [alert_id] and alert.culprit_last_sha == shas[5]

    [culprit] = session.scalars(select(Culprit).where(Culprit.last_sha == shas[5])).all()
    job = session.get(Job, culprit.job_id)
    assert job.kind == JobKind.track and job.spec.tracked_branch_id == tracked.id
    assert (culprit.kind, culprit.first_sha, list(culprit.effects)) == (CulpritKind.performance, shas[5], [CASE_NAME])
    effect = culprit.effects[CASE_NAME]
    assert round(effect["rel"], 2) == -0.4 and effect["ci"][1] < 0  # 0.995 -> 0.6 between the two heads

    history = client.get(f"/api/history/{name}").json()
    [case] = history["cases"]
    assert [(s["first_sha"], s["last_sha"], s["kind"]) for s in case["steps"]] == [(shas[5], shas[5], "performance")]
    page = client.get("/dashboard/regressions", params={"repository": name}).text
    assert shas[5][:10] in page and "-39.7%" in page and "#105" in page

    deliveries = notifications.alerts_raised(session, found.raised) + notifications.culprits_of_alerts(session,
                                                                                                      found.named)
    rows = session.scalars(select(Delivery).where(Delivery.id.in_(deliveries))).all()
    assert sorted(r.event for r in rows) == [Event.alert, Event.culprit]
    [named] = [r.payload for r in rows if r.event == Event.culprit]
    assert named["key"] == f"alert:{alert_id}" and named["job"]["alert_id"] == alert_id
    assert named["job"]["culprits"][0]["last_sha"] == shas[5]
    head, step = named["lines"]  # its PR and subject, then the step with its interval and unit
    assert head == f"culprit #105 change 5 ({shas[5][:10]})"
    assert step.startswith(f"  {CASE_NAME}: -39.7% [") and step.endswith(" TFLOP/s")
    assert all(r.subscription_id == subscription.id for r in rows)
    assert notifications.culprits_of_alerts(session, found.named) == []  # told once
