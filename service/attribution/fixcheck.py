"""The fix check of a compare job: when the pull request's base holds culprits that a finished
bisect named, how much of their step the PR recovers, what is left, and (when the bisect's
culprits were attributed at the head) which culprit explains the remainder. Computed once, when
the compare concludes, from the database alone (positions on the branch, no git); stored as
job.result["fix_check"]. The arithmetic is service/bisect/attribution.py:fix_check."""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfbisect.service.attribution.service import attributions_of, result_of
from perfbisect.service.bisect.attribution import Estimate, fix_check
from perfbisect.service.models import Culprit, CulpritKind, Job, JobKind, JobStatus, Revision

FINISHED_BISECT = (JobStatus.succeeded, JobStatus.inconclusive)


def _estimate(found: dict[str, Any], df: int = 1) -> Estimate:
    """An Estimate back from a stored {rel, ci}: the se recovered from the interval's width."""
    log = math.log1p(found["rel"])
    low, high = (math.log1p(c) for c in found["ci"])
    return Estimate(log, (high - low) / (2 * 1.96), df, found["rel"], tuple(found["ci"]))


def earlier_culprits(session: Session, compare: Job) -> list[tuple[Culprit, Job]]:
    """Performance culprits of finished bisects of the repository at or before the compare's
    base on its branch (by first-parent position), the newest bisect's when several named one."""
    base = session.scalars(select(Revision).where(Revision.repository_id == compare.repository_id,
                                                  Revision.sha == compare.revision_shas[0])).first()
    if base is None or base.position is None:
        return []
    stmt = (select(Culprit, Job).join(Job, Culprit.job_id == Job.id)
            .join(Revision, (Revision.repository_id == Job.repository_id) & (Revision.sha == Culprit.last_sha))
            .where(Job.repository_id == compare.repository_id, Job.kind == JobKind.bisect,
                   Job.status.in_(FINISHED_BISECT), Culprit.kind == CulpritKind.performance,
                   Revision.position.is_not(None), Revision.position <= base.position)
            .order_by(Job.id.desc()))
    seen, found = set(), []
    for culprit, job in session.execute(stmt):
        if culprit.last_sha not in seen:
            seen.add(culprit.last_sha)
            found.append((culprit, job))
    return found


def _pr_step(outcome: dict[str, Any], case: str) -> float | None:
    for row in outcome.get("cases", []):
        if row["case"] == case and row["outcome"] in ("regressed", "improved", "unchanged"):
            return row["steps"][0]["rel"] if row.get("steps") else 0.0
    return None


def check(session: Session, compare: Job) -> list[dict[str, Any]]:
    """Per case of the compare that an earlier culprit moved: the fix check as a dict."""
    outcome = (compare.result or {}).get("outcome") or {}
    rows = []
    earlier = earlier_culprits(session, compare)
    for case in compare.spec.case_names():
        moved = [(c, job) for c, job in earlier if case in c.effects
                 and abs(c.effects[case]["rel"]) >= job.spec.min_effect]
        pr_step = _pr_step(outcome, case)
        if not moved or pr_step is None:
            continue
        rows.append(_row(session, case, moved, pr_step))
    return rows


def _row(session: Session, case: str, moved: list[tuple[Culprit, Job]], pr_step: float) -> dict[str, Any]:
    labels = {c.last_sha: c.last_sha[:10] for c, _ in moved}
    attributed = _attribution_case(session, moved[0][1], case)
    together = singles = None
    by_sha: dict[str, int] = {}
    if attributed is not None:
        report, case_row = attributed
        by_sha = {c["last_sha"]: c["index"] for c in report["culprits"]}
        labels.update({c["last_sha"]: c["label"] for c in report["culprits"]})
        recoveries = {r["variant"]: r for r in case_row["recoveries"]}
        if case_row.get("together") in recoveries:
            together = _estimate(recoveries[case_row["together"]])
            singles = {int(k): _estimate(r) for k, r in recoveries.items() if "+" not in k}
    result = fix_check([c.effects[case]["rel"] for c, _ in moved], pr_step, together, singles)
    culprits = [labels[c.last_sha] for c, _ in moved]
    row = {"case": case, "culprits": culprits, "lost": math.expm1(result.lost), "recovered": pr_step,
           "left": math.expm1(result.left), "share": result.share, "fixes": None, "explained_by": [],
           "predicted_left": None}
    if result.fixes is not None:
        index_label = {i: labels[sha] for sha, i in by_sha.items()}
        row["fixes"] = index_label.get(result.fixes)
        row["explained_by"] = [index_label[i] for i in sorted(singles) if i != result.fixes]
        row["predicted_left"] = {"rel": result.predicted_left.rel, "ci": list(result.predicted_left.ci)}
    row["words"] = words(row)
    return row


def _attribution_case(session: Session, bisect: Job, case: str) -> tuple[dict, dict] | None:
    for job in attributions_of(session, bisect.id):
        report = result_of(job)
        if report is None:
            continue
        for row in report["cases"]:
            if row["case"] == case:
                return report, row
    return None


def words(row: dict[str, Any]) -> str:
    """'This pull request recovers 19.6% of the 25.6% lost at #950 and #930 (76%); 1.4% is left:
    what #930 costs once #950 is fixed (attribution: 1.4% [0.3, 2.5])'."""
    lost = -row["lost"]
    share = f" ({row['share'] * 100:.0f}%)" if row["share"] is not None else ""
    text = (f"this pull request recovers {row['recovered'] * 100:.1f}% of the {lost * 100:.1f}% lost at "
            f"{' and '.join(row['culprits'])}{share}; {-row['left'] * 100:.1f}% is left")
    if row["fixes"] and row["explained_by"]:
        predicted = row["predicted_left"]
        text += (f": what {' and '.join(row['explained_by'])} cost{'s' if len(row['explained_by']) == 1 else ''} "
                 f"once {row['fixes']} is fixed (attribution: {predicted['rel'] * 100:.1f}% "
                 f"[{predicted['ci'][0] * 100:.1f}, {predicted['ci'][1] * 100:.1f}])")
    return text[0].upper() + text[1:] + "."
