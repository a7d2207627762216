"""Outbound addresses (issue 40, item 6): notification targets and repository URLs whose host
resolves to a loopback, link-local or private address are refused (422 with the setting to use,
CLI exit 2) unless PERFBISECT_OUTBOUND_ALLOW names them; a delivery checks again on the address
it connects to (a name re-pointed after it was subscribed is refused); the delivery log keeps an
answer's status, never its body. The resolver is the edge replaced where a test needs a name to
move; everything else (the API, the delivery task, the HTTP connection) is real."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfbisect.service import outbound
from perfbisect.service.notifications.models import DeliveryStatus
from perfbisect.service.settings import get_settings
from tests.test_notifications import deliver_an_alert, embedded, receiver_of, settled  # noqa: F401  (fixtures)

INTERNAL = ["http://127.0.0.1:9/hook", "http://localhost:9/hook", "http://169.254.169.254/latest/meta-data",
            "http://10.1.2.3/hook", "http://192.168.0.1/hook", "http://[::1]:9/hook", "http://0.0.0.0:9/hook",
            "http://[::ffff:127.0.0.1]:9/hook"]


@pytest.fixture
def strict(monkeypatch):
    monkeypatch.setattr(get_settings(), "outbound_allow", "")


def _subscription(target: str) -> dict:
    return {"repository": "lib", "events": ["alert"], "channel": "webhook", "target": target}


@pytest.fixture
def lib(client, tmp_path) -> None:
    from tests.gitrepo import make_repo

    make_repo(tmp_path / "lib", ["one (#1)"])
    assert client.post("/api/repositories", json={"name": "lib", "url": str(tmp_path / "lib")}).status_code == 201


@pytest.mark.parametrize("target", INTERNAL)
def test_an_internal_notification_target_is_refused_with_the_setting_to_use(client, lib, strict, target) -> None:
    refused = client.post("/api/notifications/subscriptions", json=_subscription(target))
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"]
    assert "resolves to" in detail and "PERFBISECT_OUTBOUND_ALLOW" in detail
    assert client.get("/api/notifications/subscriptions").json() == []


def test_the_allowlist_names_hosts_addresses_and_networks(client, lib, monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "outbound_allow", "localhost, 10.0.0.0/8")
    for target in ("http://localhost:9/hook", "http://10.1.2.3/hook"):
        assert client.post("/api/notifications/subscriptions", json=_subscription(target)).status_code == 201
    assert client.post("/api/notifications/subscriptions",
                       json=_subscription("http://192.168.0.1/hook")).status_code == 422
    outbound.check("hooks.example.com", ["93.184.216.34", "2606:2800:220:1::"])  # public addresses pass


@pytest.mark.parametrize("url", ["https://127.0.0.1/acme/lib.git", "ssh://git@10.0.0.7/acme/lib.git",
                                 "git@169.254.169.254:acme/lib.git", "http://localhost:3000/lib.git"])
def test_an_internal_repository_url_is_refused_before_any_clone(client, strict, url) -> None:
    refused = client.post("/api/repositories", json={"name": "internal", "url": url})
    assert refused.status_code == 422 and "PERFBISECT_OUTBOUND_ALLOW" in refused.json()["detail"], refused.text


def test_local_path_repositories_stay_governed_by_the_local_roots(client, lib, strict) -> None:
    assert client.get("/api/repositories/lib").status_code == 200  # registered under the strict rule too


def test_the_cli_refuses_an_internal_repository_url_with_exit_2(migrated_engine) -> None:
    env = {**os.environ, "PERFBISECT_OUTBOUND_ALLOW": ""}
    cli = Path(sys.executable).parent / "perfbisect"
    done = subprocess.run([str(cli), "repo", "add", "https://127.0.0.1/x.git", "--name", "internal"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "127.0.0.1, a loopback address" in done.stdout + done.stderr and "Traceback" not in done.stderr


def test_the_delivery_log_keeps_the_status_not_the_body(embedded, tmp_path, receiver_of) -> None:
    server = receiver_of([403], body=b"internal admin page: db password hunter2")
    delivery = settled(deliver_an_alert(tmp_path, "webhook", server.url, secret="x" * 16))
    assert (delivery.status, delivery.response_status) == (DeliveryStatus.failed, 403)
    assert delivery.last_error == "HTTP 403" and "hunter2" not in str(delivery.last_error)


class _Rebinding:
    """A resolver whose name is public when first asked (the subscription's check) and loopback
    from then on (the delivery): DNS rebinding."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self, host: str, port: int | None = None) -> list[str]:
        assert host == "hooks.example.com"
        self.asked += 1
        return ["93.184.216.34"] if self.asked == 1 else ["127.0.0.1"]


def test_a_name_re_pointed_at_the_service_s_network_after_subscribing_is_refused(embedded, tmp_path, receiver_of,
                                                                                  monkeypatch) -> None:
    server = receiver_of([204])
    port = server.server.server_port
    target = f"http://hooks.example.com:{port}/hook"
    monkeypatch.setattr(get_settings(), "outbound_allow", "")
    monkeypatch.setattr(outbound, "resolve", _Rebinding())
    delivery = settled(deliver_an_alert(tmp_path, "webhook", target, secret="y" * 16))
    assert delivery.status == DeliveryStatus.failed and delivery.attempts == 1  # refused for good, not retried
    assert "resolves to 127.0.0.1, a loopback address" in delivery.last_error
    assert server.requests == []  # nothing reached the internal address

    # allowed, the delivery connects to the address it checked, with the name as the Host
    monkeypatch.setattr(get_settings(), "outbound_allow", "127.0.0.1")
    monkeypatch.setattr(outbound, "resolve", _Rebinding())
    delivered = settled(deliver_an_alert(tmp_path, "webhook", target, secret="z" * 16, name="kern3"))
    assert delivered.status == DeliveryStatus.delivered
    assert [r["headers"]["Host"] for r in server.requests] == [f"hooks.example.com:{port}"]
