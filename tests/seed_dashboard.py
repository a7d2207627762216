"""A small repository history for the browser tests and the screenshots: 40 commits on GitHub,
four gemm shapes and one rmsnorm case measured by a bisect (3 trials per revision, seeded
noise), a -20% step on one shape at commit 25 (the other cases' effects span zero), a failed
build at commit 12, wrong results from commit 31 (a second job), and a running compare job.
Every kind of page the dashboard has, filled as a real run fills it: the bisect's attribution
at the head (two culprits that interact), a finished compare of a pull request with a long
subject, and tracking's alerts of every kind (a bisected regression, wrong results, a one-commit
improvement reached by two branches, a broken head whose import failed)."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from sqlalchemy.orm import Session

from perfbisect.service.models import (
    Alert,
    AlertBranch,
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
SECOND_AT, IMPROVED_AT = 28, 36  # the attribution's second culprit; a one-commit improvement (no bisect)
# Long subjects, as real pull requests have: the compare form lists them, the pages wrap them.
SUBJECTS = {STEP_AT: "gemm: stage the K loop through shared memory with a double buffer and a wider vector load "
                     "for bf16 (autotuned on the nightly shapes)",
            SECOND_AT: "gemm: drop the split-K heuristic's special case for square shapes of 512 and below"}
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
    revs = [Revision(repository_id=repo.id, sha=sha(i), subject=SUBJECTS.get(i, f"kernels: change number {i}"),
                     pr_number=900 + i, authored_at=t0 + timedelta(hours=6 * i), position=i) for i in range(COMMITS)]
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
    # the control moved too: the step cell says so at length (it wrapped behind a scroll at 1400 px)
    effects = {STEPPED: {"rel": -0.2, "ci": [-0.23, -0.17], "before": 0.95, "after": 0.76, "unit": "TFLOP/s",
                         "before_value": 380.0, "after_value": 304.0, "control_step": -0.306},
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
    attribution = _attribution(session, repo, revs, bisect)
    compare = _compare(session, repo, revs, spec)
    alerts = _alerts(session, repo, cases, revs, bisect, spec_cases)
    return {"repo": repo, "job": bisect, "running": running, "revisions": revs, "alerts": alerts,
            "attribution": attribution, "compare": compare}


def _estimate(rel: float, half: float) -> dict:
    return {"rel": rel, "ci": [rel - half, rel + half], "paired": True}


def _attribution(session: Session, repo: Repository, revs: list, bisect: Job) -> Job:
    """The attribution job of `bisect` at its bad end: its two culprits on the stepped case,
    each reverted alone and both together, interacting (what the demo's attribution reports)."""
    culprits = [{"index": n, "label": f"#{900 + at}", "first_sha": revs[at].sha, "last_sha": revs[at].sha,
                 "subject": SUBJECTS[at], "reverts_cleanly": True, "problem": None}
                for n, at in enumerate((STEP_AT, SECOND_AT))]
    recoveries = [{**_estimate(rel, 0.03), "variant": key, "culprits": members, "ratio": ratio, "value": ratio * 400,
                   "metric": _estimate(rel, 0.035), "trials": 8, "blocks": 4}
                  for key, members, rel, ratio in (("0", [0], 0.25, 0.95), ("1", [1], 0.11, 0.84),
                                                   ("0+1", [0, 1], 0.72, 1.30))]
    case = {"case": STEPPED, "culprits": [0, 1], "unit": "TFLOP/s", "higher_is_better": True,
            "head": {"ratio": 0.76, "value": 304.0, "trials": 16}, "recoveries": recoveries, "together": "0+1",
            "interaction": _estimate(0.24, 0.05), "verdict": "interact", "interaction_metric": _estimate(0.24, 0.06),
            "conditional": [{"culprit": 0, "other": 1, "with_other": _estimate(0.55, 0.04),
                             "without_other": _estimate(0.25, 0.03)}],
            "clean_sets": [{**_estimate(0.72, 0.03), "variant": "0+1", "culprits": [0, 1], "short": ["0", "1"]}],
            "words": f"#{900 + STEP_AT} and #{900 + SECOND_AT} interact: reverting both recovers +72.0% "
                     f"[+69.0, +75.0], more than the sum of reverting each alone (+25.0% and +11.0%)"}
    result = {"culprits": culprits, "variants": [{"key": r["variant"], "culprits": r["culprits"], "problem": None,
                                                  "trials": 8} for r in recoveries],
              "cases": [case], "head_trials": 16}
    parent = bisect.spec
    job = Job(kind=JobKind.attribute, repository_id=repo.id, revision_shas=[revs[-1].sha], status=JobStatus.succeeded,
              spec={"good": revs[-1].sha[:10], "bad": revs[-1].sha[:10], "good_sha": revs[-1].sha,
                    "bad_sha": revs[-1].sha, "cases": [c for c in parent.cases
                                                                                 if c["name"] == STEPPED],
                    "min_effect": parent.min_effect, "parent_job_id": bisect.id, "side_by_side": True,
                    "culprits": [{k: c[k] for k in ("first_sha", "last_sha", "label", "subject")} for c in culprits],
                    "case_culprits": {STEPPED: [0, 1]}, "variants": ["0", "1", "0+1"]},
              progress={"revisions": 1, "trials": 40, "rounds": 3}, result={"attribution": result},
              created_at=bisect.finished_at, started_at=bisect.finished_at,
              finished_at=bisect.finished_at + timedelta(minutes=20))
    session.add(job)
    session.flush()
    return job


def _compare(session: Session, repo: Repository, revs: list, spec: dict) -> Job:
    """The finished compare of the pull request of the step: regressed on the stepped case."""
    base, head = revs[STEP_AT - 1].sha, revs[STEP_AT].sha
    cases = [{"case": STEPPED, "outcome": "regressed", "ci": [-0.23, -0.17],
              "steps": [{"first_sha": head, "last_sha": head, "rel": -0.2, "ci": [-0.23, -0.17], "regression": True}]},
             {"case": NORM_CASE, "outcome": "unchanged", "bound": 0.021}]
    outcome = {"verdict": "regressed", "counts": {"regressed": 1, "unchanged": 1}, "cases": cases,
               "noise": [{"case": STEPPED, "noise": 0.012, "control_spread": 0.01, "throttled": 0, "samples": 30,
                          "detectable": 0.02, "noisy": False}]}
    job = Job(kind=JobKind.compare, repository_id=repo.id, revision_shas=[base, head], status=JobStatus.succeeded,
              spec={**spec, "good": base[:10], "bad": head[:10], "good_sha": base, "bad_sha": head,
                    "pr_number": 900 + STEP_AT},
              progress={"revisions": 2, "measured": 2, "trials": 6, "rounds": 1}, result={"outcome": outcome},
              created_at=datetime(2026, 11, 8, tzinfo=timezone.utc), started_at=datetime(2026, 11, 8, tzinfo=timezone.utc),
              finished_at=datetime(2026, 11, 8, 0, 5, tzinfo=timezone.utc))
    session.add(job)
    session.flush()
    return job


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
    return [step, wrong, *_tracking_alerts(session, repo, cases, revs, main, nightly, spec_cases)]


def _tracking_alerts(session: Session, repo: Repository, cases: dict, revs: list, main: TrackedBranch,
                     nightly: TrackedBranch, spec_cases: list) -> list[Alert]:
    """A one-commit improvement (its culprit named without a bisect, on the track job that measured
    its head; the release branch reached it too) and a broken head (the newest track job's trial
    at the head failed to import)."""
    track = Job(kind=JobKind.track, repository_id=repo.id, revision_shas=[r.sha for r in revs[IMPROVED_AT - 1:]],
                status=JobStatus.succeeded, spec={"cases": spec_cases, "tracked_branch_id": main.id, "branch": "main"},
                progress={"revisions": 4, "trials": 12}, created_at=datetime(2026, 11, 10, tzinfo=timezone.utc),
                finished_at=datetime(2026, 11, 10, 1, tzinfo=timezone.utc))
    session.add(track)
    session.flush()
    improved = SHAPES[3]
    session.add(Culprit(job_id=track.id, kind=CulpritKind.performance, first_sha=revs[IMPROVED_AT].sha,
                        last_sha=revs[IMPROVED_AT].sha, revision_id=revs[IMPROVED_AT].id,
                        effects={improved: {"rel": 0.31, "ci": [0.26, 0.36], "before": 0.9, "after": 1.18,
                                            "unit": "TFLOP/s", "higher_is_better": True, "before_value": 360.0,
                                            "after_value": 472.0}}))
    one = Alert(tracked_branch_id=main.id, kind=AlertKind.improvement, status=AlertStatus.acknowledged, magnitude=0.31,
                before_sha=revs[IMPROVED_AT - 1].sha, first_sha=revs[IMPROVED_AT].sha, last_sha=revs[IMPROVED_AT].sha,
                culprit_first_sha=revs[IMPROVED_AT].sha, culprit_last_sha=revs[IMPROVED_AT].sha,
                culprit_pr=900 + IMPROVED_AT, comments={}, detections=2)
    one.cases = [AlertCase(case=cases[improved], kind=AlertKind.improvement, rel=0.31, pvalue=0.002,
                           mean_before=0.9, mean_after=1.18)]
    one.also_on = [AlertBranch(tracked_branch_id=nightly.id, before_sha=revs[IMPROVED_AT - 1].sha,
                               last_sha=revs[IMPROVED_AT].sha)]
    head = revs[-1]
    session.add(Trial(job_id=track.id, revision_id=head.id, status=TrialStatus.import_error,
                      failure_reason="ModuleNotFoundError: No module named 'minikern.gemm_tiles' (minikern/gemm.py line 3)"))
    broken = Alert(tracked_branch_id=main.id, kind=AlertKind.broken, status=AlertStatus.new, magnitude=0.0,
                   before_sha=revs[-2].sha, first_sha=head.sha, last_sha=head.sha, comments={}, detections=1,
                   note=f"the head {head.sha[:10]} failed: import_error")
    session.add_all([one, broken])
    session.flush()
    return [one, broken]


def _measurement(case: Case, name: str, i: int, rng: random.Random) -> Measurement:
    control = 400.0 if case.target == GEMM else 900.0
    ratio = 0.95 * (0.8 if name == STEPPED and i >= STEP_AT else 1.0) * rng.gauss(1.0, 0.012)
    if name != STEPPED:
        ratio = (1.0 if case.target == NORM else 0.9) * rng.gauss(1.0, 0.012)
    unit = "TFLOP/s" if case.target == GEMM else "GB/s"
    return Measurement(case_id=case.id, status="ok", value=ratio * control, control_value=control, ratio=ratio,
                       unit=unit)
