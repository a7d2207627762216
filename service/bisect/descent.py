"""Descent into a dependency bump, PURE: which confirmed culprits bump a declared dependency (and
so get a child bisect over the dependency's own range, old pin to new pin), and what the report
says once the child is done: the chain down to the dependency's culprit, or what is left outside
the bump. No database and no git: the service reads the pins from git and hands them in
(service/jobs/descent.py); tests/bisect/test_descent.py pins the rules on literal two-level histories.

Levels: the bisect a person asked for is level 0; the child over a dependency's range is level 1,
the child of that over a dependency of the dependency level 2. `MAX_LEVEL` (2) is the deepest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

MAX_LEVEL = 2


@dataclass(frozen=True)
class Bump:
    """A dependency whose pin a commit moved, `old` -> `new` (commits, tags or versions), or, for
    a toolchain bisect (`toolchain`), the package's version that moved the step and the one before."""

    dependency: str
    old: str
    new: str
    toolchain: bool = False

    def __str__(self) -> str:
        if self.toolchain:
            return f"{self.dependency} {self.old} -> {self.new}"
        return f"{self.dependency} {_short(self.old)}..{_short(self.new)}"


@dataclass(frozen=True)
class Step:
    """A confirmed culprit of one level: its label ("#945", a sha prefix), its subject, whether it
    is one commit (`exact`), and per case its step (relative change, interval)."""

    label: str
    subject: str
    exact: bool
    effects: Mapping[str, tuple[float, tuple[float, float]]]
    bumps: Sequence[Bump] = ()  # the declared pins its diff moved
    other_files: Sequence[str] = ()  # the files it changed besides the pins


@dataclass(frozen=True)
class Descend:
    """Start a child bisect over `bump` of the culprit `culprit` (an index into the level's steps)."""

    culprit: int
    bump: Bump
    level: int


def plan(steps: Sequence[Step], level: int, max_level: int = MAX_LEVEL) -> list[Descend]:
    """The children to start after a bisect of `level` confirmed `steps`: one per declared pin an
    exact culprit moved (a range of commits has no one diff to read), none past `max_level`, and
    none for a pin that did not move (old == new)."""
    if level >= max_level:
        return []
    return [Descend(i, bump, level + 1) for i, step in enumerate(steps) if step.exact
            for bump in step.bumps if bump.old != bump.new]


def _same_step(parent: tuple[float, tuple[float, float]], child: tuple[float, tuple[float, float]],
               min_effect: float) -> bool:
    """Whether the child's step is the parent's: the same direction, and the two agree on the log
    scale within their intervals or within the minimum effect."""
    (p_rel, p_ci), (c_rel, c_ci) = parent, child
    if p_rel * c_rel <= 0:
        return False
    gap = abs(math.log1p(p_rel) - math.log1p(c_rel))
    overlap = max(p_ci[0], c_ci[0]) <= min(p_ci[1], c_ci[1])
    return overlap or gap < min_effect


@dataclass(frozen=True)
class Finding:
    """What a descent concluded for one case: the chain of steps down to the deepest culprit that
    accounts for the parent's step (`chain`, outermost first), or the parent's step left outside
    the bump (`outside`: the bump's other files, empty when the bump changed nothing else)."""

    case: str
    chain: tuple[Step, ...]
    bumps: tuple[Bump, ...]
    outside: tuple[str, ...] | None = None
    child_steps: tuple[Step, ...] = field(default=())

    @property
    def explained(self) -> bool:
        return self.outside is None


def conclude(case: str, parent: Step, bump: Bump, child_steps: Sequence[Step], min_effect: float) -> Finding:
    """The finding for `case` once the child over `bump` of culprit `parent` is done: the child's
    one step that accounts for the parent's step (the chain), or the parent's step left outside
    (no child step, several that each fall short, or one of another size)."""
    own = parent.effects.get(case)
    moved = [s for s in child_steps if case in s.effects]
    if own is not None and len(moved) == 1 and _same_step(own, moved[0].effects[case], min_effect):
        return Finding(case, (parent, moved[0]), (bump,), None, tuple(child_steps))
    return Finding(case, (parent,), (bump,), tuple(parent.other_files), tuple(child_steps))


def deeper(finding: Finding, grandchild: Finding) -> Finding:
    """A level-1 finding extended by the level-2 one of its dependency culprit (the same case):
    the chain grows when the grandchild accounts for it, and stays otherwise."""
    if not finding.explained or not grandchild.explained:
        return finding
    return Finding(finding.case, finding.chain + grandchild.chain[1:], finding.bumps + grandchild.bumps, None,
                   finding.child_steps)


def _pct(rel: float) -> str:
    return f"{rel * 100:+.1f}%"


def _short(pin: str) -> str:
    return pin[:7] if len(pin) >= 40 else pin


def chain_line(finding: Finding) -> str:
    """One line: "#945 bumps minicc a1b2c3d..c3d4e5f; inside it, minicc c2f0a1b 'route maxnumf
    through the raw builder': -10.4% [-11.0%, -9.8%]", or what is left outside the bump."""
    first, outer = finding.chain[0], finding.bumps[0]
    parts = [str(outer) if outer.toolchain else f"{first.label} bumps {outer}"]
    for depth, step in enumerate(finding.chain[1:]):  # the step inside finding.bumps[depth]
        parts.append(f"inside it, {finding.bumps[depth].dependency} {step.label} {step.subject!r}")
        if depth + 1 < len(finding.bumps):
            parts[-1] += f", which bumps {finding.bumps[depth + 1]}"
    last = finding.chain[-1]
    if finding.explained:
        rel, (lo, hi) = last.effects[finding.case]
        return f"{'; '.join(parts)}: {_pct(rel)} [{_pct(lo)}, {_pct(hi)}]"
    rel, (lo, hi) = first.effects.get(finding.case, (0.0, (0.0, 0.0)))
    inside = ", ".join(f"{s.label} {_pct(s.effects[finding.case][0])}" for s in finding.child_steps
                       if finding.case in s.effects)
    if finding.outside:
        where = f"the bump's other changes: {', '.join(finding.outside)}"
    elif outer.toolchain:
        where = ("the rest is between the wheels and the commits built from source" if inside else
                 "the versions built from source show no step: look at how their wheels were built")
    else:
        where = "no other change of the bump: the step is in how the two pins build or interact"
    found = f"the dependency's own steps ({inside}) do not account for it" if inside else \
        "the dependency's range shows no step of its own"
    return f"{parts[0]}: {_pct(rel)} [{_pct(lo)}, {_pct(hi)}] left outside: {found}; {where}"
