"""Side-by-side blocks in the service (issue 23), on the real PostgreSQL and, for the embedded
server, SQLite: a job's pairs are written as A B B A blocks (a search probe's as a short block
beside its reference, issue 46), claimed as one by one worker and run
in that order, their block ids reach the planner (the culprit's interval is the paired one), a
dead worker's block is abandoned and measured anew, a lost block is re-sent whole. The harness's
results are fed in directly (a literal step, no subprocess): the edge mocked is the trial run."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.bisect.paired import block_residual, paired_comparison
from perfbisect.service.jobs import advance, views
from perfbisect.service.jobs import repository as jobs_repo
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs.schemas import BisectCreate
from perfbisect.service.models import Job, JobStatus, Trial, TrialStatus, utcnow
from perfbisect.service.trials import blocks
from perfbisect.service.trials import reconcile as reconciler
from perfbisect.service.trials import service as trials
from tests.factories import create_repository
from tests.gitrepo import make_repo
from tests.test_job_rounds import harness_result

CASE = "gemm M=256,N=256,K=256,dtype=fp32"
LONG_AGO = timedelta(minutes=10)
STEP_AT = 3  # revision index where the target gets 20% slower


def nothing_queued(_trial_id: int, _queue: str) -> bool:
    return False


def body(commits: int, **kw) -> BisectCreate:
    return BisectCreate(repository="lib", good=f"HEAD~{commits - 1}", bad="main",
                        benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
                                     "shapes": ["M=256,N=256,K=256,dtype=fp32"]}], **kw)


def truth(index: int, rng: random.Random, drift: float = 1.0) -> dict:
    """The target 20% slower from STEP_AT on, times `drift` (what the control does not cancel)."""
    return harness_result({CASE: drift * (0.8 if index >= STEP_AT else 1.0)}, rng, noise=0.005)


def two_ends(index: int, rng: random.Random) -> dict:
    """A two-revision job's truth: the bad end (1) is 20% slower."""
    return truth(STEP_AT if index else 0, rng)


@pytest.fixture
def lib(tmp_path: Path) -> Path:
    path = tmp_path / "lib"
    make_repo(path, [f"change {i}" for i in range(5)])
    return path


def submit(session, lib: Path, commits: int = 5, **kw) -> Job:
    create_repository(session, lib, name="lib")
    return jobs.create_bisect(session, body(commits, **kw), SYSTEM)


def run_job(session, job: Job, drift: tuple[float, ...] = (1.0,)) -> list[tuple[int, str]]:
    """Drive the job as the tasks do: unpaired trials one by one, each block claimed whole by a
    worker of its own; returns (trial id, worker) in the order the trials ran. Round r's trials
    all see the target-only drift `drift[r % len(drift)]`."""
    rng, ran = random.Random(3), []
    for round_number in range(40):
        planned = advance.advance(session, job.id)
        if not planned.trial_ids:
            return ran
        units = [(f"single-{i}", [trials.start(session, i, worker_host=f"single-{i}")]) for i in planned.singles()]
        units += [(f"block-{b[0]}", blocks.claim(session, b, f"block-{b[0]}").works) for b in planned.blocks]
        for worker, works in units:
            for work in works:
                ran.append((work.trial_id, worker))
                result = truth(job.revision_shas.index(work.sha), rng, drift[round_number % len(drift)])
                trials.record(session, work.trial_id, result, build_s=0.0, attempt=work.attempt)
    raise AssertionError("the job did not finish")


def job_read(session, job_id: int):
    """The job as the API shows it, re-read (the test's session holds the job from before its
    culprits were written)."""
    session.expire_all()
    return views.job_read(session, jobs.get(session, job_id))


def by_block(session, job_id: int) -> dict[int, list[Trial]]:
    grouped: dict[int, list[Trial]] = defaultdict(list)
    for trial in jobs_repo.trials_of(session, job_id):
        if trial.block is not None:
            grouped[trial.block].append(trial)
    return {block: sorted(ts, key=lambda t: t.block_slot) for block, ts in grouped.items()}


def test_a_culprits_pair_is_measured_in_abba_blocks_run_in_order_on_one_worker(session, lib) -> None:
    job = submit(session, lib)
    ran = run_job(session, job)
    read = job_read(session, job.id)
    assert read.status == "succeeded"
    assert [(c.first_sha, c.exact) for c in read.culprits] == [(job.revision_shas[STEP_AT], True)]

    grouped = by_block(session, job.id)
    order = [trial_id for trial_id, _ in ran]
    pairs, probes = [], []
    for number, block in grouped.items():
        index = [job.revision_shas.index(t.revision.sha) for t in block]
        a, b = index[0], index[1]
        if len(block) == 2:  # a search probe's short block (issue 46): the reference, then the probe
            probes.append((a, b))
        else:
            assert index == [a, b, b, a] and a < b, index
            pairs.append((a, b))
        assert [t.block_slot for t in block] == list(range(len(block)))
        assert len({t.worker_host for t in block}) == 1  # one worker ran the whole block
        positions = [order.index(t.id) for t in block]
        assert positions == list(range(positions[0], positions[0] + len(block)))  # in order, nothing between
    assert sorted(grouped) == list(range(1, len(grouped) + 1))  # numbered per job
    assert probes and all(0 < probe < len(job.revision_shas) - 1 for _, probe in probes)
    both = [tuple(sorted(p)) for p in pairs + probes]
    assert both.count((STEP_AT - 1, STEP_AT)) >= 2  # the culprit was confirmed on two blocks at least


def test_the_block_ids_reach_the_planner_and_the_culprit_has_the_paired_interval(session, lib) -> None:
    job = submit(session, lib)
    run_job(session, job)
    timed = jobs_repo.trials_of(session, job.id)
    observations = advance.observations_from(timed, job.revision_shas, "ratio")
    before, after = observations[STEP_AT - 1], observations[STEP_AT]
    shared = set(before.block_values(CASE)) & set(after.block_values(CASE))
    assert len(shared) >= 2 and shared <= set(by_block(session, job.id))
    config = advance.config_of(jobs.get(session, job.id), timed)
    ok = sorted(observations)
    paired = paired_comparison(before, after, CASE, block_residual(observations, ok, CASE),
                               min_effect=config.min_effect, alpha=config.alpha, same_z=config.same_z, at_cap=False)
    [culprit] = job_read(session, job.id).culprits
    assert culprit.effects[CASE].ci == pytest.approx(paired.effect(config.confidence).ci)
    assert culprit.effects[CASE].rel == pytest.approx(-0.2, abs=0.01)


# A target-only drift that lasts one round (a co-tenant, a burst): 5% either way, a literal series.
ROUND_DRIFT = (1.0, 1.0, 1.05, 1.05, 1.0, 0.95, 1.05, 0.95, 1.05, 1.05, 1.0, 1.05, 1.0, 0.95)


def test_each_blocks_trials_share_one_round_and_the_rounds_reach_the_planner(session, lib) -> None:
    """Issue 46: the planner judges the search's short blocks on the trial noise within rounds, so
    each value carries the round it was sent in (`Observation.rounds`): one per block, several per job."""
    job = submit(session, lib)
    run_job(session, job)
    observations = advance.observations_from(jobs_repo.trials_of(session, job.id), job.revision_shas, "ratio")
    for number, block in by_block(session, job.id).items():
        rounds = set()
        for trial in block:
            o = observations[job.revision_shas.index(trial.revision.sha)]
            rounds |= {r for r, b in zip(o.rounds[CASE], o.blocks[CASE]) if b == number}
        assert len(rounds) == 1, (number, rounds)
    assert len({r for o in observations.values() for r in o.rounds[CASE]}) > 2


@pytest.mark.parametrize("side_by_side, named", [(False, [STEP_AT, STEP_AT + 1]), (True, [STEP_AT])])
def test_round_drift_makes_a_false_culprit_only_without_side_by_side(session, lib, side_by_side, named) -> None:
    """The step at STEP_AT is the only one. Confirmed on trials of different rounds, the drift
    between them made a second culprit next to it; confirmed on blocks, it did not. (This series
    is one of 16 random ones of 1.0/0.95/1.05 per round: the one that made a false culprit
    without side by side; with it, none of the 16 did.)"""
    job = submit(session, lib, side_by_side=side_by_side)
    run_job(session, job, ROUND_DRIFT)
    read = job_read(session, job.id)
    assert [job.revision_shas.index(c.last_sha) for c in read.culprits] == named


def test_no_side_by_side_measures_no_blocks(session, lib) -> None:
    job = submit(session, lib, side_by_side=False)
    assert job.spec.side_by_side is False and advance.config_of(job, []).paired_blocks == 0
    run_job(session, job)
    read = job_read(session, job.id)
    assert [c.first_sha for c in read.culprits] == [job.revision_shas[STEP_AT]]
    assert by_block(session, job.id) == {}


def block_round(session, lib: Path) -> tuple[Job, list[list[int]]]:
    """A two-revision job's first round: its two revisions in blocks (side by side from the start)."""
    job = submit(session, lib, commits=2)
    planned = advance.advance(session, job.id)
    assert planned.singles() == [] and len(planned.blocks) == 2
    return job, planned.blocks


def test_a_block_is_claimed_whole_and_a_duplicate_message_gets_nothing(session, lib) -> None:
    job, (block, _other) = block_round(session, lib)
    claim = blocks.claim(session, block, "w1")
    assert [w.trial_id for w in claim.works] == block and not claim.abandoned
    assert [w.sha for w in claim.works] == [job.revision_shas[i] for i in (0, 1, 1, 0)]
    rows = [session.get(Trial, i) for i in block]
    assert {(t.status, t.worker_host) for t in rows} == {(TrialStatus.running, "w1")}
    assert blocks.claim(session, block, "w2").works == []  # the live worker keeps it
    # the worker's heartbeat keeps every trial of the block alive, not only the one running
    for t in rows:
        t.heartbeat_at = utcnow() - LONG_AGO
    assert blocks.check_in(session, [(w.trial_id, w.attempt) for w in claim.works], beat=True)
    assert not reconciler.reconcile(session, lambda _t, _q: True).abandoned


def test_a_dead_workers_block_is_abandoned_and_measured_anew(session, lib) -> None:
    job, (block, other) = block_round(session, lib)
    rng = random.Random(9)
    claim = blocks.claim(session, block, "dead")
    first = claim.works[0]
    trials.record(session, first.trial_id, truth(0, rng), attempt=first.attempt)  # A ran, then the worker died
    for work in blocks.claim(session, other, "alive").works:
        trials.record(session, work.trial_id, two_ends(job.revision_shas.index(work.sha), rng), attempt=work.attempt)
    for trial_id in block[1:]:
        session.get(Trial, trial_id).heartbeat_at = utcnow() - LONG_AGO

    repairs = reconciler.reconcile(session, nothing_queued)
    assert repairs.abandoned == 1 and repairs.jobs == [job.id]
    assert repairs.trials == [] and repairs.blocks == []  # nothing of it is re-run elsewhere
    rest = [session.get(Trial, i) for i in block[1:]]
    assert {(t.status, t.failure_reason) for t in rest} == {(TrialStatus.cancelled, blocks.ABANDONED)}
    late = claim.works[1]
    assert trials.record(session, late.trial_id, two_ends(1, rng), attempt=late.attempt) is None
    assert blocks.claim(session, block, "redelivered").works == []

    planned = advance.advance(session, job.id)  # block 1 measured A alone: one more block is needed
    assert len(planned.blocks) == 1
    assert {session.get(Trial, i).block for i in planned.blocks[0]} == {3}


def test_a_block_interrupted_before_the_reconciler_saw_it_is_abandoned_by_its_next_taker(session, lib) -> None:
    job, (block, _other) = block_round(session, lib)
    claim = blocks.claim(session, block, "dead")
    trials.record(session, claim.works[0].trial_id, truth(0, random.Random(1)), attempt=claim.works[0].attempt)
    for trial_id in block[1:]:
        session.get(Trial, trial_id).heartbeat_at = utcnow() - LONG_AGO
    again = blocks.claim(session, block, "w2")  # the broker gave the dead worker's message back
    assert again.works == [] and again.abandoned and again.job_id == job.id
    assert [session.get(Trial, i).status for i in block] == [TrialStatus.ok] + [TrialStatus.cancelled] * 3


def test_a_block_whose_message_was_lost_is_sent_again_whole(session, lib) -> None:
    job, planned = block_round(session, lib)
    for trial_id in (i for block in planned for i in block):
        session.get(Trial, trial_id).dispatched_at = utcnow() - LONG_AGO
    waiting = set(planned[1])
    repairs = reconciler.reconcile(session, lambda trial_id, _queue: trial_id in waiting)
    assert repairs.blocks == [(planned[0], "cpu")] and repairs.trials == [] and repairs.jobs == []
    assert reconciler.reconcile(session, lambda trial_id, _queue: trial_id in waiting).blocks == []  # sent now


def test_a_cancelled_jobs_block_is_not_run(session, lib) -> None:
    job, (block, _other) = block_round(session, lib)
    jobs.cancel(session, job.id, SYSTEM)
    assert blocks.claim(session, block, "w1").works == []
    assert {session.get(Trial, i).status for i in block} == {TrialStatus.cancelled}


def test_the_embedded_server_runs_blocks_in_order_on_one_thread(tmp_path: Path, lib: Path, monkeypatch) -> None:
    """Embedded `serve`: SQLite, the tasks in-process on two threads. Every block's four trials
    run one after another on one thread, in A B B A order, and the job names the culprit."""
    from perfbisect import dispatch
    from perfbisect.queue import ADVANCE_JOB
    from perfbisect.service import db
    from perfbisect.service.migrate import upgrade
    from perfbisect.service.settings import get_settings
    from perfbisect.workers import tasks

    url = f"sqlite:///{tmp_path / 'embedded.sqlite'}"
    upgrade(url)
    engine = db.make_engine(url)
    monkeypatch.setattr(db, "get_sessionmaker", lambda: sessionmaker(bind=engine, expire_on_commit=False))
    monkeypatch.setattr(get_settings(), "embedded_workers", 2)
    with Session(engine) as session:
        job = submit(session, lib)
        session.commit()
        job_id, shas = job.id, list(job.revision_shas)
    ran: dict[int, list[int]] = defaultdict(list)  # thread -> trial ids, in the order they ran
    rng, lock = random.Random(4), threading.Lock()

    def execute(work, should_stop=None):
        with lock:
            ran[threading.get_ident()].append(work.trial_id)
            return truth(shas.index(work.sha), rng), 0.0

    monkeypatch.setattr(tasks, "execute", execute)
    dispatch.send(ADVANCE_JOB, job_id)
    dispatch.drain()

    with Session(engine) as session:
        job = jobs.get(session, job_id)
        assert job.status == JobStatus.succeeded, job.error
        read = views.job_read(session, job)
        assert [c.first_sha for c in read.culprits] == [shas[STEP_AT]]
        grouped = by_block(session, job_id)
        assert len(grouped) >= 2
        for block in grouped.values():
            ids = [t.id for t in block]
            [thread] = [th for th, seq in ran.items() if ids[0] in seq]
            start = ran[thread].index(ids[0])
            assert ran[thread][start:start + len(ids)] == ids  # four (A B B A) or a probe's two
        left = session.scalars(select(Trial).where(Trial.job_id == job_id, Trial.status.in_(
            (TrialStatus.pending, TrialStatus.running)))).all()
        assert left == []
    engine.dispose()


@pytest.mark.parametrize("flag, expected", [([], True), (["--no-side-by-side"], False)])
def test_the_cli_sends_side_by_side_unless_told_not_to(monkeypatch, flag, expected) -> None:
    from typer.testing import CliRunner

    from perfbisect.cli import submit as cli_submit
    from perfbisect.cli.main import app

    sent = []
    monkeypatch.setattr(cli_submit, "_submit", lambda request, *args, **kw: sent.append(request))
    monkeypatch.setattr(cli_submit, "_finish", lambda *args: None)
    result = CliRunner().invoke(app, ["bisect", "--repo", "lib", "--good", "HEAD~4", "--bad", "main", "--suite", "gemm",
                                      "--target", "minikern.gemm:matmul", "--shape", "M=64,N=64,K=64,dtype=fp32",
                                      *flag])
    assert result.exit_code == 0, result.output
    assert [r.side_by_side for r in sent] == [expected]


def test_the_embedded_queue_knows_a_blocks_trials_are_queued(monkeypatch) -> None:
    """The reconciler of the embedded server asks whether a trial's message is still queued:
    a block's trials are, while its one message waits."""
    from collections import deque

    from perfbisect import dispatch
    from perfbisect.queue import RUN_BLOCK

    monkeypatch.setattr(dispatch, "_pending", deque())
    dispatch.send(RUN_BLOCK, [11, 12, 13, 14], queue="cpu")
    queued = dispatch.queued_probe()
    assert [queued(i, "cpu") for i in (11, 14, 15)] == [True, True, False]


def submit_compare(session, lib: Path, **kw) -> Job:
    """A pull request's compare: base HEAD~1 against head main (the truth's index 0 and 1)."""
    from perfbisect.service.jobs.schemas import CompareCreate

    create_repository(session, lib, name="lib")
    data = CompareCreate(repository="lib", base="HEAD~1", head="main", benchmarks=body(2).benchmarks, **kw)
    return jobs.submit_compare(session, data, SYSTEM, fetch=True).job


def run_compare(session, job: Job) -> None:
    """As run_job, the head (index 1) 20% slower than the base."""
    rng = random.Random(5)
    for _ in range(40):
        planned = advance.advance(session, job.id)
        if not planned.trial_ids:
            return
        works = [trials.start(session, i, worker_host="single") for i in planned.singles()]
        works += [w for b in planned.blocks for w in blocks.claim(session, b, f"block-{b[0]}").works]
        for work in works:
            trials.record(session, work.trial_id, two_ends(job.revision_shas.index(work.sha), rng), build_s=0.0,
                          attempt=work.attempt)
    raise AssertionError("the compare did not finish")


def test_a_compare_measures_base_and_head_in_abba_blocks_and_its_verdict_is_the_paired_step(session, lib) -> None:
    job = submit_compare(session, lib)
    assert job.spec.side_by_side is True
    run_compare(session, job)
    timed = jobs_repo.trials_of(session, job.id)
    assert timed and all(t.block is not None for t in timed)  # every trial in a block: none measured apart
    grouped = by_block(session, job.id)
    assert len(grouped) >= 2
    for block in grouped.values():
        assert [job.revision_shas.index(t.revision.sha) for t in block] == [0, 1, 1, 0]
        assert len({t.worker_host for t in block}) == 1
    observations = advance.observations_from(timed, job.revision_shas, "ratio")
    config = advance.config_of(jobs.get(session, job.id), timed)
    paired = paired_comparison(observations[0], observations[1], CASE, block_residual(observations, [0, 1], CASE),
                               min_effect=config.min_effect, alpha=config.alpha, same_z=config.same_z, at_cap=False)
    [culprit] = job_read(session, job.id).culprits
    assert culprit.effects[CASE].ci == pytest.approx(paired.effect(config.confidence).ci)
    assert culprit.effects[CASE].rel == pytest.approx(-0.2, abs=0.01)


def test_a_compare_without_side_by_side_measures_no_blocks(session, lib) -> None:
    job = submit_compare(session, lib, side_by_side=False)
    run_compare(session, job)
    assert by_block(session, job.id) == {}
    assert len(job_read(session, job.id).culprits) == 1


@pytest.mark.parametrize("flag, expected", [([], True), (["--no-side-by-side"], False)])
def test_the_cli_sends_a_compare_side_by_side_unless_told_not_to(monkeypatch, flag, expected) -> None:
    from typer.testing import CliRunner

    from perfbisect.cli import submit as cli_submit
    from perfbisect.cli.main import app

    sent = []
    monkeypatch.setattr(cli_submit, "_submit", lambda request, *args, **kw: sent.append(request))
    monkeypatch.setattr(cli_submit, "_finish", lambda *args: None)
    result = CliRunner().invoke(app, ["compare", "--repo", "lib", "--base", "HEAD~1", "--head", "main", "--suite",
                                      "gemm", "--target", "minikern.gemm:matmul", "--shape",
                                      "M=64,N=64,K=64,dtype=fp32", *flag])
    assert result.exit_code == 0, result.output
    assert [r.side_by_side for r in sent] == [expected]
