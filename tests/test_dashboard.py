"""The dashboard: pure history and SVG code on literal series, then the pages and the history
JSON through the API on rows inserted directly into the test database."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select

from dashboards.charts import Chart, ChartLine, ChartMark, ChartPoint, case_chart, nice_ticks, render_svg
from dashboards.history import CulpritRow, FailedTrialRow, MeasurementRow, build_histories, merge_commit_orders
from service.trials.repository import refresh_case_points
from service.models import (Case, Culprit, CulpritKind, Job, JobKind, JobStatus, Measurement, Repository, Revision,
                            Trial, TrialStatus)

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
    svg = render_svg(case_chart(history))
    assert svg.count('class="flag"') == 1 and "build_error, timeout" in svg


# --- pure: SVG --------------------------------------------------------------------------------

def test_nice_ticks_cover_the_range_with_round_steps() -> None:
    assert nice_ticks(558, 641) == [550, 575, 600, 625, 650]
    assert nice_ticks(0.92, 1.04) == [0.9, 0.95, 1.0, 1.05]
    flat = nice_ticks(5.0, 5.0)
    assert flat[0] < 5.0 < flat[-1]


def _polylines(svg: str) -> list[list[tuple[float, float]]]:
    found = re.findall(r'<polyline[^>]*points="([^"]+)"', svg)
    return [[tuple(map(float, xy.split(","))) for xy in pts.split()] for pts in found]


def test_render_svg_places_points_marks_and_escapes_text() -> None:
    chart = Chart(
        title="gemm <8192>",
        lines=(ChartLine("target", (ChartPoint(0, 600, "abc & <b>"), ChartPoint(10, 650, "x"))),
               ChartLine("control", (ChartPoint(0, 700, "c"), ChartPoint(10, 700, "c")), dashed=True)),
        marks=(ChartMark(5, 5, "-8.0%", "culprit", "step"), ChartMark(6, 8, "-10.4%", "range", "range")),
        x_labels={0: "aaaa", 10: "bbbb"}, y_label="TFLOP/s", width=500, height=200)
    svg = render_svg(chart)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert "abc &amp; &lt;b&gt;" in svg and "gemm &lt;8192&gt;" in svg and "<b>" not in svg
    target, control = _polylines(svg)
    # x spans the plot area (64 .. 500-16); higher value = smaller y; control is dashed
    assert target[0][0] == 64 and target[1][0] == 484
    assert target[1][1] < target[0][1] and control[0][1] < target[1][1]
    assert svg.count('stroke-dasharray="5 4"') == 2  # the control line and its legend swatch
    assert re.search(r'<line class="mark step" x1="274.0"', svg)  # halfway: 64 + 0.5 * 420
    assert re.search(r'<rect class="mark range" x="316.0" y="\d+" width="84.0"', svg)
    assert ">-10.4%<" in svg and ">aaaa<" in svg and ">TFLOP/s<" in svg


def test_render_svg_without_points_says_so() -> None:
    svg = render_svg(Chart(title="empty", lines=()))
    assert "no measurements" in svg and "<polyline" not in svg


def test_case_chart_draws_each_fingerprint_with_its_control_and_never_joins_them() -> None:
    rows = [row(SHAS[0], 600.0, control=700.0), row(SHAS[2], 550.0, control=700.0),
            row(SHAS[1], 640.0, fp="fpB", control=None)]
    [history] = build_histories(rows, [], SHAS[:3])
    chart = case_chart(history, {SHAS[0]: "tune tiles (#3)"})
    assert [(line.label, line.dashed, len(line.points)) for line in chart.lines] == [
        ("fp fpA", False, 2), ("fp fpA control", True, 2), ("fp fpB", False, 1)]
    assert chart.lines[0].color == chart.lines[1].color != chart.lines[2].color
    assert "tune tiles (#3)" in chart.lines[0].points[0].title and "600 TFLOP/s" in chart.lines[0].points[0].title
    assert chart.y_label == "TFLOP/s" and chart.x_labels[0] == SHAS[0][:7]
    assert len(_polylines(render_svg(chart))) == 3


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
    [step] = case["steps"]
    assert (step["last_sha"], step["exact"], step["rel"], step["pr_number"]) == (SHAS[3], True, -0.08, 13)
    assert client.get("/api/history/kern", params={"case": "gemm M=1,N=1,K=1,dtype=fp32"}).json()["cases"] == []
    recent = client.get("/api/history/kern", params={"last": 2}).json()
    assert [c["sha"] for c in recent["commits"]] == SHAS[3:5]
    assert [s["fingerprint"] for s in recent["cases"][0]["series"]] == ["f" * 64]
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


def test_history_page_draws_the_chart_with_the_culprit(client, measured) -> None:
    response = client.get("/dashboard/repositories/kern", params={"case": GEMM})
    assert response.status_code == 200
    html = response.text
    assert html.count("<svg") == 1 and html.count("<polyline") == 4  # two fingerprints, each with its control
    assert '<line class="mark step"' in html and ">-8.0%<" in html
    assert html.count('class="flag"') == 1  # the build_error trial at commit 1
    assert "commit 3 &lt;b&gt;" in html and "<b>" not in html.replace("<b>perfbisect</b>", "")
    assert "cdn" not in html.lower() and "<script src" not in html


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
    assert "setTimeout" not in html  # finished: no auto-refresh


def test_jobs_list_shows_progress_and_refreshes_while_running(client, measured) -> None:
    html = client.get("/dashboard/jobs").text
    for job in (measured["job"], measured["running"]):
        assert f'href="/dashboard/jobs/{job.id}"' in html
    assert '<progress value="3" max="5">' in html and "(PR #7)" in html
    assert "setTimeout" in html
    running_only = client.get("/dashboard/jobs", params={"status": "succeeded"}).text
    assert f'/dashboard/jobs/{measured["running"].id}"' not in running_only
    index = client.get("/dashboard").text
    assert "/dashboard/repositories/kern" in index and GEMM in index
