"""GitHub's webhook signature: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`."""

from __future__ import annotations

import hashlib
import hmac

from perfbisect.service.errors import PerfbisectError

SIGNATURE_HEADER = "X-Hub-Signature-256"


class Unauthorized(PerfbisectError):
    """A webhook delivery whose signature is missing or does not match (HTTP 401)."""

    status_code = 401


def sign(secret: str, body: bytes) -> str:
    """The header value GitHub would send for `body` (also what tests sign with)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_signature(secret: str, body: bytes, header: str | None) -> None:
    """Accept the delivery when `header` is the HMAC of `body` under `secret` (constant-time
    compare). Raises Unauthorized otherwise, and always without a secret."""
    if not secret:
        raise Unauthorized("no webhook secret is configured: deliveries cannot be verified")
    if not header:
        raise Unauthorized(f"missing {SIGNATURE_HEADER}: this endpoint needs deliveries signed with the webhook secret")
    if not header.startswith("sha256="):
        raise Unauthorized(f"{SIGNATURE_HEADER} must be 'sha256=<hex digest>'")
    if not hmac.compare_digest(sign(secret, body), header.strip()):
        raise Unauthorized(f"{SIGNATURE_HEADER} does not match the body: check the webhook secret")
