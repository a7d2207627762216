"""Storage for years of tracking, on the real PostgreSQL: raw samples live beside the hot
measurement rows and are read only on request; every stored trial keeps the per-revision case
points (the history index) current; revisions know their first-parent position."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from sqlalchemy import event, func, select

from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.jobs import advance
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs.schemas import BisectCreate
from perfbisect.service.models import Case, CasePoint, Measurement, MeasurementSamples, Revision, Trial
from perfbisect.service.trials import service as trials
from tests.factories import create_repository
from tests.gitrepo import make_repo
from tests.test_job_rounds import CASE_BIG, CASE_SMALL, harness_result


@pytest.fixture
def job_id(session, tmp_path: Path) -> int:
    make_repo(tmp_path / "lib", [f"change {i}" for i in range(6)])
    create_repository(session, tmp_path / "lib", name="lib")
    body = BisectCreate(repository="lib", good="HEAD~3", bad="main",
                        benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
                                     "shapes": ["M=256,N=256,K=256,dtype=fp32", "M=64,N=64,K=64,dtype=fp32"]}])
    return jobs.create_bisect(session, body, SYSTEM).id


def store(session, job_id: int, ratios: list[float]) -> list[int]:
    """Run the first round's trials, feeding the given ratios (one per trial) for CASE_BIG."""
    ids = advance.advance(session, job_id).trial_ids
    rng = random.Random(3)
    for trial_id, ratio in zip(ids, ratios, strict=False):
        trials.start(session, trial_id, worker_host="test")
        trials.record(session, trial_id, harness_result({CASE_BIG: ratio, CASE_SMALL: 1.0}, rng))
    session.flush()
    return ids


def test_revisions_of_a_range_carry_their_first_parent_depth(session, job_id) -> None:
    job = jobs.get(session, job_id)
    positions = dict(session.execute(select(Revision.sha, Revision.position)).all())
    # HEAD~3 of a six-commit history is the third commit: depth 2, then 3, 4, 5.
    assert [positions[sha] for sha in job.revision_shas] == [2, 3, 4, 5]


def test_samples_are_stored_beside_the_summary_and_points_track_the_median(session, job_id, client) -> None:
    ids = store(session, job_id, [1.0, 1.2, 0.9] * 10)
    measurement = session.scalars(select(Measurement).where(Measurement.trial_id == ids[0])).first()
    raw = session.get(MeasurementSamples, measurement.id)
    assert raw is not None and raw.samples["ratio"] and "target_ms" in raw.samples

    trials_by_revision: dict[int, list[int]] = {}
    for trial in session.scalars(select(Trial).where(Trial.id.in_(ids))):
        trials_by_revision.setdefault(trial.revision_id, []).append(trial.id)
    revision_id, members = next((r, m) for r, m in trials_by_revision.items() if len(m) >= 2)
    stmt = (select(CasePoint).join(Revision, CasePoint.revision_id == Revision.id)
            .where(CasePoint.revision_id == revision_id))
    points = session.scalars(stmt).all()
    assert len(points) == 2  # one per case, one fingerprint
    big_case = session.scalars(select(Case).where(Case.name == CASE_BIG)).one()
    big = next(p for p in points if p.case_id == big_case.id)
    ratios = sorted(m.ratio for m in session.scalars(
        select(Measurement).where(Measurement.trial_id.in_(members), Measurement.case_id == big.case_id)))
    assert big.trials == len(members)
    assert big.ratio == pytest.approx(ratios[len(ratios) // 2] if len(ratios) % 2 else
                                      (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2)
    assert big.position == session.get(Revision, revision_id).position

    page = client.get(f"/api/jobs/{job_id}/trials", params={"limit": 2}).json()
    assert [t["id"] for t in page] == sorted(ids)[:2]
    assert all("samples" not in m for t in page for m in t["measurements"].values())
    rest = client.get(f"/api/jobs/{job_id}/trials", params={"after": page[-1]["id"], "samples": True}).json()
    assert [t["id"] for t in rest] == sorted(ids)[2:]
    assert all(m["samples"]["ratio"] for t in rest for m in t["measurements"].values())


def test_a_failed_trial_adds_no_point(session, job_id) -> None:
    ids = advance.advance(session, job_id).trial_ids
    trials.start(session, ids[0], worker_host="test")
    trials.record(session, ids[0], harness_result({}, random.Random(1), status="import_error"))
    session.flush()
    assert session.scalars(select(CasePoint)).all() == []


def test_a_trial_without_a_device_stores_no_provenance(session, job_id) -> None:
    """SQL NULL, not a JSON null, also over what an earlier attempt left: the newest-device
    probe skips trials whose provenance IS NULL."""
    ids = advance.advance(session, job_id).trial_ids
    trials.start(session, ids[0], worker_host="test")
    session.get(Trial, ids[0]).provenance = {"name": "an earlier attempt's device"}
    session.flush()
    trials.record(session, ids[0], {**harness_result({}, random.Random(1), status="build_error"), "device": None})
    session.flush()
    assert session.scalar(select(func.count()).select_from(Trial).where(Trial.id == ids[0],
                                                                        Trial.provenance.is_(None))) == 1


def _statements(session) -> list[str]:
    """Record the SQL the session's connection runs from now on."""
    seen: list[str] = []
    event.listen(session.connection(), "before_cursor_execute",
                 lambda _c, _cur, statement, *_a: seen.append(statement))
    return seen


def test_jobs_list_is_light_paged_and_one_query_whatever_its_length(session, job_id, client) -> None:
    body = BisectCreate(repository="lib", good="HEAD~3", bad="main", min_effect=0.05,
                        benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
                                     "shapes": ["M=64,N=64,K=64,dtype=fp32"]}])
    more = [jobs.create_bisect(session, body.model_copy(update={"min_effect": 0.05 + i / 100}), SYSTEM).id for i in range(4)]
    session.flush()
    seen = _statements(session)
    page = client.get("/api/jobs", params={"limit": 3}).json()
    # one query for the page (the token check is the authentication's own)
    selects = [s for s in seen if s.lstrip().upper().startswith("SELECT") and "FROM api_tokens" not in s]
    assert len(selects) == 1, selects
    assert [j["id"] for j in page] == sorted([job_id, *more], reverse=True)[:3]
    first = page[0]
    assert "spec" not in first and "revision_shas" not in first
    assert (first["good"], first["bad"], first["culprits"], first["url"]) == ("HEAD~3", "main", 0, f"/api/jobs/{first['id']}")
    rest = client.get("/api/jobs", params={"before": page[-1]["id"]}).json()
    assert [j["id"] for j in rest] == sorted([job_id, *more], reverse=True)[3:]
