"""The dashboard in a real browser: Playwright driving Debian's Chromium (/usr/bin/chromium,
`apt-get install chromium`; never `playwright install`) against one uvicorn server on a seeded
database (tests/seed_dashboard.py), one browser for the whole module. Charts render with data,
zoom by drag, buttons and keyboard, the read-out names the commit, filters and links work, and
axe-core (the copy axe-playwright-python ships) finds no violation on any dashboard page."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("PERFBISECT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install '.[test]')")
if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)

from tests.seed_dashboard import NORM_CASE, SHAPES, STEP_AT, STEPPED, sha  # noqa: E402

pytestmark = pytest.mark.browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def seeded(migrated_engine) -> Iterator[dict]:
    """The seeded history in one transaction rolled back at the end; every request of the
    server runs in a savepoint of it, one at a time."""
    from sqlalchemy.orm import Session

    from tests.seed_dashboard import seed

    connection = migrated_engine.connect()
    outer = connection.begin()
    session = Session(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)
    try:
        yield {"session": session, **seed(session)}
    finally:
        session.close()
        outer.rollback()
        connection.close()


@pytest.fixture(scope="module")
def server(seeded) -> Iterator[str]:
    import uvicorn

    from perfbisect.service.api import create_app
    from perfbisect.service.api.deps import get_session

    app = create_app()
    lock = threading.Lock()

    def _session():
        with lock:  # one connection shared by the server's threads
            savepoint = seeded["session"].begin_nested()
            try:
                yield seeded["session"]
            finally:
                savepoint.rollback()

    app.dependency_overrides[get_session] = _session
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser, server, request):
    width = getattr(request, "param", 1200)  # indirect parametrization: the viewport width
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=server)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    # The Content-Security-Policy (service/api/headers.py) must block nothing the pages need. An
    # image is no need: ReDoc's footer logo from its CDN is blocked on purpose and hides itself.
    pg.on("console", lambda m: "Content Security Policy" in m.text and not m.text.startswith("Loading the image")
          and errors.append(m.text))
    yield pg
    context.close()
    assert errors == [], f"JavaScript errors: {errors}"


def _history(page, **query) -> None:
    from urllib.parse import urlencode
    page.goto(f"/dashboard/repositories/minikern?{urlencode(query)}")
    page.wait_for_selector("figure.perf-chart[data-ready='true'] canvas")


def test_chart_renders_the_series_with_the_step_only_where_it_passed(page) -> None:
    _history(page, target="minikern.gemm:matmul", case=STEPPED)
    fig = page.locator("figure.perf-chart")
    assert fig.count() == 1
    legend = fig.locator("ul.legend").inner_text()
    assert "NVIDIA H200" in legend and "step (-20.0%)" in legend and "failed trial" in legend
    assert "wrong results" in legend
    box = fig.locator("canvas").first.bounding_box()
    assert box and box["width"] > 300 and box["height"] > 200
    _history(page, target="minikern.rmsnorm:rmsnorm", case=NORM_CASE)  # +1.8% with an interval spanning 0
    assert "step (" not in page.locator("ul.legend").inner_text()


def test_zoom_by_drag_buttons_and_keyboard_and_the_readout(page) -> None:
    _history(page, target="minikern.gemm:matmul", case=STEPPED)
    fig = page.locator("figure.perf-chart")
    over = fig.locator(".u-over")
    box = over.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.2, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()
    assert fig.get_attribute("data-zoomed") == "true"
    fig.locator("button.zoom-reset").click()
    assert fig.get_attribute("data-zoomed") == "false"
    fig.locator(".plot").focus()
    page.keyboard.press("+")
    assert fig.get_attribute("data-zoomed") == "true"
    page.keyboard.press("0")
    page.keyboard.press("Home")
    readout = fig.locator(".readout").inner_text()
    assert sha(0)[:10] in readout and "#900" in readout and "median of 3 trials" in readout
    assert "[" in readout and "× control" in readout  # the trials' range, in the ratio view
    # its links, filled in from the chart's templates
    assert fig.locator(f".readout a[href='https://github.com/acme/minikern/commit/{sha(0)}']").count() == 1
    assert fig.locator(".readout a[href='https://github.com/acme/minikern/pull/900']").count() == 1
    fig.locator("input[value='value']").check()
    fig.locator(".plot").focus()
    page.keyboard.press("ArrowRight")
    assert "TFLOP/s" in fig.locator(".readout").inner_text()


def test_shape_filter_and_overlay(page) -> None:
    _history(page, target="minikern.gemm:matmul")
    assert page.locator("figure.perf-chart").count() == len(SHAPES)
    page.select_option("select.shape-param[data-param='dtype']", "bf16")
    page.click("form.filters button[type='submit']")
    page.wait_for_selector("figure.perf-chart[data-ready='true']")
    assert "shape=dtype%3Dbf16" in page.url
    assert page.locator("figure.perf-chart").count() == 2
    page.check("input[name='overlay']")
    page.click("form.filters button[type='submit']")
    page.wait_for_selector("figure.perf-chart[data-ready='true']")
    assert page.locator("figure.perf-chart").count() == 1
    assert page.locator("ul.legend li .swatch").count() == 2  # one line per shape


def test_links_lead_to_the_commit_the_job_and_the_compare_view(page, seeded) -> None:
    _history(page, target="minikern.gemm:matmul", case=STEPPED)
    culprit = sha(STEP_AT)
    assert page.locator(f"a[href='https://github.com/acme/minikern/commit/{culprit}']").count() >= 1
    assert page.locator(f"a[href='https://github.com/acme/minikern/pull/{900 + STEP_AT}']").count() >= 1
    page.click("figure.perf-chart .readout a.compare-link")  # the read-out starts on the newest point
    assert page.url.endswith(f"/compare?base={sha(38)}&head={sha(39)}")
    assert page.locator("tr", has_text=STEPPED).count() == 1
    _history(page, target="minikern.gemm:matmul", case=STEPPED)
    page.click(f"a[href='/dashboard/jobs/{seeded['job'].id}']")
    assert page.locator("h1").inner_text().startswith(f"Job #{seeded['job'].id}")
    page.goto("/dashboard/repositories/minikern")
    page.click("text=compare two revisions")
    page.select_option("select[name='base']", sha(STEP_AT - 1))
    page.select_option("select[name='head']", sha(STEP_AT))
    page.click("form.filters button[type='submit']")
    row = page.locator("tr", has_text=STEPPED)
    assert "worse" in row.inner_text()


def _axe(page) -> list[dict]:
    import axe_playwright_python
    # evaluated by the driver, not added as a <script>: the pages' Content-Security-Policy runs no
    # inline script, and a test's tool is no reason to loosen it
    page.evaluate((Path(axe_playwright_python.__file__).parent / "axe.min.js").read_text())
    # resultTypes: only the violations are reported in full (the passes' nodes are not collected):
    # the same rules run, about a third faster on ReDoc's long page.
    return page.evaluate("axe.run(document, {resultTypes: ['violations']})"
                         ".then(r => r.violations.map(v => ({id: v.id, nodes: v.nodes.map(n => n.target)})))")


def _pages(seeded) -> dict[str, list[str]]:
    """The URLs visited per page route of the app: each kind of page with what makes it widest
    (an attribution figure, a compare's table, an alert of each kind, a broken head)."""
    jobs = [seeded[k].id for k in ("job", "running", "attribution", "compare")]
    history = "/dashboard/repositories/minikern"
    return {"/": ["/"], "/dashboard": ["/dashboard"], "/dashboard/jobs": ["/dashboard/jobs"],
            "/dashboard/jobs/{job_id}": [f"/dashboard/jobs/{i}" for i in jobs],
            "/dashboard/repositories/{name}": [
                history, f"{history}?target=minikern.gemm:matmul&case={STEPPED}",
                f"{history}?target=minikern.gemm:matmul&shape=dtype%3Dbf16&overlay=true", "/dashboard/repositories/nope"],
            "/dashboard/alerts": ["/dashboard/alerts"],
            "/dashboard/alerts/{alert_id}": [f"/dashboard/alerts/{a.id}" for a in seeded["alerts"]],
            "/dashboard/tracked-branches": ["/dashboard/tracked-branches"],
            "/dashboard/regressions": ["/dashboard/regressions"],
            "/dashboard/repositories/{name}/compare": [
                f"{history}/compare", f"{history}/compare?base={sha(STEP_AT - 1)}&head={sha(STEP_AT)}"],
            "/docs": ["/docs"], "/redoc": ["/redoc"]}


def _page_routes() -> set[str]:
    """Every page the app serves to a browser: its GET routes outside the OpenAPI schema (the
    dashboard's pages, /docs and /redoc), read from the app so a new page cannot be missed."""
    from fastapi.routing import APIRoute

    from perfbisect.service.api import create_app

    def walk(routes, prefix: str = "") -> Iterator[tuple[str, APIRoute]]:
        for route in routes:
            if (context := getattr(route, "include_context", None)) is not None:  # an included router
                yield from walk(context.included_router.routes, prefix + context.prefix)
            elif isinstance(route, APIRoute):
                yield prefix + route.path, route

    return {path for path, r in walk(create_app().routes) if "GET" in r.methods and not r.include_in_schema}


def test_every_page_route_is_visited(seeded) -> None:
    assert set(_pages(seeded)) == _page_routes()
    kinds = {a.kind.value for a in seeded["alerts"]}
    assert kinds == {"regression", "improvement", "wrong_results", "broken"}
    assert any(a.culprit_first_sha and a.bisect_job_id is None for a in seeded["alerts"])  # one commit, no bisect


def _settle(page, path: str) -> None:
    if page.locator("figure.perf-chart").count():
        page.wait_for_selector("figure.perf-chart[data-ready='true']")
    if path == "/docs":
        page.wait_for_selector(".swagger-ui .opblock")
    if path == "/redoc":
        page.wait_for_selector("[role='menuitem']", state="attached", timeout=20_000)


# The scroll regions whose content is wider than they are: "label scrollWidth/clientWidth".
SCROLLED_BOXES = ("[...document.querySelectorAll('.scroll')].filter(e => e.scrollWidth > e.clientWidth + 1)"
                  ".map(e => `${e.getAttribute('aria-label')} ${e.scrollWidth}/${e.clientWidth}`)")


@pytest.mark.parametrize("page", [1400, 390], indirect=True, ids=["desktop", "phone"])
def test_every_page_passes_axe_and_fits_its_viewport(page, seeded) -> None:
    """axe finds no violation, and no page is wider than the viewport: tables scroll inside their
    own box, long names wrap, charts take their box's width; on a desktop no table needs its
    scroll. One visit a page checks all three."""
    width = page.viewport_size["width"]
    found, wide, scrolled = {}, {}, {}
    for path in (url for urls in _pages(seeded).values() for url in urls):
        page.goto(path)
        _settle(page, path)
        if (scroll := page.evaluate("document.documentElement.scrollWidth")) > width:
            wide[path] = scroll
        if width >= 1100 and (boxes := page.evaluate(SCROLLED_BOXES)):  # a desktop: no column behind a scroll
            scrolled[path] = boxes
        if violations := _axe(page):
            found[path] = violations
    assert found == {}, json.dumps(found, indent=1)[:4000]
    assert wide == {}, wide
    assert scrolled == {}, scrolled
    _history(page, target="minikern.gemm:matmul", case=STEPPED)
    canvas = page.locator("figure.perf-chart canvas").first.bounding_box()
    assert canvas["x"] >= 0 and canvas["x"] + canvas["width"] <= width


@pytest.mark.parametrize("page", [390], indirect=True, ids=["phone"])
def test_step_labels_do_not_overlap_on_a_phone_chart(page) -> None:
    _history(page, target="minikern.gemm:matmul", case=STEPPED)  # -20% at 25, wrong results from 31
    boxes = json.loads(page.locator("figure.perf-chart .uplot").first.get_attribute("data-labels"))
    assert len(boxes) == 2
    (l1, t1, r1, b1), (l2, t2, r2, b2) = boxes
    assert r1 <= l2 or r2 <= l1 or b1 <= t2 or b2 <= t1  # side by side or one above the other


def test_arrow_keys_start_at_the_newest_commit_and_stop_at_the_ends(page) -> None:
    _history(page, target="minikern.gemm:matmul", case=STEPPED)
    fig = page.locator("figure.perf-chart")
    readout = fig.locator(".readout")
    assert sha(39)[:10] in readout.inner_text()
    fig.locator(".plot").focus()
    page.keyboard.press("ArrowRight")  # already the newest: stays, never jumps to the oldest
    assert sha(39)[:10] in readout.inner_text()
    page.keyboard.press("ArrowLeft")
    assert sha(38)[:10] in readout.inner_text()
    page.keyboard.press("Home")
    page.keyboard.press("ArrowLeft")
    assert sha(0)[:10] in readout.inner_text()
    page.keyboard.press("End")
    assert sha(39)[:10] in readout.inner_text()


def test_value_view_reads_values_and_the_legend_names_the_control(page) -> None:
    _history(page, target="minikern.gemm:matmul", case=STEPPED)
    fig = page.locator("figure.perf-chart")
    assert "× control" in fig.locator(".readout").inner_text()
    assert "control" not in fig.locator("ul.legend").inner_text()
    fig.locator("input[value='value']").check()
    readout = fig.locator(".readout").inner_text()
    assert "× control" not in readout and "TFLOP/s" in readout  # switched at once, no stale ratio
    assert "control (dashed" in fig.locator("ul.legend").inner_text()


def test_tooltip_names_the_commit_under_the_mouse(page) -> None:
    _history(page, target="minikern.gemm:matmul", case=STEPPED)
    over = page.locator("figure.perf-chart .u-over")
    box = over.bounding_box()
    page.mouse.move(box["x"] + box["width"] - 2, box["y"] + box["height"] / 2)
    tip = page.locator("figure.perf-chart .tip")
    assert tip.is_visible() and sha(39)[:7] in tip.inner_text() and "× control" in tip.inner_text()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] + 120)
    assert not tip.is_visible()


def test_the_chart_is_two_key_presses_away(page, seeded) -> None:
    for path in (f"/dashboard/repositories/minikern?target=minikern.gemm:matmul&case={STEPPED}",
                 f"/dashboard/jobs/{seeded['job'].id}"):
        page.goto(path)
        page.wait_for_selector("figure.perf-chart[data-ready='true']")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "skip to the chart"
        page.keyboard.press("Enter")
        assert page.evaluate("document.activeElement.id") == "chart-1-plot"


def test_bulk_triage_sends_the_token_and_the_fields(page, seeded) -> None:
    from perfbisect.service.auth import service as auth

    _, token = auth.create_token(seeded["session"], "browser-triager", auth.parse_scopes(["triage"]))
    page.goto("/dashboard/alerts")
    assert page.locator("tbody tr").count() == len(seeded["alerts"])
    page.fill("#token-form input[name='token']", token)
    page.click("#token-form button[type='submit']")
    assert "token is set" in page.locator("#token-state").inner_text()
    assert page.evaluate("document.cookie") == ""  # kept in sessionStorage, never a cookie
    page.check("#pick-all")
    page.select_option("#triage-form select[name='status']", "acknowledged")
    page.fill("#triage-form input[name='assignee']", "ana")
    page.click("#triage-form button[type='submit']")
    assert "Say why" in page.locator("#triage-message").inner_text()  # a bulk change needs a reason
    page.fill("#triage-form input[name='reason']", "seen on the nightly")
    answers = []

    def through(route):  # to the real server; its answer is kept before the page reloads
        response = route.fetch()
        answers.append((route.request, response.status, response.json()))
        route.fulfill(response=response)

    page.route("**/api/alerts", through)
    with page.expect_navigation():  # saved: the page reloads to show the new state
        page.click("#triage-form button[type='submit']")
    [(sent, status, body)] = answers
    assert sent.method == "PATCH" and sent.headers["authorization"] == f"Bearer {token}"
    newest_first = sorted((a.id for a in seeded["alerts"]), reverse=True)  # the table's order
    assert json.loads(sent.post_data) == {"ids": newest_first, "status": "acknowledged", "assignee": "ana",
                                          "reason": "seen on the nightly"}
    assert status == 200
    assert [(a["status"], a["assignee"], a["triaged_by"]) for a in body] == [("acknowledged", "ana", "browser-triager")] * len(newest_first)
    page.click("#token-forget")
    page.check("#pick-all")
    page.fill("#triage-form input[name='assignee']", "bo")
    page.fill("#triage-form input[name='reason']", "handed over")
    page.click("#triage-form button[type='submit']")
    assert "token" in page.locator("#triage-message").inner_text()


LONG_CASE, LONG_STEP = "gemm M=512,N=512,K=512,dtype=bf16", 3_000


@pytest.fixture(scope="module")
def long_history(seeded) -> dict:
    """A repository of 5,000 commits, each with a point of one case, a -8% step at 3,000 and a
    band spike at 1,234 (added once to the module's seeded transaction)."""
    from sqlalchemy import insert, select

    from perfbisect.service.models import Case, CasePoint, Repository, Revision

    session, n = seeded["session"], 5_000
    repo = Repository(name="longkern", url="https://github.com/acme/longkern.git", env={})
    session.add(repo)
    session.flush()
    session.execute(insert(Revision), [{"repository_id": repo.id, "sha": f"{i:040x}", "subject": f"change {i}",
                                        "pr_number": 5_000 + i, "position": i} for i in range(n)])
    case = Case(repository_id=repo.id, suite="gemm", target="longkern.gemm:matmul", name=LONG_CASE, params={})
    session.add(case)
    session.flush()
    ids = dict(session.execute(select(Revision.position, Revision.id).where(Revision.repository_id == repo.id)).all())
    points = []
    for i in range(n):
        value = 600.0 * (0.92 if i >= LONG_STEP else 1.0) * (1 + 0.002 * ((i * 7919) % 11 - 5))
        spread = 80.0 if i == 1_234 else 2.0
        points.append({"case_id": case.id, "revision_id": ids[i], "fingerprint": "f" * 16, "position": i, "trials": 3,
                       "value": value, "control_value": 680.0, "ratio": value / 680, "unit": "TFLOP/s",
                       "higher_is_better": True, "value_min": value - spread, "value_max": value + spread,
                       "ratio_min": (value - spread) / 680, "ratio_max": (value + spread) / 680})
    session.execute(insert(CasePoint), points)
    session.flush()
    return {"commits": n}


def test_a_long_history_is_drawn_bounded_and_a_zoom_fetches_the_window_in_full(page, long_history) -> None:
    started = time.perf_counter()
    page.goto(f"/dashboard/repositories/longkern?case={LONG_CASE}")
    page.wait_for_selector("figure.perf-chart[data-ready='true'] canvas")
    ready_s = time.perf_counter() - started
    fig = page.locator("figure.perf-chart")
    drawn = int(fig.get_attribute("data-points"))
    assert 1_000 <= drawn <= 1_400  # bounded, not 5,000
    fig.locator(".plot").focus()
    for _ in range(4):  # 1/16 of the range: about 310 commits, all of them measured
        page.keyboard.press("+")
    asked = time.perf_counter()
    # the window of all four presses, fetched: on a loaded machine the chart may settle (and
    # fetch) between two presses, and an earlier, wider window is drawn for a while
    page.wait_for_function("""() => {
        const fig = document.querySelector("figure.perf-chart");
        const [low, high] = (fig.dataset.window || "").split(":").map(Number);
        return fig.dataset.loading === "false" && high - low <= 400;
    }""")
    zoom_s = time.perf_counter() - asked - 0.12  # less the chart's wait for the zoom to settle
    low, high = map(int, fig.get_attribute("data-window").split(":"))
    assert high - low > 200
    # every commit of the window is drawn now (about 6% of them were in the overview), the
    # overview's points on either side
    assert int(fig.get_attribute("data-points")) >= drawn + (high - low) // 2
    page.keyboard.press("0")  # back to the whole range: the overview's points again, nothing fetched
    page.wait_for_selector("figure.perf-chart[data-window='']")
    assert int(fig.get_attribute("data-points")) == drawn
    legend = fig.locator("ul.legend").inner_text()
    assert "step" not in legend  # no culprit in this history; the bounded API keeps marks (tests/test_downsample.py)
    print(f"\nlong history (5,000 commits): ready {ready_s * 1000:.0f} ms after navigation, "
          f"{drawn} points drawn; zoomed window {low}..{high} fetched and drawn in {zoom_s * 1000:.0f} ms")
