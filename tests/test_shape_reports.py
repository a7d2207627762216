"""Spread and mode findings (issue 46) from the pure planner's finding to the report, the PR
comment, the merge gate and the job page's plot: the finding's JSON goes through the API schema."""

from __future__ import annotations

from datetime import datetime, timezone
from statistics import NormalDist

from perfbisect.dashboards.shapes import shape_charts
from perfbisect.service.bisect.model import BisectConfig
from perfbisect.service.bisect.shapes import shape_step
from perfbisect.service.jobs.outcome import shape_dict
from perfbisect.service.jobs.schemas import JobRead
from perfbisect.service.reports.culprits import culprit_table
from perfbisect.service.reports.pr_comment import render_job
from perfbisect.service.webhooks.check import GatePolicy, check_verdict

CASE = "gemm M=4096"
TIGHT = [1 + 0.01 * NormalDist().inv_cdf((k + 0.5) / 40) for k in range(40)]
SLOW_PATH = TIGHT[:36] + [2.0, 2.02, 1.98, 2.01]  # a tenth of the calls twice as slow
SHAS = ["a" * 40, "b" * 40, "c" * 40]


def job(shapes: list[dict], kind: str = "compare") -> JobRead:
    now = datetime.now(timezone.utc)
    outcome = {"verdict": "unchanged", "counts": {"unchanged": 1},
               "cases": [{"case": CASE, "outcome": "unchanged", "bound": 0.01, "ci": [-0.01, 0.01]}],
               "shapes": shapes}
    return JobRead(id=9, kind=kind, status="succeeded", repository="lib",
                   spec={"good": "v1", "bad": "main", "min_effect": 0.02, "metric": "ratio",
                         "cases": [{"name": CASE}]},
                   progress={"revisions": 3, "measured": 3, "trials": 20, "rounds": 3},
                   revision_shas=SHAS, error=None, created_at=now, started_at=now, finished_at=now,
                   culprits=[], outcome=outcome)


def bimodal() -> dict:
    finding = shape_step([TIGHT] * 4, [SLOW_PATH] * 4, 0.01, BisectConfig(), first=2, last=2, case=CASE)
    return shape_dict(finding, SHAS)


def test_the_report_names_the_new_mode_its_share_and_where_it_sits():
    text = " ".join(culprit_table(job([bimodal()])).split())
    assert "Spread and shape" in text
    assert f"{CASE}: bimodal from cccccccccc: a new mode carries 10% of the calls at +10" in text  # +100%, give or take the fit
    assert "spread 1.0%" in text  # the body of the calls: unchanged by the slow ones
    assert "bimodal from cccccccccc" in render_job(job([bimodal()]))


def test_the_gate_warns_by_default_and_fails_when_asked():
    warned = check_verdict(job([bimodal()]))
    assert warned.conclusion == "success" and "1 case noisier or bimodal" in warned.title
    assert "- bimodal: " in warned.summary
    failed = check_verdict(job([bimodal()]), GatePolicy(shapes="failure"))
    assert failed.conclusion == "failure" and "noisier or bimodal" in failed.title
    quiet = check_verdict(job([]), GatePolicy(shapes="failure"))
    assert quiet.conclusion == "success" and "noisier" not in quiet.title


def test_the_job_page_plots_before_and_after():
    (chart,) = shape_charts(job([bimodal()]).outcome)
    assert chart.kind == "bimodal" and chart.case == CASE
    before = [float(p.split(",")[1]) for p in chart.before.split()]
    after = [float(p.split(",")[1]) for p in chart.after.split()]
    assert len(before) == len(after) == 2 * 24 + 2
    assert after[-2] < chart.height - 4 == before[-2]  # the slow calls' bin: after only
    assert shape_charts(job([{**bimodal(), "histogram": None}]).outcome) == []
