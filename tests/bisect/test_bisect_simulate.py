"""The simulator: history parsing, the --json result shape, sha resolution, the text table."""

import json

import pytest

from perfbisect.service.bisect.history import HistoryError, load_history
from perfbisect.service.bisect.simulate import format_simulation, simulate

HISTORY = {
    "commits": 120, "samples_per_trial": 20, "process_drift_cv": 0.02,
    "control": {"value": 1252.0, "cv": 0.01},
    "cases": {"S=180180": {"cv": 0.01, "levels": [[0, 1288.2], [37, 1188.1], [90, 1077.0]],
                           "bimodal": {"p": 0.1, "shift": -0.10}}},
    "unbuildable": [12, 13, 14], "wrong_results": [[55, 65]], "higher_is_better": True,
}
SHAS = [f"{i:02x}" + "ab" * 19 for i in range(41)]


def fake_rev_list(path, good, bad):
    assert (path, good, bad) == ("/repos/k", "v1", "v2")
    return SHAS


def test_json_shape_is_the_issue_s(tmp_path):
    path = tmp_path / "h.json"
    path.write_text(json.dumps(HISTORY))
    result = simulate(load_history(path), workers=4, seed=0)
    assert set(result) == {"culprits", "shapes", "correctness", "revisions_measured", "trials", "rounds"}
    assert [c["revision"] for c in result["culprits"]] == [37, 90]
    culprit = result["culprits"][0]
    assert set(culprit) == {"revision", "range", "cases"}  # no sha without a repository
    assert culprit["range"] == [37, 37]
    assert set(culprit["cases"]["S=180180"]) == {"rel", "ci", "before", "after"}
    assert all(set(f) == {"first_bad", "fixed_at"} for f in result["correctness"])
    assert isinstance(result["trials"], int) and result["trials"] >= result["revisions_measured"]
    json.dumps(result)  # serialisable as is


def test_repo_history_resolves_sha_prefixes_and_reports_shas():
    data = {"repo": "/repos/k", "good": "v1", "bad": "v2", "samples_per_trial": 20,
            "cases": {"a": {"cv": 0.01, "levels": [[0, 100.0], [SHAS[17][:8], 90.0]]}},
            "unbuildable": [SHAS[3][:6]]}
    h = load_history(data, repo_resolver=fake_rev_list)
    assert h.n_revisions == 41 and h.unbuildable == frozenset({3})
    result = simulate(h, seed=1)
    assert result["culprits"][0]["revision"] == 17
    assert result["culprits"][0]["sha"] == SHAS[17]


def test_malformed_histories_are_refused_with_the_field_named():
    with pytest.raises(HistoryError, match="commits"):
        load_history({"cases": {"a": {"levels": [[0, 1.0]]}}})
    with pytest.raises(HistoryError, match="levels"):
        load_history({"commits": 5, "cases": {"a": {"levels": [[9, 1.0]]}}})
    with pytest.raises(HistoryError, match="resolver"):
        load_history({"repo": ".", "good": "a", "bad": "b", "cases": {}})
    with pytest.raises(HistoryError, match="sha prefix"):
        load_history({"commits": 5, "cases": {"a": {"levels": [["abc", 1.0]]}}})


def test_same_seed_same_result_and_a_readable_table():
    h = load_history(HISTORY)
    first = simulate(h, seed=5)
    assert first == simulate(h, seed=5)
    table = format_simulation(first)
    assert "S=180180" in table and "wrong results from revision 55, fixed at 65" in table
    assert f"trials {first['trials']}" in table
    assert "no performance culprit" in format_simulation(
        {"culprits": [], "correctness": [], "revisions_measured": 2, "trials": 12, "rounds": 1})
