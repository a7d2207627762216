"""What a hunk localization job searches (issue 43): one target per confirmed performance
culprit of a bisect, made when the job is created. Reads the bisect's culprits and trials and
the repository's mirror (the culprit's first-parent diff, a range's combined diff); flushes
nothing. A culprit that cannot be searched is still a target, with the reason it is `skipped`,
so the report says "no evidence of this kind, because ..." rather than nothing."""

from __future__ import annotations

import math
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from perfbisect.gitrepo import GitError, Mirror
from perfbisect.service.attribution.service import attributable, culprit_label
from perfbisect.service.bisect.hunks import SplitDiff, keep_imported, split_diff
from perfbisect.service.hunks.variants import MAX_HUNKS
from perfbisect.service.job_spec import LocalizeTarget, SpecHunk
from perfbisect.service.models import Culprit, Job, Repository, Revision, Trial
from perfbisect.service.repos.repository import revisions_by_sha
from perfbisect.service.settings import get_settings

CONTROL_OWN = ("the step is the control's own (what ran beside the kernel changed, the same code at both ends): "
               "no hunk of the culprit's diff carries it")


def targets_of(session: Session, parent: Job, culprits: Sequence[Culprit]) -> list[LocalizeTarget]:
    """One target per performance culprit that moved a case, in the bisect's order."""
    chosen, case_culprits = attributable(parent, culprits, minimum=1)
    if not chosen:
        return []
    repo = session.get_one(Repository, parent.repository_id)
    mirror = Mirror(get_settings().mirrors_dir.resolve(), repo.name, repo.url)
    revisions = revisions_by_sha(session, parent.repository_id, [c.last_sha for c in chosen])
    out = []
    for index, culprit in enumerate(chosen):
        cases = [case for case, found in case_culprits.items() if index in found]
        out.append(_target(session, parent, mirror, culprit, cases, culprit_label(culprit, revisions)[0]))
    return out


def _target(session: Session, parent: Job, mirror: Mirror, culprit: Culprit, cases: list[str],
            label: str) -> LocalizeTarget:
    shas = parent.revision_shas
    first, last = shas.index(culprit.first_sha), shas.index(culprit.last_sha)
    base = LocalizeTarget(label=label, first_sha=culprit.first_sha, last_sha=culprit.last_sha,
                          parent_sha=shas[first - 1] if first else None, commits=last - first + 1)
    steps = {case: math.log1p(culprit.effects[case]["rel"]) for case in cases
             if case in culprit.effects and culprit.effects[case].get("control_step") is None}
    if not steps:
        return base.model_copy(update={"skipped": CONTROL_OWN})
    if base.parent_sha is None:
        return base.model_copy(update={"skipped": "the culprit is the range's first commit: no parent to apply hunks to"})
    try:
        split = split_diff(mirror.culprit_diff(culprit.first_sha, culprit.last_sha))
    except GitError as exc:
        return base.model_copy(update={"skipped": f"the culprit's diff could not be read: {exc}"})
    imported = imported_files(session, parent.id, [base.parent_sha, culprit.last_sha])
    kept = keep_imported(split, imported) if imported else split
    aside = [{"path": a.path, "reason": a.reason} for a in kept.set_aside]
    fields = {"cases": steps, "set_aside": aside, "complete": len(kept.hunks) == len(split.hunks) and not split.set_aside,
              "hunks": [SpecHunk(index=h.index, path=h.path, old_start=h.old_start, old_len=h.old_len,
                                 new_start=h.new_start, new_len=h.new_len, lines=list(h.lines), header=list(h.header),
                                 section=h.section) for h in kept.hunks]}
    reason = _nothing_to_search(kept)
    return base.model_copy(update={**fields, "skipped": reason, **({"hunks": []} if reason else {})})


def _nothing_to_search(kept: SplitDiff) -> str | None:
    """Why the kept hunks cannot be searched (none, or too many), or None."""
    if len(kept.hunks) > MAX_HUNKS:
        return f"{len(kept.hunks)} hunks in the imported files: more than the {MAX_HUNKS} a search takes"
    if kept.hunks:
        return None
    reasons = sorted({a.reason.split(":")[0] for a in kept.set_aside}) or ["an empty diff"]
    return "no text hunk in a file the trials imported (" + "; ".join(reasons) + ")"


def imported_files(session: Session, job_id: int, shas: Sequence[str]) -> set[str]:
    """The worktree files that the job's trials at these revisions loaded (empty: none recorded,
    trials from before issue 43)."""
    rows = session.scalars(select(Trial.imported).join(Revision, Trial.revision_id == Revision.id)
                           .where(Trial.job_id == job_id, Revision.sha.in_(list(shas)), Trial.imported.is_not(None)))
    return {name for row in rows for name in row or ()}
