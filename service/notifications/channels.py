"""Sending one notification: a signed JSON webhook, a Slack-compatible incoming webhook (httpx),
or an email (the standard library's smtplib). No retries here: the Celery task retries what
raises `Transient`, with Celery's own backoff, and gives up at once on `Refused`.

apprise was considered (it speaks to many services) but hides the response status that the
delivery log shows and cannot sign a body; the three channels here are a POST and an SMTP
exchange each.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import smtplib
import ssl
from email.message import EmailMessage
from typing import Any

import httpx

from perfbisect.service.alerts.render import plain_text
from perfbisect.service.notifications.models import Channel
from perfbisect.service.outbound import GuardedTransport, OutboundRefused
from perfbisect.service.settings import get_settings

SIGNATURE_HEADER = "X-Perfbisect-Signature-256"
TIMEOUT_S = 10.0
# A 4xx other than these says the target will never take this body: retrying cannot help.
RETRIED_4XX = (408, 409, 425, 429)


class Transient(Exception):
    """The target may take it later: the network, a timeout, a 5xx, a 429, an SMTP 4xx."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Refused(Exception):
    """The target refused it for good (a 4xx, an SMTP 5xx, no SMTP server configured)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def sign(secret: str, body: bytes) -> str:
    """The signature header's value: like GitHub's X-Hub-Signature-256, 'sha256=' and the hex
    HMAC-SHA256 of the raw body under the subscription's secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    """POST through outbound.GuardedTransport: the target's addresses are checked as it connects
    (a name re-pointed at the service's own network since it was subscribed is refused). Only
    the status is kept: the answer's body is the target's, possibly an internal service's."""
    try:
        with httpx.Client(transport=GuardedTransport(), timeout=TIMEOUT_S) as client:
            response = client.post(url, content=body, headers={"Content-Type": "application/json", **headers})
    except OutboundRefused as exc:
        raise Refused(exc.message) from exc
    except httpx.HTTPError as exc:
        raise Transient(f"{exc.__class__.__name__}: {exc}") from exc
    status = response.status_code
    if status < 300:
        return status
    message = f"HTTP {status}"
    if status >= 500 or status in RETRIED_4XX:
        raise Transient(message, status)
    raise Refused(message, status)


def _webhook(target: str, secret: str | None, delivery_id: int, payload: dict[str, Any]) -> int:
    body = webhook_body(payload)
    headers = {"X-Perfbisect-Event": payload["event"], "X-Perfbisect-Delivery": str(delivery_id),
               "User-Agent": "perfbisect-notifications"}
    if secret:
        headers[SIGNATURE_HEADER] = sign(secret, body)
    return _post(target, body, headers)


def webhook_body(payload: dict[str, Any]) -> bytes:
    """The webhook's signed body: the payload as is (its lines and links as the other channels show them)."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def slack_body(payload: dict[str, Any]) -> bytes:
    return json.dumps({"text": plain_text(payload)}).encode()


def email_message(sender: str, target: str, payload: dict[str, Any]) -> EmailMessage:
    message = EmailMessage()
    message["Subject"], message["From"], message["To"] = payload["title"], sender, target
    message.set_content(plain_text(payload))
    return message


def _slack(target: str, payload: dict[str, Any]) -> int:
    return _post(target, slack_body(payload), {})


def _email(target: str, payload: dict[str, Any]) -> None:
    settings = get_settings()
    if not settings.smtp_host:
        raise Refused("no SMTP server: set PERFBISECT_SMTP_HOST")
    message = email_message(settings.smtp_from, target, payload)
    try:
        with smtplib.SMTP(settings.smtp_host, settings.smtp_port, timeout=TIMEOUT_S) as smtp:
            if settings.smtp_starttls:
                smtp.starttls(context=ssl.create_default_context())
            if settings.smtp_user:
                smtp.login(settings.smtp_user, settings.smtp_password or "")
            smtp.send_message(message)
    except smtplib.SMTPResponseException as exc:
        error = f"SMTP {exc.smtp_code}: {exc.smtp_error!r}"
        raise (Transient if 400 <= exc.smtp_code < 500 else Refused)(error, exc.smtp_code) from exc
    except (smtplib.SMTPException, OSError) as exc:
        raise Transient(f"{exc.__class__.__name__}: {exc}") from exc


def send(channel: Channel, target: str, secret: str | None, delivery_id: int, payload: dict[str, Any]) -> int | None:
    """Deliver `payload`; returns the HTTP status (None for email). Raises Transient or Refused."""
    if channel == Channel.webhook:
        return _webhook(target, secret, delivery_id, payload)
    if channel == Channel.slack:
        return _slack(target, payload)
    _email(target, payload)
    return None
