"""Rate limits per token and, for bad tokens, per client address (the `limits` package: a fixed
window per key, kept in Redis when REDIS_URL is set, so every API process counts together, else
in this process).

- Every request that names a valid token counts against PERFBISECT_TOKEN_RATE_LIMIT ("600/minute").
- Every request whose token is unknown or revoked counts against PERFBISECT_BAD_TOKEN_RATE_LIMIT
  for its client address; past it, that address gets 429 for every bad token until the window
  ends, so guessing tokens costs a window per few guesses. A valid token from that address is
  still served: a colleague's typo behind the same NAT must not lock the team out.
Both answer 429 with Retry-After (seconds to the window's end). A limiter that cannot reach Redis
lets the request through (logged): the limits protect the service, they must not take it down.
"""

from __future__ import annotations

import logging
import math
import time
from functools import lru_cache

from limits import RateLimitItem, parse
from limits.storage import storage_from_string
from limits.strategies import FixedWindowRateLimiter

from perfbisect.service.errors import TooManyRequests
from perfbisect.service.settings import get_settings

log = logging.getLogger(__name__)
PREFIX = "perfbisect-rate"


@lru_cache
def _limiter() -> FixedWindowRateLimiter:
    settings = get_settings()
    storage = storage_from_string(settings.redis_url or "memory://")
    return FixedWindowRateLimiter(storage)


@lru_cache
def _rule(text: str) -> RateLimitItem:
    return parse(text)


def reset() -> None:
    """Forget the counters and re-read the settings (tests; a settings change)."""
    _limiter.cache_clear()
    _rule.cache_clear()


def _retry_after(rule: RateLimitItem, *key: str) -> int:
    reset_at = _limiter().get_window_stats(rule, PREFIX, *key).reset_time
    return max(1, math.ceil(reset_at - time.time()))


def _hit(rule_text: str, *key: str) -> int | None:
    """Count one request under `key`; seconds to wait when over the limit, else None."""
    if not rule_text:
        return None
    rule = _rule(rule_text)
    try:
        if _limiter().hit(rule, PREFIX, *key):
            return None
        return _retry_after(rule, *key)
    except Exception:  # Redis down: let the request through rather than fail it
        log.warning("rate limiter unavailable; request not limited", exc_info=True)
        return None


def _over(rule_text: str, *key: str) -> int | None:
    """Seconds to wait when `key` is already over the limit (without counting), else None."""
    if not rule_text:
        return None
    rule = _rule(rule_text)
    try:
        return None if _limiter().test(rule, PREFIX, *key) else _retry_after(rule, *key)
    except Exception:
        log.warning("rate limiter unavailable; request not limited", exc_info=True)
        return None


def check_address(address: str | None) -> None:
    """For a bad token: 429 when this address sent too many bad tokens lately."""
    wait = _over(get_settings().bad_token_rate_limit, "bad-token", address or "unknown")
    if wait is not None:
        raise TooManyRequests(f"too many requests with a bad token from {address}: retry in {wait} s "
                              f"(PERFBISECT_BAD_TOKEN_RATE_LIMIT={get_settings().bad_token_rate_limit})", wait)


def bad_token(address: str | None) -> None:
    """A bad token from `address`: counted (the caller then answers 401)."""
    _hit(get_settings().bad_token_rate_limit, "bad-token", address or "unknown")


def token_request(token_id: int, name: str) -> None:
    """One request of a valid token; raises TooManyRequests past its limit."""
    limit = get_settings().token_rate_limit
    wait = _hit(limit, "token", str(token_id))
    if wait is not None:
        raise TooManyRequests(f"the token {name!r} sent more than {limit} requests: retry in {wait} s "
                              "(PERFBISECT_TOKEN_RATE_LIMIT)", wait)
