"""Notifications (issue 27): subscriptions through the API (admin), the deliveries an alert, a
bisect's culprits and a failed merge gate make (once each, to the subscriptions that want them),
and the delivery task against local stand-ins: an HTTP receiver on 127.0.0.1 that checks the
HMAC signature, and aiosmtpd's SMTP server. The delivery tests run embedded (SQLite, the tasks
in-process), as `perfbisect serve` without a broker does."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sqlalchemy import select

from perfbisect.service.alerts import service as alerts
from perfbisect.service.models import Culprit, CulpritKind, Job, JobKind, JobStatus, Repository
from perfbisect.service.notifications import service as notifications
from perfbisect.service.notifications.models import Delivery, DeliveryStatus, Event
from perfbisect.service.notifications.schemas import SubscriptionCreate
from perfbisect.service.tracking import service as tracking
from tests.alerts.test_loop_service import lib, measure, push, step_at, track  # noqa: F401 (lib: a fixture)

SECRET = "s3cret-of-the-receiver-0123456789"


def subscribe(session, repo: str, channel: str, target: str, events: list[str], branch: str | None = None,
              secret: str | None = None):
    from perfbisect.service.auth.principal import SYSTEM

    data = SubscriptionCreate(repository=repo, branch=branch, events=events, channel=channel, target=target,
                              secret=secret)
    return notifications.subscribe(session, data, SYSTEM)


# --- the API -------------------------------------------------------------------------------------


def test_subscriptions_are_created_listed_and_deleted_by_admins_only(client, submit_client, session, lib) -> None:
    name = lib["repo"].name
    body = {"repository": name, "branch": "main", "events": ["alert", "culprit"], "channel": "webhook",
            "target": "http://127.0.0.1:9/hook"}
    assert submit_client.post("/api/notifications/subscriptions", json=body).status_code == 403
    assert submit_client.get("/api/notifications/deliveries").status_code == 403
    created = client.post("/api/notifications/subscriptions", json=body)
    assert created.status_code == 201, created.text
    sub = created.json()
    assert len(sub["secret"]) == 64 and sub["events"] == ["alert", "culprit"] and sub["repository"] == name
    [listed] = [s for s in client.get("/api/notifications/subscriptions").json() if s["id"] == sub["id"]]
    assert listed["secret"] is None  # shown once, at creation
    mail = client.post("/api/notifications/subscriptions", json={**body, "channel": "email", "target": "a@b.example"})
    assert mail.status_code == 201 and mail.json()["secret"] is None
    assert client.delete(f"/api/notifications/subscriptions/{sub['id']}").status_code == 204
    assert client.delete(f"/api/notifications/subscriptions/{sub['id']}").status_code == 404
    assert sub["id"] not in [s["id"] for s in client.get("/api/notifications/subscriptions").json()]


@pytest.mark.parametrize("change, says", [
    ({"channel": "email"}, "email address"),
    ({"target": "ftp://x/y"}, "http(s) URL"),
    ({"events": ["everything"]}, "alert"),
    ({"events": []}, "at least 1"),
    ({"channel": "slack", "secret": "x" * 20}, "only webhook"),
])
def test_bad_subscriptions_are_422_with_a_message(client, lib, change, says) -> None:
    body = {"repository": lib["repo"].name, "events": ["alert"], "channel": "webhook",
            "target": "https://hooks.example/x", **change}
    answer = client.post("/api/notifications/subscriptions", json=body)
    assert answer.status_code == 422 and says in answer.text


def test_an_unknown_repository_is_404(client) -> None:
    body = {"repository": "nope", "events": ["alert"], "channel": "slack", "target": "https://hooks.example/x"}
    assert client.post("/api/notifications/subscriptions", json=body).status_code == 404


# --- which events make which deliveries ------------------------------------------------------------


def test_a_raised_alert_is_delivered_once_to_the_subscriptions_that_want_it(session, lib) -> None:
    name = lib["repo"].name
    wanted = [subscribe(session, name, "webhook", "http://127.0.0.1:9/a", ["alert"], branch="main"),
              subscribe(session, name, "email", "team@example.com", ["alert", "gate_failure"])]
    subscribe(session, name, "webhook", "http://127.0.0.1:9/b", ["alert"], branch="release")  # another branch
    subscribe(session, name, "slack", "https://hooks.example/c", ["culprit"], branch="main")  # another event
    values = step_at(lib, 10)
    tracked = track(session, lib)
    measure(session, tracking.start_run(session, tracked.id).job.id, values)
    for index in (11, 13, 15):
        push(session, lib, tracked, index, values)
    found = alerts.detect(session, tracked.id)
    ids = notifications.alerts_raised(session, found.raised)
    rows = [session.get(Delivery, i) for i in ids]
    assert sorted(r.subscription_id for r in rows) == sorted(s.id for s in wanted)
    payload = rows[0].payload
    assert (payload["event"], payload["repository"], payload["branch"]) == ("alert", name, "main")
    assert payload["alert"]["id"] == found.raised[0] and payload["alert"]["kind"] == "regression"
    assert payload["title"].startswith(f"perfbisect: regression on {name}@main") and "-39.6%" in payload["lines"][0]
    # a re-detection lists the same alert as raised again: nobody hears of it twice
    assert notifications.alerts_raised(session, alerts.detect(session, tracked.id).raised) == []


def finished(session, repo: Repository, kind: JobKind, rel: float | None, pr: int | None = None) -> Job:
    job = Job(kind=kind, repository_id=repo.id, status=JobStatus.succeeded, revision_shas=["1" * 40, "2" * 40],
              spec={"good": "v1", "bad": "main", "min_effect": 0.02, "metric": "ratio", "pr_number": pr},
              progress={})
    session.add(job)
    session.flush()
    if rel is not None:
        session.add(Culprit(job_id=job.id, kind=CulpritKind.performance, first_sha="2" * 40, last_sha="2" * 40,
                            effects={"gemm M=64": {"rel": rel, "ci": [rel - 0.01, rel + 0.01], "before": 1.0,
                                                   "after": 1.0 + rel}}))
        session.flush()
    session.expire_all()
    return job


def test_culprits_and_failed_gates_are_delivered_and_passing_gates_are_not(session, lib) -> None:
    repo = lib["repo"]
    everything = subscribe(session, repo.name, "webhook", "http://127.0.0.1:9/a", ["culprit", "gate_failure"])
    subscribe(session, repo.name, "webhook", "http://127.0.0.1:9/b", ["culprit"], branch="main")  # branch only
    bisect = finished(session, repo, JobKind.bisect, -0.2)
    [culprit] = [session.get(Delivery, i) for i in notifications.job_finished(session, bisect.id)]
    assert (culprit.subscription_id, culprit.event) == (everything.id, Event.culprit)
    assert culprit.payload["job"]["culprits"][0]["exact"] and "gemm M=64: -20.0%" in culprit.payload["lines"][1]
    assert notifications.job_finished(session, bisect.id) == []  # a re-sent notify_job delivers nothing twice

    gate = finished(session, repo, JobKind.compare, -0.2, pr=7)
    [failure] = [session.get(Delivery, i) for i in notifications.job_finished(session, gate.id)]
    assert failure.event == Event.gate_failure and failure.payload["job"]["pr_number"] == 7
    assert "gate failed on PR #7" in failure.payload["title"] and "regressed" in failure.payload["title"]
    assert notifications.job_finished(session, finished(session, repo, JobKind.compare, +0.2, pr=8).id) == []
    assert notifications.job_finished(session, finished(session, repo, JobKind.bisect, None).id) == []


# --- delivering, embedded, against local stand-ins ---------------------------------------------------


@pytest.fixture
def embedded(tmp_path: Path, monkeypatch) -> Iterator[None]:
    """SQLite under its own PERFBISECT_HOME, the tasks run in-process, retries 50 ms apart."""
    from perfbisect.cli.common import prepare_database
    from perfbisect.service.db import get_engine, get_read_sessionmaker, get_sessionmaker
    from perfbisect.service.settings import get_settings

    cached = (get_settings, get_engine, get_sessionmaker, get_read_sessionmaker)
    monkeypatch.delenv("DATABASE_URL")
    monkeypatch.setenv("PERFBISECT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PERFBISECT_NOTIFY_BACKOFF_S", "0.05")
    monkeypatch.setenv("PERFBISECT_NOTIFY_MAX_ATTEMPTS", "3")
    for cache in cached:
        cache.cache_clear()
    prepare_database()
    yield
    monkeypatch.undo()
    for cache in cached:
        cache.cache_clear()


class Receiver:
    """An HTTP server on 127.0.0.1 that answers the statuses of `answers` in turn (then 204), each
    with `body`, and keeps each request's body, headers and whether its signature was right."""

    def __init__(self, answers: list[int], body: bytes = b"") -> None:
        self.answers, self.requests = list(answers), []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                signed = hmac.compare_digest(self.headers.get("X-Perfbisect-Signature-256", ""), expected)
                receiver.requests.append({"body": json.loads(body), "signed": signed, "headers": dict(self.headers)})
                self.send_response(receiver.answers.pop(0) if receiver.answers else (204 if signed else 401))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver_of():
    made = []

    def make(answers: list[int], body: bytes = b"") -> Receiver:
        made.append(Receiver(answers, body))
        return made[-1]

    yield make
    for receiver in made:
        receiver.close()


def deliver_an_alert(tmp_path: Path, channel: str, target: str, secret: str | None = None, name: str = "kern") -> int:
    """Subscribe, raise a (hand-made) alert notice, commit, send; returns the delivery's id."""
    from perfbisect import dispatch
    from perfbisect.service.db import session_scope
    from perfbisect.service.notifications.events import Notice
    from perfbisect.workers.notify_tasks import send_deliveries

    with session_scope() as session:
        repo = Repository(name=name, url=str(tmp_path / name), env={})
        session.add(repo)
        session.flush()
        subscribe(session, name, channel, target, ["alert"], branch="main", secret=secret)
        payload = {"event": "alert", "key": "alert:1", "repository": "kern", "branch": "main",
                   "title": "perfbisect: regression on kern@main", "lines": ["gemm: -12.0%"], "url": None}
        [delivery_id] = notifications.notify(session, Notice(Event.alert, repo.id, "main", payload))
    send_deliveries([delivery_id])
    dispatch.drain()
    return delivery_id


def settled(delivery_id: int, timeout_s: float = 15.0) -> Delivery:
    """The delivery once it is no longer pending (a retry comes back from a timer thread)."""
    from perfbisect.service.db import session_scope

    deadline = time.monotonic() + timeout_s
    while True:
        with session_scope() as session:
            delivery = session.get(Delivery, delivery_id)
        if delivery.status != DeliveryStatus.pending or time.monotonic() > deadline:
            return delivery
        time.sleep(0.05)


def test_a_webhook_is_signed_retried_with_backoff_and_logged(embedded, tmp_path, receiver_of) -> None:
    from fastapi.testclient import TestClient

    from perfbisect.service.api import create_app
    from perfbisect.service.auth import service as auth
    from perfbisect.service.db import session_scope

    receiver = receiver_of([503])  # down once, then up
    delivery_id = deliver_an_alert(tmp_path, "webhook", receiver.url, secret=SECRET)
    delivery = settled(delivery_id)
    assert (delivery.status, delivery.attempts, delivery.response_status) == (DeliveryStatus.delivered, 2, 204)
    assert [r["signed"] for r in receiver.requests] == [True, True]
    first = receiver.requests[0]
    assert first["body"]["title"] == "perfbisect: regression on kern@main"
    assert first["headers"]["X-Perfbisect-Event"] == "alert"
    assert first["headers"]["X-Perfbisect-Delivery"] == str(delivery_id)

    with session_scope() as session:
        _row, token = auth.create_token(session, "ops", auth.parse_scopes(["admin"]))
    with TestClient(create_app(), headers={"Authorization": f"Bearer {token}"}) as api:
        [logged] = api.get("/api/notifications/deliveries").json()
    assert (logged["id"], logged["status"], logged["attempts"], logged["event"]) == (delivery_id, "delivered", 2,
                                                                                    "alert")


def test_a_refused_webhook_is_not_retried_and_a_dead_one_gives_up(embedded, tmp_path, receiver_of) -> None:
    refusing = receiver_of([400])
    refused = settled(deliver_an_alert(tmp_path, "webhook", refusing.url, secret=SECRET))
    assert (refused.status, refused.attempts, refused.response_status) == (DeliveryStatus.failed, 1, 400)
    assert len(refusing.requests) == 1

    down = receiver_of([503, 503, 503, 503])
    gave_up = settled(deliver_an_alert(tmp_path, "webhook", down.url, secret=SECRET, name="kern2"))
    assert (gave_up.status, gave_up.attempts) == (DeliveryStatus.failed, 3)  # PERFBISECT_NOTIFY_MAX_ATTEMPTS
    assert len(down.requests) == 3 and "HTTP 503" in gave_up.last_error


def test_slack_gets_the_text(embedded, tmp_path, receiver_of) -> None:
    slack = receiver_of([200])
    delivery = settled(deliver_an_alert(tmp_path, "slack", slack.url))
    assert delivery.status == DeliveryStatus.delivered
    [request] = slack.requests
    assert request["body"] == {"text": "perfbisect: regression on kern@main\ngemm: -12.0%"}


def test_email_goes_through_smtp(embedded, tmp_path, monkeypatch) -> None:
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message

    from perfbisect.service.settings import get_settings

    received = []

    class Keep(Message):
        def handle_message(self, message) -> None:
            received.append(message)

    with socket.socket() as probe:  # a free port (aiosmtpd's start() cannot use port 0)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    smtp = Controller(Keep(), hostname="127.0.0.1", port=port)
    smtp.start()
    try:
        monkeypatch.setattr(get_settings(), "smtp_host", "127.0.0.1")
        monkeypatch.setattr(get_settings(), "smtp_port", port)
        delivery = settled(deliver_an_alert(tmp_path, "email", "team@example.com"))
    finally:
        smtp.stop()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.delivered, 1)
    [mail] = received
    assert mail["To"] == "team@example.com" and mail["Subject"] == "perfbisect: regression on kern@main"
    assert "gemm: -12.0%" in mail.get_payload()


def test_email_without_an_smtp_server_fails_with_the_setting_to_set(embedded, tmp_path) -> None:
    delivery = settled(deliver_an_alert(tmp_path, "email", "team@example.com"))
    assert delivery.status == DeliveryStatus.failed and "PERFBISECT_SMTP_HOST" in delivery.last_error


def test_deleting_a_subscription_keeps_its_log(session, lib) -> None:
    sub = subscribe(session, lib["repo"].name, "slack", "https://hooks.example/x", ["culprit"])
    [delivery_id] = notifications.job_finished(session, finished(session, lib["repo"], JobKind.bisect, -0.3).id)
    notifications.unsubscribe(session, sub.id)
    session.expire_all()
    assert session.get(Delivery, delivery_id).subscription_id is None
    assert notifications.work_of(session, delivery_id) is None  # not sent
    assert session.scalars(select(Delivery.status).where(Delivery.id == delivery_id)).one() == DeliveryStatus.failed


def test_the_smtp_password_is_redacted_from_stored_output(monkeypatch) -> None:
    from perfbisect.service.settings import get_settings
    from perfbisect.workers import redact

    monkeypatch.setattr(get_settings(), "smtp_password", "mail-pass-0451")
    redact.secrets.cache_clear()
    try:
        assert redact.redact("login mail-pass-0451 ok") == "login [redacted] ok"
    finally:
        redact.secrets.cache_clear()
