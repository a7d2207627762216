"""The loop after each measurement: change points on every case's history become alerts
(grouped, matched with earlier detections, fixed when the level comes back), an alert whose
range hides unmeasured commits gets a bisect job (at most `max_bisects` per branch at once,
largest first), and a finished bisect names the alert's culprit; a one-commit range names it at
once (service/alerts/one_commit). A head that fails to build or import is a `broken` alert, fixed
by the next head that works. A step whose culprit another branch's alert has is that alert's
(service/alerts/same_change: one alert per change). A head whose calls got noisier or gained a
second mode is a `noisier` or `bimodal` alert (service/alerts/spread, issue 46), raised, triaged,
bisected and notified like a speed step's, never matched with one. Triage through the API.

Flushes, never commits: the task or request owns the transaction and, after its commit, sends
what the returned `Next` lists (bisect jobs to advance, alerts to comment on).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from sqlalchemy.orm import Session

from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.alerts import grouping, history, one_commit, repository, same_change, spread
from perfbisect.service.alerts.grouping import KnownAlert, StepGroup
from perfbisect.service.alerts.schemas import AlertUpdate
from perfbisect.service.bisect.changepoints import compute_change_points
from perfbisect.service.bisect.model import BisectConfig, stored_step_moved
from perfbisect.service.errors import BadRequest, NotFound
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs.schemas import BisectCreate
from perfbisect.service.models import (Alert, AlertCase, AlertChange, AlertKind, AlertStatus, CulpritKind, Job,
                                      JobStatus, TrackedBranch, utcnow)
from perfbisect.service.suites import service as suites
from perfbisect.service.tracking import service as tracking

BISECT_WORKERS = 2  # revisions measured per round of an alert's bisect
# A level needs this many measured heads: an alert waits for 3 heads after a step (each head the
# median of its trials), so one slow head is not an alert. Passed explicitly: the detector's own
# default may be larger.
MIN_HEADS = 3
# A step the detector finds at SUSPECT_PVALUE is re-measured side by side with the head before it
# (when the branch asks for `confirm_trials`); it is an alert only at ALERT_PVALUE. A suspect's
# jump test (which tells a step from a trend) is looser, SUSPECT_TREND_PVALUE: the re-measure of
# the two heads side by side is the test a trend fails (they differ by one commit's worth), while
# the jump test's lines through 3-5 noisy heads a side refused real steps. In the twelfth
# session's quiet tracking demos it lost the demo's -40% step in 2 of 12 runs and the +114% one in
# 1 (bench/RESULTS.md).
SUSPECT_PVALUE, ALERT_PVALUE, SUSPECT_TREND_PVALUE = 0.01, 0.001, 0.1
CLOSED = (AlertStatus.invalid, AlertStatus.expected)  # nobody wants their culprit
SHAPE_KINDS = (AlertKind.noisier, AlertKind.bimodal)  # spread and mode steps (issue 46)
# A spread or mode step is an alert at ALERT_PVALUE (split over the branch's cases) with a bisect's
# bars: a spread 1.5x the level before, a new mode of 5% of the calls (BisectConfig's defaults).
SHAPE_CONFIG = BisectConfig()


@dataclass
class Next:
    """What to send once the transaction has committed."""

    bisect_job_ids: list[int] = field(default_factory=list)
    measure_job_ids: list[int] = field(default_factory=list)  # side-by-side re-measures of suspected steps
    comment_alert_ids: list[int] = field(default_factory=list)
    raised: list[int] = field(default_factory=list)
    named: list[int] = field(default_factory=list)  # alerts whose culprit was named without a bisect


def _known(alert: Alert, branch: history.BranchHistory) -> KnownAlert:
    before, after = branch.position(alert.before_sha), branch.position(alert.last_sha)
    bad = AlertKind.wrong_results if alert.kind == AlertKind.wrong_results else AlertKind.regression
    levels = {c.case.name: (None if bad == AlertKind.wrong_results else c.mean_before)
              for c in alert.cases if c.kind == bad}
    span = (before, after) if before is not None and after is not None else None
    return KnownAlert(alert.id, alert.status.value, alert.kind.value, span, levels)


def _store(session: Session, tracked: TrackedBranch, branch: history.BranchHistory, group: StepGroup,
           alert: Alert | None) -> Alert:
    """Create the group's alert, or narrow and refresh the matched one (its status is kept; once
    its bisect named a culprit, its range stays the one that was bisected)."""
    span = (group.before, group.after)
    if alert is None:
        alert = Alert(tracked_branch_id=tracked.id, status=AlertStatus.new, comments={}, detections=0)
        alert.cases = []
        session.add(alert)
    else:
        known = _known(alert, branch).span
        if known and alert.culprit_first_sha is not None:
            # bisected side by side: that culprit outweighs heads' medians measured at other
            # times (a bisect's heads measured under load moved a demo alert off its culprit)
            span = known
        else:
            span = grouping.overlap(known, span) or span if known else span
    alert.kind = AlertKind(group.kind)
    alert.before_sha, alert.first_sha, alert.last_sha = (branch.shas[span[0]], branch.shas[span[0] + 1],
                                                          branch.shas[span[1]])
    alert.magnitude = group.magnitude
    alert.detections += 1
    alert.updated_at = utcnow()
    if alert.kind == AlertKind.broken and alert.note is None:
        alert.note = f"the head {alert.last_sha[:10]} failed: {branch.broken.get(span[1], 'build_error')}"
    rows = {c.case_id: c for c in alert.cases}
    for step in group.steps:
        if step.kind == grouping.BROKEN:  # the whole head failed: no case of its own
            continue
        case = branch.case_rows[step.case]
        row = rows.get(case.id)
        if row is None:
            row = AlertCase(case=case)
            alert.cases.append(row)
        row.kind = AlertKind.wrong_results if step.kind == grouping.WRONG_RESULTS else AlertKind(step.kind)
        row.rel, row.pvalue, row.mean_before, row.mean_after = step.rel, step.pvalue, step.mean_before, step.mean_after
    session.flush()
    return alert


def _mark_fixed(tracked: TrackedBranch, branch: history.BranchHistory, steps: list[grouping.Step],
                alerts: list[Alert]) -> list[int]:
    """Move open alerts whose level came back to fixed; returns their ids."""
    higher = {h.case: h.higher_is_better for h in branch.cases}
    known = {a.id: _known(a, branch) for a in alerts}
    fixed = []
    for alert in alerts:
        hit = grouping.restoring_step(known[alert.id], steps, higher, tracked.min_magnitude)
        if hit is None:
            continue
        alert.status, alert.updated_at = AlertStatus.fixed, utcnow()
        alert.fixed_by_id = None if alert.kind == AlertKind.broken else next((
            a.id for a in alerts if a.id != alert.id and known[a.id].span
            and grouping.overlap(known[a.id].span, (hit.before, hit.after))), None)
        fixed.append(alert.id)
    return fixed


def _confirmed(session: Session, tracked: TrackedBranch, branch: history.BranchHistory, group: StepGroup,
               remeasures: dict[tuple[int, int], grouping.Remeasure], out: Next) -> bool:
    """Whether a new group may become an alert now; starts its side-by-side re-measure when it
    needs one (a bisect-free track job of its two heads, `confirm_trials` trials each)."""
    verdict = grouping.confirmation(group, remeasures, tracked.min_magnitude)
    if verdict == grouping.REMEASURE:
        try:
            job = tracking.start_remeasure(session, tracked, branch.shas[group.before], branch.shas[group.after])
        except BadRequest:
            return False
        remeasures[group.before, group.after] = grouping.Remeasure(group.before, group.after, None)
        out.measure_job_ids.append(job.id)
    return verdict == grouping.ALERT


def step_detector(min_magnitude: float, confirm: bool) -> grouping.Detector:
    """The change-point detector of a tracked branch's histories: suspects (to re-measure) when the
    branch confirms steps, else alerts. Relative: a head's noise is a share of its level (a ratio
    to the control, a throughput), so the logs are tested."""
    pvalue, trend = (SUSPECT_PVALUE, SUSPECT_TREND_PVALUE) if confirm else (ALERT_PVALUE, ALERT_PVALUE)
    return partial(compute_change_points, min_magnitude=min_magnitude, min_size=MIN_HEADS, pvalue=pvalue,
                   trend_pvalue=trend, relative=True)


def detect(session: Session, tracked_id: int) -> Next:
    """Run the change-point detection over the branch's histories and update its alerts.
    Raises NotFound for an unknown tracked branch."""
    tracked = tracking.get(session, tracked_id, lock=True)
    branch = history.load(session, tracked)
    steps = grouping.detect_steps(branch.cases, step_detector(tracked.min_magnitude, bool(tracked.confirm_trials)))
    steps += branch.broken_steps()
    alerts = {a.id: a for a in repository.of_branch(session, tracked.id)}
    attached = [(a, row) for a, row in repository.attached_to(session, tracked.id)  # other branches' alerts of the same change
                if a.kind not in SHAPE_KINDS]
    known = [_known(a, branch) for a in alerts.values() if a.kind not in SHAPE_KINDS] + same_change.known(attached, branch)
    remeasures = history.remeasures(session, tracked, branch) if tracked.confirm_trials else {}
    rows = {alert.id: row for alert, row in attached}
    out = Next()
    for match in grouping.reconcile(grouping.group_steps(steps), known):
        if match.alert_id in rows:
            same_change.narrow(rows[match.alert_id], branch, match.group)
            continue
        if match.alert_id is None and not _is_new(session, tracked, branch, match.group, remeasures, out):
            continue
        alert = _store(session, tracked, branch, match.group, alerts.get(match.alert_id or -1))
        alerts[alert.id] = alert
        if match.raised:
            out.raised.append(alert.id)
    out.comment_alert_ids += _mark_fixed(tracked, branch, steps, [a for a in alerts.values() if a.kind not in SHAPE_KINDS])
    for alert in _shape_alerts(session, tracked, branch, [a for a in alerts.values() if a.kind in SHAPE_KINDS], out):
        alerts[alert.id] = alert
    session.flush()
    _schedule(session, tracked, branch, list(alerts.values()), out)
    return out


def _shape_alerts(session: Session, tracked: TrackedBranch, branch: history.BranchHistory, known: list[Alert],
                  out: Next) -> list[Alert]:
    """The branch's spread and mode steps (service/alerts/spread) as alerts: a step is the alert of
    its kind that holds its case and whose range overlaps it (refreshed), else a new one (raised).
    Returns the alerts touched."""
    heads = history.call_heads(session, tracked, branch)
    level = ALERT_PVALUE / max(len(heads), 1)
    touched, new = [], []
    for name, case_heads in sorted(heads.items()):
        for step in spread.spread_steps(name, case_heads, level, SHAPE_CONFIG):
            kind = AlertKind(step.finding.kind)
            alert = next((a for a in known if a.kind == kind and {c.case.name for c in a.cases} == {name}
                          and _known(a, branch).span
                          and grouping.overlap(_known(a, branch).span, (step.before, step.after))), None)
            if alert is None:
                alert = Alert(tracked_branch_id=tracked.id, status=AlertStatus.new, comments={}, detections=0, kind=kind)
                alert.cases = [AlertCase(case=branch.case_rows[name], kind=kind)]
                session.add(alert)
                known.append(alert)
                new.append(alert)
            finding, row = step.finding, alert.cases[0]
            if alert.culprit_last_sha is None:  # once named, its range stays the one that was bisected
                alert.before_sha, alert.first_sha, alert.last_sha = (
                    branch.shas[step.before], branch.shas[step.before + 1], branch.shas[step.after])
            alert.magnitude, alert.detections, alert.updated_at = finding.ratio - 1, alert.detections + 1, utcnow()
            row.rel, row.pvalue, row.mean_before, row.mean_after = finding.ratio - 1, finding.pvalue, finding.before, finding.after
            touched.append(alert)
    session.flush()
    out.raised += [a.id for a in new]
    return touched


def _is_new(session: Session, tracked: TrackedBranch, branch: history.BranchHistory, group: StepGroup,
            remeasures: dict[tuple[int, int], grouping.Remeasure], out: Next) -> bool:
    """Whether a group no alert of the branch holds becomes a new alert: once confirmed (when the
    branch confirms steps), and unless it is the step of another branch's alert, which it then
    attaches to (one alert per change)."""
    if tracked.confirm_trials and not _confirmed(session, tracked, branch, group, remeasures, out):
        return False
    twin = same_change.find(session, tracked, branch, group)
    if twin is not None:
        same_change.attach(twin, tracked, branch, group)
        return False
    return True


def _bisect_request(session: Session, tracked: TrackedBranch, alert: Alert) -> BisectCreate:
    names = {c.case.name for c in alert.cases}
    cases = [c for c in tracked.cases if c["name"] in names]
    return BisectCreate(repository=tracked.repository.name, good=alert.before_sha, bad=alert.last_sha,
                        benchmarks=suites.benchmarks_of_cases(session, cases), device_class=tracked.device_class,
                        min_effect=tracked.min_magnitude, metric=tracked.metric, workers=BISECT_WORKERS,
                        policy=tracked.policy)


def _schedule(session: Session, tracked: TrackedBranch, branch: history.BranchHistory, alerts: list[Alert],
              out: Next) -> None:
    """For alerts not triaged away (invalid, expected) and without a culprit: name it when the
    range is one commit; else start bisects, largest first, while fewer than `max_bisects` of the
    branch run."""
    waiting = []
    for alert in alerts:
        if alert.status in CLOSED or alert.culprit_last_sha or alert.bisect_job_id:  # a fixed one is still bisected
            continue
        before, after = branch.position(alert.before_sha), branch.position(alert.last_sha)
        if before is None or after is None:
            continue
        if after - before == 1:  # nothing unmeasured in between: the measured head is the culprit
            alert.culprit_first_sha = alert.culprit_last_sha = alert.last_sha
            if alert.kind not in (AlertKind.broken, *SHAPE_KINDS):  # no speed step to store as a culprit row
                one_commit.record(session, tracked, alert)
                out.named.append(alert.id)
            out.comment_alert_ids.append(alert.id)
        elif alert.kind != AlertKind.broken:  # a bisect skips what does not build: it cannot find this one
            waiting.append(alert)
    free = tracked.max_bisects - repository.running_bisects(session, tracked.id)
    for alert in sorted(waiting, key=lambda a: -a.magnitude)[:max(free, 0)]:
        try:
            job = jobs.create_bisect(session, _bisect_request(session, tracked, alert), SYSTEM)
        except BadRequest as exc:
            alert.note = f"could not bisect: {exc.message}"
            continue
        job.spec = job.spec.updated(alert_id=alert.id)
        alert.bisect_job_id = job.id
        out.bisect_job_ids.append(job.id)
    session.flush()


def culprit_of(job: Job, alert: Alert) -> tuple[str, str] | None:
    """The bisect's culprit for the alert: the correctness one for wrong results, else the
    performance culprit with the largest step on the alert's cases."""
    if alert.kind == AlertKind.wrong_results:
        found = [c for c in job.culprits if c.kind == CulpritKind.correctness]
        return (found[0].first_sha, found[0].last_sha) if found else None
    if alert.kind in SHAPE_KINDS:  # the bisect's noisier or bimodal finding on the alert's case
        names = {c.case.name for c in alert.cases}
        shapes = [s for s in ((job.result or {}).get("outcome") or {}).get("shapes") or []
                  if s.get("case") in names and s.get("kind") == alert.kind.value]
        return (shapes[0]["first_sha"], shapes[0]["last_sha"]) if shapes else None
    names, min_effect = {c.case.name for c in alert.cases}, job.spec.min_effect
    scored = [(max((abs(e["rel"]) for n, e in c.effects.items() if n in names and stored_step_moved(e, min_effect)),
                   default=0.0), c)
              for c in job.culprits if c.kind == CulpritKind.performance]
    scored = [(score, c) for score, c in scored if score > 0]  # a culprit of other cases is not this alert's
    if not scored:
        return None
    culprit = max(scored, key=lambda sc: sc[0])[1]
    return culprit.first_sha, culprit.last_sha


def _name_culprit(session: Session, tracked: TrackedBranch, job: Job, alert: Alert, culprit: tuple[str, str] | None,
                  out: Next) -> None:
    """Store the culprit the alert's bisect named (its comment, and those of alerts it fixed, to
    send), or say that it named none."""
    if culprit is not None:
        alert.culprit_first_sha, alert.culprit_last_sha = culprit
        out.comment_alert_ids.append(alert.id)
        out.comment_alert_ids += [a.id for a in repository.of_branch(session, tracked.id) if a.fixed_by_id == alert.id]
    else:
        alert.note = f"bisect job {job.id} {job.status.value} without naming a culprit for this alert"
    alert.updated_at = utcnow()
    session.flush()


def job_finished(session: Session, job_id: int) -> Next | None:
    """An alert's bisect finished: attach its culprit, then start the next bisects of the branch.
    Returns None when the job is no alert's bisect."""
    alert = repository.by_bisect_job(session, job_id)
    if alert is None:
        return None
    job = jobs.get(session, job_id)
    tracked = tracking.get(session, alert.tracked_branch_id, lock=True)
    out = Next()
    # A culprit is stored only once confirmed: an inconclusive (or failed) bisect's culprits
    # stand although some other case or revision could not be decided.
    culprit = culprit_of(job, alert) if job.status != JobStatus.cancelled else None
    twin = same_change.twin(session, alert, culprit)
    if twin is not None:  # another branch's alert has this culprit: one alert per change, told there
        same_change.fold(session, twin, alert)
    else:
        _name_culprit(session, tracked, job, alert, culprit, out)
    branch = history.load(session, tracked)
    branch = history.load(session, tracked)
    _schedule(session, tracked, branch, list(repository.of_branch(session, tracked.id)), out)
    return out


def get(session: Session, alert_id: int) -> Alert:
    alert = repository.get(session, alert_id)
    if alert is None:
        raise NotFound(f"no alert {alert_id}")
    return alert


TRIAGED_FIELDS = ("status", "assignee", "bug", "note")


def triage(session: Session, alert_id: int, update: AlertUpdate, by: str) -> Alert:
    """Set the fields `update` carries (an empty assignee, bug or note clears it) and record each
    change in alert_changes under `by` (the token's name) with the update's reason. Invalid or
    expected cancels the alert's running bisect; reopening it restarts the bisect. Raises NotFound."""
    alert = repository.get(session, alert_id, lock=True)
    if alert is None:
        raise NotFound(f"no alert {alert_id}")
    now = utcnow()
    for name in TRIAGED_FIELDS:
        wanted = getattr(update, name)
        if wanted is None:
            continue
        old = alert.status.value if name == "status" else getattr(alert, name)
        new = wanted or None
        if new == old:
            continue
        session.add(AlertChange(alert_id=alert.id, at=now, by=by, field=name, old=old, new=new, reason=update.reason))
        if name == "status":
            _set_status(session, alert, AlertStatus(new), now)
        else:
            setattr(alert, name, new)
        alert.triaged_by = by
    alert.updated_at = now
    session.flush()
    return alert


def _set_status(session: Session, alert: Alert, status: AlertStatus, now) -> None:
    """Dismissing (invalid, expected) cancels the running bisect; reopening an alert whose bisect
    was cancelled forgets that job, so the branch's next detection (which the triage request
    queues) starts a new one when a bisect slot is free."""
    reopened = alert.status in CLOSED and status not in CLOSED
    alert.status, alert.triaged_at = status, now
    if alert.bisect_job_id is None or alert.culprit_last_sha:
        return
    job = jobs.get(session, alert.bisect_job_id)
    if alert.status in CLOSED and not job.status.finished:
        jobs.cancel(session, job.id, SYSTEM)
    elif reopened and job.status == JobStatus.cancelled:
        alert.bisect_job_id = None


def triage_many(session: Session, ids: list[int], update: AlertUpdate, by: str) -> list[Alert]:
    """The same triage for every alert in `ids` (in id order, so two bulk requests lock in the
    same order); all or none: an unknown id raises NotFound before anything is kept."""
    return [triage(session, alert_id, update, by) for alert_id in sorted(set(ids))]
