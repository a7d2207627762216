"""The dashboard: pure history and SVG code on literal series, then the pages and the history
JSON through the API on rows inserted directly into the test database."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from perfbisect.dashboards.charts import case_chart
from perfbisect.dashboards.compare import case_verdict, compare_rows
from perfbisect.dashboards.history import (
    CulpritRow,
    FailedTrialRow,
    MeasurementRow,
    PointRow,
    build_histories,
    merge_commit_orders,
    steps_of,
)
from perfbisect.dashboards.links import repo_links
from perfbisect.service.bisect.model import stored_step_moved
from perfbisect.service.models import (
    Alert,
    AlertCase,
    AlertKind,
    AlertStatus,
    Case,
    Culprit,
    CulpritKind,
    Job,
    JobKind,
    JobStatus,
    Measurement,
    Repository,
    Revision,
    TrackedBranch,
    TrackTrigger,
    Trial,
    TrialStatus,
)
from perfbisect.service.trials.repository import refresh_case_points

SHAS = [f"{i:x}" * 40 for i in range(1, 7)]  # six fake 40-char shas: 1111..., 2222..., ...
GEMM = "gemm M=64,N=64,K=64,dtype=fp32"
TARGET = "minikern.gemm:matmul"


def row(sha: str, value: float | None, *, fp: str = "fpA", control: float | None = 100.0, case: str = GEMM,
        status: str = "ok", trial_status: str = "ok") -> MeasurementRow:
    return MeasurementRow(suite="gemm", target=TARGET, case=case, fingerprint=fp, sha=sha, job_id=1, value=value,
                          control_value=control, ratio=None if value is None else value / (control or 1),
                          unit="TFLOP/s", status=status, trial_status=trial_status)


# --- pure: ordering, series, steps ------------------------------------------------------------

def test_merge_commit_orders_keeps_each_range_and_places_the_rest_by_date() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    dates = {sha: t0 + timedelta(days=i) for i, sha in enumerate("abcdefg")}
    assert merge_commit_orders([["a", "b", "c", "d"], ["c", "d", "e", "f"]], dates) == list("abcdef")
    # a lone commit (a compare job's base) lands by date between the ranges' commits
    assert merge_commit_orders([["a", "c", "e"], ["d"]], dates) == ["a", "c", "d", "e"]
    # ranges win over dates: b is authored last but a range puts it first
    late = {**dates, "b": t0 + timedelta(days=30)}
    assert merge_commit_orders([["b", "c"], ["a"]], late)[:2] == ["a", "b"]


def test_merge_commit_orders_breaks_a_cycle_instead_of_dropping_commits() -> None:
    order = merge_commit_orders([["a", "b"], ["b", "a"], ["c"]])
    assert sorted(order) == ["a", "b", "c"]


def test_history_takes_per_revision_medians_one_line_per_fingerprint() -> None:
    rows = [row(SHAS[0], 10.0), row(SHAS[0], 12.0), row(SHAS[0], 30.0),  # median 12
            row(SHAS[2], 8.0, control=90.0),
            row(SHAS[1], 50.0, fp="fpB"),                                 # another machine: own line
            row(SHAS[1], 99.0, status="wrong_results"),                     # a failed result is not drawn
            row(SHAS[3], 99.0, trial_status="build_error"),
            row("f" * 40, 99.0)]                                            # commit outside the order
    [history] = build_histories(rows, [], SHAS[:4])
    assert [s.fingerprint for s in history.series] == ["fpA", "fpB"]
    a, b = history.series
    assert [(p.index, p.value, p.trials) for p in a.points] == [(0, 12.0, 3), (2, 8.0, 1)]
    assert a.points[1].control_value == 90.0
    assert [(p.index, p.value) for p in b.points] == [(1, 50.0)]
    assert history.units == ["TFLOP/s"]


def test_culprits_mark_their_cases_and_the_latest_job_wins() -> None:
    effects = {GEMM: {"rel": -0.08, "ci": [-0.1, -0.06], "before": 1.0, "after": 0.92}}
    targets = {GEMM: frozenset({TARGET})}
    culprits = [
        CulpritRow(job_id=1, kind="performance", first_sha=SHAS[2], last_sha=SHAS[2], effects=effects,
                   targets_by_case=targets, pr_number=12),
        CulpritRow(job_id=2, kind="performance", first_sha=SHAS[2], last_sha=SHAS[2],
                   effects={GEMM: {**effects[GEMM], "rel": -0.09}}, targets_by_case=targets),
        CulpritRow(job_id=2, kind="performance", first_sha=SHAS[3], last_sha=SHAS[4], effects=effects,
                   targets_by_case=targets),
        CulpritRow(job_id=2, kind="performance", first_sha=SHAS[1], last_sha=SHAS[1], effects=effects,
                   targets_by_case={GEMM: frozenset({"other.kernel:fn"})}),   # another target's case
        CulpritRow(job_id=3, kind="correctness", first_sha=SHAS[5], last_sha=SHAS[5], effects={},
                   targets_by_case=targets),
    ]
    [history] = build_histories([row(s, 10.0) for s in SHAS], culprits, SHAS)
    marks = [(m.kind, m.first_index, m.last_index, m.label, m.job_id) for m in history.steps]
    assert marks == [("performance", 2, 2, "-9.0%", 2), ("performance", 3, 4, "-8.0%", 2),
                     ("correctness", 5, 5, "wrong results", 3)]


def test_failed_trials_flag_the_commits_of_their_jobs_cases() -> None:
    targets = {GEMM: frozenset({TARGET})}
    failed = [FailedTrialRow(1, SHAS[1], "build_error", targets), FailedTrialRow(2, SHAS[1], "timeout", targets),
              FailedTrialRow(1, SHAS[2], "error", {GEMM: frozenset({"other.kernel:fn"})})]
    [history] = build_histories([row(SHAS[0], 10.0)], [], SHAS, failed)
    assert [(f.index, f.statuses) for f in history.failed] == [(1, ("build_error", "timeout"))]
    chart = case_chart([history], {})
    assert chart["failed"] == [{"x": 1, "sha": SHAS[1], "statuses": ["build_error", "timeout"]}]


# --- pure: chart data, links, compare --------------------------------------------------------

def test_case_chart_carries_each_fingerprint_with_its_spread_device_and_commit_links() -> None:
    rows = [row(SHAS[0], 600.0, control=700.0), row(SHAS[0], 620.0, control=700.0), row(SHAS[2], 550.0, control=700.0),
            row(SHAS[1], 640.0, fp="fpB", control=None)]
    [history] = build_histories(rows, [], SHAS[:3])
    links = repo_links("git@github.com:acme/kern.git")
    commits = {SHAS[0]: {"subject": "tune tiles", "pr_number": 3}}
    chart = case_chart([history], commits, {"fpA": "NVIDIA H200 · torch 2.11"}, links=links)
    assert [(s["label"], len(s["points"])) for s in chart["series"]] == [
        ("NVIDIA H200 · torch 2.11 (fp fpA)", 2), ("fp fpB", 1)]
    first = chart["series"][0]["points"][0]
    assert (first["value"], first["value_min"], first["value_max"], first["trials"]) == (610.0, 600.0, 620.0, 2)
    assert first["ratio_min"] == pytest.approx(600 / 700) and first["control"] == 700.0
    assert chart["commits"][SHAS[0]] == {"subject": "tune tiles", "pr_number": 3}
    assert chart["commit_url"].replace("{sha}", SHAS[0]) == f"https://github.com/acme/kern/commit/{SHAS[0]}"
    assert chart["pr_url"].replace("{pr}", "3") == "https://github.com/acme/kern/pull/3"
    assert chart["unit"] == "TFLOP/s" and chart["title"] == f"{GEMM} ({TARGET})"


@pytest.mark.parametrize("url, commit, pull", [
    ("https://github.com/acme/kern.git", "https://github.com/acme/kern/commit/abc", "https://github.com/acme/kern/pull/7"),
    ("git@gitlab.com:grp/sub/kern.git", "https://gitlab.com/grp/sub/kern/-/commit/abc",
     "https://gitlab.com/grp/sub/kern/-/merge_requests/7"),
    ("/srv/git/kern", None, None)])
def test_repo_links_follow_the_hosts_url_forms(url: str, commit, pull) -> None:
    links = repo_links(url)
    assert (links.commit("abc"), links.pull(7)) == (commit, pull)


def test_a_local_repository_s_commits_link_to_the_dashboard_s_commit_view() -> None:
    """Issue 42: a local path's commits had no link; they open the commit in the compare view."""
    assert repo_links("/srv/git/kern", "kern demo").commit("abc") == "/dashboard/repositories/kern%20demo/compare?head=abc"
    assert repo_links("/srv/git/kern", "kern").pull(7) is None
    assert repo_links("https://github.com/acme/kern.git", "kern").commit("abc") == "https://github.com/acme/kern/commit/abc"


def test_only_steps_whose_interval_passed_are_marked() -> None:
    assert stored_step_moved({"rel": -0.54, "ci": [-0.6, -0.5]}, 0.02)
    assert not stored_step_moved({"rel": 0.018, "ci": [-0.01, 0.05]}, 0.02)  # interval spans zero
    assert not stored_step_moved({"rel": 0.015, "ci": [0.01, 0.02]}, 0.02)   # below the minimum effect
    assert not stored_step_moved({"rel": 0.2, "ci": [0.11, 0.3], "confirmed": False}, 0.15)  # its verdict: not DIFFERENT
    other = "rmsnorm N=4096"
    effects = {GEMM: {"rel": -0.3, "ci": [-0.35, -0.25]}, other: {"rel": 0.018, "ci": [-0.01, 0.05]}}
    targets = {GEMM: frozenset({TARGET}), other: frozenset({TARGET})}
    culprit = CulpritRow(job_id=1, kind="performance", first_sha=SHAS[2], last_sha=SHAS[2], effects=effects,
                         targets_by_case=targets, min_effect=0.02)
    histories = build_histories([row(s, 10.0) for s in SHAS] + [row(s, 5.0, case=other) for s in SHAS], [culprit], SHAS)
    assert {h.case: len(h.steps) for h in histories} == {GEMM: 1, other: 0}


def test_compare_rows_say_better_worse_or_within_noise() -> None:
    def point(sha, ratio, lo, hi, case=GEMM, fp="a"):
        return PointRow(suite="gemm", target=TARGET, case=case, fingerprint=fp, sha=sha, position=0, trials=3,
                        value=ratio * 100, control_value=100.0, ratio=ratio, unit="TFLOP/s", ratio_min=lo, ratio_max=hi)
    base = [point(SHAS[0], 1.0, 0.98, 1.02), point(SHAS[0], 1.0, 0.98, 1.02, case="b"),
            point(SHAS[0], 1.0, 0.9, 1.1, case="c")]
    head = [point(SHAS[1], 0.8, 0.79, 0.81), point(SHAS[1], 1.2, 1.19, 1.21, case="b"),
            point(SHAS[1], 1.05, 1.0, 1.1, case="c"), point(SHAS[1], 1.0, 1.0, 1.0, case="d")]
    rows = {r.case: r for r in compare_rows(base, head)}
    assert rows[GEMM].change == pytest.approx(-0.2) and rows[GEMM].direction == "worse"
    assert rows["b"].direction == "better" and rows["c"].direction == "within noise"
    assert rows["d"].direction == "missing" and rows["d"].base is None


def test_case_verdict_is_the_bisect_s_three_way_answer_with_interval_and_noise() -> None:
    step = case_verdict([0.941, 0.947, 0.951], [0.75, 0.756, 0.763], min_effect=0.02)
    assert step.verdict == "different" and step.pvalue < 0.001
    assert step.ci[0] < step.rel < step.ci[1] < -0.02 and step.trials == (3, 3)
    assert all(0.004 < n < 0.01 for n in step.noise)  # each side's spread between trials
    flat = case_verdict([0.9, 0.91, 0.905], [0.902, 0.908, 0.904], min_effect=0.02)
    assert flat.verdict == "same" and -0.02 < flat.ci[0] < flat.ci[1] < 0.02
    assert case_verdict([0.9, 0.91, 0.905], [0.902, 0.908, 0.904], min_effect=0.001).verdict == "unknown"
    one_each = case_verdict([0.9], [0.7], min_effect=0.02)  # no noise estimate: cannot tell
    assert one_each.verdict == "unknown" and one_each.ci is None and one_each.noise == (None, None)
    assert case_verdict([], [0.7], min_effect=0.02) is None


# --- pages through the API --------------------------------------------------------------------

@pytest.fixture
def measured(session) -> dict:
    """A repository with a five-commit bisect: two fingerprints, a step at commit 3 (-8%)."""
    repo = Repository(name="kern", url="https://github.com/acme/kern.git", env={})
    session.add(repo)
    session.flush()
    t0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
    revs = [Revision(repository_id=repo.id, sha=SHAS[i], subject=f"commit {i} <b>", pr_number=10 + i,
                     authored_at=t0 + timedelta(hours=i), position=i) for i in range(5)]
    case = Case(repository_id=repo.id, suite="gemm", target=TARGET, name=GEMM, params={"M": 64, "N": 64, "K": 64})
    session.add_all([*revs, case])
    spec = {"good": "v1", "bad": "main", "cases": [{"suite": "gemm", "target": TARGET, "name": GEMM,
                                                    "params": case.params}], "min_effect": 0.02, "metric": "ratio"}
    job = Job(kind=JobKind.bisect, repository_id=repo.id, spec=spec, revision_shas=SHAS[:5],
              status=JobStatus.succeeded, progress={"revisions": 5, "measured": 3, "trials": 5, "rounds": 2})
    running = Job(kind=JobKind.compare, repository_id=repo.id, spec={**spec, "pr_number": 7},
                  revision_shas=[SHAS[4], SHAS[5]], status=JobStatus.running, progress={"revisions": 2, "measured": 0})
    session.add_all([job, running])
    session.flush()
    values = {0: [600.0, 610.0], 2: [605.0], 3: [556.0], 4: [560.0]}
    for i, vals in values.items():
        for v in vals:
            trial = Trial(job_id=job.id, revision_id=revs[i].id, status=TrialStatus.ok, fingerprint="f" * 64)
            trial.measurements = [Measurement(case_id=case.id, status="ok", value=v, control_value=700.0,
                                              ratio=v / 700.0, unit="TFLOP/s")]
            session.add(trial)
    other = Trial(job_id=job.id, revision_id=revs[1].id, status=TrialStatus.ok, fingerprint="e" * 64)
    other.measurements = [Measurement(case_id=case.id, status="ok", value=300.0, control_value=320.0, ratio=0.94,
                                      unit="TFLOP/s")]
    session.add_all([other, Trial(job_id=job.id, revision_id=revs[1].id, status=TrialStatus.build_error)])
    session.flush()
    for trial in session.scalars(select(Trial).where(Trial.job_id == job.id)):
        refresh_case_points(session, trial, [case.id])  # what storing a trial does
    session.add(Culprit(job_id=job.id, kind=CulpritKind.performance, first_sha=SHAS[3], last_sha=SHAS[3],
                        revision_id=revs[3].id, effects={GEMM: {"rel": -0.08, "ci": [-0.1, -0.06], "before": 0.865,
                                                                "after": 0.795, "unit": "TFLOP/s",
                                                                "before_value": 605.0, "after_value": 556.0}}))
    session.flush()
    return {"repo": repo, "job": job, "running": running}


def test_history_json_orders_commits_and_separates_fingerprints(client, measured) -> None:
    response = client.get("/api/history/kern")
    assert response.status_code == 200, response.text
    body = response.json()
    assert [c["sha"] for c in body["commits"]] == SHAS[:5]
    [case] = body["cases"]
    assert (case["suite"], case["target"], case["case"], case["units"]) == ("gemm", TARGET, GEMM, ["TFLOP/s"])
    lines = {s["fingerprint"]: [(p["sha"], p["value"], p["trials"]) for p in s["points"]] for s in case["series"]}
    assert lines == {"f" * 64: [(SHAS[0], 605.0, 2), (SHAS[2], 605.0, 1), (SHAS[3], 556.0, 1), (SHAS[4], 560.0, 1)],
                     "e" * 64: [(SHAS[1], 300.0, 1)]}
    assert case["failed"] == [{"sha": SHAS[1], "index": 1, "statuses": ["build_error"]}]
    first = next(s for s in case["series"] if s["fingerprint"] == "f" * 64)["points"][0]  # the trials' spread, kept in case_points as trials are stored
    assert (first["value_min"], first["value_max"]) == (600.0, 610.0)
    assert first["ratio_min"] == pytest.approx(600 / 700) and first["ratio_max"] == pytest.approx(610 / 700)
    [step] = case["steps"]
    assert (step["last_sha"], step["exact"], step["rel"], step["pr_number"]) == (SHAS[3], True, -0.08, 13)
    assert client.get("/api/history/kern", params={"case": "gemm M=1,N=1,K=1,dtype=fp32"}).json()["cases"] == []
    recent = client.get("/api/history/kern", params={"last": 2}).json()
    assert [c["sha"] for c in recent["commits"]] == SHAS[3:5]
    assert [s["fingerprint"] for s in recent["cases"][0]["series"]] == ["f" * 64]
    window = client.get("/api/history/kern", params={"start": 3, "end": 4}).json()
    assert [c["sha"] for c in window["commits"]] == SHAS[3:5] and window["cases"][0]["steps"][0]["last_sha"] == SHAS[3]
    after = client.get("/api/history/kern", params={"start": 4}).json()["cases"][0]
    assert after["steps"] == [] and after["failed"] == []
    assert client.get("/api/history/kern", params={"start": 4, "end": 3}).status_code == 422
    listed = client.get("/api/history").json()
    assert listed == [{"repository": "kern", "url": "https://github.com/acme/kern.git",
                       "cases": [{"suite": "gemm", "target": TARGET, "case": GEMM}]}]


def test_overview_page_summarises_each_case_without_every_point(client, measured) -> None:
    response = client.get("/dashboard/repositories/kern")
    assert response.status_code == 200
    html = response.text
    assert html.count('<svg class="spark"') == 1 and GEMM in html and "-8.0%" in html
    assert "case=gemm%20M%3D64%2CN%3D64%2CK%3D64%2Cdtype%3Dfp32" in html  # a link to the case's history
    body = client.get("/api/history/kern/overview", params={"points": 3}).json()
    [row] = body["cases"]
    # the line with the most points stands for the case: its newest commit and value
    assert (row["latest_sha"], row["latest_value"], row["points"]) == (SHAS[4], 560.0, 3)
    assert row["latest_step"]["last_sha"] == SHAS[3] and row["latest_step"]["rel"] == -0.08


def _chart_specs(html: str) -> list[dict]:
    return [json.loads(m) for m in re.findall(r'<script type="application/json">(.*?)</script>', html, re.S)]


def test_history_page_embeds_the_chart_with_the_culprit_and_links(client, measured) -> None:
    response = client.get("/dashboard/repositories/kern", params={"case": GEMM})
    assert response.status_code == 200
    html = response.text
    [spec] = _chart_specs(html)
    assert len(spec["series"]) == 2  # two fingerprints
    assert [(m["label"], m["sha"]) for m in spec["steps"]] == [("-8.0%", SHAS[3])]
    assert [f["sha"] for f in spec["failed"]] == [SHAS[1]]  # the build_error trial at commit 1
    assert spec["commits"][SHAS[3]]["subject"] == "commit 3 <b>"  # escaped by tojson inside the script
    assert "commit 3 <b>" not in html and f"https://github.com/acme/kern/commit/{SHAS[3]}" in html
    assert "https://github.com/acme/kern/pull/13" in html
    assert "cdn" not in html.lower() and all(src.startswith("/static/") for src in re.findall(r'<script src="([^"]+)"', html))


def test_stalled_job_stops_the_reload_and_says_so(client, measured, session) -> None:
    running = measured["running"]
    long_ago = datetime.now(timezone.utc) - timedelta(hours=2)
    running.created_at = running.started_at = long_ago
    trial = Trial(job_id=running.id, revision_id=session.scalars(select(Revision.id)).first(), status=TrialStatus.ok,
                  started_at=long_ago, finished_at=long_ago + timedelta(minutes=5))
    session.add(trial)
    session.flush()
    html = client.get(f"/dashboard/jobs/{running.id}").text
    assert 'data-refresh="stalled"' in html and "may be stalled" in html
    trial.finished_at = datetime.now(timezone.utc) - timedelta(minutes=1)  # a slow job, not a stalled one
    session.flush()
    assert 'data-refresh="live"' in client.get(f"/dashboard/jobs/{running.id}").text


def test_a_running_job_s_page_and_api_say_what_it_builds_and_an_eta_with_the_builds(client, measured, session) -> None:
    """Issue 45: the job page and the API's progress carry the build phase and the ETA the CLI
    prints, builds still expected included (`progress.eta_s`)."""
    running = measured["running"]
    running.started_at = datetime.now(timezone.utc) - timedelta(seconds=160)
    running.progress = {**running.progress, "trials": 2, "expected_trials": 8, "build_s_done": 100.0,
                        "expected_build_s": 3600.0, "building": [{"sha": "3f2a1b9c0d11", "est_s": 3600.0}]}
    revision = session.scalars(select(Revision.id)).first()
    session.add_all([Trial(job_id=running.id, revision_id=revision, status=TrialStatus.ok) for _ in range(2)])
    session.flush()
    html = client.get(f"/dashboard/jobs/{running.id}").text
    assert "building <code>3f2a1b</code> (est. 60m)" in html
    eta = re.search(r"ETA (\d+)m \(60m of builds\)", html)
    assert eta and 61 <= int(eta.group(1)) <= 63  # 6 trials at 30 s each (160 s less 100 s building, over 2) + 60m
    body = client.get(f"/api/jobs/{running.id}").json()
    assert 3780 <= body["progress"]["eta_s"] <= 3800
    assert "eta_s" not in client.get(f"/api/jobs/{measured['job'].id}").json()["progress"]  # finished


def test_errors_are_html_for_browsers_and_json_for_api_clients(client, measured) -> None:
    browser = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
    page = client.get("/dashboard/repositories/nope", headers=browser)
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert "<main" in page.text and "no repository &#39;nope&#39; is registered" in page.text
    missing = client.get("/no/such/page", headers=browser)
    assert missing.status_code == 404 and "<h1>404" in missing.text
    invalid = client.get("/dashboard/jobs/abc", headers=browser)
    assert invalid.status_code == 422 and "text/html" in invalid.headers["content-type"]
    assert client.get("/no/such/page").json()["detail"] == "Not Found"
    assert client.get("/dashboard/jobs/abc").json()["detail"][0]["loc"] == ["path", "job_id"]


@pytest.mark.parametrize("accept, html", [
    ("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", True),  # a browser's navigation
    ("*/*", False), ("", False), ("application/json", False),
    ("application/json, text/html;q=0.5", False), ("text/html;q=0.9, application/json;q=0.2", True)])
def test_html_only_when_the_client_prefers_it(accept: str, html: bool) -> None:
    from starlette.requests import Request

    from perfbisect.dashboards.pages import prefers_html
    request = Request({"type": "http", "headers": [(b"accept", accept.encode())] if accept else []})
    assert prefers_html(request) is html


def test_api_docs_are_served_from_the_package(client) -> None:
    for path in ("/docs", "/redoc"):
        html = client.get(path).text
        assert "/static/vendor/" in html and "cdn" not in html.lower() and "fonts.googleapis" not in html
    assert client.get("/static/vendor/swagger-ui/swagger-ui-bundle.js").status_code == 200
    assert client.get("/static/vendor/redoc/redoc.standalone.js").status_code == 200
    assert client.get("/static/vendor/uplot/uPlot.iife.min.js").status_code == 200


def test_alerts_list_only_passed_steps_with_links(client, measured, session) -> None:
    job = measured["job"]
    session.add(Culprit(job_id=job.id, kind=CulpritKind.performance, first_sha=SHAS[1], last_sha=SHAS[1],
                        effects={GEMM: {"rel": 0.018, "ci": [-0.01, 0.05]}}))  # spans zero: no alert
    session.flush()
    html = client.get("/dashboard/regressions").text
    assert html.count("<tr>") == 2  # header + the -8% step
    assert "regression" in html and "-8.0% [-10.0%, -6.0%]" in html and "https://github.com/acme/kern/pull/13" in html
    assert '<span class="muted">none</span>' in html  # not an alert's bisect: no made-up triage state
    assert "No regressions" in client.get("/dashboard/regressions", params={"kind": "improvement"}).text
    old_link = client.get("/dashboard/alerts", params={"kind": "wrong results"}, follow_redirects=False)
    assert old_link.status_code == 307 and old_link.headers["location"].startswith("/dashboard/regressions?")


@pytest.fixture
def alerted(session, measured) -> dict:
    """main of `kern` tracked on push with one regression alert bisected by the measured job."""
    case = session.scalars(select(Case).where(Case.repository_id == measured["repo"].id)).one()
    tracked = TrackedBranch(repository_id=measured["repo"].id, branch="main", device_class="h200", cases=[],
                            trigger=TrackTrigger.schedule, interval_s=3600,
                            last_run_at=datetime(2026, 1, 2, 10, tzinfo=timezone.utc), last_sha=SHAS[4])
    session.add(tracked)
    session.flush()
    alert = Alert(tracked_branch_id=tracked.id, kind=AlertKind.regression, status=AlertStatus.new, magnitude=0.08,
                  before_sha=SHAS[2], first_sha=SHAS[3], last_sha=SHAS[3], culprit_first_sha=SHAS[3],
                  culprit_last_sha=SHAS[3], bisect_job_id=measured["job"].id, comments={}, detections=1)
    alert.cases = [AlertCase(case=case, kind=AlertKind.regression, rel=-0.08, pvalue=0.001, mean_before=0.86,
                             mean_after=0.79)]
    session.add(alert)
    session.flush()
    measured["job"].spec = measured["job"].spec.updated(alert_id=alert.id)
    session.flush()
    return {**measured, "tracked": tracked, "alert": alert}


def test_alerts_page_shows_triage_who_when_assignee_issue_and_links_both_ways(client, alerted) -> None:
    alert, job = alerted["alert"], alerted["job"]
    triaged = client.patch(f"/api/alerts/{alert.id}", json={"status": "investigating", "assignee": "ana",
                                                            "bug": "https://github.com/acme/kern/issues/5"})
    assert triaged.status_code == 200, triaged.text
    html = client.get("/dashboard/alerts", params={"repository": "kern", "branch": "main"}).text
    assert f'href="/dashboard/alerts/{alert.id}"' in html and "investigating" in html
    assert client.principal.name in html and "ana" in html and 'href="https://github.com/acme/kern/issues/5"' in html
    assert f'href="/dashboard/jobs/{job.id}"' in html  # its bisect
    assert f"https://github.com/acme/kern/commit/{SHAS[3]}" in html  # its culprit
    assert "/dashboard/repositories/kern?case=" in html  # its chart
    assert 'class="pick"' in html and 'id="token-form"' in html and "/static/triage.js" in html
    assert "No alerts match" in client.get("/dashboard/alerts", params={"status": "fixed"}).text
    assert client.get("/dashboard/alerts", params={"kind": "sideways"}).status_code == 422
    detail = client.get(f"/dashboard/alerts/{alert.id}").text
    assert "new" in detail and "investigating" in detail and "ana" in detail  # the history table
    assert f'data-alert-id="{alert.id}"' in detail
    assert client.get("/dashboard/alerts/999999").status_code == 404
    # and back: the job, the chart's step list and the regressions list lead to the alert
    assert f'href="/dashboard/alerts/{alert.id}"' in client.get(f"/dashboard/jobs/{job.id}").text
    chart = client.get("/dashboard/repositories/kern", params={"case": GEMM}).text
    assert f'href="/dashboard/alerts/{alert.id}"' in chart
    assert f'href="/dashboard/alerts/{alert.id}"' in client.get("/dashboard/regressions").text


def test_tracked_branches_page_lists_triggers_runs_and_alerts(client, alerted) -> None:
    html = client.get("/dashboard/tracked-branches").text
    assert "kern" in html and "every 1 h" in html and "2026-01-02 10:00" in html and SHAS[4][:10] in html
    assert "due now" in html  # an hour after its last run, long ago
    assert "1 alerts" in html and "1 new" in html and "branch=main" in html


def test_an_inconclusive_jobs_confirmed_culprits_reach_the_regressions_page(client, measured, session) -> None:
    job = measured["job"]
    job.status = JobStatus.inconclusive  # another case could not be decided: its culprits still stand
    session.add(Culprit(job_id=job.id, kind=CulpritKind.correctness, first_sha=SHAS[4], last_sha=SHAS[4],
                        effects={GEMM: {"error": 0.5, "tolerance": 0.01, "message": "relative error 0.5"}}))
    session.flush()
    html = client.get("/dashboard/regressions").text
    assert "-8.0% [-10.0%, -6.0%]" in html and "wrong results" in html
    assert html.count("<tr>") == 3 and "every case of the job" not in html  # the wrong row names its case


def test_a_correctness_mark_lands_only_on_the_cases_that_were_wrong() -> None:
    other = "rmsnorm M=64,N=64,dtype=fp32"
    targets = {GEMM: frozenset({TARGET}), other: frozenset({"minikern.norm:rmsnorm"})}
    wrong = CulpritRow(job_id=1, kind="correctness", first_sha=SHAS[2], last_sha=SHAS[2],
                       effects={GEMM: {"error": 0.5, "tolerance": 0.01}}, targets_by_case=targets)
    legacy = CulpritRow(job_id=2, kind="correctness", first_sha=SHAS[3], last_sha=SHAS[3], effects={},
                        targets_by_case=targets)
    marks = steps_of([wrong, legacy], SHAS)
    assert [m.job_id for m in marks[(TARGET, GEMM)]] == [1, 2]
    assert [m.job_id for m in marks[("minikern.norm:rmsnorm", other)]] == [2]  # stored without cases: every case


def test_wrong_results_read_as_fixed_once_a_later_head_passes_or_the_bisect_saw_the_fix() -> None:
    targets = {GEMM: frozenset({TARGET})}
    later = CulpritRow(job_id=1, kind="correctness", first_sha=SHAS[2], last_sha=SHAS[2],
                       effects={GEMM: {"error": 0.5, "tolerance": 0.01}}, targets_by_case=targets)
    bisected = CulpritRow(job_id=2, kind="correctness", first_sha=SHAS[1], last_sha=SHAS[1], effects={GEMM: {}},
                          targets_by_case=targets, fixed_sha=SHAS[2])
    # heads with right results at 0 and 3 (1 and 2 were wrong: no point)
    [history] = build_histories([row(SHAS[0], 10.0), row(SHAS[3], 10.0)], [later, bisected], SHAS[:4])
    assert [(m.last_sha, m.label) for m in history.steps] == [
        (SHAS[1], f"wrong results (fixed at {SHAS[2][:10]})"), (SHAS[2], f"wrong results (fixed at {SHAS[3][:10]})")]
    [still] = build_histories([row(SHAS[0], 10.0)], [later], SHAS[:4])
    assert [m.label for m in still.steps] == ["wrong results"]  # nothing passed since


def test_fixed_wrong_results_read_as_fixed_on_the_overview_and_the_case_page(client, measured, session) -> None:
    session.add(Culprit(job_id=measured["job"].id, kind=CulpritKind.correctness, first_sha=SHAS[3], last_sha=SHAS[3],
                        effects={GEMM: {"error": 0.5, "tolerance": 0.01}}))
    session.flush()
    fixed = f"wrong results (fixed at {SHAS[4][:10]})"  # commit 4 measured right results again
    assert f"{fixed} at" in client.get("/dashboard/repositories/kern").text
    [spec] = _chart_specs(client.get("/dashboard/repositories/kern", params={"case": GEMM}).text)
    assert [m["label"] for m in spec["steps"]] == ["-8.0%", fixed]
    [case] = client.get("/api/history/kern").json()["cases"]
    assert case["steps"][-1]["fixed_sha"] == SHAS[4]


def test_compare_view_reads_two_stored_revisions(client, measured) -> None:
    html = client.get("/dashboard/repositories/kern/compare", params={"base": SHAS[2][:8], "head": SHAS[3]}).text
    assert "0.864" in html and "0.794" in html and "-8.1%" in html  # ratios to the control
    assert "verdict at 2.0%" in html and "unknown" in html and "1 vs 1 trials" in html  # one trial a side
    steady = client.get("/dashboard/repositories/kern/compare", params={"base": SHAS[0], "head": SHAS[0],
                                                                          "min_effect": 0.05}).text
    assert "verdict at 5.0%" in steady and "same" in steady and "±1.2% / ±1.2%" in steady  # 600 and 610
    assert client.get("/dashboard/repositories/kern/compare", params={"min_effect": 2}).status_code == 422
    assert client.get("/dashboard/repositories/kern/compare", params={"base": "zzzz", "head": SHAS[3]}).status_code == 404
    chooser = client.get("/dashboard/repositories/kern/compare").text
    assert chooser.count(f'<option value="{SHAS[0]}"') == 2  # base and head selects


def test_the_compare_form_defaults_to_the_newest_job_s_minimum_effect(client, session, measured) -> None:
    """Issue 42: the form offered 2% while the repository's jobs asked 15%."""
    spec = {**measured["job"].spec.model_dump(mode="json"), "min_effect": 0.15}
    session.add(Job(kind=JobKind.bisect, repository_id=measured["repo"].id, spec=spec, revision_shas=SHAS[:5],
                    status=JobStatus.succeeded, progress={}))
    session.flush()
    chooser = client.get("/dashboard/repositories/kern/compare").text
    assert 'name="min_effect" min="0.001" max="0.99" step="0.001" value="0.15"' in chooser
    head_measured = client.get("/dashboard/repositories/kern/compare", params={"base": SHAS[2], "head": SHAS[3]}).text
    assert "verdict at 2.0%" in head_measured  # the job that measured the head asked 2%


def test_a_case_s_history_downloads_as_csv_and_json_from_its_page(client, measured) -> None:
    """Issue 42: the page links a download of the series it shows, as CSV and as JSON."""
    page = client.get("/dashboard/repositories/kern", params={"case": GEMM}).text
    query = "case=gemm+M%3D64%2CN%3D64%2CK%3D64%2Cdtype%3Dfp32"
    assert f'<a href="/api/history/kern/download?{query}&amp;format=csv" download>download CSV</a>' in page
    assert f'<a href="/api/history/kern/download?{query}&amp;format=json" download>download JSON</a>' in page
    csv_file = client.get(f"/api/history/kern/download?{query}&format=csv")
    assert csv_file.status_code == 200
    assert csv_file.headers["content-type"] == "text/csv; charset=utf-8"
    assert csv_file.headers["content-disposition"] == \
        'attachment; filename="kern-history-gemm_M=64,N=64,K=64,dtype=fp32.csv"'
    rows = csv_file.text.splitlines()
    assert rows[0] == ("suite,target,case,fingerprint,unit,subject,pr_number,sha,index,value,control_value,ratio,"
                       "trials,value_min,value_max,ratio_min,ratio_max")
    assert (f'gemm,{TARGET},"{GEMM}",{"f" * 64},TFLOP/s,commit 0 <b>,10,{SHAS[0]},0,605.0,700.0,'
            f"{605 / 700!r},2,600.0,610.0,{600 / 700!r},{610 / 700!r}") in rows
    assert len(rows) == 1 + 5  # four revisions on one device, one on the other
    json_file = client.get(f"/api/history/kern/download?{query}&format=json")
    assert json_file.headers["content-type"] == "application/json"
    assert json_file.headers["content-disposition"].endswith('.json"')
    assert json_file.json() == client.get(f"/api/history/kern?{query}").json()
    assert client.get("/api/history/kern/download", params={"format": "xls"}).status_code == 422
    assert client.get("/api/history/nope/download").status_code == 404


def test_a_commit_alone_is_compared_with_the_measured_revision_before_it(client, session, measured) -> None:
    """The commit view a local repository's commit links open: head only, base the revision before."""
    measured["repo"].url = "/srv/git/kern"
    session.flush()
    html = client.get("/dashboard/repositories/kern/compare", params={"head": SHAS[3]}).text
    assert f'<option value="{SHAS[2]}" selected>' in html and f'<option value="{SHAS[3]}" selected>' in html
    assert "-8.1%" in html  # 605 -> 556 on the device measured at both
    assert f'<a href="/dashboard/repositories/kern/compare?head={SHAS[3]}"><code>{SHAS[3][:10]}</code></a>' in html
    first = client.get("/dashboard/repositories/kern/compare", params={"head": SHAS[0]}).text
    assert first.count(" selected>") == 1  # the head: nothing was measured before the first commit


def test_unknown_repository_or_job_is_404(client, measured) -> None:
    assert client.get("/dashboard/repositories/nope").status_code == 404
    assert client.get("/api/history/nope").json()["detail"] == "no repository 'nope' is registered"
    assert client.get("/dashboard/jobs/999999").status_code == 404


def test_job_page_shows_culprit_table_and_per_revision_medians(client, measured) -> None:
    job = measured["job"]
    html = client.get(f"/dashboard/jobs/{job.id}").text
    assert f"Job #{job.id}: bisect" in html and "status-succeeded" in html
    assert SHAS[3][:10] in html and "#13" in html and "605.0 -&gt; 556.0 TFLOP/s" in html
    assert "-8.0% [-10.0, -6.0]" in html
    assert "<details open>" in html
    medians = re.search(r"per-revision medians \((\d+) revisions\)", html)
    assert medians and medians.group(1) == "5"
    assert "build_error 1" in html and "ok 6" in html
    assert "data-refresh" not in html  # finished: no auto-refresh


def test_jobs_list_shows_progress_and_refreshes_while_running(client, measured) -> None:
    html = client.get("/dashboard/jobs").text
    for job in (measured["job"], measured["running"]):
        assert f'href="/dashboard/jobs/{job.id}"' in html
    assert '<progress value="3" max="5"' in html and "(PR #7)" in html
    assert 'data-refresh="live"' in html  # static/refresh.js reloads it (and gives up when nothing changes)
    running_only = client.get("/dashboard/jobs", params={"status": "succeeded"}).text
    assert f'/dashboard/jobs/{measured["running"].id}"' not in running_only
    index = client.get("/dashboard").text
    assert "/dashboard/repositories/kern" in index and GEMM in index


def test_the_overview_s_newest_points_are_the_same_with_or_without_lateral(session, measured, monkeypatch) -> None:
    # PostgreSQL reads each case's newest points by a LATERAL index scan; SQLite (the embedded
    # default) by a window over the repository's points. Both answer the same rows.
    from perfbisect.dashboards import repository

    repo = repository.repository_by_name(session, "kern")
    lateral = repository.latest_points(session, repo.id, per_case=3)
    monkeypatch.setattr(type(session.get_bind().dialect), "name", "sqlite")
    windowed = repository.latest_points(session, repo.id, per_case=3)
    assert lateral == windowed and {p.sha for p in lateral} == set(SHAS[2:5])


def test_revision_meta_for_many_shas_reads_the_repository_instead_of_an_in_list(session, measured, monkeypatch) -> None:
    from perfbisect.dashboards import repository

    repo = repository.repository_by_name(session, "kern")
    small = repository.revision_meta(session, repo.id, SHAS[1:4])
    monkeypatch.setattr(repository, "META_IN_LIMIT", 1)
    assert repository.revision_meta(session, repo.id, SHAS[1:4]) == small and set(small) == set(SHAS[1:4])


def test_a_fingerprint_s_device_is_its_newest_trial_with_a_provenance(session, measured) -> None:
    from sqlalchemy import null

    from perfbisect.dashboards.repository import devices_of

    job_id, revision_id = session.execute(select(Trial.job_id, Trial.revision_id)).first()
    h100, h200 = {"name": "NVIDIA H100"}, {"name": "NVIDIA H200"}
    session.add_all([Trial(job_id=job_id, revision_id=revision_id, status=TrialStatus.ok, fingerprint="a" * 64,
                           provenance=prov) for prov in (h100, h200, null())])  # the newest has none
    session.add(Trial(job_id=job_id, revision_id=revision_id, status=TrialStatus.ok, fingerprint="b" * 64))
    session.flush()
    assert devices_of(session, ["a" * 64, "b" * 64, "", "c" * 64]) == {"a" * 64: h200}
    assert devices_of(session, []) == {}


def test_history_api_downsamples_to_a_width_and_windows_by_commit_index(client, measured) -> None:
    full = client.get("/api/history/kern").json()
    [series] = [s for s in full["cases"][0]["series"] if s["fingerprint"] == "f" * 64]
    assert (series["total"], series["sent"]) == (4, 4)
    body = client.get("/api/history/kern", params={"width": 16}).json()
    assert body["encoding"] == "columns" and body["commits"]["sha"] == SHAS[:5]
    line = next(s for s in body["cases"][0]["series"] if s["fingerprint"] == "f" * 64)
    assert (line["total"], line["sent"]) == (4, 4)
    assert line["points"]["index"] == [0, 2, 3, 4] and line["points"]["value"] == [605.0, 605.0, 556.0, 560.0]
    assert line["points"]["ratio_min"][0] == round(600 / 700, 6)  # 6 significant digits
    assert body["cases"][0]["steps"][0]["last_index"] == 3
    window = client.get("/api/history/kern", params={"width": 16, "start": 2, "end": 3}).json()
    assert window["commits"]["sha"] == SHAS[2:4]
    backwards = client.get("/api/history/kern", params={"start": 3, "end": 2})
    assert backwards.status_code == 422 and "end must not be before start" in backwards.text
    assert client.get("/api/history/kern", params={"width": 1}).status_code == 422


def test_history_and_overview_answer_304_while_nothing_changed(client, measured) -> None:
    for path in ("/api/history/kern", "/api/history/kern/overview"):
        first = client.get(path)
        tag = first.headers["etag"]
        again = client.get(path, headers={"If-None-Match": tag})
        assert again.status_code == 304 and again.content == b""
        assert client.get(path, headers={"If-None-Match": '"other"'}).status_code == 200
    tag = client.get("/api/history/kern").headers["etag"]
    assert client.get("/api/history/kern", params={"last": 2}).headers["etag"] != tag  # the query is in the body


def test_history_columns_are_the_same_on_postgresql_and_on_the_sqlite_path(session, measured, monkeypatch) -> None:
    # PostgreSQL aggregates each series into binary arrays read by numpy; SQLite (the embedded
    # default) reads the rows. Both give the same columns, in position order.
    from perfbisect.dashboards import columns, repository

    repo = repository.repository_by_name(session, "kern")
    case_ids = sorted(repository.case_keys(session, repo.id))
    arrays, _ = columns.read_series(session, case_ids)
    ids = arrays[1].ints["revision_id"]
    metas = columns.revisions_by_id(session, ids)
    versions = columns.series_digest(session, case_ids)  # no point read: their versions
    monkeypatch.setattr(type(session.get_bind().dialect), "name", "sqlite")
    rows, _ = columns.read_series(session, case_ids)
    assert columns.series_digest(session, case_ids)[0] == versions[0] == case_ids[:1]
    assert columns.series_digest(session, case_ids, 5)[0] == []
    assert columns.revisions_by_id(session, ids) == metas and [metas[i].sha for i in ids.tolist()] == \
        [SHAS[0], SHAS[2], SHAS[3], SHAS[4]]
    assert [(s.case_id, s.fingerprint, s.unit, s.higher_is_better, len(s)) for s in arrays] == \
        [(s.case_id, s.fingerprint, s.unit, s.higher_is_better, len(s)) for s in rows] == \
        [(case_ids[0], "e" * 64, "TFLOP/s", True, 1), (case_ids[0], "f" * 64, "TFLOP/s", True, 4)]
    for a, b in zip(arrays, rows):
        assert all((a.ints[c] == b.ints[c]).all() for c in columns.INTS)
        assert all(((a.floats[c] == b.floats[c]) | (a.floats[c] != a.floats[c])).all() for c in columns.FLOATS)
    assert arrays[1].ints["position"].tolist() == [0, 2, 3, 4] and arrays[1].floats["value"].tolist()[0] == 605.0
    assert columns.read_series(session, case_ids, 3, 3)[0][0].ints["position"].tolist() == [3]


def test_the_bounded_history_s_etag_follows_a_point_rewritten_in_place(client, session, measured) -> None:
    # The ETag of /api/history?width= is a digest of the reads, known before the body is built:
    # a case point rewritten in place (same id: another trial of the revision landed) or a new
    # culprit must change it.
    from sqlalchemy import update

    from perfbisect.service.models import CasePoint

    params = {"width": 16}
    tag = client.get("/api/history/kern", params=params).headers["etag"]
    assert client.get("/api/history/kern", params=params, headers={"If-None-Match": tag}).status_code == 304
    assert client.get("/api/history/kern", params={"width": 17}).headers["etag"] != tag
    session.execute(update(CasePoint).where(CasePoint.position == 2).values(value=606.0))
    session.flush()
    changed = client.get("/api/history/kern", params=params, headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    line = next(s for s in changed.json()["cases"][0]["series"] if s["fingerprint"] == "f" * 64)
    assert line["points"]["value"][1] == 606.0
    tag = changed.headers["etag"]
    job = measured["job"]
    session.add(Culprit(job_id=job.id, kind=CulpritKind.correctness, first_sha=SHAS[4], last_sha=SHAS[4], effects={}))
    session.flush()
    assert client.get("/api/history/kern", params=params, headers={"If-None-Match": tag}).status_code == 200


def test_a_304_reads_no_point_and_builds_no_body(client, measured, monkeypatch) -> None:
    # The ETags of the overview and the bounded history are digests of the points' versions and
    # the marks, known before anything is read or built: a matching If-None-Match is answered
    # without reading the points or building the body, and a request without one is sent the
    # body built before (in this process) for the same ETag.
    from perfbisect.dashboards import columns, views

    requests = (("/api/history/kern/overview", None), ("/api/history/kern", {"width": 16}))
    first = {path: client.get(path, params=params) for path, params in requests}

    def fail(*args, **kwargs):
        raise AssertionError("the body was built again")

    monkeypatch.setattr(views, "repository_overview", fail)
    monkeypatch.setattr(columns, "read_series", fail)
    for path, params in requests:
        again = client.get(path, params=params, headers={"If-None-Match": first[path].headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        cached = client.get(path, params=params)
        assert cached.status_code == 200 and cached.content == first[path].content
        assert cached.headers["etag"] == first[path].headers["etag"]


def test_the_overview_s_etag_and_body_follow_a_newest_point_rewritten_in_place(client, session, measured) -> None:
    # The overview's ETag is the newest points' versions (a new one on every write, a trigger)
    # and the culprits: a point rewritten in place or a new culprit gives a new ETag and a body
    # built again, not the one built before.
    from sqlalchemy import update

    from perfbisect.service.models import CasePoint

    first = client.get("/api/history/kern/overview")
    tag = first.headers["etag"]
    assert first.json()["cases"][0]["latest_value"] == 560.0
    assert client.get("/api/history/kern/overview", headers={"If-None-Match": tag}).status_code == 304
    session.execute(update(CasePoint).where(CasePoint.position == 4).values(value=561.0))
    session.flush()
    changed = client.get("/api/history/kern/overview", headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert changed.json()["cases"][0]["latest_value"] == 561.0
    tag = changed.headers["etag"]
    session.add(Culprit(job_id=measured["job"].id, kind=CulpritKind.correctness, first_sha=SHAS[4], last_sha=SHAS[4],
                        effects={GEMM: {}}))
    session.flush()
    again = client.get("/api/history/kern/overview", headers={"If-None-Match": tag})
    assert again.status_code == 200 and again.json()["cases"][0]["latest_step"]["last_sha"] == SHAS[4]


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_the_marks_digest_follows_culprits_failed_trials_and_their_commits(session, measured, monkeypatch,
                                                                          dialect) -> None:
    # What the ETags read instead of the marks: on PostgreSQL one statement, elsewhere the rows.
    from perfbisect.dashboards import repository

    monkeypatch.setattr(type(session.get_bind().dialect), "name", dialect)
    repo_id, job = measured["repo"].id, measured["job"]
    before = repository.marks_digest(session, repo_id)
    assert repository.marks_digest(session, repo_id) == before
    revision = session.scalars(select(Revision).where(Revision.sha == SHAS[4])).one()
    session.add(Trial(job_id=job.id, revision_id=revision.id, status=TrialStatus.timeout))
    session.flush()
    failed = repository.marks_digest(session, repo_id)
    assert failed != before
    revision.subject = "a culprit's commit renamed"  # not a culprit's commit: the marks are the same
    session.flush()
    assert repository.marks_digest(session, repo_id) == failed
    culprit = session.scalars(select(Culprit).where(Culprit.job_id == job.id)).one()
    culprit.effects = {GEMM: {**culprit.effects[GEMM], "rel": -0.09}}
    session.flush()
    assert repository.marks_digest(session, repo_id) != failed
