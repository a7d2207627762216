"""GET /metrics (issue 27) scraped as Prometheus would: every family is computed from the rows
at scrape time (and the broker's queues from Redis), so the numbers follow the data, whichever
`serve` process answers."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from perfbisect.service.models import (Alert, AlertKind, AlertStatus, Job, JobKind, JobStatus, Repository, Revision,
                                       TrackedBranch, Trial, TrialStatus, WebhookDelivery, utcnow)
from perfbisect.service.notifications.models import Channel, Delivery, DeliveryStatus, Event, Subscription
from tests.test_notifications import embedded  # noqa: F401 (a fixture: SQLite, tasks in-process)


def scrape(client) -> dict[tuple[str, tuple], float]:
    answer = client.get("/metrics")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(answer.text) for s in family.samples}


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def rows(session):
    repo = Repository(name="metrics-kern", url="/tmp/metrics-kern", env={})
    session.add(repo)
    session.flush()
    revision = Revision(repository_id=repo.id, sha="a" * 40, subject="s")
    session.add(revision)
    jobs = [Job(kind=JobKind.bisect, repository_id=repo.id, status=status, spec={}, revision_shas=[], progress={})
            for status in (JobStatus.running, JobStatus.succeeded, JobStatus.succeeded, JobStatus.inconclusive)]
    session.add_all(jobs)
    session.flush()
    beat = utcnow() - timedelta(seconds=3)

    def trial(status: TrialStatus, **kw) -> Trial:
        return Trial(job_id=jobs[0].id, revision_id=revision.id, status=status, **kw)

    session.add_all([
        trial(TrialStatus.ok, phases={"build": 0.2, "timing": 40.0, "import": 1.5}),
        trial(TrialStatus.ok, phases={"build": 3.0, "timing": 70.0}),
        trial(TrialStatus.build_error, phases={"build": 2.0}),
        trial(TrialStatus.timeout), trial(TrialStatus.worker_error),
        trial(TrialStatus.pending, device_class="h200"), trial(TrialStatus.pending, device_class="h200"),
        trial(TrialStatus.running, device_class="h200", worker_host="gpu-node-1", heartbeat_at=beat,
              phases={"build": 999.0}),  # unfinished: not in the histogram
    ])
    subscription = Subscription(repository_id=repo.id, events=["alert"], channel=Channel.webhook, target="http://x/")
    session.add(subscription)
    session.flush()
    session.add_all([Delivery(subscription_id=subscription.id, channel=Channel.webhook, event=Event.alert, payload={},
                              status=status) for status in (DeliveryStatus.delivered, DeliveryStatus.delivered,
                                                            DeliveryStatus.failed)])
    session.add(WebhookDelivery(delivery_id="d-metrics-1", body_sha256="f" * 64, event="pull_request"))
    session.flush()
    return {"beat": beat}


def test_the_metrics_follow_the_rows(client, anonymous_client, session, rows) -> None:
    before = scrape(anonymous_client)  # public reads: a scraper needs no token by default
    samples = scrape(client)
    assert value(samples, "perfbisect_jobs", kind="bisect", state="succeeded") == 2
    assert value(samples, "perfbisect_jobs", kind="bisect", state="inconclusive") == 1
    assert value(samples, "perfbisect_trials_waiting", device_class="h200", state="pending") == 2
    assert value(samples, "perfbisect_trials_waiting", device_class="h200", state="running") == 1
    for kind in ("build_error", "timeout", "worker_error"):
        assert value(samples, "perfbisect_trial_failures_total", kind=kind) == 1
    build = {s: value(samples, "perfbisect_trial_phase_seconds_bucket", phase="build", le=s)
             for s in ("0.25", "2.5", "5", "+Inf")}
    assert build == {"0.25": 1, "2.5": 2, "5": 3, "+Inf": 3}
    assert value(samples, "perfbisect_trial_phase_seconds_sum", phase="build") == pytest.approx(5.2)
    assert value(samples, "perfbisect_trial_phase_seconds_count", phase="timing") == 2
    assert value(samples, "perfbisect_trial_phase_seconds_count", phase="checkout") == 0
    assert value(samples, "perfbisect_worker_last_heartbeat_timestamp_seconds", worker="gpu-node-1") == \
        pytest.approx(rows["beat"].timestamp())
    assert value(samples, "perfbisect_notification_deliveries", channel="webhook", event="alert",
                 status="delivered") == 2
    assert value(samples, "perfbisect_github_webhook_deliveries_total", event="pull_request") == 1
    assert before == samples  # computed from the rows, not from what this process saw


def test_alert_counts(client, session) -> None:
    repo = Repository(name="metrics-alerts", url="/tmp/metrics-alerts", env={})
    session.add(repo)
    session.flush()
    tracked = TrackedBranch(repository_id=repo.id, branch="main", cases=[])
    session.add(tracked)
    session.flush()
    session.add_all([Alert(tracked_branch_id=tracked.id, kind=AlertKind.regression, status=status, before_sha="1",
                           first_sha="2", last_sha="3", comments={})
                     for status in (AlertStatus.new, AlertStatus.new, AlertStatus.fixed)])
    session.flush()
    samples = scrape(client)
    assert value(samples, "perfbisect_alerts", kind="regression", status="new") == 2
    assert value(samples, "perfbisect_alerts", kind="regression", status="fixed") == 1


def test_queue_depth_comes_from_the_broker(client, monkeypatch) -> None:
    from perfbisect.service.settings import get_settings

    url = os.environ.get("PERFBISECT_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    broker = redis.Redis.from_url(url)
    broker.delete("cpu", "control", "cpu\x06\x163")
    broker.rpush("cpu", "m1", "m2")
    broker.rpush("cpu\x06\x163", "m3")  # kombu's list for a priority step
    broker.rpush("control", "m4")
    monkeypatch.setattr(get_settings(), "redis_url", url)
    try:
        samples = scrape(client)
    finally:
        broker.delete("cpu", "control", "cpu\x06\x163")
    assert value(samples, "perfbisect_broker_up") == 1
    assert value(samples, "perfbisect_queue_depth", queue="cpu") == 3
    assert value(samples, "perfbisect_queue_depth", queue="control") == 1
    monkeypatch.setattr(get_settings(), "redis_url", "redis://127.0.0.1:1/0")  # nothing listens there
    assert value(scrape(client), "perfbisect_broker_up") == 0


def test_metrics_need_a_read_token_when_reads_are_private(anonymous_client, read_client, monkeypatch) -> None:
    from perfbisect.service.settings import get_settings

    monkeypatch.setattr(get_settings(), "public_reads", False)
    assert anonymous_client.get("/metrics").status_code == 401
    assert read_client.get("/metrics").status_code == 200


def test_the_root_redirects_to_the_dashboard(anonymous_client) -> None:
    answer = anonymous_client.get("/", follow_redirects=False)
    assert answer.status_code == 307 and answer.headers["location"] == "/dashboard"


def test_json_logs_are_one_object_per_line() -> None:
    import json
    import subprocess
    import sys

    code = ("import logging; from perfbisect.service.logs import configure, uvicorn_log_config; "
            "assert uvicorn_log_config('text') is None; configure('json'); "
            "logging.getLogger('uvicorn.access').info('GET /metrics 200', extra={'color_message': 'x'}); "
            "logging.getLogger('perfbisect.workers').warning('trial %s failed', 7, extra={'trial_id': 7})")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    access, warning = [json.loads(line) for line in done.stderr.splitlines()]
    assert (access["logger"], access["level"], access["message"]) == ("uvicorn.access", "INFO", "GET /metrics 200")
    assert "color_message" not in access  # uvicorn's coloured copy
    assert (warning["message"], warning["trial_id"], warning["level"]) == ("trial 7 failed", 7, "WARNING")
    assert {"time", "process"} <= warning.keys()


def test_an_embedded_server_scrapes_its_sqlite_database(embedded) -> None:
    from prometheus_client import generate_latest

    from perfbisect.service.api.metrics import registry
    from perfbisect.service.db import session_scope

    with session_scope(reads_only=True) as session:
        text = generate_latest(registry(session)).decode()
    samples = {s.name for family in text_string_to_metric_families(text) for s in family.samples}
    assert "perfbisect_trial_phase_seconds_count" in samples and "perfbisect_broker_up" not in samples
