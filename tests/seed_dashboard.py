"""A small repository history for the browser tests and the screenshots: 40 commits on GitHub,
four gemm shapes and one rmsnorm case measured by a bisect (3 trials per revision, seeded
noise), a -20% step on one shape at commit 25 (the other cases' effects span zero), a failed
build at commit 12, wrong results from commit 31 (a second job), and a running compare job."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from sqlalchemy.orm import Session

from perfbisect.service.models import (
    Alert,
    AlertCase,
    AlertKind,
    AlertStatus,
    Case,
    Culprit,
    CulpritKind,
    Job,
    JobKind,
    JobStatus,
    Measurement,
    Repository,
    Revision,
    TrackedBranch,
    TrackTrigger,
    Trial,
    TrialStatus,
)
from perfbisect.service.trials.repository import refresh_case_points

COMMITS = 40
STEP_AT, FAILED_AT, WRONG_AT = 25, 12, 31
DEVICE = {"kind": "cuda", "name": "NVIDIA H200", "driver": "570.86", "cuda": "12.8", "torch": "2.11.0",
          "triton": "3.6.0"}
FINGERPRINT = "9f2c" + "0" * 60
GEMM = "minikern.gemm:matmul"
NORM = "minikern.rmsnorm:rmsnorm"
SHAPES = [f"gemm M={m},N={m},K={k},dtype={d}" for m, k, d in
          ((512, 512, "bf16"), (512, 512, "fp16"), (1024, 1024, "bf16"), (1024, 1024, "fp16"))]
STEPPED = SHAPES[0]
NORM_CASE = "rmsnorm N=4096,dtype=bf16"


def sha(i: int) -> str:
    return f"{(i * 2654435761) % 16**10:010x}" + f"{i:030x}"


def seed(session: Session) -> dict:
    rng = random.Random(13)
    repo = Repository(name="minikern", url="https://github.com/acme/minikern.git", env={})
    session.add(repo)
    session.flush()
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    revs = [Revision(repository_id=repo.id, sha=sha(i), subject=f"kernels: change number {i}", pr_number=900 + i,
                     authored_at=t0 + timedelta(hours=6 * i), position=i) for i in range(COMMITS)]
    cases = {name: Case(repository_id=repo.id, suite="gemm", target=GEMM, name=name, params={}) for name in SHAPES}
    cases[NORM_CASE] = Case(repository_id=repo.id, suite="rmsnorm", target=NORM, name=NORM_CASE, params={})
    session.add_all([*revs, *cases.values()])
    spec_cases = [{"suite": c.suite, "target": c.target, "name": c.name, "params": {}} for c in cases.values()]
    spec = {"good": revs[0].sha[:10], "bad": revs[-1].sha[:10], "cases": spec_cases, "min_effect": 0.02,
            "metric": "ratio"}
    bisect = Job(kind=JobKind.bisect, repository_id=repo.id, spec=spec, revision_shas=[r.sha for r in revs],
                 status=JobStatus.succeeded, progress={"revisions": COMMITS, "measured": 22, "trials": 66, "rounds": 6},
                 created_at=t0 + timedelta(days=11), started_at=t0 + timedelta(days=11),
                 finished_at=t0 + timedelta(days=11, hours=1))
    session.add(bisect)
    session.flush()
    measured = sorted({0, 5, 10, 11, 13, 15, 18, 20, 22, 23, 24, 25, 26, 28, 30, 31, 32, 34, 36, 38, 39})
    trials = []
    for i in measured:
        for _ in range(3):
            trial = Trial(job_id=bisect.id, revision_id=revs[i].id, status=TrialStatus.ok, fingerprint=FINGERPRINT,
                          provenance=DEVICE)
            trial.measurements = [_measurement(cases[name], name, i, rng) for name in cases]
            trials.append(trial)
    trials.append(Trial(job_id=bisect.id, revision_id=revs[FAILED_AT].id, status=TrialStatus.build_error))
    session.add_all(trials)
    session.flush()
    for trial in trials:
        refresh_case_points(session, trial, [c.id for c in cases.values()])
    effects = {STEPPED: {"rel": -0.2, "ci": [-0.23, -0.17], "before": 0.95, "after": 0.76, "unit": "TFLOP/s",
                         "before_value": 380.0, "after_value": 304.0},
               NORM_CASE: {"rel": 0.018, "ci": [-0.012, 0.047], "before": 1.0, "after": 1.018, "unit": "GB/s",
                           "before_value": 900.0, "after_value": 916.0}}
    session.add(Culprit(job_id=bisect.id, kind=CulpritKind.performance, first_sha=revs[STEP_AT].sha,
                        last_sha=revs[STEP_AT].sha, revision_id=revs[STEP_AT].id, effects=effects))
    session.add(Culprit(job_id=bisect.id, kind=CulpritKind.correctness, first_sha=revs[WRONG_AT].sha,
                        last_sha=revs[WRONG_AT].sha, revision_id=revs[WRONG_AT].id, effects={}))
    running = Job(kind=JobKind.compare, repository_id=repo.id, spec={**spec, "pr_number": 977},
                  revision_shas=[revs[-2].sha, revs[-1].sha], status=JobStatus.running,
                  progress={"revisions": 2, "measured": 1, "trials": 3},
                  created_at=datetime.now(timezone.utc), started_at=datetime.now(timezone.utc))
    session.add(running)
    session.flush()
    alerts = _alerts(session, repo, cases, revs, bisect, spec_cases)
    return {"repo": repo, "job": bisect, "running": running, "revisions": revs, "alerts": alerts}


def _alerts(session: Session, repo: Repository, cases: dict, revs: list, bisect: Job, spec_cases: list) -> list[Alert]:
    """main tracked on every push with two alerts (the -20% step, bisected by `bisect`, and the
    wrong results), and a nightly branch that never ran."""
    main = TrackedBranch(repository_id=repo.id, branch="main", device_class="h200", cases=spec_cases,
                         trigger=TrackTrigger.push, last_sha=revs[-1].sha,
                         last_run_at=datetime(2026, 11, 11, 6, tzinfo=timezone.utc))
    nightly = TrackedBranch(repository_id=repo.id, branch="release", device_class="h200", cases=spec_cases,
                            trigger=TrackTrigger.schedule, interval_s=86400)
    session.add_all([main, nightly])
    session.flush()
    step = Alert(tracked_branch_id=main.id, kind=AlertKind.regression, status=AlertStatus.new, magnitude=0.2,
                 before_sha=revs[STEP_AT - 1].sha, first_sha=revs[STEP_AT].sha, last_sha=revs[STEP_AT].sha,
                 culprit_first_sha=revs[STEP_AT].sha, culprit_last_sha=revs[STEP_AT].sha, bisect_job_id=bisect.id,
                 comments={}, detections=1)
    step.cases = [AlertCase(case=cases[STEPPED], kind=AlertKind.regression, rel=-0.2, pvalue=0.001,
                            mean_before=0.95, mean_after=0.76)]
    wrong = Alert(tracked_branch_id=main.id, kind=AlertKind.wrong_results, status=AlertStatus.new, magnitude=0.0,
                  before_sha=revs[WRONG_AT - 1].sha, first_sha=revs[WRONG_AT].sha, last_sha=revs[WRONG_AT].sha,
                  comments={}, detections=1)
    wrong.cases = [AlertCase(case=cases[NORM_CASE], kind=AlertKind.wrong_results)]
    session.add_all([step, wrong])
    session.flush()
    bisect.spec = bisect.spec.updated(alert_id=step.id)
    session.flush()
    return [step, wrong]


def _measurement(case: Case, name: str, i: int, rng: random.Random) -> Measurement:
    control = 400.0 if case.target == GEMM else 900.0
    ratio = 0.95 * (0.8 if name == STEPPED and i >= STEP_AT else 1.0) * rng.gauss(1.0, 0.012)
    if name != STEPPED:
        ratio = (1.0 if case.target == NORM else 0.9) * rng.gauss(1.0, 0.012)
    unit = "TFLOP/s" if case.target == GEMM else "GB/s"
    return Measurement(case_id=case.id, status="ok", value=ratio * control, control_value=control, ratio=ratio,
                       unit=unit)
