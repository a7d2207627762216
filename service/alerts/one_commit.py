"""An alert whose range is one commit needs no bisect: the measured head after the step is its
culprit. It gets the Culprit row a bisect would have stored, on the track job that measured that
head, with each case's step between the two heads' trials (their medians, the 95% bootstrap
interval, the unit), so the history chart, the regressions list, the alert's comment and the
culprit notification show it like any other culprit. Flushes, never commits."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfbisect.service.bisect.effect import bootstrap_effect
from perfbisect.service.jobs.advance import raw_medians, wrong_effects
from perfbisect.service.job_spec import field as spec_field
from perfbisect.service.models import (Alert, AlertKind, Culprit, CulpritKind, Job, JobKind, Measurement, Revision,
                                      TrackedBranch, Trial, TrialStatus)
from perfbisect.service.tracking import repository as tracking_repo


def _measuring_job(session: Session, tracked: TrackedBranch, trials: Sequence[Trial], sha: str) -> Job | None:
    """The newest track job of the branch with a trial at `sha`."""
    ids = {t.job_id for t in trials if t.revision.sha == sha}
    stmt = (select(Job).where(Job.id.in_(ids), Job.kind == JobKind.track,
                              spec_field(Job.spec, "tracked_branch_id").as_integer() == tracked.id).order_by(Job.id.desc()))
    return session.scalars(stmt).first()


def _side(trials: Sequence[Trial], sha: str, case: str, fingerprint: str | None, ratio: bool) -> list[Measurement]:
    """The case's ok measurements at `sha` with today's fingerprint."""
    return [m for t in trials if t.revision.sha == sha and t.status == TrialStatus.ok and t.fingerprint == fingerprint
            for m in t.measurements if m.case.name == case and m.status == "ok"
            and (m.ratio if ratio else m.value) is not None]


def _effects(trials: Sequence[Trial], tracked: TrackedBranch, alert: Alert, fingerprint: str | None) -> dict:
    """Per case of the alert, its step from the before head's trials to the after head's."""
    ratio, effects = tracked.metric == "ratio", {}
    for row in alert.cases:
        name = row.case.name
        before = _side(trials, alert.before_sha, name, fingerprint, ratio)
        after = _side(trials, alert.last_sha, name, fingerprint, ratio)
        if not before or not after:
            continue
        decide = (lambda m: m.ratio) if ratio else (lambda m: m.value)
        step = bootstrap_effect([decide(m) for m in before], [decide(m) for m in after])
        raw = [sorted(m.value for m in side if m.value is not None) for side in (before, after)]
        effects[name] = {"rel": step.rel, "ci": list(step.ci), "before": step.before, "after": step.after,
                         "unit": after[0].unit, "higher_is_better": True if ratio else after[0].higher_is_better,
                         "before_value": raw[0][len(raw[0]) // 2] if raw[0] else None,
                         "after_value": raw[1][len(raw[1]) // 2] if raw[1] else None}
    return effects


def record(session: Session, tracked: TrackedBranch, alert: Alert) -> Culprit | None:
    """Store the culprit row of a one-commit alert (its culprit is its last head); None when no
    track job of the branch measured that head (nothing to attach the row to)."""
    trials = tracking_repo.finished_trials_at(session, tracked.repository_id, tracked.device_class,
                                              [alert.before_sha, alert.last_sha])
    job = _measuring_job(session, tracked, trials, alert.last_sha)
    if job is None:
        return None
    revision = session.scalars(select(Revision).where(Revision.repository_id == tracked.repository_id,
                                                      Revision.sha == alert.last_sha)).first()
    if alert.kind == AlertKind.wrong_results:
        kind, effects = CulpritKind.correctness, wrong_effects(trials, alert.last_sha, [c.case.name for c in alert.cases])
    else:
        fingerprint = tracking_repo.current_fingerprint(session, tracked.repository_id, tracked.device_class)
        kind, effects = CulpritKind.performance, _effects(trials, tracked, alert, fingerprint)
    culprit = Culprit(job_id=job.id, kind=kind, first_sha=alert.last_sha, last_sha=alert.last_sha,
                      revision_id=revision.id if revision else None, effects=effects)
    session.add(culprit)
    session.flush()
    return culprit


def measured(session: Session, tracked: TrackedBranch, alert: Alert) -> dict[str, dict]:
    """What a raised alert's message says of each case beyond its step: the medians with their
    unit at the heads on both sides (TFLOP/s, GB/s), or a wrong case's error and tolerance."""
    if alert.kind == AlertKind.broken:
        return {}
    trials = tracking_repo.finished_trials_at(session, tracked.repository_id, tracked.device_class,
                                              [alert.before_sha, alert.last_sha])
    names = [c.case.name for c in alert.cases]
    if alert.kind == AlertKind.wrong_results:
        return wrong_effects(trials, alert.last_sha, names)
    before, after = raw_medians(trials, alert.before_sha), raw_medians(trials, alert.last_sha)
    return {name: {"before_value": before[name][0], "after_value": after[name][0], "unit": after[name][1]}
            for name in names if name in before and name in after}
