"""Screenshots of the dashboard for the README: the history, job, regressions and compare pages
of the small seeded history the browser tests use (tests/seed_dashboard.py), in a throw-away
SQLite database, taken with the same Playwright + Debian Chromium setup.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="perfbisect-shots-"))
    os.environ.update({"PERFBISECT_HOME": str(home), "DATABASE_URL": f"sqlite:///{home / 'shots.db'}"})
    os.environ.pop("REDIS_URL", None)
    sys.path.insert(0, str(ROOT))

    import uvicorn
    from playwright.sync_api import sync_playwright

    from perfbisect.service.api import create_app
    from perfbisect.service.db import session_scope
    from perfbisect.service.migrate import upgrade
    from tests.seed_dashboard import STEP_AT, STEPPED, seed, sha

    upgrade()
    with session_scope() as session:
        ids = {k: v.id for k, v in seed(session).items() if k in ("job", "running")}
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=args.port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    pages = {
        "history.png": f"/dashboard/repositories/minikern?target=minikern.gemm:matmul&case={STEPPED}",
        "overlay.png": "/dashboard/repositories/minikern?target=minikern.gemm:matmul&shape=dtype%3Dbf16&overlay=true",
        "job.png": f"/dashboard/jobs/{ids['job']}",
        "alerts.png": "/dashboard/alerts",
        "compare.png": f"/dashboard/repositories/minikern/compare?base={sha(STEP_AT - 1)}&head={sha(STEP_AT)}",
    }
    args.out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1150, "height": 900}, base_url=f"http://127.0.0.1:{args.port}")
        for name, path in pages.items():
            page.goto(path)
            if page.locator("figure.perf-chart").count():
                page.wait_for_selector("figure.perf-chart[data-ready='true']")
                page.locator("figure.perf-chart .plot").first.focus()
                for _ in range(12):  # walk to a commit near the step so the read-out shows it
                    page.keyboard.press("ArrowRight")
            page.screenshot(path=str(args.out / name), full_page=name != "job.png")
            print(args.out / name)
        browser.close()
    server.should_exit = True


if __name__ == "__main__":
    main()
