"""Per-case histories from measurement rows: pure functions, no database.

One case (suite + target + canonical name) is one chart; inside it, one line per fingerprint
(conbench's rule: measurements with different fingerprints are never compared or joined), each
point the median over the trials at one revision, with the control's median as a second line.
Commits are placed on the x axis by their index in the repository's first-parent order, so a
bisect's sparse measurements keep their true distance and a culprit range can be drawn as a band.
"""

from __future__ import annotations

import heapq
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import NamedTuple

from perfbisect.service.bisect.model import stored_step_moved


@dataclass(frozen=True)
class MeasurementRow:
    """One measurement as loaded from the database (a case inside one trial)."""

    suite: str
    target: str
    case: str
    fingerprint: str | None
    sha: str
    job_id: int
    value: float | None
    control_value: float | None
    ratio: float | None
    unit: str | None
    higher_is_better: bool = True
    status: str = "ok"
    trial_status: str = "ok"


class PointRow(NamedTuple):
    """One case's median at one revision for one fingerprint, as stored in case_points. A
    NamedTuple, like RevisionPoint: a year of one case is 10,000 of them per request, and a
    frozen dataclass costs 10 us each to build."""

    suite: str
    target: str
    case: str
    fingerprint: str | None
    sha: str
    position: int
    trials: int
    value: float | None
    control_value: float | None
    ratio: float | None
    unit: str | None
    higher_is_better: bool = True
    value_min: float | None = None
    value_max: float | None = None
    ratio_min: float | None = None
    ratio_max: float | None = None


@dataclass(frozen=True)
class CulpritRow:
    """One culprit as loaded, with the targets its job measured per case name (effects are keyed
    by case name only, so the job's spec says which target a name belongs to)."""

    job_id: int
    kind: str
    first_sha: str
    last_sha: str
    effects: Mapping[str, Mapping[str, object]]
    targets_by_case: Mapping[str, frozenset[str]]
    subject: str | None = None
    pr_number: int | None = None
    min_effect: float = 0.0
    fixed_sha: str | None = None  # correctness: where its bisect saw the case pass again


@dataclass(frozen=True)
class FailedTrialRow:
    """A trial that measured nothing (build_error, import_error, timeout, error), with the
    targets its job measured per case name."""

    job_id: int
    sha: str
    status: str
    targets_by_case: Mapping[str, frozenset[str]]


@dataclass(frozen=True)
class FailedMark:
    """A commit where trials of this case's jobs failed; the bisect skips such commits."""

    index: int
    sha: str
    statuses: tuple[str, ...]


class RevisionPoint(NamedTuple):
    sha: str
    index: int
    value: float
    control_value: float | None
    ratio: float | None
    trials: int
    value_min: float | None = None
    value_max: float | None = None
    ratio_min: float | None = None
    ratio_max: float | None = None


@dataclass(frozen=True)
class Series:
    fingerprint: str | None
    unit: str | None
    higher_is_better: bool
    points: tuple[RevisionPoint, ...]
    measured: int | None = None  # the points before downsampling (None: every point is here)
    columns: dict[str, list] | None = None  # the kept points as JSON columns, where no point is built (dashboards.bounded)

    @property
    def total(self) -> int:
        return len(self.points) if self.measured is None else self.measured


@dataclass(frozen=True)
class StepMark:
    """A culprit on one case: the commits first..last (equal when exact) and the step."""

    kind: str
    first_index: int
    last_index: int
    first_sha: str
    last_sha: str
    rel: float | None
    ci: tuple[float, float] | None
    job_id: int
    subject: str | None = None
    pr_number: int | None = None
    fixed_sha: str | None = None  # correctness: the first commit seen passing again after it

    @property
    def exact(self) -> bool:
        return self.first_sha == self.last_sha

    @property
    def label(self) -> str:
        if self.kind == "correctness":
            return f"wrong results (fixed at {self.fixed_sha[:10]})" if self.fixed_sha else "wrong results"
        return "step" if self.rel is None else f"{self.rel * 100:+.1f}%"


@dataclass
class CaseHistory:
    suite: str
    target: str
    case: str
    series: list[Series] = field(default_factory=list)
    steps: list[StepMark] = field(default_factory=list)
    failed: list[FailedMark] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.suite, self.target, self.case)

    @property
    def units(self) -> list[str]:
        return sorted({s.unit for s in self.series if s.unit})


def merge_commit_orders(sequences: Iterable[Sequence[str]],
                        dates: Mapping[str, datetime | None] | None = None) -> list[str]:
    """One commit order from several first-parent ranges (each oldest first): every range's
    order is kept; commits the ranges do not order against each other are placed by authored
    date, then by when they were first seen. A cycle (ranges that disagree, e.g. after a force
    push) is broken by the same tie rule instead of dropping commits."""
    dates = dates or {}
    seen: dict[str, int] = {}
    after: dict[str, set[str]] = defaultdict(set)
    for seq in sequences:
        for sha in seq:
            seen.setdefault(sha, len(seen))
        for a, b in zip(seq, seq[1:]):
            if a != b:
                after[a].add(b)
    indegree = {sha: 0 for sha in seen}
    for a, successors in after.items():
        for b in successors:
            indegree[b] += 1

    def rank(sha: str) -> tuple:
        date = dates.get(sha)
        return (date is None, date.timestamp() if date else 0.0, seen[sha], sha)

    heap = [rank(sha) for sha, d in indegree.items() if d == 0]
    heapq.heapify(heap)
    order: list[str] = []
    placed: set[str] = set()
    while len(order) < len(seen):
        if not heap:  # a cycle: release the earliest remaining commit
            heap = [min(rank(sha) for sha in seen if sha not in placed)]
        sha = heapq.heappop(heap)[-1]
        if sha in placed:
            continue
        placed.add(sha)
        order.append(sha)
        for nxt in after.get(sha, ()):
            indegree[nxt] -= 1
            if indegree[nxt] == 0 and nxt not in placed:
                heapq.heappush(heap, rank(nxt))
    return order


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def plotted(row: MeasurementRow) -> bool:
    """Only a finished, ok trial's ok measurement with a value is drawn (a failed sample fails
    the result: it is not averaged with the good ones)."""
    return row.trial_status == "ok" and row.status == "ok" and row.value is not None


Order = Sequence[str] | Mapping[str, int]


def index_of(order: Order) -> Mapping[str, int]:
    """sha -> x position: a list of shas is numbered in order; a mapping (the commits' first-parent
    positions) is used as it is."""
    return order if isinstance(order, Mapping) else {sha: i for i, sha in enumerate(order)}


def series_from_points(points: Iterable[PointRow]) -> dict[tuple[str, str, str], list[Series]]:
    """Per case key: one Series per fingerprint from stored per-revision medians (already in
    case, fingerprint, position order), x = the commit's first-parent position."""
    grouped: dict[tuple, list[PointRow]] = defaultdict(list)
    for p in points:
        if p.value is not None:
            grouped[(p.suite, p.target, p.case, p.fingerprint)].append(p)
    result: dict[tuple[str, str, str], list[Series]] = defaultdict(list)
    for (suite, target, case, fingerprint), rows in sorted(grouped.items(), key=lambda kv: (kv[0][:3], kv[0][3] or "")):
        result[(suite, target, case)].append(Series(
            fingerprint=fingerprint, unit=rows[0].unit, higher_is_better=rows[0].higher_is_better,
            # positional: a long history's points are built by the thousand, and keywords cost 2x
            points=tuple([RevisionPoint(r.sha, r.position, r.value, r.control_value, r.ratio, r.trials,
                                        r.value_min, r.value_max, r.ratio_min, r.ratio_max) for r in rows])))
    return dict(result)


def series_of(rows: Iterable[MeasurementRow], order: Order) -> dict[tuple[str, str, str], list[Series]]:
    """Per case key (suite, target, case): one Series per fingerprint, a point per revision
    (the median over its trials), in `order`. Rows at commits outside `order` are left out."""
    index = index_of(order)
    grouped: dict[tuple, dict[str, list[MeasurementRow]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if plotted(row) and row.sha in index:
            grouped[(row.suite, row.target, row.case, row.fingerprint)][row.sha].append(row)
    result: dict[tuple[str, str, str], list[Series]] = defaultdict(list)
    for (suite, target, case, fingerprint), by_sha in sorted(grouped.items(), key=lambda kv: (kv[0][:3], kv[0][3] or "")):
        points = []
        for sha in sorted(by_sha, key=index.__getitem__):
            trial_rows = by_sha[sha]
            values = [r.value for r in trial_rows]
            ratios = [r.ratio for r in trial_rows if r.ratio is not None]
            points.append(RevisionPoint(
                sha=sha, index=index[sha], value=_median(values),
                control_value=_median(r.control_value for r in trial_rows),
                ratio=_median(ratios), trials=len(trial_rows), value_min=min(values), value_max=max(values),
                ratio_min=min(ratios, default=None), ratio_max=max(ratios, default=None)))
        first = next(iter(by_sha.values()))[0]
        result[(suite, target, case)].append(
            Series(fingerprint=fingerprint, unit=first.unit, higher_is_better=first.higher_is_better,
                   points=tuple(points)))
    return dict(result)


def steps_of(culprits: Iterable[CulpritRow], order: Order) -> dict[tuple[str, str], list[StepMark]]:
    """Per (target, case name), a StepMark for each culprit touching it: a performance culprit
    marks the cases of its effects that moved (stored_step_moved), a correctness culprit the cases
    that failed accuracy (its effects; every case of its job when it names none). Effects name
    cases only, so the culprit's job says which target each name belongs to. Culprits whose
    commits are outside `order` (a PR head off the branch) are left out."""
    index = index_of(order)
    marks: dict[tuple[str, str], list[StepMark]] = defaultdict(list)
    for c in culprits:
        if c.first_sha not in index or c.last_sha not in index:
            continue
        if c.kind == "performance":
            names = [n for n, e in c.effects.items() if stored_step_moved(e, c.min_effect)]
        else:  # the cases that failed accuracy; every case of the job only for a culprit stored without them
            names = list(c.effects) or list(c.targets_by_case)
        for name in names:
            effect = c.effects.get(name, {})
            ci = effect.get("ci")
            mark = StepMark(
                kind=c.kind, first_index=index[c.first_sha], last_index=index[c.last_sha],
                first_sha=c.first_sha, last_sha=c.last_sha, job_id=c.job_id,
                rel=effect.get("rel"), ci=(float(ci[0]), float(ci[1])) if ci else None,
                subject=c.subject, pr_number=c.pr_number, fixed_sha=c.fixed_sha)
            for target in c.targets_by_case.get(name, frozenset()):
                marks[(target, name)].append(mark)
    return dict(marks)


def failures_of(failed: Iterable[FailedTrialRow], order: Order) -> dict[tuple[str, str], list[FailedMark]]:
    """Per (target, case name), the commits in `order` where a trial of a job measuring that
    case failed, with the distinct failure statuses, in commit order."""
    index = index_of(order)
    statuses: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for f in failed:
        if f.sha in index:
            for name, targets in f.targets_by_case.items():
                for target in targets:
                    statuses[(target, name)][f.sha].add(f.status)
    return {key: [FailedMark(index=index[sha], sha=sha, statuses=tuple(sorted(st)))
                  for sha, st in sorted(by_sha.items(), key=lambda kv: index[kv[0]])]
            for key, by_sha in statuses.items()}


def build_histories(rows: Iterable[MeasurementRow], culprits: Iterable[CulpritRow],
                    order: Order, failed: Iterable[FailedTrialRow] = ()) -> list[CaseHistory]:
    """Every case with at least one plotted point, sorted by suite, target, case, with its
    fingerprint lines, the culprit marks and the failed-trial commits of its (target, case)."""
    return assemble_histories(series_of(rows, order), culprits, order, failed)


def _point_indexes(line: Series) -> list[int]:
    return [p.index for p in line.points] if line.points else list((line.columns or {}).get("index", []))


def _with_fix(mark: StepMark, lines: Sequence[Series], sha_at: Mapping[int, str]) -> StepMark:
    """A wrong-results mark fixed later: a point after it (points are heads measured with right
    results) says where the case passes again, when its bisect did not see the fix."""
    if mark.kind != "correctness" or mark.fixed_sha:
        return mark
    later = [i for line in lines for i in _point_indexes(line) if i > mark.last_index and i in sha_at]
    return replace(mark, fixed_sha=sha_at[min(later)]) if later else mark


def assemble_histories(series: Mapping[tuple[str, str, str], list[Series]], culprits: Iterable[CulpritRow],
                       order: Order, failed: Iterable[FailedTrialRow] = ()) -> list[CaseHistory]:
    """CaseHistory per case of `series`, with the culprit marks and failed commits in `order`."""
    steps = steps_of(culprits, order)
    failures = failures_of(failed, order)
    sha_at = {i: sha for sha, i in index_of(order).items()}
    histories = []
    for (suite, target, case), lines in sorted(series.items()):
        latest: dict[tuple[str, str, str], StepMark] = {}
        for mark in sorted(steps.get((target, case), []), key=lambda m: m.job_id):
            latest[(mark.kind, mark.first_sha, mark.last_sha)] = mark  # re-found by a later job: keep its numbers
        marks = sorted((_with_fix(m, lines, sha_at) for m in latest.values()), key=lambda m: (m.first_index, m.job_id))
        histories.append(CaseHistory(suite=suite, target=target, case=case, series=lines, steps=marks,
                                     failed=failures.get((target, case), [])))
    return histories
