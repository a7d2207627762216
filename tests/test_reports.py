"""The text report: verdict and counts, only the cases that moved, before -> after in the quantity
of the step and in the metric (both labelled), improvements called improvements, 100 columns."""

from __future__ import annotations

from datetime import datetime, timezone

from perfbisect.service.jobs.schemas import JobRead
from perfbisect.service.reports.culprits import culprit_rows, culprit_table, report_lines

BIG, SMALL = "attention B=1,H=32,S=4096,D=128,causal=false,dtype=bf16", "attention B=1,H=32,S=1024,D=128,causal=false,dtype=bf16"


def job(culprits: list[dict], outcome: dict | None = None, status: str = "succeeded") -> JobRead:
    now = datetime.now(timezone.utc)
    return JobRead(id=7, kind="bisect", status=status, repository="lib",
                   spec={"good": "v1", "bad": "main", "min_effect": 0.02, "metric": "ratio"},
                   progress={"revisions": 9, "measured": 5, "trials": 30, "rounds": 4},
                   revision_shas=["a" * 40], error=None, created_at=now, started_at=now, finished_at=now,
                   culprits=culprits, outcome=outcome)


STEP = {"kind": "performance", "first_sha": "c" * 40, "last_sha": "c" * 40, "fixed_sha": None, "exact": True,
        "subject": "attention: drop the fastmath flag from the exp2 path, which the compiler then lowers to "
                   "the precise libdevice exp (#930)", "pr_number": 930,
        "effects": {
            BIG: {"rel": -0.104, "ci": [-0.12, -0.09], "before": 0.9712, "after": 0.8702,
                  "unit": "TFLOP/s", "before_value": 1188.6, "after_value": 1077.0},
            SMALL: {"rel": -0.004, "ci": [-0.02, 0.01], "before": 1.0, "after": 1.0,
                    "unit": "TFLOP/s", "before_value": 1260.5, "after_value": 1254.1}}}
FASTER = {**STEP, "first_sha": "d" * 40, "last_sha": "d" * 40, "pr_number": 945, "subject": "grouped order again (#945)",
          "effects": {BIG: {"rel": 1.31, "ci": [1.2, 1.4], "before": 0.4, "after": 0.924, "unit": "TFLOP/s",
                            "before_value": 500.0, "after_value": 1155.0}}}


def outcome(verdict: str, cases: list[dict]) -> dict:
    counts = {k: sum(c["outcome"] == k for c in cases) for k in ("regressed", "improved", "unchanged", "inconclusive", "failed")}
    return {"verdict": verdict, "counts": counts, "cases": cases}


def test_table_lists_only_the_cases_that_moved_in_both_quantities() -> None:
    text = culprit_table(job([STEP]))
    assert "cccccccccc  #930  attention: drop the fastmath flag" in text
    assert f"  {BIG}  -10.4% [-12.0, -9.0] regression" in text
    assert "ratio to control 0.9712 -> 0.8702; 1188.6 -> 1077.0 TFLOP/s" in text
    assert "S=1024" not in text


def test_report_fits_100_columns_and_cuts_subjects_at_whole_words() -> None:
    text = culprit_table(job([STEP, FASTER]))
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "which the compiler then lowers to ..." in text or "which the compiler then ..." in text
    wide = culprit_table(job([STEP, FASTER]), wide=True)
    assert "the precise libdevice exp (#930)" in wide and max(len(line) for line in wide.splitlines()) > 100


def test_an_improvement_is_called_an_improvement_and_coloured() -> None:
    report = job([FASTER], outcome("improved", [{"case": BIG, "outcome": "improved", "steps": [
        {"first_sha": "d" * 40, "last_sha": "d" * 40, "rel": 1.31, "ci": [1.2, 1.4], "regression": False}]}]))
    text = culprit_table(report)
    assert "+131.0% [+120.0, +140.0] improvement" in text and "regression" not in text
    assert "verdict: IMPROVED (0 regressed, 1 improved, 0 unchanged, 0 inconclusive, 0 failed)" in text
    styles = {span.style for line in report_lines(report) for span in line.spans}
    assert "green" in styles and "red" not in styles


def test_range_culprit_and_correctness_finding() -> None:
    hidden = {**STEP, "first_sha": "d" * 40, "last_sha": "e" * 40, "exact": False, "pr_number": None}
    wrong = {"kind": "correctness", "first_sha": "f" * 40, "last_sha": "f" * 40, "fixed_sha": "9" * 40,
             "exact": True, "subject": "hoist the trip count (#935)", "pr_number": 935, "effects": {},
             "wrong_cases": {"gemm M=256,N=256,K=520,dtype=fp32": {"error": 0.126, "tolerance": 0.002}}}
    text = culprit_table(job([hidden, wrong]))
    assert "dddddddddd..eeeeeeeeee" in text
    assert "ffffffffff #935 hoist the trip count (#935): first wrong results; fixed at 9999999999" in text
    assert "gemm M=256,N=256,K=520,dtype=fp32: error 0.126 vs tolerance 0.002" in text


def test_unchanged_says_so_and_failed_shows_the_error() -> None:
    unchanged = outcome("unchanged", [{"case": SMALL, "outcome": "unchanged", "bound": 0.011, "ci": [-0.011, 0.004],
                                       "reason": "no step beyond 1.1% (minimum effect 2.0%)"}])
    text = culprit_table(job([], unchanged))
    assert "No performance step above the minimum effect (2.0%)" in text and "no step beyond 1.1%" in text
    failed = outcome("failed", [{"case": SMALL, "outcome": "failed", "reason": "import failed at the bad end",
                                 "error": "Traceback ...\nModuleNotFoundError: No module named 'lib.nope'"}])
    text = culprit_table(job([], failed, status="failed"))
    assert "No performance step" not in text and "verdict: FAILED" in text
    assert "import failed at the bad end" in text and "ModuleNotFoundError: No module named 'lib.nope'" in text


SOURCE = "source:liger_cross_entropy.py@08d5a460867a BT=8192,V=128256,dtype="


def test_long_case_names_that_differ_at_the_end_stay_apart() -> None:
    # A suite file's cases share a long prefix: cut at the end, bf16 and fp32 read the same
    # ("...V=128256,d..." twice, as on the first H200 run of Liger's cross entropy).
    cases = [{"case": SOURCE + dtype, "outcome": "inconclusive", "reason": "too noisy", "steps": []}
             for dtype in ("bf16", "fp32")]
    text = culprit_table(job([], outcome("inconclusive", cases), status="inconclusive"))
    rows = [line for line in text.splitlines() if "inconclusive" in line and line.startswith("  ")]
    assert len(rows) == 2 and rows[0].split()[-2] != rows[1].split()[-2]
    assert any("dtype=bf16" in r for r in rows) and any("dtype=fp32" in r for r in rows)
    assert max(len(line) for line in text.splitlines()) <= 100
    wide = culprit_table(job([], outcome("inconclusive", cases), status="inconclusive"), wide=True)
    assert f"  {SOURCE}bf16  " in wide and f"  {SOURCE}fp32  " in wide


def test_case_labels_cut_at_the_end_when_that_keeps_them_apart() -> None:
    from perfbisect.service.reports.culprits import case_labels
    assert case_labels([BIG, SMALL], 100) == {BIG: BIG, SMALL: SMALL}
    labels = case_labels([BIG, SMALL], 30)
    assert len(set(labels.values())) == 2 and all(len(v) <= 30 for v in labels.values())
    assert labels[BIG].startswith("attention B=1,H=32,S=4096")
    same_ends = ["x" * 40 + "A" + "y" * 40, "x" * 40 + "B" + "y" * 40]
    assert case_labels(same_ends, 30) == {n: n for n in same_ends}


def test_a_range_culprit_says_why_it_is_a_range() -> None:
    # Liger's #1266 did not compile on triton 3.6 and #1275 fixed that: the step is named as the
    # range #1266..#1275, and the report says the first was not measured, and why.
    shas = ["a" * 40, "b" * 40, "c" * 40, "d" * 40]
    step = {**STEP, "first_sha": shas[2], "last_sha": shas[3], "exact": False, "pr_number": 1275,
            "subject": "Make LOG2_E a tl.constexpr (#1275)",
            "effects": {SOURCE + "bf16": {**STEP["effects"][BIG], "rel": 0.187, "ci": [0.129, 0.248]},
                        SOURCE + "fp32": {**STEP["effects"][SMALL]}}}
    cases = [{"case": SOURCE + "bf16", "outcome": "improved", "steps": []},
             {"case": SOURCE + "fp32", "outcome": "inconclusive", "reason": "too noisy", "steps": []}]
    failures = [{"sha": shas[2], "reason": "compile_error", "words": "compile failed", "case": SOURCE + dtype,
                 "trials": 1, "error": "NameError"} for dtype in ("bf16", "fp32")]
    report = job([step], {**outcome("inconclusive", cases), "failures": failures}, status="inconclusive")
    report = report.model_copy(update={"revision_shas": shas})
    text = culprit_table(report)
    assert "a range, not one commit: the step is at dddddddddd or before it at cccccccccc compile failed" in text
    moved_row = next(line for line in text.splitlines() if "+18.7%" in line)
    assert "dtype=bf16" in moved_row  # the moved case named as in the case list, its dtype kept
    assert max(len(line) for line in text.splitlines()) <= 100
    wide = culprit_table(report, wide=True)
    assert "cccccccccc..dddddddddd: a range, not one commit: the step is at dddddddddd or before" in wide


def test_a_step_its_own_verdict_did_not_confirm_is_left_out_and_labelled_where_shown() -> None:
    # SMALL's interval excludes 0 at -15%, but its verdict at the culprit was not DIFFERENT
    unconfirmed = {**STEP["effects"][SMALL], "rel": -0.15, "ci": [-0.2, -0.1], "confirmed": False}
    culprit = {**STEP, "effects": {**STEP["effects"], SMALL: unconfirmed}}
    text = culprit_table(job([culprit]))
    assert BIG in text and "S=1024" not in text
    rows = culprit_rows(job([culprit]), all_cases=True)  # every case, as the job page's full table
    [small] = [row for row in rows if SMALL in row]
    assert any("-15.0% [-20.0, -10.0] (not confirmed" in cell for cell in small), small
    # a case its verdict called SAME with a step nowhere near the minimum: no label
    flat = {**culprit, "effects": {**culprit["effects"], SMALL: {**unconfirmed, "rel": -0.004, "ci": [-0.02, 0.01]}}}
    [small] = [row for row in culprit_rows(job([flat]), all_cases=True) if SMALL in row]
    assert not any("confirmed" in cell for cell in small), small


def test_an_unchanged_range_says_what_a_step_had_to_outlast_to_be_seen() -> None:
    """Issue 46: "no step in this range" after --scan 4 measured 6 of 69 revisions, though a
    step and its undo 6 commits apart sat between two points. The report, the PR comment and
    the API's outcome carry the widest unmeasured stretch."""
    from perfbisect.service.reports.pr_comment import render_job

    case = {"case": SMALL, "outcome": "unchanged", "bound": 0.011, "ci": [-0.011, 0.004], "unseen": 13,
            "reason": "no step beyond 1.1% (minimum effect 2.0%)"}
    gap = {"after_sha": "4" * 40, "before_sha": "5" * 40, "commits": 14, "unseen": 13}
    scanned = job([], {**outcome("unchanged", [{**case, "gap": gap}]), "gap": gap})
    assert scanned.outcome.gap.commits == 14 and scanned.outcome.cases[0].gap.before_sha == "5" * 40
    text = " ".join(culprit_table(scanned).split())
    assert ("No performance step above the minimum effect (2.0%) that lasts 14 commits or more: a step undone "
            "within 14 consecutive commits (4444444444..5555555555, 13 not measured) would not be seen") in text
    assert "in this range." not in text
    md = render_job(scanned, public_url="https://perf.example")
    assert ("Unchanged covers what was measured: a step undone within 14 consecutive commits "
            "(`4444444444..5555555555`, 13 not measured) would not be seen; `--scan auto`") in md

    every = job([], outcome("unchanged", [case]))  # no gap: every revision measured (or a job from before it)
    every.progress.update(revisions=9, measured=9)
    assert "at any revision of this range (every one was measured)" in " ".join(culprit_table(every).split())
    every.progress.update(measured=5)
    assert "at the 5 of 9 revisions measured" in " ".join(culprit_table(every).split())
    assert "would not be seen" not in render_job(every)
