"""What the limits of issue 22 cost and do, without a database:

- a rate-limit check per request (the `limits` fixed window), in-process and in Redis;
- the body limit: time to a 413 for a declared 512 MiB body on a real server;
- a fetch of a remote that accepts and never answers: killed at the timeout; a second fetch of the
  same remote at once answers "busy" instead of waiting.

    python bench/limits_cost.py [--redis redis://127.0.0.1:6379/14] [--timeout 2]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import uvicorn

from perfbisect.gitrepo import Mirror
from perfbisect.service.auth import ratelimit
from perfbisect.service.settings import get_settings


def limiter_us(redis_url: str | None, calls: int = 2000) -> float:
    settings = get_settings()
    settings.redis_url, settings.token_rate_limit = redis_url, "1000000/minute"
    ratelimit.reset()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        ratelimit.token_request(123456, "bench")
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def time_to_413() -> float:
    from perfbisect.service.api import create_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    with socket.create_connection(("127.0.0.1", port)) as conn:
        started = time.perf_counter()
        conn.sendall(b"POST /api/jobs/bisect HTTP/1.1\r\nHost: b\r\nContent-Length: 536870912\r\n\r\n")
        reply = conn.recv(4096)
        took = time.perf_counter() - started
    server.should_exit = True
    assert reply.split()[1] == b"413", reply
    return took


def hung_fetch(timeout_s: float) -> tuple[float, float]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held = []
    threading.Thread(target=lambda: [held.append(server.accept()[0]) for _ in range(16)], daemon=True).start()
    mirror = Mirror(Path(tempfile.mkdtemp()), "hung", f"git://127.0.0.1:{server.getsockname()[1]}/x.git")
    result: dict[str, float] = {}

    def first() -> None:
        started = time.perf_counter()
        mirror.fetch_once(time.time(), timeout_s)
        result["first"] = time.perf_counter() - started

    thread = threading.Thread(target=first)
    thread.start()
    time.sleep(0.3)
    started = time.perf_counter()
    assert mirror.fetch_once(time.time(), timeout_s) is None
    busy = time.perf_counter() - started
    thread.join()
    return result["first"], busy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", default=None)
    parser.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args()
    print(f"rate-limit check, in-process: {limiter_us(None):.1f} us median")
    if args.redis:
        print(f"rate-limit check, Redis {args.redis}: {limiter_us(args.redis):.1f} us median")
    print(f"413 for a declared 512 MiB body: {time_to_413() * 1000:.1f} ms after the headers")
    took, busy = hung_fetch(args.timeout)
    print(f"fetch of a hung git:// remote, timeout {args.timeout:.0f} s: killed after {took:.2f} s; "
          f"a second fetch of it meanwhile: 'busy' in {busy * 1000:.1f} ms")


if __name__ == "__main__":
    main()
