"""Where the service may send requests on an admin's word: notification targets and the hosts of
registered repository URLs. A name that resolves to a loopback, link-local, private or other
non-public address (the metadata service at 169.254.169.254, the database, Redis, an intranet
admin page) is refused unless PERFBISECT_OUTBOUND_ALLOW names it (a host name, an address or a
network such as 10.0.0.0/8), so a subscription or a registration cannot turn the service into a
probe of its own network.

The check is made when the target is registered (a clear 422) and again at each delivery, on the
addresses the connection then uses (`GuardedTransport`): resolve, refuse, then connect to the
address that was checked, so a name re-pointed after registration (DNS rebinding) is refused
too. Local-path repositories are not network targets: PERFBISECT_LOCAL_REPO_ROOTS governs them.
"""

from __future__ import annotations

import ipaddress
import socket
from functools import lru_cache
from typing import Any

import httpcore
import httpx

from perfbisect.service.errors import BadRequest
from perfbisect.service.settings import get_settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class OutboundRefused(BadRequest):
    """The host resolves to an address outside the public internet and is not allowed."""


@lru_cache
def _allowed(text: str) -> tuple[frozenset[str], tuple[Network, ...]]:
    names, networks = set(), []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            names.add(item.lower().rstrip("."))
    return frozenset(names), tuple(networks)


def _kind(address: Address) -> str | None:
    """Why `address` is not a public one (None: it is)."""
    for test, kind in ((address.is_loopback, "loopback"), (address.is_link_local, "link-local"),
                       (address.is_private, "private"), (not address.is_global, "non-public")):
        if test:
            return kind
    return None


def resolve(host: str, port: int | None = None) -> list[str]:
    """Every address `host` resolves to (raises OSError when it does not)."""
    return list(dict.fromkeys(info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)))


def check(host: str, addresses: list[str]) -> None:
    """Raises OutboundRefused when any of `host`'s addresses is not public and not allowed."""
    names, networks = _allowed(get_settings().outbound_allow)
    if host.lower().rstrip(".").strip("[]") in names:
        return
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        kind = _kind(address)
        if kind is not None and not any(address in network for network in networks):
            raise OutboundRefused(f"{host} resolves to {address}, a {kind} address: refused (add it to "
                                  "PERFBISECT_OUTBOUND_ALLOW to allow it)")


def check_host(host: str) -> None:
    """Registration's check: refuses a host that resolves to a non-public address. A name that
    does not resolve now passes: nothing can be sent to it, and each delivery checks again."""
    try:
        addresses = resolve(host.strip("[]"))
    except (OSError, UnicodeError):
        return
    check(host, addresses)


def check_url(url: str) -> None:
    """check_host for an http(s) URL's host. Raises OutboundRefused."""
    host = httpx.URL(url).host
    if host:
        check_host(host)


class _GuardedBackend(httpcore.SyncBackend):
    """Connects only to an address that passed `check`, the one it resolved."""

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        try:
            addresses = resolve(host, port)
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        check(host, addresses)
        return super().connect_tcp(addresses[0], port, timeout, local_address, socket_options)


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport with `_GuardedBackend` under its pool (TLS still verifies the host
    name: httpcore takes it from the URL, not from the address). No proxy from the environment:
    a proxy would resolve the name itself, after the check."""

    def __init__(self) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore.ConnectionPool(ssl_context=httpx.create_ssl_context(), network_backend=_GuardedBackend())
