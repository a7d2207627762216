"""The hunk localization report (job.result["hunks"]): per culprit, per case, the responsible
hunk(s) with file, line range, trimmed text and share of the step, or why none is named; and
the few "why" lines the CLI prints under a culprit."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from perfbisect.service.bisect.attribution import Contrasts
from perfbisect.service.bisect.hunks import Search, Subset, bound, share_of
from perfbisect.service.hunks.schemas import (BrokenRead, CaseHunksRead, CulpritHunksRead, HunkRead, HunkEvidence,
                                              ShareRead)
from perfbisect.service.hunks.variants import hunks_of
from perfbisect.service.job_spec import LocalizeSpec, LocalizeTarget

_BROKEN = {"revert_conflict": "the hunks do not apply on the parent", "build_error": "does not build with these hunks",
           "import_error": "does not import with these hunks", "error": "a case fails with these hunks",
           "compile_error": "a kernel does not compile with these hunks",
           "wrong_results": "a case gives wrong results with these hunks"}


def broken_words(status: str) -> str:
    return _BROKEN.get(status, status)


def _case(target: LocalizeTarget, index: int, case: str, search: Search, contrasts: Contrasts | None,
          broken: Mapping[tuple[int, Subset], str]) -> CaseHunksRead:
    out = CaseHunksRead(case=case, status="none", reason=search.reason, rounds=search.rounds,
                        bound=bound(len(target.hunks)),
                        broken=[BrokenRead(hunks=sorted(s), problem=broken.get((index, s), "broken"))
                                for s in search.broken])
    if search.found is None:
        return out
    hunks = [h for h in hunks_of(target) if h.index in search.found]
    out.status = "group" if search.group else "found"
    out.hunks = [HunkRead(index=h.index, path=h.path, lines=h.line_range(), section=h.section, text=h.trimmed())
                 for h in hunks]
    arm = tuple(sorted(search.found))
    full = target.cases[case]
    if contrasts is not None and arm in contrasts.means:
        gap = contrasts.recovery(arm)
        share = share_of(full + gap.log, (full + math.log1p(gap.ci[0]), full + math.log1p(gap.ci[1])), full)
    else:  # the culprit's own diff, never measured apart (all its hunks): the whole step
        share = share_of(full, (full, full), full)
    out.share = ShareRead(share=share.share, ci=share.ci) if share else None
    return out


def build(spec: LocalizeSpec, searches: Mapping[tuple[int, str], tuple[Search, Contrasts | None]],
          attempts: Mapping[tuple[int, Subset | None], int], broken: Mapping[tuple[int, Subset], str]) -> dict[str, Any]:
    """The stored report: {"culprits": [CulpritHunksRead]}."""
    culprits = []
    for index, target in enumerate(spec.targets):
        cases = [_case(target, index, case, *searches[(index, case)], broken)
                 for case in target.cases if (index, case) in searches]
        culprits.append(CulpritHunksRead(
            label=target.label, first_sha=target.first_sha, last_sha=target.last_sha, commits=target.commits,
            searched_hunks=len(target.hunks), set_aside=target.set_aside, skipped=target.skipped, cases=cases,
            trials=sum(n for (t, _), n in attempts.items() if t == index)))
    return {"culprits": [c.model_dump(mode="json") for c in culprits]}


def why_lines(evidence: HunkEvidence) -> list[str]:
    """The CLI's 'why' lines for one culprit's hunks (a few lines, text trimmed)."""
    if not evidence.available or evidence.culprit is None:
        return [f"hunk: no evidence of this kind, because {evidence.reason}"]
    culprit = evidence.culprit
    if culprit.skipped:
        return [f"hunk: no evidence of this kind, because {culprit.skipped}"]
    lines = []
    span = f" over the combined diff of {culprit.commits} commits" if culprit.commits > 1 else ""
    for case in culprit.cases:
        cost = (f"{case.rounds} rounds (bound {case.bound}), {culprit.searched_hunks} hunks searched{span}, "
                f"{culprit.trials} trials")
        if case.status == "none":
            lines.append(f"hunk on {case.case}: none named, because {case.reason} [{cost}]")
            continue
        share = (f", {case.share.share:.0%} of the step ({case.share.ci[0]:.0%} to {case.share.ci[1]:.0%})"
                 if case.share else "")
        what = "hunks that only work together" if case.status == "group" else "hunk"
        lines.append(f"{what} on {case.case}: " + ", ".join(h.lines for h in case.hunks) + share + f" [{cost}]")
        lines += ["    " + text for h in case.hunks[:2] for text in h.text.splitlines()[:6]]
    return lines
