"""Retention of raw samples, on the real PostgreSQL (and the CLI on the embedded SQLite): past
the retention a finished job's trials lose their raw samples and nothing else; a job still
running, or a trial finished recently, keeps them."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, select, update
from typer.testing import CliRunner

from perfbisect.cli.main import app
from perfbisect.service.jobs import service as jobs
from perfbisect.service.models import CasePoint, JobStatus, Measurement, MeasurementSamples, Trial, utcnow
from perfbisect.service.trials import retention
from tests.test_cli_outcomes import embedded, finished_job  # noqa: F401
from tests.test_job_rounds import CASE_BIG, CASE_SMALL, harness_result, repo, run_job, submit  # noqa: F401

OLD = timedelta(days=200)


def steady(i, rng):
    return harness_result({CASE_BIG: 1.0, CASE_SMALL: 1.0}, rng)


def age(session, job_id: int, by: timedelta) -> None:
    session.execute(update(Trial).where(Trial.job_id == job_id).values(finished_at=utcnow() - by))
    session.flush()


def samples_of_job(session, job_id: int) -> int:
    return session.scalar(select(func.count()).select_from(MeasurementSamples)
                          .join(Measurement, Measurement.id == MeasurementSamples.measurement_id)
                          .join(Trial, Trial.id == Measurement.trial_id).where(Trial.job_id == job_id))


def summaries(session, job_id: int) -> list:
    rows = session.execute(select(Measurement.id, Measurement.ratio, Measurement.value).join(Trial)
                           .where(Trial.job_id == job_id).order_by(Measurement.id)).all()
    return [tuple(r) for r in rows] + [tuple(r) for r in session.execute(
        select(CasePoint.case_id, CasePoint.revision_id, CasePoint.ratio).order_by(CasePoint.id)).all()]


def test_old_samples_of_finished_jobs_go_and_everything_else_stays(session, repo, client) -> None:
    old, recent, running = submit(session), submit(session, min_effect=0.05), submit(session, min_effect=0.07)
    for job_id in (old, recent, running):
        run_job(session, job_id, steady)
    jobs.get(session, running).status = JobStatus.running  # as if its last round were in flight
    age(session, old, OLD)
    age(session, running, OLD)
    age(session, recent, timedelta(days=10))
    kept = {j: samples_of_job(session, j) for j in (old, recent, running)}
    assert all(kept.values())
    before = summaries(session, old)

    before_cutoff = retention.cutoff(180)
    assert retention.due(session, before_cutoff) == retention.Pruned(
        session.scalar(select(func.count()).where(Trial.job_id == old)), kept[old])
    first = retention.prune_batch(session, before_cutoff, limit=4)
    assert first.trials == 4 and 0 < first.samples < kept[old]  # a batch is a batch
    while retention.prune_batch(session, before_cutoff).trials:
        pass
    assert samples_of_job(session, old) == 0
    assert samples_of_job(session, recent) == kept[recent] and samples_of_job(session, running) == kept[running]
    assert summaries(session, old) == before  # measurements and case points untouched
    assert retention.due(session, before_cutoff) == retention.Pruned(0, 0)

    # The API tells pruned samples from samples never stored, and the outcome is still there.
    job = client.get(f"/api/jobs/{old}").json()
    assert job["status"] == "succeeded" and job["outcome"]["verdict"] == "unchanged"
    [trial] = client.get(f"/api/jobs/{old}/trials", params={"samples": True, "limit": 1}).json()
    assert trial["samples_pruned_at"] is not None
    assert {m["samples"] for m in trial["measurements"].values()} == {None}
    assert all(m["ratio"] is not None for m in trial["measurements"].values())
    [fresh] = client.get(f"/api/jobs/{recent}/trials", params={"samples": True, "limit": 1}).json()
    assert fresh["samples_pruned_at"] is None and all(m["samples"] for m in fresh["measurements"].values())


def test_the_cli_prunes_in_batches_and_a_dry_run_deletes_nothing(embedded, tmp_path: Path) -> None:  # noqa: F811
    from perfbisect.service.db import session_scope

    job_id = finished_job(tmp_path, steady)
    with session_scope() as session:
        age(session, job_id, OLD)
        stored = samples_of_job(session, job_id)
    runner = CliRunner()
    dry = runner.invoke(app, ["db", "prune-samples", "--dry-run"])
    assert dry.exit_code == 0 and f"({stored} rows)" in dry.output, dry.output
    recent = runner.invoke(app, ["db", "prune-samples", "--older-than", "365"])
    assert recent.exit_code == 0 and "(0 rows)" in recent.output
    done = runner.invoke(app, ["db", "prune-samples"])
    assert done.exit_code == 0 and f"({stored} rows) finished over 180 days ago" in done.output, done.output
    with session_scope() as session:
        assert samples_of_job(session, job_id) == 0
        assert session.scalar(select(func.count()).select_from(Measurement)) > 0
    bad = runner.invoke(app, ["db", "prune-samples", "--older-than", "0"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_the_embedded_server_prunes_at_start_and_then_hourly(embedded, tmp_path: Path) -> None:  # noqa: F811
    import time

    from perfbisect import dispatch
    from perfbisect.service.db import session_scope

    job_id = finished_job(tmp_path, steady)
    with session_scope() as session:
        age(session, job_id, OLD)
    just_now = time.monotonic()
    pruned = dispatch.embedded_upkeep({dispatch.PRUNE_SAMPLES: just_now})
    assert pruned[dispatch.PRUNE_SAMPLES] == just_now  # pruned under an hour ago: it waits
    with session_scope() as session:
        assert samples_of_job(session, job_id) > 0
    assert dispatch.embedded_upkeep({})[dispatch.PRUNE_SAMPLES] > just_now  # at the server's start
    with session_scope() as session:
        assert samples_of_job(session, job_id) == 0
