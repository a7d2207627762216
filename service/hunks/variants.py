"""The arms of a hunk localization job (issue 43) and how a trial names one. For each target
(a culprit) there is its head, the culprit as it is ('c0'), and its variants, the culprit's
parent with a subset of its kept hunks applied ('c0:h5': a hexadecimal bit mask of the hunk
indices, so 300 hunks fit the trial's variant column). The worker applies a variant's patch
(`hunk_patch`) after checking the parent out (workers/runner.py)."""

from __future__ import annotations

from perfbisect.service.bisect.hunks import Hunk, Subset, subset_patch
from perfbisect.service.job_spec import JobSpec, LocalizeSpec, LocalizeTarget

MAX_HUNKS = 300  # a bit mask of 300 bits is 75 hex digits: the variant column holds 100


def arm_key(target: int, subset: Subset | None = None) -> str:
    """'c0' for target 0's culprit, 'c0:h5' for its parent with hunks 0 and 2 applied."""
    if subset is None:
        return f"c{target}"
    return f"c{target}:h{sum(1 << i for i in subset):x}"


def parse_arm(key: str) -> tuple[int, Subset | None]:
    """(target, subset or None for the culprit itself). Raises ValueError on another shape."""
    head, _, mask = key.partition(":")
    if not head.startswith("c") or (mask and not mask.startswith("h")):
        raise ValueError(f"not a localization arm: {key!r}")
    if not mask:
        return int(head[1:]), None
    bits = int(mask[1:], 16)
    return int(head[1:]), frozenset(i for i in range(bits.bit_length()) if bits >> i & 1)


def hunks_of(target: LocalizeTarget) -> list[Hunk]:
    return [Hunk(h.index, h.path, h.old_start, h.old_len, h.new_start, h.new_len, tuple(h.lines), tuple(h.header),
                 h.section) for h in target.hunks]


def trial_cases(spec: JobSpec, variant: str | None) -> list[dict]:
    """The cases a trial measures: a localization trial only its culprit's moved cases (a
    round then costs what those cases cost, not the whole bisect's); every other trial the
    job's."""
    if not variant or not isinstance(spec, LocalizeSpec):
        return spec.cases
    wanted = spec.targets[parse_arm(variant)[0]].cases
    return [case for case in spec.cases if case["name"] in wanted]


def hunk_patch(spec: JobSpec, variant: str | None) -> str | None:
    """The patch a localization trial applies at its revision (the culprit's parent); None for
    the culprit's own trials and for other jobs."""
    if not variant or not isinstance(spec, LocalizeSpec):
        return None
    target, subset = parse_arm(variant)
    if subset is None:
        return None
    return subset_patch([h for h in hunks_of(spec.targets[target]) if h.index in subset])
