"""A hunk localization trial in the worker (issue 43, real git and a real trial process): the
subset's patch is applied at the checked-out parent before the build, the trial records the
worktree files it imported, and a patch that does not apply is a `revert_conflict` result (the
variant broken, never blamed), not an error."""

from __future__ import annotations

from dataclasses import replace

from perfbisect.workers.runner import execute
from tests.test_worker_trials import probe_git_repo, without_namespaces, work  # noqa: F401

PATCH = """diff --git a/NOTES b/NOTES
index 1111111..2222222 100644
--- a/NOTES
+++ b/NOTES
@@ -1 +1 @@
-{old}
\\ No newline at end of file
+patched
\\ No newline at end of file
"""


MARKER = """diff --git a/src/probekern/__init__.py b/src/probekern/__init__.py
index e69de29..1111111 100644
--- a/src/probekern/__init__.py
+++ b/src/probekern/__init__.py
@@ -0,0 +1,2 @@
+import os
+open(os.environ["PROBE_OUT"] + ".patched", "w").close()
"""


def test_a_variant_trial_applies_its_hunks_and_records_its_imports(probe_git_repo, tmp_path):
    repo, shas = probe_git_repo
    out = tmp_path / "probe.json"
    result, _ = execute(replace(work(repo, shas[0], out), patch=MARKER + PATCH.format(old="one")))
    assert result["status"] == "ok", result
    assert (tmp_path / "probe.json.patched").exists()  # the trial ran the patched package
    assert {"src/probekern/__init__.py", "src/probekern/ops.py"} <= set(result["imported"])


def test_a_patch_that_does_not_apply_is_a_revert_conflict(probe_git_repo, tmp_path):
    repo, shas = probe_git_repo
    result, _ = execute(replace(work(repo, shas[1], tmp_path / "probe.json"), patch=PATCH.format(old="one")))
    assert result["status"] == "revert_conflict"
    assert result["error"].startswith("the hunks do not apply on the parent")
