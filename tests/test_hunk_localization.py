"""Hunk localization jobs (issue 43) on the real PostgreSQL, the harness's results fed in
directly: a bisect asked to localize names a "cleanup" culprit that changes eight hunks in five
files (and a doc the trials never import); the localization job that follows measures subsets of
its hunks at its parent, side by side with it, and names the one hunk that costs, with its file,
lines, text and share, within ceil(log2 H) + 2 rounds. The failure paths give "no evidence of
this kind, because ..." and never fail the job: a step that is the control's own, a culprit
whose changes are all binary or renamed, a subset whose hunks do not apply."""

from __future__ import annotations

from pathlib import Path

import pytest
from perfbisect.cli.hunks import hunk_check
from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.bisect.hunks import bound
from perfbisect.service.errors import NotFound
from perfbisect.service.evidence.service import evidence_of
from perfbisect.service.hunks import service as hunks
from perfbisect.service.hunks.report import why_lines
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs import views
from perfbisect.service.jobs.schemas import BisectCreate
from perfbisect.service.models import Culprit, JobKind, Trial

from tests.factories import create_repository
from tests.gitrepo import git
from tests.test_attribution_job import drive
from tests.test_job_rounds import CASE_BIG, CASE_SMALL, harness_result

COSTLY = "+    acc = a_tile.clone()  # whole-tile copy\n"
FILES = ["lib/gemm.py", "lib/attn.py", "lib/norm.py", "lib/utils.py", "lib/io.py"]
IMPORTED = FILES + ["lib/__init__.py"]


def _module(name: str, cleaned: set[int]) -> str:
    """A module of 60 lines; each line in `cleaned` is renamed, harmlessly, in the cleanup."""
    return "".join(f"v{i} = {i}  # {'cleaned ' if i in cleaned else ''}{name}\n" for i in range(60))


def _write(repo: Path, files: dict[str, str | bytes]) -> None:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)


def _commit(repo: Path, subject: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", subject)


def make_history(path: Path, cleanup_at: int = 5, moves_only: bool = False) -> None:
    """17 commits; commit `cleanup_at` is the cleanup: hunks in every module, the costly one in
    lib/gemm.py's kloop (line 31), and docs/notes.md (`moves_only`: a rename and a binary file)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for i in range(17):
        files: dict[str, str | bytes] = {"history.txt": f"{i}\n"}
        if i == 0:
            files.update({name: _module(name, set()) for name in FILES} | {"lib/__init__.py": "", "docs/notes.md": "a\n",
                                                                          "lib/table.bin": b"\0\1"})
        if i == cleanup_at and moves_only:
            (path / "lib/io.py").rename(path / "lib/io2.py")
            files["lib/table.bin"] = b"\0\2"
        elif i == cleanup_at:
            lines = _module("lib/gemm.py", {5, 50}).splitlines(keepends=True)
            lines.insert(31, COSTLY[1:])
            files.update({"lib/gemm.py": "".join(lines), "lib/attn.py": _module("lib/attn.py", {10, 40}),
                          "lib/norm.py": _module("lib/norm.py", {3}), "lib/utils.py": _module("lib/utils.py", {20}),
                          "lib/io.py": _module("lib/io.py", {55}), "docs/notes.md": "a\nb\n"})
        _write(path, files)
        _commit(path, f"change {i} (#{100 + i})")


def localize_truth(shas: list[str], at: int, control_own: bool = False, broken: str | None = None,
                   failing_case: bool = False):
    """The bisect sees the step at `at` (0.8 of before on CASE_BIG); a localization variant
    carries it when its patch holds the costly hunk; the culprit's own trials carry it. `broken`:
    a variant with that file's hunks but not the costly one does not build (`failing_case`: its
    case fails)."""
    def result_of(work, rng):
        if work.patch is not None and broken and broken in work.patch and COSTLY not in work.patch:
            if failing_case:  # the code builds; the case fails (a definition the subset left out)
                failed = harness_result({CASE_BIG: 1.0}, rng)
                failed["cases"][0].update(status="error", error="NameError: name '_check' is not defined")
                return {**failed, "imported": IMPORTED}
            return {**harness_result({}, rng, status="build_error"), "error": "SyntaxError"}
        if work.patch is not None:
            big = 0.8 if COSTLY in work.patch else 1.0
        else:
            big = 0.8 if shas.index(work.sha) >= at else 1.0
        result = harness_result({CASE_BIG: big, CASE_SMALL: 1.0}, rng, noise=0.01,
                                control=50.0 if control_own and shas.index(work.sha) >= at else 100.0)
        return {**result, "imported": IMPORTED}
    return result_of


def cleanup_repo_path(session) -> Path:
    from perfbisect.service.models import Repository

    return Path(session.query(Repository).filter(Repository.name == "lib").one().url)


@pytest.fixture()
def cleanup_repo(session, tmp_path: Path):
    make_history(tmp_path / "lib")
    return create_repository(session, tmp_path / "lib", name="lib")


def bisect_and_localize(session, **truth):
    """Bisect the history (with `localize`); returns its id, shas and the job that followed."""
    body = BisectCreate(repository="lib", good="HEAD~16", bad="main", localize=True,
                        benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
                                     "shapes": ["M=256,N=256,K=256,dtype=fp32", "M=64,N=64,K=64,dtype=fp32"]}])
    bisect_id = jobs.create_bisect(session, body, SYSTEM).id
    shas = jobs.get(session, bisect_id).revision_shas
    follow = drive(session, bisect_id, localize_truth(shas, 5, **truth))
    return bisect_id, shas, follow


def test_the_costly_hunk_of_a_cleanup_is_named_within_the_bound(session, cleanup_repo) -> None:
    bisect_id, shas, localize_id = bisect_and_localize(session)
    assert localize_id is not None, "the bisect asked to localize: the localization job follows"
    job = jobs.get(session, localize_id)
    assert job.kind == JobKind.localize
    (target,) = job.spec.targets
    assert target.last_sha == shas[5] and target.parent_sha == shas[4]
    assert len(target.hunks) == 8 and not target.complete  # the doc the trials never import is set aside
    assert {"path": "docs/notes.md", "reason": "not imported by the trial"} in target.set_aside
    drive(session, localize_id, localize_truth(shas, 5))
    job = jobs.get(session, localize_id)
    assert job.status.value == "succeeded"
    trials = session.query(Trial).filter(Trial.job_id == localize_id).order_by(Trial.block, Trial.block_slot).all()
    assert all(t.block is not None for t in trials)
    assert [t.variant.count(":") for t in trials[:4]] == [0, 1, 1, 0]  # culprit v v culprit
    evidence = hunks.hunk_evidence(session, bisect_id, shas[5][:10])
    assert evidence.available and evidence.localization_job_id == localize_id
    (case,) = evidence.culprit.cases
    assert case.case == CASE_BIG and case.status == "found"
    (hunk,) = case.hunks
    assert hunk.path == "lib/gemm.py" and hunk.lines.startswith("lib/gemm.py:") and "whole-tile copy" in hunk.text
    assert case.rounds <= bound(8) == case.bound
    assert 0.7 < case.share.share < 1.3 and case.share.ci[0] < 1 < case.share.ci[1] + 0.2
    lines = why_lines(evidence)
    assert lines[0].startswith(f"hunk on {CASE_BIG}: lib/gemm.py:") and f"(bound {bound(8)})" in lines[0]
    assert any("whole-tile copy" in line for line in lines[1:])
    # the culprit's evidence document (GET /api/jobs/{id}/culprits/{sha}/evidence) carries it, first
    document = evidence_of(session, bisect_id, shas[5])
    assert document.hunks.localization_job_id == localize_id and document.summary[:len(lines)] == lines
    # the demo's truth check scores the named hunk against the planted one
    read = views.job_read(session, jobs.get(session, bisect_id))
    event = {"event": "cleanup", "kind": "perf", "index": 5, "sha": shas[5], "parent": shas[4],
             "cases": {"cpu": [CASE_BIG]}, "hunks": {"cpu": ["whole-tile copy"]}}
    found = {c.last_sha: evidence for c in read.culprits}
    assert hunk_check(read, {"events": [event]}, found, cleanup_repo_path(session)) == {
        "exact": ["cleanup"], "harmless": [], "missed": []}
    harmless = {**event, "hunks": {"cpu": ["cleaned lib/attn.py"]}}
    assert hunk_check(read, {"events": [harmless]}, found, cleanup_repo_path(session))["harmless"] == ["cleanup"]
    # an event whose step is in no hunk (a bump's pin, set aside): any named hunk is harmless, none is exact
    in_the_pin = {**event, "hunks": {"cpu": []}}
    assert hunk_check(read, {"events": [in_the_pin]}, found, cleanup_repo_path(session))["harmless"] == ["cleanup"]
    unnamed = evidence.model_copy(update={"culprit": evidence.culprit.model_copy(update={
        "cases": [case.model_copy(update={"status": "none", "hunks": []})]})})
    assert hunk_check(read, {"events": [in_the_pin]}, {c.last_sha: unnamed for c in read.culprits},
                      cleanup_repo_path(session))["exact"] == ["cleanup"]


def test_a_step_that_is_the_controls_own_has_no_hunk_evidence(session, cleanup_repo) -> None:
    bisect_id, shas, _ = bisect_and_localize(session)
    culprit = session.query(Culprit).filter(Culprit.job_id == bisect_id).one()
    culprit.effects = {case: {**e, "control_step": -0.5} for case, e in culprit.effects.items()}
    session.flush()
    job = hunks.maybe_create(session, jobs.get(session, bisect_id))
    (target,) = job.spec.targets
    assert target.skipped.startswith("the step is the control's own")
    drive(session, job.id, localize_truth(shas, 5))
    assert jobs.get(session, job.id).status.value == "succeeded"  # never a failed job
    lines = why_lines(hunks.hunk_evidence(session, bisect_id, shas[5]))
    assert lines == [f"hunk: no evidence of this kind, because {target.skipped}"]


def test_evidence_for_a_sha_that_is_no_culprit_or_an_unknown_job(session, cleanup_repo) -> None:
    bisect_id, shas, _ = bisect_and_localize(session)
    other = hunks.hunk_evidence(session, bisect_id, shas[2])
    assert not other.available and "is not a performance culprit" in other.reason
    pending = hunks.hunk_evidence(session, bisect_id, shas[5])
    assert not pending.available and "no answer yet" in pending.reason
    with pytest.raises(NotFound):
        hunks.hunk_evidence(session, 999_999, shas[5])


@pytest.mark.parametrize("failing_case, problem", [(False, "does not build with these hunks"),
                                                   (True, "a case fails with these hunks")])
def test_a_subset_that_does_not_build_or_run_is_recorded_and_never_blamed(session, cleanup_repo, failing_case,
                                                                         problem) -> None:
    bisect_id, shas, localize_id = bisect_and_localize(session)
    drive(session, localize_id, localize_truth(shas, 5, broken="lib/attn.py", failing_case=failing_case))
    evidence = hunks.hunk_evidence(session, bisect_id, shas[5])
    (case,) = evidence.culprit.cases
    assert case.status == "found" and [h.path for h in case.hunks] == ["lib/gemm.py"]
    assert case.broken and all(b.problem == problem for b in case.broken)


def test_a_culprit_of_renames_and_binary_files_only_has_no_hunk_evidence(session, tmp_path: Path) -> None:
    make_history(tmp_path / "lib", moves_only=True)
    create_repository(session, tmp_path / "lib", name="lib")
    bisect_id, shas, localize_id = bisect_and_localize(session)
    (target,) = jobs.get(session, localize_id).spec.targets
    assert target.skipped == ("no text hunk in a file the trials imported (binary file; not imported by the trial; "
                              "renamed from lib/io.py)")
    drive(session, localize_id, localize_truth(shas, 5))
    assert jobs.get(session, localize_id).status.value == "succeeded"
    (line,) = why_lines(hunks.hunk_evidence(session, bisect_id, shas[5]))
    assert line.startswith("hunk: no evidence of this kind, because no text hunk")


def test_the_localization_job_reads_and_follows_like_any_job(session, cleanup_repo) -> None:
    from perfbisect.cli.common import exit_code
    from perfbisect.cli.follow import progress_line
    from perfbisect.service.reports.culprits import report_lines

    _bisect_id, shas, localize_id = bisect_and_localize(session)
    drive(session, localize_id, localize_truth(shas, 5))
    read = views.job_read(session, jobs.get(session, localize_id))
    assert read.kind == "localize" and read.status == "succeeded" and exit_code(read) == 0
    assert "succeeded" in progress_line(read, 1.0)
    assert report_lines(read)
