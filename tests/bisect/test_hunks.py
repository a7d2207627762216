"""Hunk localization (issue 43), pure: split literal diffs into hunks, keep the imported files,
write a subset's patch, and the adaptive partition over recorded outcomes (its cost bound, groups
that only work together, broken subsets recorded and never blamed)."""

from __future__ import annotations

import math
import random

import pytest

from perfbisect.service.bisect.hunks import (Outcome, bound, classify, keep_imported, plan, share_of, split_diff,
                                             subset_patch)

DIFF = """\
diff --git a/pkg/gemm.py b/pkg/gemm.py
index 1111111..2222222 100644
--- a/pkg/gemm.py
+++ b/pkg/gemm.py
@@ -3,7 +3,7 @@ import torch
 
 BLOCK_M = 128
 BLOCK_N = 128
-BLOCK_K = 64
+BLOCK_K = 32
 GROUP_M = 8
 
 
@@ -20,6 +20,8 @@ def matmul(a, b):
     m, k = a.shape
     n = b.shape[1]
+    # cleanup: name the shapes
+    assert k == b.shape[0]
     out = torch.empty(m, n)
     return _run(a, b, out)
 
diff --git a/pkg/norm.py b/pkg/norm.py
index 3333333..4444444 100644
--- a/pkg/norm.py
+++ b/pkg/norm.py
@@ -1,4 +1,3 @@
-# norm
 import torch
 
 
diff --git a/docs/notes.md b/docs/notes.md
new file mode 100644
index 0000000..5555555
--- /dev/null
+++ b/docs/notes.md
@@ -0,0 +1,2 @@
+# notes
+tiles
diff --git a/pkg/logo.png b/pkg/logo.png
index 6666666..7777777 100644
Binary files a/pkg/logo.png and b/pkg/logo.png differ
diff --git a/pkg/old_name.py b/pkg/new_name.py
similarity index 90%
rename from pkg/old_name.py
rename to pkg/new_name.py
index 8888888..9999999 100644
--- a/pkg/old_name.py
+++ b/pkg/new_name.py
@@ -1,2 +1,2 @@
-x = 1
+x = 2
 y = 1
diff --git a/run.sh b/run.sh
old mode 100644
new mode 100755
"""


def test_split_numbers_hunks_and_sets_aside_binary_renames_and_modes():
    split = split_diff(DIFF)
    assert [(h.index, h.path) for h in split.hunks] == [(0, "pkg/gemm.py"), (1, "pkg/gemm.py"), (2, "pkg/norm.py"),
                                                        (3, "docs/notes.md")]
    first = split.hunks[0]
    assert (first.old_start, first.old_len, first.new_start, first.new_len) == (3, 7, 3, 7)
    assert first.section == "import torch"
    assert first.line_range() == "pkg/gemm.py:3-9"
    assert split.hunks[2].line_range() == "pkg/norm.py:1-3"
    assert split.files() == {"pkg/gemm.py": (0, 1), "pkg/norm.py": (2,), "docs/notes.md": (3,)}
    reasons = {a.path: a.reason for a in split.set_aside}
    assert reasons["pkg/logo.png"].startswith("binary file")
    assert reasons["pkg/new_name.py"].startswith("renamed from pkg/old_name.py")
    assert reasons["run.sh"].startswith("no content change")


def test_trimmed_text_shows_the_changed_lines_with_one_line_of_context():
    hunk = split_diff(DIFF).hunks[0]
    assert hunk.trimmed() == " BLOCK_N = 128\n-BLOCK_K = 64\n+BLOCK_K = 32\n GROUP_M = 8"
    assert hunk.trimmed(limit=2).endswith("... 2 more lines")


def test_keep_imported_drops_files_the_trial_never_loaded_and_renumbers():
    kept = keep_imported(split_diff(DIFF), ["pkg/gemm.py", "pkg/__init__.py"])
    assert [(h.index, h.path) for h in kept.hunks] == [(0, "pkg/gemm.py"), (1, "pkg/gemm.py")]
    aside = {a.path: a.reason for a in kept.set_aside}
    assert aside["pkg/norm.py"] == "not imported by the trial"
    assert aside["docs/notes.md"] == "not imported by the trial"


def test_merge_commit_combined_diff_is_set_aside_with_its_reason():
    combined = "diff --cc pkg/gemm.py\nindex 1,2..3\n--- a/pkg/gemm.py\n+++ b/pkg/gemm.py\n@@@ -1,1 -1,1 +1,1 @@@\n"
    split = split_diff(combined)
    assert split.hunks == ()
    assert "first-parent diff" in split.set_aside[0].reason


def test_subset_patch_shifts_a_later_hunk_by_the_chosen_hunks_above_only():
    split = split_diff(DIFF)
    alone = subset_patch([split.hunks[1]])
    assert "@@ -20,6 +20,8 @@ def matmul(a, b)" in alone
    assert alone.startswith("diff --git a/pkg/gemm.py b/pkg/gemm.py\n")
    norm_then_gemm = subset_patch([split.hunks[2], split.hunks[0]])
    assert norm_then_gemm.index("pkg/gemm.py") < norm_then_gemm.index("pkg/norm.py")
    # a deletion above shifts the new start of a later hunk of the same file
    two = split_diff(DIFF.replace("@@ -20,6 +20,8 @@", "@@ -20,6 +20,8 @@").replace(
        "-BLOCK_K = 64\n+BLOCK_K = 32\n", "-BLOCK_K = 64\n").replace("@@ -3,7 +3,7 @@", "@@ -3,7 +3,6 @@"))
    both = subset_patch(two.hunks[:2])
    assert "@@ -20,6 +19,8 @@" in both
    assert "@@ -0,0 +1,2 @@" in subset_patch([split.hunks[3]])


def _run(files, responsible, *, complete=True, broken=(), group=False, budget=None):
    """Drive `plan` with an oracle: a subset carries the whole step when it holds every
    responsible hunk, part of it when some (`group`: only all together count), none otherwise."""
    results: dict[frozenset[int], Outcome] = {}
    for _ in range(100):
        search = plan(files, results, complete=complete, budget=budget)
        if search.done:
            return search
        for subset in search.requests:
            hit = responsible & subset
            results[subset] = (Outcome.broken if subset in broken else Outcome.full if hit == responsible
                               else Outcome.none if not hit or group else Outcome.partial)
    raise AssertionError("no answer in 100 rounds")


@pytest.mark.parametrize("count", [1, 2, 3, 7, 16, 35])
def test_one_responsible_hunk_among_h_is_found_within_the_bound(count):
    rng = random.Random(count)
    files: dict[str, list[int]] = {}
    for i in range(count):
        files.setdefault(f"f{rng.randrange(max(1, count // 3))}.py", []).append(i)
    for target in range(count):
        for complete in (True, False):  # False: the kept hunks together are measured first, one round more
            search = _run(files, frozenset([target]), complete=complete)
            assert search.found == {target} and not search.group
            assert search.rounds <= bound(count), (target, complete, search.rounds)


def test_the_cost_bound_is_log2_plus_two():
    assert [bound(h) for h in (1, 2, 3, 35)] == [2, 3, 4, 8]


def test_hunks_that_only_work_together_are_reported_as_a_group():
    files = {"a.py": [0, 1, 2], "b.py": [3, 4], "c.py": [5, 6, 7]}
    search = _run(files, frozenset([1, 6]), group=True)
    assert search.group and {1, 6} <= search.found
    assert search.found != frozenset(range(8)) or search.reason is None


def test_a_broken_subset_is_recorded_and_never_blamed():
    files = {"a.py": [0, 1], "b.py": [2, 3]}
    search = _run(files, frozenset([3]), broken={frozenset([0, 1])})
    assert search.found == {3}
    assert frozenset([0, 1]) in search.broken


def test_incomplete_kept_hunks_that_miss_the_step_give_a_reason_not_a_blame():
    search = _run({"a.py": [0, 1]}, frozenset([9]), complete=False)
    assert search.found is None
    assert "do not reproduce the step" in search.reason


def test_no_hunk_at_all_says_why():
    assert "no hunk" in plan({}, {}, complete=True).reason


def test_unknown_outcomes_are_measured_again_and_the_budget_stops_the_search():
    files = {"a.py": [0], "b.py": [1]}
    first = plan(files, {}, complete=True)
    again = plan(files, {s: Outcome.unknown for s in first.requests}, complete=True)
    assert again.requests == first.requests
    stopped = plan(files, {s: Outcome.unknown for s in first.requests}, complete=True, budget=0)
    assert stopped.done and "not resolved within 0 rounds" in stopped.reason


def test_classify_against_the_culprits_step():
    full = math.log(1.30)
    assert classify(math.log(1.29), (math.log(1.25), math.log(1.33)), full, 0.02) == Outcome.full
    assert classify(0.0, (-0.02, 0.02), full, 0.02) == Outcome.none
    assert classify(math.log(1.14), (math.log(1.12), math.log(1.16)), full, 0.02) == Outcome.partial
    assert classify(math.log(1.15), (math.log(0.9), math.log(1.4)), full, 0.02) == Outcome.unknown
    # decided at half the step: an interval twice the margin wide still parts the halves of a round
    assert classify(0.25, (0.15, 0.35), full, 0.02) == Outcome.full
    assert classify(0.0, (-0.11, 0.11), full, 0.02) == Outcome.none
    assert classify(0.13, (0.03, 0.23), full, 0.02) == Outcome.unknown
    # a faster step (negative) classifies by the same rule
    assert classify(-0.25, (-0.27, -0.23), -0.26, 0.02) == Outcome.full


def test_share_of_the_step_with_its_interval():
    share = share_of(0.2, (0.15, 0.25), 0.25)
    assert share.share == pytest.approx(0.8) and share.ci == pytest.approx((0.6, 1.0))
    assert share_of(0.1, (0.0, 0.2), 0.0) is None
