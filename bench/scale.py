"""Load and scale benchmark: a year of tracking in PostgreSQL, served by `perfbisect serve`.

Generates one repository with REVISIONS first-parent commits, CASES cases and TRIALS trials per
revision (each measuring every case, with SAMPLES raw samples per series), in a database of its
own, through the migrations; then starts the server against it and prints:
- p50/p95 of one case's history (all commits, last 100), the all-cases overview, a job read and
  the jobs list (sequential requests);
- achieved rps, p99 and 5xx/503 counts for job reads offered at fixed rates (open loop);
- how long latency takes to come back to normal after an overload stops;
- the history page of one case over all commits in Chromium (Playwright, when Debian's Chromium
  is there): from the overview to a drawn, zoomable chart (and in a fresh browser context), and
  a zoom's fetch of its window at full resolution until it is drawn (targets: under 1 s and
  under 200 ms);
- bytes per trial and per measurement (hot table with its indexes, and the raw samples apart).

    .venv/bin/python bench/scale.py                      # 10,000 x 50 x 3 (1.5 M measurements)
    .venv/bin/python bench/scale.py --revisions 2000 --quick

The load generator runs on the same machine as the server: on 2 cores it takes a share of them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PG = "postgresql://postgres@127.0.0.1:5432"


def shapes(n: int) -> list[str]:
    sizes = [256, 512, 1024, 2048, 4096, 8192, 16384]
    out = []
    for m in sizes:
        for k in sizes:
            for dtype in ("bf16", "fp16"):
                out.append(f"gemm M={m},N={m},K={k},dtype={dtype}")
    return out[:n]


def copy_rows(conn: psycopg.Connection, table: str, columns: list[str], rows) -> None:
    with conn.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def generate(url: str, revisions: int, cases: int, trials: int, samples: int, seed: int = 1) -> dict:
    """Fill the database through COPY; returns ids to query. Values: a slow drift plus a -8%
    step at 60% of the history on half of the cases, 1% noise."""
    rng = random.Random(seed)
    names = shapes(cases)
    with psycopg.connect(url, autocommit=False) as conn:
        repo_id = conn.execute("INSERT INTO repositories (name, url, build_command, import_root, env, default_branch,"
                               " created_at) VALUES ('scale', 'https://github.com/acme/scale.git', NULL, '.', '{}',"
                               " 'main', now()) RETURNING id").fetchone()[0]
        shas = [f"{i:08x}" + "%032x" % rng.getrandbits(128) for i in range(revisions)]
        copy_rows(conn, "revisions", ["repository_id", "sha", "parent_sha", "author", "subject", "pr_number", "position"],
                  ((repo_id, sha, shas[i - 1] if i else None, "dev", f"change {i} (#{1000 + i})", 1000 + i, i)
                   for i, sha in enumerate(shas)))
        rev_ids = dict(conn.execute("SELECT sha, id FROM revisions WHERE repository_id = %s", (repo_id,)).fetchall())
        copy_rows(conn, "cases", ["repository_id", "suite", "target", "name", "params"],
                  ((repo_id, "gemm", "lib.gemm:matmul", name, "{}") for name in names))
        case_ids = dict(conn.execute("SELECT name, id FROM cases WHERE repository_id = %s", (repo_id,)).fetchall())
        # One tracking job per 100 commits, as a tracked branch adds them.
        job_ids = []
        for start in range(0, revisions, 100):
            chunk = shas[start:start + 100]
            spec = {"good": chunk[0], "bad": chunk[-1], "cases": [{"suite": "gemm", "target": "lib.gemm:matmul",
                                                                   "name": n, "params": {}} for n in names],
                    "min_effect": 0.02, "metric": "ratio", "device_class": "cuda"}
            job_ids.append(conn.execute(
                "INSERT INTO jobs (kind, status, repository_id, spec, revision_shas, progress, created_at) VALUES "
                "('track', 'succeeded', %s, %s, %s, %s, now()) RETURNING id",
                (repo_id, json.dumps(spec), json.dumps(chunk),
                 json.dumps({"revisions": len(chunk), "measured": len(chunk), "trials": len(chunk) * trials}))).fetchone()[0])
        now = datetime.now(timezone.utc)
        copy_rows(conn, "trials", ["job_id", "revision_id", "status", "device_class", "device", "fingerprint",
                                   "attempts", "created_at"],
                  ((job_ids[i // 100], rev_ids[sha], "ok", "cuda", "NVIDIA H200", "f" * 16, 1, now)
                   for i, sha in enumerate(shas) for _ in range(trials)))
        trial_ids = [row[0] for row in conn.execute("SELECT id FROM trials ORDER BY id")]
        step_at = int(revisions * 0.6)
        values: dict[tuple[int, int], list[float]] = {}
        meas, raw_samples = [], []
        mid = 0
        for t_index, trial_id in enumerate(trial_ids):
            rev = t_index // trials
            for c_index, name in enumerate(names):
                level = 600.0 * (1 + 0.02 * rev / revisions) * (0.92 if c_index % 2 == 0 and rev >= step_at else 1.0)
                value = level * rng.lognormvariate(0, 0.01)
                control = 680.0 * rng.lognormvariate(0, 0.01)
                mid += 1
                meas.append((mid, trial_id, case_ids[name], "ok", value / control, value, control, "TFLOP/s", True, 1e-3))
                ms = [1.0 / value * rng.lognormvariate(0, 0.01) for _ in range(samples)]
                cms = [1.0 / control * rng.lognormvariate(0, 0.01) for _ in range(samples)]
                raw_samples.append((mid, json.dumps({"target_ms": ms, "control_ms": cms,
                                                     "ratio": [c / t for c, t in zip(cms, ms)]})))
                values.setdefault((rev, case_ids[name]), []).append(value)
                if len(meas) >= 50_000:
                    _flush(conn, meas, raw_samples)
        _flush(conn, meas, raw_samples)
        conn.execute("SELECT setval(pg_get_serial_sequence('measurements', 'id'), %s)", (mid,))
        copy_rows(conn, "case_points", ["case_id", "revision_id", "fingerprint", "position", "trials", "value",
                                        "control_value", "ratio", "unit", "higher_is_better", "value_min",
                                        "value_max", "ratio_min", "ratio_max"],
                  ((case_id, rev_ids[shas[rev]], "f" * 16, rev, len(v), statistics.median(v), 680.0,
                    statistics.median(v) / 680.0, "TFLOP/s", True, min(v), max(v), min(v) / 680.0, max(v) / 680.0)
                   for (rev, case_id), v in values.items()))
        conn.execute("INSERT INTO culprits (job_id, kind, first_sha, last_sha, effects, created_at) VALUES "
                     "(%s, 'performance', %s, %s, %s, now())",
                     (job_ids[step_at // 100], shas[step_at], shas[step_at],
                      json.dumps({n: {"rel": -0.08, "ci": [-0.09, -0.07], "before": 0.9, "after": 0.83}
                                  for i, n in enumerate(names) if i % 2 == 0})))
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return {"case": names[0], "job_id": job_ids[len(job_ids) // 2], "measurements": mid}


def _flush(conn, meas: list, raw_samples: list) -> None:
    copy_rows(conn, "measurements", ["id", "trial_id", "case_id", "status", "ratio", "value", "control_value", "unit",
                                     "higher_is_better", "accuracy_error"], meas)
    copy_rows(conn, "measurement_samples", ["measurement_id", "samples"], raw_samples)
    meas.clear()
    raw_samples.clear()


def sizes(url: str) -> dict[str, float]:
    with psycopg.connect(url) as conn:
        def total(table: str) -> int:
            return conn.execute("SELECT pg_total_relation_size(%s)", (table,)).fetchone()[0]

        def heap(table: str) -> int:
            return conn.execute("SELECT pg_relation_size(%s)", (table,)).fetchone()[0]

        n_meas = conn.execute("SELECT count(*) FROM measurements").fetchone()[0]
        n_trials = conn.execute("SELECT count(*) FROM trials").fetchone()[0]
        return {
            "measurement row (heap)": heap("measurements") / n_meas,
            "measurement row (heap + indexes)": total("measurements") / n_meas,
            "raw samples per measurement": total("measurement_samples") / n_meas,
            "case point per measurement": total("case_points") / n_meas,
            "per trial, everything": sum(total(t) for t in ("trials", "measurements", "measurement_samples",
                                                            "case_points")) / n_trials,
        }


def machine_reference_ms() -> float:
    """A fixed pure-Python loop, best of 5, in ms. The development VM's speed varies about 2x
    over a day; runs are comparable only at a like reference."""
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        sum(i * i for i in range(1_000_000))
        best = min(best, (time.perf_counter() - t0) * 1000)
    return best


# Targets as ratios to the machine reference (the figures scale with the machine's speed):
# (label, p95 at most this many references).
TARGETS = {"one case, all commits, width 1400": 0.5, "all-cases overview (JSON)": 0.5}
JOB_READ_P99_TARGET = 1.0  # 200 job reads/s offered: p99 at most 1x the reference, nothing shed
HISTORY_BYTES_TARGET = 200_000  # one case over every commit at width 1,400
PAGE_READY_TARGET_MS = 1000  # the history page of a 10,000-commit case: drawn and zoomable
ZOOM_TARGET_MS = 200  # a zoom: its window fetched at full resolution and drawn
CHROMIUM = os.environ.get("PERFBISECT_CHROMIUM") or "/usr/bin/chromium"

# In the page before its scripts: when each window fetch started and when its window was drawn
# (the chart sets data-window once the answer is drawn), on the page's own clock.
ZOOM_PROBE = """
window.__zooms = [];
const fetch0 = window.fetch;
window.fetch = function (url, opts) {
  if (String(url).includes("&start=")) window.__zooms.push({asked: performance.now(), drawn: null});
  return fetch0.apply(this, arguments);
};
new MutationObserver(function (changes) {
  changes.forEach(function (c) {
    const last = window.__zooms[window.__zooms.length - 1];
    if (last && !last.drawn && c.target.dataset.window) last.drawn = performance.now();
  });
}).observe(document, {subtree: true, attributes: true, attributeFilter: ["data-window"]});
"""


def history_page(base: str, case: str, loads: int = 5, zooms: int = 8) -> None:
    """Times the history page of `case` in Chromium, from navigation start until the chart is
    drawn and takes input (the page's own clock), two ways, `loads` times each: from the
    overview in a tab that has shown it (the way a user comes: the browser running, the static
    files cached; the target), and in a fresh browser context (a new renderer, nothing cached).
    Then `zooms` drag-zooms at spread positions, each from its window's fetch to its drawing
    (the chart's 120 ms wait for a zoom to settle comes before the fetch and is not counted)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("history page in Chromium: skipped (no playwright)")
        return
    if not Path(CHROMIUM).exists():
        print(f"history page in Chromium: skipped (no Chromium at {CHROMIUM}; `make chromium`)")
        return
    from urllib.parse import quote

    url, overview = f"{base}/dashboard/repositories/scale?case={quote(case)}", f"{base}/dashboard/repositories/scale"

    def drawn(page) -> float:
        page.goto(url, wait_until="commit")
        page.wait_for_selector("figure.perf-chart[data-ready='true'] canvas", timeout=30_000)
        return page.evaluate("performance.now()")

    from_overview, cold, zoom_ms = [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            tab = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
            tab.add_init_script(ZOOM_PROBE)
            for _ in range(loads):
                tab.goto(overview)
                from_overview.append(drawn(tab))
            for _ in range(loads):
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                cold.append(drawn(context.new_page()))
                context.close()
            fig = tab.locator("figure.perf-chart")
            points = int(fig.get_attribute("data-points"))
            total = tab.evaluate("JSON.parse(document.querySelector('figure.perf-chart script').textContent)"
                                 ".series.reduce((n, s) => Math.max(n, s.total), 0)")
            box = fig.locator(".u-over").bounding_box()
            for i in range(zooms if points < total else 0):  # a chart with every point fetches nothing
                left = box["x"] + box["width"] * (0.05 + 0.85 * i / max(1, zooms - 1))
                y = box["y"] + box["height"] / 2
                tab.mouse.move(left, y)
                tab.mouse.down()
                tab.mouse.move(left + box["width"] * 0.06, y, steps=4)  # ~6% of the range
                tab.mouse.up()
                tab.wait_for_function("() => { const z = window.__zooms; "
                                      f"return z.length === {i + 1} && z[{i}].drawn; }}", timeout=30_000)
                z = tab.evaluate(f"window.__zooms[{i}]")
                zoom_ms.append(z["drawn"] - z["asked"])
                fig.locator(".zoom-reset").click()  # the overview again, nothing fetched
                tab.wait_for_selector("figure.perf-chart[data-window='']")
        finally:
            browser.close()

    def line(label: str, ms: list[float], target: float | None) -> str:
        verdict = f"; < {target:.0f} ms: {'met' if max(ms) < target else 'MISSED'}" if target else ""
        return (f"  {label}: median {statistics.median(ms):.0f} ms, worst {max(ms):.0f} ms "
                f"({', '.join(f'{v:.0f}' for v in ms)}{verdict})")

    print(f"history page in Chromium ({points:,} points drawn of {total:,}, one case over all commits):")
    print(line("from the overview, drawn and zoomable", from_overview, PAGE_READY_TARGET_MS))
    print(line("in a fresh browser context", cold, None))
    print(line("a zoom's window fetched and drawn", zoom_ms, ZOOM_TARGET_MS) if zoom_ms else
          "  a zoom: nothing to fetch (the chart draws every point)")


def timed(client: httpx.Client, path: str, params: dict | None = None, reps: int = 20,
          revalidate: bool = False) -> tuple[float, float, int]:
    """p50, p95 (ms) and body bytes of `reps` sequential GETs; with `revalidate`, each sends the
    ETag of the first answer (a dashboard refresh when nothing changed: 304, empty body). A
    `width` given as a range asks each GET for the next width of it: a body never built before
    (the server keeps the bodies it built by ETag)."""
    headers = {"If-None-Match": client.get(path, params=params).headers.get("etag", "")} if revalidate else {}
    times, size = [], 0
    for rep in range(reps):
        asked = {**params, "width": params["width"][rep]} if params and isinstance(params.get("width"), range) \
            else params
        t0 = time.perf_counter()
        r = client.get(path, params=asked, headers=headers)
        times.append((time.perf_counter() - t0) * 1000)
        if r.status_code != 304:
            r.raise_for_status()
        size = len(r.content)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))], size


class RawHTTP:
    """A minimal keep-alive HTTP/1.1 GET client on asyncio streams. httpx's async client costs
    about 1-2 ms of CPU per request and, under overload, a cancelled request could leave its
    pool stuck: on 2 cores shared with the server it was the bottleneck and hung the run.

    Like any keep-alive client (urllib3, httpx) it does not reuse a connection idle longer than
    the server keeps one open, and sends a GET again, once, on a fresh connection when a reused
    one was closed before any answer came (the server's idle close racing the request): those
    requests are counted in `stale_retries`, not as failures."""

    IDLE_S = 2.0  # under uvicorn's keep-alive timeout (5 s)

    def __init__(self, host: str, port: int, max_connections: int) -> None:
        self.host, self.port = host, port
        self.idle: list[tuple[float, asyncio.StreamReader, asyncio.StreamWriter]] = []
        self.slots = asyncio.Semaphore(max_connections)
        self.stale_retries = 0

    async def _connection(self) -> tuple[bool, asyncio.StreamReader, asyncio.StreamWriter]:
        while self.idle:
            since, reader, writer = self.idle.pop()
            if time.monotonic() - since < self.IDLE_S:
                return True, reader, writer
            writer.close()
        return False, *(await asyncio.open_connection(self.host, self.port))

    async def get(self, path: str) -> int:
        async with self.slots:
            reused, reader, writer = await self._connection()
            try:
                try:
                    writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
                    status_line = await reader.readline()
                except ConnectionError:
                    if not reused:
                        raise
                    status_line = b""
                if not status_line and reused:  # closed by the server while idle: nothing was answered
                    writer.close()
                    self.stale_retries += 1
                    reused, (reader, writer) = False, await asyncio.open_connection(self.host, self.port)
                    writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
                    status_line = await reader.readline()
                status = int(status_line.split()[1])
                length, close = 0, False
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                    elif name.lower() == "connection" and "close" in value.lower():
                        close = True
                await reader.readexactly(length)
            except BaseException:
                writer.close()  # a cancelled or broken exchange: never reuse the connection
                raise
            if close:
                writer.close()
            else:
                self.idle.append((time.monotonic(), reader, writer))
            return status

    def close(self) -> None:
        for _, _, writer in self.idle:
            writer.close()


async def offered_load(base: str, path: str, rps: int, seconds: float, deadline_s: float = 10.0) -> dict:
    """Open loop: send at `rps` whatever the answers; latency per request from the moment it
    was due (a client that falls behind counts against the server, never in its favour),
    status counts. A request without an answer after `deadline_s` counts as failed (599)."""
    host, port = base.removeprefix("http://").split(":")
    client = RawHTTP(host, int(port), max_connections=512)
    results: list[tuple[float, int]] = []

    async def one(due: float) -> None:
        try:
            status = await asyncio.wait_for(client.get(path), deadline_s)
        except (OSError, ValueError, IndexError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            status = 599
        results.append(((time.perf_counter() - due) * 1000, status))

    tasks, start = [], time.perf_counter()
    for i in range(int(rps * seconds)):
        due = start + i / rps
        if (delay := due - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(due)))
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - start
    client.close()
    ok = sorted(ms for ms, s in results if s == 200)
    return {"offered": rps, "achieved_ok_rps": len(ok) / wall,
            "p50_ms": statistics.median(ok) if ok else None,
            "p99_ms": ok[int(0.99 * (len(ok) - 1))] if ok else None,
            "shed_503": sum(s == 503 for _, s in results),
            "errors_5xx": sum(s >= 500 and s not in (503, 599) for _, s in results),
            "no_answer": sum(s == 599 for _, s in results), "stale_retries": client.stale_retries}


def server_cpu_ms(pid: int, client: httpx.Client, path: str, n: int = 1000, revalidate: bool = False) -> float:
    """CPU time the server's processes (the parent and its workers) spend per request (with
    `revalidate`, each request sends the ETag of the first answer)."""
    headers = {"If-None-Match": client.get(path).headers.get("etag", "")} if revalidate else {}
    def cpu_s() -> float:
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
        total = 0
        for p in [pid, *map(int, children)]:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks
        return total / os.sysconf("SC_CLK_TCK")

    before = cpu_s()
    for _ in range(n):
        r = client.get(path, headers=headers)
        if r.status_code != 304:
            r.raise_for_status()
    return (cpu_s() - before) / n * 1000


def recovery(client: httpx.Client, path: str, normal_ms: float, base: str) -> float:
    """Overload (1000 rps offered for 5 s), then seconds until 5 requests in a row are back
    under 2x the normal latency."""
    overload = asyncio.run(offered_load(base, path, 1000, 5, deadline_s=5.0))
    print(f"overload: {overload['achieved_ok_rps']:.0f} ok rps, {overload['shed_503']} shed (503), "
          f"{overload['no_answer']} without an answer in 5 s, {overload['errors_5xx']} other 5xx")
    stop = time.perf_counter()
    streak = 0
    while time.perf_counter() - stop < 120:
        t0 = time.perf_counter()
        r = client.get(path)
        ms = (time.perf_counter() - t0) * 1000
        streak = streak + 1 if r.status_code == 200 and ms < 2 * normal_ms + 5 else 0
        if streak == 5:
            return time.perf_counter() - stop
        time.sleep(0.05)
    return float("inf")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--revisions", type=int, default=10_000)
    ap.add_argument("--cases", type=int, default=50)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--samples", type=int, default=40, help="raw samples per series (3 series per measurement)")
    ap.add_argument("--database", default="perfbisect_scale")
    ap.add_argument("--reuse", action="store_true", help="keep an already generated database")
    ap.add_argument("--workers", type=int, default=2, help="server processes")
    ap.add_argument("--rates", default="50,100,200")
    ap.add_argument("--quick", action="store_true", help="5 s per rate instead of 10")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` still stops the server below

    url = f"{PG}/{args.database}"
    env = {**os.environ, "DATABASE_URL": url, "PERFBISECT_HOME": "/tmp/perfbisect-scale-home"}
    env.pop("REDIS_URL", None)
    if not args.reuse:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{args.database}"')
        subprocess.run([str(BIN / "perfbisect"), "db", "upgrade"], env=env, check=True, capture_output=True)
        t0 = time.perf_counter()
        ids = generate(url, args.revisions, args.cases, args.trials, args.samples)
        print(f"generated {ids['measurements']:,} measurements in {time.perf_counter() - t0:.0f} s")
    with psycopg.connect(url) as conn:
        case = conn.execute("SELECT name FROM cases ORDER BY id LIMIT 1").fetchone()[0]
        job_id = conn.execute("SELECT id FROM jobs ORDER BY id OFFSET (SELECT count(*) / 2 FROM jobs) LIMIT 1").fetchone()[0]
    print("bytes:", json.dumps({k: round(v) for k, v in sizes(url).items()}))
    reference = machine_reference_ms()  # every latency is also printed as a ratio to it (issue 29)
    print(f"machine reference: {reference:.0f} ms (a fixed Python loop; lower is faster)")

    port = 18765
    with socket.socket() as probe:  # a server left by an interrupted run would be measured instead
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            sys.exit(f"port {port} is in use (a server from an earlier run?): stop it first")
    server = subprocess.Popen([str(BIN / "perfbisect"), "serve", "--port", str(port), "--no-migrate",
                               "--workers", str(args.workers)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.3)
            time.sleep(5)  # every server process up, not only the first
            rows = [
                ("one case, all commits", "/api/history/scale", {"case": case}),
                ("one case, all commits, width 1400", "/api/history/scale", {"case": case, "width": 1400}),
                ("  same, If-None-Match (304)", "/api/history/scale", {"case": case, "width": 1400}),
                ("  same, a new body each (width 1401+)", "/api/history/scale",
                 {"case": case, "width": range(1401, 1421)}),
                ("one case, zoomed 500 commits", "/api/history/scale",
                 {"case": case, "width": 1400, "start": 5000, "end": 5499}),
                ("one case, last 100", "/api/history/scale", {"case": case, "last": 100}),
                ("all-cases overview (JSON)", "/api/history/scale/overview", None),
                ("  same, If-None-Match (304)", "/api/history/scale/overview", None),
                ("all-cases overview (page)", "/dashboard/repositories/scale", None),
                ("job read", f"/api/jobs/{job_id}", None),
                ("jobs list", "/api/jobs", None),
            ]
            reference = machine_reference_ms()
            print(f"machine reference now: {reference:.0f} ms; each row's ratio is to the mean of the references"
                  " measured just before and after it (the load of a shared machine moves within a run)")
            print(f"{'request':<36}{'p50 ms':>9}{'p95 ms':>9}{'ref ms':>8}{'p95/ref':>9}{'bytes':>11}")
            normal = None
            for label, path, params in rows:
                p50, p95, size = timed(client, path, params, revalidate="304" in label)
                reference = (reference + (after := machine_reference_ms())) / 2
                normal = p50 if label == "job read" else normal
                target = f" (<= {TARGETS[label]}x: {'met' if p95 <= TARGETS[label] * reference else 'MISSED'})" \
                    if label in TARGETS else ""
                if label == "one case, all commits, width 1400":
                    target += f" (<= {HISTORY_BYTES_TARGET:,} B: {'met' if size <= HISTORY_BYTES_TARGET else 'MISSED'})"
                print(f"{label:<36}{p50:>9.1f}{p95:>9.1f}{reference:>8.0f}{p95 / reference:>9.2f}{size:>11,}{target}")
                reference = after
            print(f"server CPU per job read: {server_cpu_ms(server.pid, client, f'/api/jobs/{job_id}'):.2f} ms "
                  "(1,000 sequential reads; target < 3 ms)")
            history = f"/api/history/scale?case={case.replace(' ', '%20').replace(',', '%2C').replace('=', '%3D')}&width=1400"
            print(f"server CPU per history read at width 1400: {server_cpu_ms(server.pid, client, history, 50):.1f} ms; "
                  f"with If-None-Match: {server_cpu_ms(server.pid, client, history, 50, revalidate=True):.1f} ms")
            overview = "/api/history/scale/overview"
            print(f"server CPU per overview read: {server_cpu_ms(server.pid, client, overview, 50):.1f} ms; "
                  f"with If-None-Match: {server_cpu_ms(server.pid, client, overview, 50, revalidate=True):.1f} ms")
            per = 5 if args.quick else 10
            print(f"\njob reads offered at a fixed rate for {per} s ({args.workers} server processes):")
            print(f"{'offered rps':>12}{'ok rps':>9}{'p50 ms':>9}{'p99 ms':>9}{'p99/ref':>9}{'503 shed':>10}{'other 5xx':>11}"
                  f"{'no answer':>11}{'resent':>8}")
            for rate in (int(r) for r in args.rates.split(",")):
                res = asyncio.run(offered_load(base, f"/api/jobs/{job_id}", rate, per))
                reference = (reference + (after := machine_reference_ms())) / 2
                print(f"{res['offered']:>12}{res['achieved_ok_rps']:>9.0f}{res['p50_ms'] or 0:>9.1f}"
                      f"{res['p99_ms'] or 0:>9.1f}{res['shed_503']:>10}{res['errors_5xx']:>11}{res['no_answer']:>11}"
                      f"{res['stale_retries']:>8}   p99/ref {(res['p99_ms'] or 0) / reference:.2f}")
                if rate == 200:
                    met = (res["p99_ms"] or float("inf")) <= JOB_READ_P99_TARGET * reference and not (
                        res["shed_503"] or res["errors_5xx"] or res["no_answer"])
                    print(f"{'':>12}target at 200 rps: p99 <= {JOB_READ_P99_TARGET}x the reference "
                          f"({reference:.0f} ms), nothing shed: {'met' if met else 'MISSED'}")
                reference = after
            seconds = recovery(client, f"/api/jobs/{job_id}", normal or 5.0, base)
            print(f"\nback to normal latency {seconds:.1f} s after a 5 s overload (1000 rps offered) stopped")
            reference = machine_reference_ms()
            history_page(base, case)
            print(f"(machine reference around the page: {(reference + machine_reference_ms()) / 2:.0f} ms)")
            print(f"machine reference at the end: {machine_reference_ms():.0f} ms")
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=20)


if __name__ == "__main__":
    main()
