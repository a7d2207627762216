"""All SQL of the dashboard. Read-only: nothing here adds, flushes or commits.

Rows come back as the plain dataclasses of `dashboards.history`, so the charts and histories
are built without a session.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import exists, func, select, union_all
from sqlalchemy.orm import Session, selectinload

from perfbisect.dashboards.history import (
    CulpritRow,
    FailedTrialRow,
    MeasurementRow,
    PointRow,
    RevisionPoint,
    Series,
)
from perfbisect.service.job_spec import JobSpec
from perfbisect.service.models import (
    Case,
    CasePoint,
    Culprit,
    Job,
    JobStatus,
    Measurement,
    Repository,
    Revision,
    Trial,
    TrialStatus,
)

# The columns of a PointRow, in its field order (an empty fingerprint reads as None).
POINT_COLUMNS = (Case.suite, Case.target, Case.name, func.nullif(CasePoint.fingerprint, ""), Revision.sha,
                 CasePoint.position, CasePoint.trials, CasePoint.value, CasePoint.control_value, CasePoint.ratio,
                 CasePoint.unit, CasePoint.higher_is_better, CasePoint.value_min, CasePoint.value_max,
                 CasePoint.ratio_min, CasePoint.ratio_max)
FAILED_TRIALS = (TrialStatus.build_error, TrialStatus.import_error, TrialStatus.timeout, TrialStatus.error)


class RevisionMeta(NamedTuple):
    sha: str
    subject: str
    pr_number: int | None
    authored_at: datetime | None

    @property
    def label(self) -> str:
        pr = f" (#{self.pr_number})" if self.pr_number and f"#{self.pr_number}" not in self.subject else ""
        return f"{self.subject}{pr}"


@dataclass(frozen=True)
class CaseKey:
    suite: str
    target: str
    name: str


def list_repositories(session: Session) -> Sequence[Repository]:
    return session.scalars(select(Repository).order_by(Repository.name)).all()


def repository_by_name(session: Session, name: str) -> Repository | None:
    return session.scalars(select(Repository).where(Repository.name == name)).one_or_none()


def measured_cases(session: Session, repository_id: int) -> list[CaseKey]:
    """The cases of a repository that have at least one point in their history (an index probe
    per case, never a scan of the measurements)."""
    stmt = (select(Case.suite, Case.target, Case.name)
            .where(Case.repository_id == repository_id, exists().where(CasePoint.case_id == Case.id))
            .order_by(Case.suite, Case.target, Case.name))
    return [CaseKey(*row) for row in session.execute(stmt)]


def max_position(session: Session, repository_id: int) -> int | None:
    """The newest first-parent position of the repository's known commits."""
    return session.scalar(select(func.max(Revision.position)).where(Revision.repository_id == repository_id))


def revision_positions(session: Session, repository_id: int, shas: Sequence[str]) -> dict[str, int]:
    """sha -> first-parent position, for the commits of `shas` that are on the branch."""
    stmt = select(Revision.sha, Revision.position).where(
        Revision.repository_id == repository_id, Revision.sha.in_(list(shas)), Revision.position.is_not(None))
    return {sha: position for sha, position in session.execute(stmt)}


# Above this many commits, revision_meta and case_series read the repository's revisions and keep
# the asked ones: an IN list of thousands of bound parameters costs more to send and plan than the scan.
META_IN_LIMIT = 500


def case_keys(session: Session, repository_id: int, *, suite: str | None = None, target: str | None = None,
              case: str | None = None) -> dict[int, tuple[str, str, str]]:
    """case id -> (suite, target, case name) of the repository's cases, optionally one suite,
    target or case."""
    stmt = select(Case.id, Case.suite, Case.target, Case.name).where(Case.repository_id == repository_id)
    for column, wanted in ((Case.suite, suite), (Case.target, target), (Case.name, case)):
        if wanted:
            stmt = stmt.where(column == wanted)
    return {case_id: (s, t, n) for case_id, s, t, n in session.connection().execute(stmt)}


def case_series(session: Session, repository_id: int, *, suite: str | None = None, target: str | None = None,
                case: str | None = None, min_position: int | None = None, max_position: int | None = None,
                ) -> tuple[dict[tuple[str, str, str], list[Series]], dict[str, RevisionMeta]]:
    """Per case key (suite, target, case) of the repository (optionally one suite, target or
    case; optionally only from `min_position` on and up to `max_position`): one Series per fingerprint of its stored
    per-revision medians in position order, and the metadata of their commits.

    Three reads, none joined per point: the matching cases (a handful of rows), their points
    (an index-only range scan over case_points (case_id, position), no strings per point) and
    the points' commits once. Joined per point, PostgreSQL hashed and re-sorted every point and
    each case's and commit's strings were decoded 10,000 times for a year of one case."""
    keys = case_keys(session, repository_id, suite=suite, target=target, case=case)
    if not keys:
        return {}, {}
    # RevisionPoint's fields after the sha (position is its index), then what a series carries once
    points = (select(CasePoint.case_id, func.nullif(CasePoint.fingerprint, ""), CasePoint.revision_id,
                     CasePoint.position, CasePoint.value, CasePoint.control_value, CasePoint.ratio, CasePoint.trials,
                     CasePoint.value_min, CasePoint.value_max, CasePoint.ratio_min, CasePoint.ratio_max,
                     CasePoint.unit, CasePoint.higher_is_better)
              .where(CasePoint.case_id.in_(sorted(keys)), CasePoint.position.is_not(None),
                     CasePoint.value.is_not(None))
              .order_by(CasePoint.case_id, CasePoint.position))
    if min_position is not None:
        points = points.where(CasePoint.position >= min_position)
    if max_position is not None:
        points = points.where(CasePoint.position <= max_position)
    rows = session.connection().execute(points).all()
    commits = _commits_by_id(session, repository_id, {r[2] for r in rows}, min(r[3] for r in rows) if rows else 0)
    sha_of = {rid: meta.sha for rid, meta in commits.items()}
    grouped: dict[tuple[int, str | None], list] = defaultdict(list)
    for r in rows:
        grouped[(r[0], r[1])].append(r)
    series: dict[tuple[str, str, str], list[Series]] = defaultdict(list)
    for (case_id, fingerprint), group in sorted(grouped.items(), key=lambda kv: (keys[kv[0][0]], kv[0][1] or "")):
        series[keys[case_id]].append(Series(
            fingerprint=fingerprint, unit=group[0][12], higher_is_better=group[0][13],
            points=tuple([RevisionPoint._make((sha_of[r[2]], *r[3:12])) for r in group])))
    return dict(series), {meta.sha: meta for meta in commits.values()}


def _commits_by_id(session: Session, repository_id: int, ids: set[int], min_position: int) -> dict[int, RevisionMeta]:
    """revision id -> metadata of the commits `ids` (whose positions are min_position or more)."""
    if not ids:
        return {}
    stmt = select(Revision.id, Revision.sha, Revision.subject, Revision.pr_number, Revision.authored_at)
    if len(ids) <= META_IN_LIMIT:
        stmt = stmt.where(Revision.id.in_(sorted(ids)))
    else:  # a range of the first-parent history (most of its commits measured): keep the asked ones
        stmt = stmt.where(Revision.repository_id == repository_id, Revision.position >= min_position)
    return {rid: RevisionMeta(sha, subject or "", pr_number, authored_at)
            for rid, sha, subject, pr_number, authored_at in session.connection().execute(stmt).all() if rid in ids}


def _point_rows(session: Session, stmt) -> list[PointRow]:
    # Core execution on the session's connection: plain tuples, none of the ORM's row loading.
    return [PointRow._make(r) for r in session.connection().execute(stmt).all()]


# The overview's newest points on PostgreSQL: one LATERAL index-only scan per case, read by the
# driver's cursor (SQLAlchemy's per-value result processing cost more than the query).
_LATEST_PG = """
SELECT c.suite, c.target, c.name, nullif(p.fingerprint, ''), r.sha, p.position, p.trials, p.value, p.control_value,
       p.ratio, p.unit, p.higher_is_better, p.value_min, p.value_max, p.ratio_min, p.ratio_max
FROM cases c
JOIN LATERAL (SELECT fingerprint, revision_id, position, trials, value, control_value, ratio, unit, higher_is_better,
                     value_min, value_max, ratio_min, ratio_max
              FROM case_points WHERE case_id = c.id AND position IS NOT NULL
              ORDER BY position DESC LIMIT %(per_case)s) p ON true
JOIN revisions r ON r.id = p.revision_id
WHERE c.repository_id = %(repository_id)s
"""


def latest_points(session: Session, repository_id: int, per_case: int) -> list[PointRow]:
    """The newest `per_case` points of every case of the repository (for the overview's latest
    value and sparkline), in case, fingerprint and position order; never every point. On
    PostgreSQL one LATERAL index-only scan per case (ix_case_points_case_position, backwards,
    covering every column read; a window over every point took 0.8 s on a year of tracking, and
    reading the ids first and then each point by its key 2,500 heap probes), sorted here rather
    than by the database (a sort on the cases' names under their collation cost more than the
    scans); elsewhere (SQLite, the embedded default) one window query."""
    if session.get_bind().dialect.name == "postgresql":
        with session.connection().connection.driver_connection.cursor(binary=True) as cursor:
            rows = cursor.execute(_LATEST_PG, {"per_case": per_case, "repository_id": repository_id}).fetchall()
        return sorted(map(PointRow._make, rows), key=lambda p: (p.suite, p.target, p.case, p.fingerprint or "",
                                                                  p.position))
    ranked = (select(CasePoint.id, func.row_number().over(partition_by=CasePoint.case_id,
                                                          order_by=CasePoint.position.desc()).label("n"))
              .join(Case, CasePoint.case_id == Case.id)
              .where(Case.repository_id == repository_id, CasePoint.position.is_not(None))).subquery()
    stmt = (select(*POINT_COLUMNS)
            .join(Case, CasePoint.case_id == Case.id).join(Revision, CasePoint.revision_id == Revision.id)
            .where(CasePoint.id.in_(select(ranked.c.id).where(ranked.c.n <= per_case)))
            .order_by(Case.suite, Case.target, Case.name, CasePoint.fingerprint, CasePoint.position))
    return _point_rows(session, stmt)


_LATEST_VERSIONS_PG = """
SELECT c.id, c.suite, c.target, c.name, count(*), sum(p.version), max(p.version)
FROM cases c
JOIN LATERAL (SELECT version FROM case_points WHERE case_id = c.id AND position IS NOT NULL
              ORDER BY position DESC LIMIT %(per_case)s) p ON true
WHERE c.repository_id = %(repository_id)s
GROUP BY c.id ORDER BY c.id
"""


def latest_digest(session: Session, repository_id: int, per_case: int) -> str:
    """Changes whenever latest_points(per_case) would read something else: on PostgreSQL each
    case's count, sum and maximum of its newest points' versions (a number new on every write of
    a point, migration 0017), the same index-only scans without reading the points; elsewhere
    the points themselves."""
    if session.get_bind().dialect.name == "postgresql":
        with session.connection().connection.driver_connection.cursor() as cursor:
            rows = cursor.execute(_LATEST_VERSIONS_PG, {"per_case": per_case, "repository_id": repository_id}).fetchall()
    else:
        rows = latest_points(session, repository_id, per_case)
    return repr((per_case, rows))


# Every culprit and failed trial of the repository's jobs, as text, with what their marks are made
# of: the job's spec (targets, min_effect), the commits' positions, the culprit commit's subject and PR.
_MARKS_PG = """
SELECT md5(coalesce(string_agg(mark, ',' ORDER BY mark), '')) FROM (
    SELECT ROW('c', c.id, c.job_id, c.kind, c.first_sha, c.last_sha, c.fixed_sha, c.effects, j.spec, f.position,
               l.position, l.subject, l.pr_number)::text AS mark
    FROM culprits c JOIN jobs j ON j.id = c.job_id
    LEFT JOIN revisions f ON f.repository_id = j.repository_id AND f.sha = c.first_sha
    LEFT JOIN revisions l ON l.repository_id = j.repository_id AND l.sha = c.last_sha
    WHERE j.repository_id = %(repository_id)s
    UNION ALL
    SELECT ROW('t', t.id, t.job_id, t.status, r.sha, r.position, j.spec)::text
    FROM trials t JOIN jobs j ON j.id = t.job_id JOIN revisions r ON r.id = t.revision_id
    WHERE j.repository_id = %(repository_id)s AND t.status = ANY(%(failed)s)
) marks
"""


def marks_digest(session: Session, repository_id: int) -> str:
    """Changes whenever culprit_rows, failed_trials or the positions of their commits would read
    something else: on PostgreSQL one statement that reads them as text; elsewhere those reads,
    as sorted JSON (a repr would list a frozenset of targets in an order that depends on the
    process's string hashing, so two server processes would disagree)."""
    if session.get_bind().dialect.name == "postgresql":
        with session.connection().connection.driver_connection.cursor() as cursor:
            return cursor.execute(_MARKS_PG, {"repository_id": repository_id,
                                              "failed": [s.name for s in FAILED_TRIALS]}).fetchone()[0]
    culprits, failed = culprit_rows(session, repository_id), failed_trials(session, repository_id)
    shas = sorted({sha for c in culprits for sha in (c.first_sha, c.last_sha)} | {f.sha for f in failed})
    return json.dumps([[asdict(r) for r in culprits], [asdict(r) for r in failed],
                       sorted(revision_positions(session, repository_id, shas).items())], sort_keys=True, default=sorted)


def revision_meta(session: Session, repository_id: int, shas: Sequence[str] | None = None) -> dict[str, RevisionMeta]:
    """sha -> subject, PR number, authored date; all the repository's revisions without `shas`."""
    stmt = select(Revision.sha, Revision.subject, Revision.pr_number, Revision.authored_at).where(
        Revision.repository_id == repository_id)
    wanted = None if shas is None else set(shas)
    if wanted is not None and len(wanted) <= META_IN_LIMIT:
        stmt = stmt.where(Revision.sha.in_(sorted(wanted)))
    return {sha: RevisionMeta(sha, subject or "", pr_number, authored_at)
            for sha, subject, pr_number, authored_at in session.connection().execute(stmt).all()
            if wanted is None or sha in wanted}


def measurement_rows(session: Session, repository_id: int, *, job_id: int | None = None,
                     suite: str | None = None, target: str | None = None,
                     case: str | None = None, shas: Sequence[str] | None = None) -> list[MeasurementRow]:
    """Every measurement of the repository (or of one job), joined to its trial, revision and
    case, optionally narrowed to one suite, target or case name, or to the revisions `shas`."""
    stmt = (
        select(Case.suite, Case.target, Case.name, Trial.fingerprint, Revision.sha, Trial.job_id,
               Measurement.value, Measurement.control_value, Measurement.ratio, Measurement.unit,
               Measurement.higher_is_better, Measurement.status, Trial.status.label("trial_status"))
        .join(Trial, Measurement.trial_id == Trial.id)
        .join(Revision, Trial.revision_id == Revision.id)
        .join(Case, Measurement.case_id == Case.id)
        .where(Revision.repository_id == repository_id, Trial.variant.is_(None))  # a variant is not the commit
        .order_by(Trial.id)
    )
    if job_id is not None:
        stmt = stmt.where(Trial.job_id == job_id)
    if shas is not None:
        stmt = stmt.where(Revision.sha.in_(list(shas)))
    for column, wanted in ((Case.suite, suite), (Case.target, target), (Case.name, case)):
        if wanted:
            stmt = stmt.where(column == wanted)
    return [MeasurementRow(suite=r.suite, target=r.target, case=r.name, fingerprint=r.fingerprint, sha=r.sha,
                           job_id=r.job_id, value=r.value, control_value=r.control_value, ratio=r.ratio,
                           unit=r.unit, higher_is_better=r.higher_is_better, status=r.status,
                           trial_status=r.trial_status.value if hasattr(r.trial_status, "value") else r.trial_status)
            for r in session.execute(stmt)]


def _targets_by_case(spec: JobSpec) -> dict[str, frozenset[str]]:
    targets: dict[str, set[str]] = defaultdict(set)
    for case in spec.cases:
        targets[case["name"]].add(case["target"])
    return {name: frozenset(t) for name, t in targets.items()}


def failed_trials(session: Session, repository_id: int, *, job_id: int | None = None) -> list[FailedTrialRow]:
    """Trials of the repository's jobs (or of one job) that failed as a whole, with the sha; each
    job's spec is read once, not once per failed trial."""
    stmt = (select(Trial.job_id, Revision.sha, Trial.status)
            .join(Revision, Trial.revision_id == Revision.id).join(Job, Trial.job_id == Job.id)
            .where(Job.repository_id == repository_id, Trial.status.in_(FAILED_TRIALS)).order_by(Trial.id))
    if job_id is not None:
        stmt = stmt.where(Trial.job_id == job_id)
    failed = session.execute(stmt).all()
    if not failed:
        return []
    specs = dict(session.execute(select(Job.id, Job.spec).where(Job.id.in_({r.job_id for r in failed}))).all())
    targets = {jid: _targets_by_case(spec) for jid, spec in specs.items()}
    return [FailedTrialRow(job_id=r.job_id, sha=r.sha, status=r.status.value, targets_by_case=targets[r.job_id])
            for r in failed]


def culprit_rows(session: Session, repository_id: int, *, job_id: int | None = None) -> list[CulpritRow]:
    """The culprits of the repository's jobs (or of one job), with the targets each job measured
    per case name and the culprit commit's subject and PR."""
    # Rows of columns, not ORM entities: each ETag of the history and the overview reads these.
    stmt = (select(Culprit.job_id, Culprit.kind, Culprit.first_sha, Culprit.last_sha, Culprit.effects, Culprit.fixed_sha,
                   Job.spec)
            .join(Job, Culprit.job_id == Job.id).where(Job.repository_id == repository_id).order_by(Culprit.id))
    if job_id is not None:
        stmt = stmt.where(Job.id == job_id)
    loaded = session.execute(stmt).all()
    if not loaded:
        return []
    meta = revision_meta(session, repository_id, [c.last_sha for c in loaded])
    rows = []
    for culprit in loaded:
        spec = culprit.spec
        rev = meta.get(culprit.last_sha)
        rows.append(CulpritRow(
            job_id=culprit.job_id, kind=culprit.kind.value, first_sha=culprit.first_sha, last_sha=culprit.last_sha,
            effects=culprit.effects or {}, targets_by_case=_targets_by_case(spec),
            subject=rev.subject if rev else None, pr_number=rev.pr_number if rev else None,
            min_effect=spec.min_effect, fixed_sha=culprit.fixed_sha))
    return rows


def recent_jobs(session: Session, *, status: JobStatus | None = None, repository_id: int | None = None,
                limit: int = 50) -> Sequence[Job]:
    """Newest first, with the repository and culprits loaded (the job read model needs both)."""
    stmt = select(Job).options(selectinload(Job.repository), selectinload(Job.culprits))
    if status is not None:
        stmt = stmt.where(Job.status == status)
    if repository_id is not None:
        stmt = stmt.where(Job.repository_id == repository_id)
    return session.scalars(stmt.order_by(Job.id.desc()).limit(limit)).all()


def job_with_culprits(session: Session, job_id: int) -> Job | None:
    stmt = select(Job).where(Job.id == job_id).options(selectinload(Job.repository), selectinload(Job.culprits))
    return session.scalars(stmt).one_or_none()


def trial_counts(session: Session, job_id: int) -> dict[str, int]:
    """Trial status -> count for one job."""
    stmt = select(Trial.status, func.count()).where(Trial.job_id == job_id).group_by(Trial.status)
    return {(s.value if hasattr(s, "value") else s): n for s, n in session.execute(stmt)}


def trial_phases(session: Session, job_id: int) -> list[dict[str, Any] | None]:
    """The recorded phases of every trial of one job (None where a trial recorded none)."""
    return list(session.scalars(select(Trial.phases).where(Trial.job_id == job_id)))


def trial_builds(session: Session, job_id: int) -> list[dict[str, Any] | None]:
    """What the build cache did in every trial of one job (None where it was not used)."""
    return list(session.scalars(select(Trial.build_cache).where(Trial.job_id == job_id)))


def devices_of(session: Session, fingerprints: Sequence[str]) -> dict[str, dict]:
    """fingerprint -> the provenance (device, driver, CUDA, torch, triton) of its newest trial
    that has one: per fingerprint shown, one backward probe of (fingerprint, id) that stops at
    the first such trial, never a read of all the fingerprint's trials."""
    newest = [select(Trial.fingerprint, Trial.provenance)
              .where(Trial.fingerprint == fp, Trial.provenance.is_not(None))
              .order_by(Trial.id.desc()).limit(1).subquery()
              for fp in sorted({f for f in fingerprints if f})]
    if not newest:
        return {}
    stmt = union_all(*(select(probe.c.fingerprint, probe.c.provenance) for probe in newest))
    return {fp: prov for fp, prov in session.execute(stmt) if prov}


def revision_points(session: Session, repository_id: int, revision_ids: Sequence[int]) -> list[tuple[int, PointRow]]:
    """(revision id, point) of every case at the given revisions, from case_points (what the
    compare view reads: no measurement is loaded)."""
    stmt = (select(CasePoint.revision_id, *POINT_COLUMNS)
            .join(Case, CasePoint.case_id == Case.id).join(Revision, CasePoint.revision_id == Revision.id)
            .where(Case.repository_id == repository_id, CasePoint.revision_id.in_(list(revision_ids)))
            .order_by(Case.suite, Case.target, Case.name, CasePoint.fingerprint))
    return [(revision_id, PointRow._make(rest)) for revision_id, *rest in session.connection().execute(stmt).all()]


def revision_by_ref(session: Session, repository_id: int, ref: str) -> Revision | None:
    """The stored revision whose sha is `ref` or starts with it (7+ characters)."""
    stmt = select(Revision).where(Revision.repository_id == repository_id, Revision.sha.startswith(ref))
    found = session.scalars(stmt.limit(2)).all()
    return found[0] if len(found) == 1 else None


def job_min_effect(session: Session, revision_id: int) -> float | None:
    """The minimum effect of the newest job that measured the revision (None when none has)."""
    stmt = (select(Job.spec).join(Trial, Trial.job_id == Job.id).where(Trial.revision_id == revision_id)
            .order_by(Job.id.desc()).limit(1))
    spec = session.scalar(stmt)
    return spec.min_effect if spec is not None and spec.min_effect else None


def newest_min_effect(session: Session, repository_id: int) -> float | None:
    """The minimum effect of the repository's newest job that has one (an attribution has none)."""
    stmt = select(Job.spec).where(Job.repository_id == repository_id).order_by(Job.id.desc()).limit(20)
    return next((s.min_effect for s in session.scalars(stmt) if getattr(s, "min_effect", None)), None)


def measured_revisions(session: Session, repository_id: int, limit: int = 200) -> list[Revision]:
    """The newest revisions that have case points (what the compare form offers)."""
    stmt = (select(Revision).where(Revision.repository_id == repository_id,
                                   exists().where(CasePoint.revision_id == Revision.id))
            .order_by(Revision.position.desc().nulls_last(), Revision.id.desc()).limit(limit))
    return list(session.scalars(stmt))


def measured_before(session: Session, repository_id: int, revision: Revision) -> Revision | None:
    """The newest revision with case points before `revision` in first-parent order."""
    if revision.position is None:
        return None
    stmt = (select(Revision).where(Revision.repository_id == repository_id, Revision.position < revision.position,
                                   exists().where(CasePoint.revision_id == Revision.id))
            .order_by(Revision.position.desc()).limit(1))
    return session.scalar(stmt)


def finished_culprits(session: Session, *, repository_id: int | None = None, limit: int = 200):
    """(culprit, job, repository) of finished jobs of any outcome, newest first: a culprit is
    written only once confirmed, so an inconclusive (or failed, or cancelled) job's culprits
    are culprits all the same."""
    finished = [s for s in JobStatus if s.finished]
    stmt = (select(Culprit, Job, Repository).join(Job, Culprit.job_id == Job.id)
            .join(Repository, Job.repository_id == Repository.id)
            .where(Job.status.in_(finished))
            .order_by(Culprit.id.desc()).limit(limit))
    if repository_id is not None:
        stmt = stmt.where(Job.repository_id == repository_id)
    return session.execute(stmt).all()


def last_activity(session: Session, job_ids: Sequence[int]) -> dict[int, datetime]:
    """job id -> when one of its trials last started or finished (jobs without trials are left
    out): what tells a slow job from a stalled one. One grouped query over the given jobs."""
    if not job_ids:
        return {}
    latest = func.max(func.coalesce(Trial.finished_at, Trial.started_at, Trial.created_at))
    stmt = select(Trial.job_id, latest).where(Trial.job_id.in_(list(job_ids))).group_by(Trial.job_id)
    return {job_id: when for job_id, when in session.execute(stmt) if when is not None}
