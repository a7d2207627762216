"""The culprit table: only cases that moved are listed, ranges and correctness findings read right."""

from __future__ import annotations

from datetime import datetime, timezone

from service.jobs.schemas import JobRead
from service.reports.culprits import culprit_table, markdown_report


def job(culprits: list[dict], status: str = "succeeded") -> JobRead:
    now = datetime.now(timezone.utc)
    return JobRead(id=7, kind="bisect", status=status, repository="lib",
                   spec={"good": "v1", "bad": "main", "min_effect": 0.02, "metric": "ratio"},
                   progress={"revisions": 9, "measured": 5, "trials": 30, "rounds": 4},
                   revision_shas=["a" * 40], error=None, created_at=now, started_at=now, finished_at=now,
                   culprits=culprits)


STEP = {"kind": "performance", "first_sha": "c" * 40, "last_sha": "c" * 40, "fixed_sha": None, "exact": True,
        "subject": "attention: drop fastmath (#930)", "pr_number": 930,
        "effects": {
            "attention S=4096": {"rel": -0.104, "ci": [-0.12, -0.09], "before": 1.0, "after": 0.9,
                                 "unit": "TFLOP/s", "before_value": 1188.6, "after_value": 1077.0},
            "attention S=1024": {"rel": -0.004, "ci": [-0.02, 0.01], "before": 1.0, "after": 1.0,
                                 "unit": "TFLOP/s", "before_value": 1260.5, "after_value": 1254.1}}}


def test_table_lists_only_the_cases_that_moved() -> None:
    text = culprit_table(job([STEP]))
    assert "cccccccccc  #930  attention: drop fastmath (#930)  attention S=4096" in text
    assert "1188.6 -> 1077.0 TFLOP/s" in text and "-10.4% [-12.0, -9.0]" in text
    assert "S=1024" not in text


def test_range_culprit_and_correctness_finding() -> None:
    hidden = {**STEP, "first_sha": "d" * 40, "last_sha": "e" * 40, "exact": False, "pr_number": None}
    wrong = {"kind": "correctness", "first_sha": "f" * 40, "last_sha": "f" * 40, "fixed_sha": "9" * 40,
             "exact": True, "subject": "hoist the trip count (#935)", "pr_number": 935, "effects": {}}
    text = culprit_table(job([hidden, wrong]))
    assert "dddddddddd..eeeeeeeeee" in text
    assert "ffffffffff #935 hoist the trip count (#935): first wrong results; fixed at 9999999999" in text


def test_no_step_says_so_and_markdown_has_a_table() -> None:
    assert "No performance step above the minimum effect (2.0%)" in culprit_table(job([]))
    md = markdown_report(job([STEP]))
    assert "| cccccccccc | #930 |" in md and "30 trials over 5 revisions" in md
