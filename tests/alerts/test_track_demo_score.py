"""`perfbisect demo --track` scores only the planted steps its measured heads can reveal: pure,
on literal events shaped like the demo's GROUND_TRUTH.json."""

from __future__ import annotations

from types import SimpleNamespace

from perfbisect.cli.track_demo import score, untrackable

RMS, GEMM, ATTN = ["rmsnorm"], ["gemm bf16"], ["attention"]


def event(name: str, index: int, kind: str = "perf", cases: list[str] | None = None, **more) -> dict:
    return {"event": name, "index": index, "kind": kind, "sha": f"s{index}", "cases": {"cpu": cases or []}, **more}


EVENTS = [event("rms_blocks", 3, cases=RMS), event("rms_weight_check", 6, cases=RMS),
          event("swizzle_off_bf16", 10, cases=GEMM),
          event("import_broken", 16, "import_error", RMS + GEMM + ATTN), event("import_fixed", 19, "import_fixed",
                                                                              fixes="import_broken"),
          event("fastmath_dropped", 22, cases=ATTN), event("block_k_small_step", 28, cases=GEMM),
          event("k_tail_dropped", 33, "wrong_results", ["gemm K=520"]),
          event("k_tail_fixed", 38, "wrong_results_fixed", ["gemm K=520"], fixes="k_tail_dropped"),
          event("swizzle_partial_recovery", 43, cases=GEMM)]
HEADS = [1, 3, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53]  # backfill 1, 3, 5, then every 4th


def cases(names: list[str]) -> list[SimpleNamespace]:
    return [SimpleNamespace(case=name) for name in names]


def test_steps_before_three_heads_of_their_level_are_not_trackable() -> None:
    """rms_blocks has one head before it, rms_weight_check two heads since rms_blocks; block_k
    has exactly three since the swizzle step (head 17 is inside the import break and measures
    nothing), so it is trackable, and so is the recovery with heads 45, 49, 53 after it."""
    assert untrackable(EVENTS, HEADS, "cpu", 3) == {
        "rms_blocks": "1 measured head(s) of its level before it and 2 after (a level needs 3)",
        "rms_weight_check": "2 measured head(s) of its level before it and 11 after (a level needs 3)"}
    assert "swizzle_partial_recovery" in untrackable(EVENTS, HEADS[:-1], "cpu", 3)
    assert "block_k_small_step" in untrackable(EVENTS, [h for h in HEADS if h != 25], "cpu", 3)


def test_a_wrong_results_step_needs_a_head_that_runs_it_before_it_is_fixed() -> None:
    assert "k_tail_dropped" not in untrackable(EVENTS, HEADS, "cpu", 3)
    assert "k_tail_dropped" in untrackable(EVENTS, [h for h in HEADS if h not in (33, 37)], "cpu", 3)


def test_the_score_counts_trackable_steps_and_an_alert_over_an_untrackable_one_is_not_false() -> None:
    shas = [f"s{i}" for i in range(54)]
    alert = SimpleNamespace(id=1, before_sha="s5", last_sha="s9", culprit_exact=True, culprit_last_sha="s6",
                            cases=cases(RMS))
    swizzle = SimpleNamespace(id=2, before_sha="s9", last_sha="s13", culprit_exact=True, culprit_last_sha="s10",
                              cases=cases(GEMM))
    result = score({"events": EVENTS}, shas, [alert, swizzle], {1: 21, 2: 21}, HEADS)
    assert [s["event"] for s in result["steps"]] == ["swizzle_off_bf16", "fastmath_dropped", "block_k_small_step",
                                                      "k_tail_dropped", "swizzle_partial_recovery"]
    assert result["steps"][0] == {"event": "swizzle_off_bf16", "index": 10, "alerts": 1, "delay_heads": 3,
                                  "culprit_exact": True}
    assert set(result["untracked"]) == {"rms_blocks", "rms_weight_check"} and result["false_alerts"] == []


def test_an_alert_on_other_cases_over_a_planted_step_is_a_false_alert_not_a_second_one() -> None:
    """block_k (gemm, commit 28) has its alert; an alert on attention over 25..29 is not block_k's
    second alert (which would fail the step) but a false alert; nor does a gemm alert over the
    rmsnorm steps' range count as covering them."""
    shas = [f"s{i}" for i in range(54)]
    block_k = SimpleNamespace(id=1, before_sha="s25", last_sha="s29", culprit_exact=True, culprit_last_sha="s28",
                              cases=cases(GEMM))
    attention = SimpleNamespace(id=2, before_sha="s25", last_sha="s29", culprit_exact=False, culprit_last_sha=None,
                                cases=cases(ATTN))
    gemm_early = SimpleNamespace(id=3, before_sha="s1", last_sha="s9", culprit_exact=False, culprit_last_sha=None,
                                 cases=cases(GEMM))
    result = score({"events": EVENTS}, shas, [block_k, attention, gemm_early], {1: 37, 2: 37, 3: 9}, HEADS)
    [step] = [s for s in result["steps"] if s["event"] == "block_k_small_step"]
    assert (step["alerts"], step["culprit_exact"]) == (1, True)
    assert result["false_alerts"] == [2, 3]


def test_a_broken_alert_over_the_planted_import_break_is_no_false_alert_and_covers_no_step() -> None:
    """Heads 17 (inside the import break 16..19) failed to import: the broken alert over 13..17
    is the break's, not a false alert; one elsewhere is false, and neither covers a planted step."""
    shas = [f"s{i}" for i in range(54)]
    broken = SimpleNamespace(id=1, kind="broken", before_sha="s13", last_sha="s17", culprit_exact=False,
                             culprit_last_sha=None, cases=[])
    stray = SimpleNamespace(id=2, kind="broken", before_sha="s25", last_sha="s29", culprit_exact=False,
                            culprit_last_sha=None, cases=[])
    result = score({"events": EVENTS}, shas, [broken, stray], {1: 17, 2: 29}, HEADS)
    assert result["false_alerts"] == [2] and all(s["alerts"] == 0 for s in result["steps"])


def test_a_bimodal_alert_over_the_planted_slow_path_is_not_false_and_a_speed_alert_there_is() -> None:
    """Issue 46: the planted spread event (#949 on the fp32 gemm) is not a speed step to score, but a
    noisier or bimodal alert over it is no false alert; a regression alert over it is."""
    shas = [f"s{i}" for i in range(54)]
    events = EVENTS + [event("fp32_self_check", 43, "spread", ["gemm fp32"])]
    bimodal = SimpleNamespace(id=3, kind="bimodal", before_sha="s41", last_sha="s45", culprit_exact=False,
                              culprit_last_sha=None, cases=cases(["gemm fp32"]))
    speed = SimpleNamespace(id=4, kind="regression", before_sha="s41", last_sha="s45", culprit_exact=False,
                            culprit_last_sha=None, cases=cases(["gemm fp32"]))
    result = score({"events": events}, shas, [bimodal, speed], {3: 45, 4: 45}, HEADS)
    assert result["false_alerts"] == [4]
    assert "fp32_self_check" not in [s["event"] for s in result["steps"]]
