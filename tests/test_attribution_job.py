"""Attribution jobs on the real PostgreSQL, the harness's results fed in directly: a bisect that
names two culprits on one case goes on to an attribution job (created in the round that concludes
it), whose rounds measure the bad end and every variant side by side; the report, the API read
and the PR comment say what each culprit costs at the head and that they interact. A variant
that does not revert cleanly is reported as such, not as an error."""

from __future__ import annotations

import random
from pathlib import Path

from perfbisect.service.attribution import service as attribution
from perfbisect.cli.common import exit_code
from perfbisect.cli.follow import progress_line
from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.jobs.schemas import CompareCreate
from perfbisect.service.jobs import advance, views
from perfbisect.service.jobs import service as jobs
from perfbisect.service.models import JobKind, Trial
from perfbisect.service.reports.culprits import culprit_table
from perfbisect.service.reports.pr_comment import render_culprit_comment, render_job
from perfbisect.service.trials import service as trials
from tests.test_job_rounds import CASE_BIG, CASE_SMALL, harness_result, repo, submit  # noqa: F401

STEPS = {5: 0.8, 11: 0.7}  # two culprits on CASE_BIG: the head runs at 0.56 of the good end


def bisect_truth(index: int, rng: random.Random) -> dict:
    big = 1.0
    for at, factor in STEPS.items():
        big *= factor if index >= at else 1.0
    return harness_result({CASE_BIG: big, CASE_SMALL: 1.0}, rng, noise=0.005)


def drive(session, job_id: int, result_of) -> int | None:
    """advance -> start -> record like the tasks do; returns the follow-up job it created."""
    rng = random.Random(3)
    follow_up = None
    for _ in range(60):
        planned = advance.advance(session, job_id)
        session.flush()
        follow_up = planned.follow_up or follow_up
        if not planned.trial_ids:
            return follow_up
        for trial_id in planned.trial_ids:
            work = trials.start(session, trial_id, worker_host="test")
            if work is not None:
                trials.record(session, trial_id, result_of(work, rng), build_s=0.0)
    raise AssertionError("job did not finish")


def interacting(conflict_with: str | None = None, alone: dict[str, float] | None = None):
    """The head at 0.56; either culprit reverted alone gives 0.8 (or `alone`, by its sha), both
    1.0: each one costs 43% with the other in, 25% (and 30%) without it. `conflict_with`: that
    culprit's reverts conflict."""
    def result_of(work, rng):
        if work.job_id is not None and work.reverts:
            reverted = {sha for first, last in work.reverts for sha in (first, last)}
            if conflict_with in reverted:
                return {"status": "revert_conflict", "cases": [], "device": None,
                        "error": "does not revert cleanly at the head: conflicts in lib/gemm.py"}
            big = 1.0 if len(work.reverts) == 2 else (alone or {}).get(work.reverts[0][1], 0.8)
        else:
            big = 0.56
        return harness_result({CASE_BIG: big}, rng, noise=0.01)
    return result_of


def bisect_then_attribute(session, conflict: int | None = None, alone: dict[int, float] | None = None):
    bisect_id = submit(session)
    attribution_id = drive(session, bisect_id, lambda work, rng: bisect_truth(
        jobs.get(session, bisect_id).revision_shas.index(work.sha), rng))
    assert attribution_id is not None, "two culprits on one case: the attribution follows the bisect"
    bisect = jobs.get(session, bisect_id)
    shas = bisect.revision_shas
    drive(session, attribution_id, interacting(shas[conflict] if conflict is not None else None,
                                               {shas[i]: v for i, v in (alone or {}).items()}))
    return views.job_read(session, jobs.get(session, bisect_id)), jobs.get(session, attribution_id)


def test_two_interacting_culprits_are_attributed(session, repo) -> None:
    read, job = bisect_then_attribute(session)
    assert job.kind == JobKind.attribute and job.status.value == "succeeded"
    assert [c.label for c in job.spec.culprits] == ["#105", "#111"]
    assert job.spec.case_culprits == {CASE_BIG: [0, 1]}  # CASE_SMALL never moved
    assert job.spec.variants == ["0", "1", "0+1"]
    trials_of = session.query(Trial).filter(Trial.job_id == job.id).all()
    per_arm = {}
    for t in trials_of:
        per_arm[t.variant] = per_arm.get(t.variant, 0) + 1
    assert set(per_arm) == {None, "0", "1", "0+1"}
    assert len({n for arm, n in per_arm.items() if arm is not None}) == 1  # same count per variant
    assert job.spec.side_by_side is True  # as its bisect: each variant in blocks with the bad end
    by_block: dict[int, list[Trial]] = {}
    for t in sorted(trials_of, key=lambda t: (t.block or 0, t.block_slot or 0)):
        by_block.setdefault(t.block, []).append(t)
    assert all(t.block is not None for t in trials_of if t.variant is not None)
    for block in (b for number, b in by_block.items() if number is not None):
        v = block[1].variant
        assert v is not None and [t.variant for t in block] == [None, v, v, None]

    assert read.attribution_job_id == job.id
    case = read.attribution.cases[0]
    assert case.case == CASE_BIG and case.verdict == "interact" and case.together == "0+1"
    singles = {r.variant: r.rel for r in case.recoveries}
    assert abs(singles["0"] - (0.8 / 0.56 - 1)) < 0.03 and abs(singles["0+1"] - (1 / 0.56 - 1)) < 0.04
    # log(1/0.56) - 2 log(0.8/0.56) = log(0.56/0.64): -12.5%
    assert abs(case.interaction.rel - (0.56 / 0.64 - 1)) < 0.03 and case.interaction.ci[1] < 0
    assert case.words.startswith("Reverting #105 alone recovers 4") and "; #111 alone 4" in case.words
    assert "they interact (-12." in case.words or "they interact (-13." in case.words or "they interact (-11." in case.words
    assert " costs 4" in case.words and "with #" in case.words and "% without it. " in case.words
    # neither alone recovers what both do (0.8 of 1.0): the pair is the clean set
    assert [(c.variant, c.short) for c in case.clean_sets] == [("0+1", ["0", "1"])]
    assert case.words.endswith(f"Reverting {{#105, #111}} together recovers {case.clean_sets[0].rel * 100:.1f}%; "
                               "neither alone does.")

    own = views.job_read(session, job)
    assert exit_code(own) == 0 and "at its bad end: succeeded" in culprit_table(own)
    assert "#105 + #111 reverted" in culprit_table(own)
    text = culprit_table(read)
    assert "Attribution at the head" in text and "#105 + #111 reverted" in text and ": interact" in text
    md = render_job(read)
    assert "**Attribution at the head**" in md and "| #105 + #111 reverted |" in md and "**interact**" in md
    comment = render_culprit_comment(read, [c for c in read.culprits if c.kind == "performance"][:1])
    assert "| arm | ratio to control | metric | recovery [95% CI] | in the metric [95% CI] |" in comment
    assert case.words in comment
    # the same arithmetic on the metric (TFLOP/s): harness_result's values move with the ratio here
    both = next(r for r in case.recoveries if r.variant == "0+1")
    assert both.metric is not None and abs(both.metric.rel - (1 / 0.56 - 1)) < 0.08
    assert case.interaction_metric is not None and case.interaction_metric.ci[0] < case.interaction_metric.rel


def test_a_culprit_that_does_not_revert_cleanly_is_reported_not_failed(session, repo) -> None:
    read, job = bisect_then_attribute(session, conflict=5)
    assert job.status.value == "succeeded", job.error
    culprits = {c.label: c for c in read.attribution.cases and read.attribution.culprits}
    assert not culprits["#105"].reverts_cleanly
    assert culprits["#105"].problem == "does not revert cleanly at the head: conflicts in lib/gemm.py"
    case = read.attribution.cases[0]
    assert case.interaction is None and {r.variant for r in case.recoveries} == {"1"}
    assert case.words.endswith("#105 does not revert cleanly at the head: conflicts in lib/gemm.py.")
    conflicted = [v for v in read.attribution.variants if v.problem]
    assert {v.key for v in conflicted} == {"0", "0+1"}
    # a conflicting variant is tried in the first round's blocks (two, two of it a block), never again
    again = session.query(Trial).filter(Trial.job_id == job.id, Trial.variant == "0").count()
    assert again == 4


def test_no_attribute_skips_and_post_forces(session, repo) -> None:
    bisect_id = submit(session, attribute=False)
    assert drive(session, bisect_id, lambda work, rng: bisect_truth(
        jobs.get(session, bisect_id).revision_shas.index(work.sha), rng)) is None
    made = attribution.create(session, jobs.get(session, bisect_id), forced=True)
    assert made.created and made.job.kind == JobKind.attribute
    again = attribution.create(session, jobs.get(session, bisect_id), forced=True)
    assert not again.created and again.job.id == made.job.id  # one open attribution per request


def test_the_api_and_the_job_page_show_the_attribution(session, repo, client, sent_tasks) -> None:
    read, job = bisect_then_attribute(session)
    body = client.get(f"/api/jobs/{read.id}").json()
    assert body["attribution_job_id"] == job.id
    assert body["attribution"]["cases"][0]["verdict"] == "interact"
    assert [c["culprits"] for c in body["attribution"]["cases"][0]["clean_sets"]] == [[0, 1]]
    # measured side by side, every estimate is paired on the variant's own blocks
    case = body["attribution"]["cases"][0]
    assert all(r["paired"] and r["blocks"] >= 2 for r in case["recoveries"]) and case["interaction"]["paired"]
    paired = "paired: each variant against the bad end of its own side-by-side blocks ("
    assert client.get(f"/api/jobs/{job.id}").json()["attribution"]["culprits"][1]["label"] == "#111"
    for page_id in (read.id, job.id):
        html = client.get(f"/dashboard/jobs/{page_id}", headers={"Accept": "text/html"}).text
        assert "<h2>Attribution at the head</h2>" in html and "<svg role=\"img\"" in html
        assert "#105 + #111 reverted" in html and "interaction" in html
        assert f"Estimates {paired}" in html and "not yet" not in html
    own_page = client.get(f"/dashboard/jobs/{job.id}", headers={"Accept": "text/html"}).text
    assert "each measured side by side with it (blocks of the bad end, the variant twice" in own_page
    md = client.get(f"/api/jobs/{read.id}/report", params={"format": "markdown"}).text
    assert "**Attribution at the head**" in md and f"_Estimates {paired}" in md
    assert f"({paired}" in culprit_table(read)
    # forcing it again through the API while none is open: a new job, queued after the commit
    accepted = client.post(f"/api/jobs/{read.id}/attribute")
    assert accepted.status_code == 202 and accepted.json()["id"] != job.id
    refused = client.post(f"/api/jobs/{job.id}/attribute")  # an attribution is not a bisect
    assert refused.status_code == 422 and "is not a finished bisect" in refused.json()["detail"]


def test_a_fix_is_checked_against_the_culprits_in_its_base(session, repo) -> None:
    """#105 reverted alone gives 0.7, #111 alone 0.8, both 1.0; a PR on main that recovers what
    reverting #111 does leaves 20% of the 44% lost, which #105 explains (+25% once #111 is fixed)."""
    from tests.gitrepo import git

    read, _job = bisect_then_attribute(session, alone={5: 0.7, 11: 0.8})
    path = repo.url
    git(path, "checkout", "-q", "-b", "fix")
    (Path(path) / "fix.txt").write_text("fixed\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "Fix the second step (#200)")
    body = CompareCreate(repository="lib", base="main", head="fix", pr_number=200, benchmarks=[
        {"suite": "gemm", "target": "minikern.gemm:matmul", "shapes": [CASE_BIG.split(" ", 1)[1]]}])
    compare = jobs.submit_compare(session, body, SYSTEM, fetch=True).job
    base = compare.revision_shas[0]
    drive(session, compare.id, lambda work, rng: harness_result({CASE_BIG: 0.56 if work.sha == base else 0.8}, rng,
                                                                noise=0.01))
    checked = views.job_read(session, jobs.get(session, compare.id)).fix_check
    assert [row.case for row in checked] == [CASE_BIG]
    row = checked[0]
    assert row.culprits == ["#105", "#111"] and abs(row.lost - (0.56 - 1)) < 0.03
    assert row.fixes == "#111" and row.explained_by == ["#105"]
    assert abs(row.left - (0.8 - 1)) < 0.03 and abs(row.predicted_left.rel - 0.25) < 0.04
    assert row.words.startswith("This pull request recovers 4") and "is left: what #105 costs once #111 is fixed" in row.words
    assert row.words in render_job(views.job_read(session, jobs.get(session, compare.id)))
    print(row.words, read.attribution.cases[0].words, sep="\n")


def test_an_attribution_job_says_how_many_trials_it_expects_from_its_first_round(session, repo) -> None:
    """The progress bar counts trials done of trials expected: "0/? trials" in the first round
    was all an attribution job showed (eleventh session)."""
    bisect_id = submit(session)
    attribution_id = drive(session, bisect_id, lambda work, rng: bisect_truth(
        jobs.get(session, bisect_id).revision_shas.index(work.sha), rng))
    first = advance.advance(session, attribution_id)
    session.flush()
    job = jobs.get(session, attribution_id)
    assert job.progress["trials"] == 0 and job.progress["expected_trials"] == len(first.trial_ids) > 0
    assert progress_line(views.job_read(session, job), 0.0).startswith(
        f"job {attribution_id} running: round 1, 0/{len(first.trial_ids)} trials")
