"""A pull request is measured against the merge base of its head and its base branch, not the
branch's tip: a docs-only PR that lags a base branch which moved since it branched off is not
credited with the base's step. End to end on a real git repository and the real database: the
webhook delivery, the task's resolution, the planner's rounds and the gate; the harness is the
edge (trials get stored results of known values, as a worker would store them)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy import select

from perfbisect.service.jobs import repository as jobs_repo
from perfbisect.service.jobs import views as job_views
from perfbisect.service.models import Culprit, Job, TrackedBranch
from perfbisect.service.reports.pr_comment import render_job
from perfbisect.service.webhooks.check import check_verdict
from tests.alerts.test_loop_service import measure
from tests.factories import create_repository
from tests.gitrepo import git, make_repo
from tests.test_webhooks import CASE, deliver, pr_event, resolve, settings  # noqa: F401 - a fixture

NAME = CASE["name"]


def gemm_result(ratio: float) -> dict:
    """A harness result of the PR bot's gemm case at `ratio`, as a worker stores it."""
    return {"status": "ok", "harness_version": "1", "device": {"name": "test-cpu"}, "wall_s": 1.0,
            "cases": [{"suite": "gemm", "target": CASE["target"], "name": NAME, "params": {}, "status": "ok",
                       "median_ratio": ratio, "metric": {"name": "TFLOP/s", "higher_is_better": True,
                                                         "target": ratio, "control": 1.0}}]}


def resolved(session, job_id: int) -> Job:
    """The job once its revisions are known: the request resolved them from the mirror when it
    held every commit already, else its first task does (tests.test_webhooks.resolve)."""
    job = session.get(Job, job_id)
    return job if job.revision_shas else resolve(session, job_id)


@pytest.fixture
def lagging(tmp_path: Path, session) -> dict:
    """main: import, add gemm; a docs-only PR branches off there (#973); then main lands a gemm
    speed-up (#974, +60%). The PR's base is main's tip; its merge base is 'add gemm'."""
    path = tmp_path / "lib"
    shas = make_repo(path, ["initial import (#1)", "add gemm (#2)"])
    git(path, "checkout", "-q", "-b", "docs")
    (path / "README.md").write_text("fix a typo\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "docs: fix a typo (#973)")
    head = git(path, "rev-parse", "HEAD")
    git(path, "checkout", "-q", "main")
    (path / "gemm.py").write_text("# faster\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "faster gemm (#974)")
    tip = git(path, "rev-parse", "HEAD")
    repo = create_repository(session, path, name=f"lib-{uuid.uuid4().hex[:8]}")
    session.add(TrackedBranch(repository_id=repo.id, branch="main", device_class="cpu", cases=[CASE],
                              metric="ratio", min_magnitude=0.05))
    session.flush()
    # 1.0 everywhere but main's tip, which is 60% faster: the base's own step
    values = {tip: 1.6}
    return {"repo": repo, "path": path, "merge_base": shas[1], "tip": tip, "head": head,
            "value_of": lambda sha: values.get(sha, 1.0)}


def test_a_docs_only_pr_lagging_an_improved_base_passes_the_gate_and_is_no_regression(
        client, settings, lagging, session, sent_tasks) -> None:  # noqa: F811
    response = deliver(client, pr_event(lagging["tip"], lagging["head"], number=973,
                                         clone_url=str(lagging["path"])))
    assert response.status_code == 202, response.text
    job = resolved(session, response.json()["job_id"])
    assert job.revision_shas == [lagging["merge_base"], lagging["head"]]
    assert (job.spec["good_sha"], job.spec["base_tip_sha"]) == (lagging["merge_base"], lagging["tip"])

    measure(session, job.id, lagging["value_of"], gemm_result)
    session.expire_all()  # a fresh read, as the task that posts the gate does
    job = jobs_repo.get_job(session, job.id)
    read = job_views.job_read(session, job)
    verdict = check_verdict(read)
    assert verdict.conclusion == "success", verdict.summary
    assert verdict.title == "no performance change (threshold 5.0%)"
    note = (f"Base: the merge base `{lagging['merge_base'][:10]}` of the head and its base branch, not the branch's "
            f"tip `{lagging['tip'][:10]}`: the steps the base made since the head branched off are not the head's.")
    assert verdict.summary.endswith(note)
    assert note in render_job(read)
    assert read.outcome.cases[0].outcome == "unchanged"
    assert session.scalars(select(Culprit).where(Culprit.job_id == job.id)).all() == []
    page = client.get("/dashboard/regressions").text
    assert lagging["head"][:10] not in page and "#973" not in page


def test_a_compare_of_two_given_revisions_still_measures_the_base_as_given(client, lagging, session) -> None:
    response = client.post("/api/jobs/compare", json={
        "repository": lagging["repo"].name, "base": lagging["tip"], "head": lagging["head"],
        "benchmarks": [{"suite": "gemm", "target": CASE["target"], "shapes": ["M=64,N=64,K=64,dtype=fp32"]}]})
    assert response.status_code == 202, response.text
    job = resolved(session, response.json()["id"])
    assert job.revision_shas == [lagging["tip"], lagging["head"]] and "base_tip_sha" not in job.spec
