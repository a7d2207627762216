"""Hunk localization (issue 43): which hunks of a culprit's diff carry its step. Pure: no
database, git, Celery or CUDA; the diff is text, the measurements are outcomes.

The culprit's first-parent diff (`git diff parent culprit`, a range's combined diff) is split
into hunks (`split_diff`); files the trial never imported, binary files and renames are set
aside with the reason (`keep_imported`, `split_diff`). A *variant* is the parent with a subset
of the kept hunks applied (`subset_patch` writes it as a patch `git apply` takes), measured
side by side against the culprit; its step against the parent, relative to the culprit's own,
is its `Outcome` (`classify`): the whole step, none of it, part of it, or broken (the subset
does not apply, build or import: recorded, never blamed).

`plan` is an adaptive partition (delta debugging): halve the candidate files, keep the half
that carries the whole step, then halve that file's hunks. Both halves of a round are measured
side by side, so a round costs two variants; one responsible hunk among H costs about
ceil(log2 H) + 2 rounds (the extra ones: the kept hunks together, when files were set aside,
and the file level rounding up). When neither half carries the whole step (the hunks only
work together, or a half is broken), it tries dropping each quarter of the candidates; when
that fails too, the candidates are reported as a group. `plan` replays the recorded outcomes
from the start, so it is a function of them (the planner style of service/bisect/planner.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")
TRIM_LINES = 12  # the changed lines shown of a hunk, with one line of context around them


@dataclass(frozen=True)
class Hunk:
    """One hunk of one file: `path` (its new path; `old_path` differs only for a deleted file),
    the old and new line ranges, and its lines (' ', '-', '+' and '\\ No newline' lines).
    `header` holds the file's header lines (diff --git, modes, ---, +++) for a patch."""

    index: int
    path: str
    old_start: int
    old_len: int
    new_start: int
    new_len: int
    lines: tuple[str, ...]
    header: tuple[str, ...]
    section: str = ""  # what git prints after the @@ (the enclosing def)

    @property
    def old_path(self) -> str:
        return _header_path(self.header, "--- ") or self.path

    @property
    def delta(self) -> int:
        return self.new_len - self.old_len

    def line_range(self) -> str:
        """'path:first-last' on the culprit's side (the old side for a pure deletion)."""
        start, length = (self.new_start, self.new_len) if self.new_len else (self.old_start, self.old_len)
        return f"{self.path}:{start}" + (f"-{start + length - 1}" if length > 1 else "")

    def trimmed(self, limit: int = TRIM_LINES) -> str:
        """The changed lines with one line of context each side, at most `limit` lines."""
        changed = [i for i, line in enumerate(self.lines) if line[:1] in "+-"]
        keep = sorted({j for i in changed for j in (i - 1, i, i + 1) if 0 <= j < len(self.lines)})
        shown = [self.lines[i] for i in keep]
        if len(shown) > limit:
            return "\n".join(shown[:limit] + [f"... {len(shown) - limit} more lines"])
        return "\n".join(shown)


@dataclass(frozen=True)
class SetAside:
    """A file of the diff the search does not split, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class SplitDiff:
    hunks: tuple[Hunk, ...]
    set_aside: tuple[SetAside, ...] = ()

    def files(self) -> dict[str, tuple[int, ...]]:
        """path -> the indices of its hunks, in diff order."""
        out: dict[str, list[int]] = {}
        for hunk in self.hunks:
            out.setdefault(hunk.path, []).append(hunk.index)
        return {path: tuple(indices) for path, indices in out.items()}


def _header_path(header: Sequence[str], prefix: str) -> str | None:
    for line in header:
        if line.startswith(prefix):
            name = line[len(prefix):].split("\t")[0].strip()
            return None if name == "/dev/null" else name[2:] if name[:2] in ("a/", "b/") else name
    return None


def _file_blocks(text: str) -> list[list[str]]:
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("diff --git ") or line.startswith("diff --cc ") or line.startswith("diff --combined "):
            blocks.append([line])
        elif blocks:
            blocks[-1].append(line)
    return blocks


def _git_path(first: str) -> str:
    """The b/ path of a 'diff --git a/x b/x' line (paths without spaces; others fall back)."""
    parts = first.split(" ")
    return parts[-1][2:] if parts[-1].startswith("b/") else parts[-1]


def _set_aside_reason(block: list[str]) -> str | None:
    first = block[0]
    if not first.startswith("diff --git "):
        return "a merge's combined diff: localize on the first-parent diff (git diff parent culprit)"
    if any(line.startswith("Binary files ") or line == "GIT binary patch" for line in block):
        return "binary file: no text hunks to split"
    if any(line.startswith("rename from ") or line.startswith("copy from ") for line in block):
        source = next(line.split(" ", 2)[2] for line in block if line.startswith(("rename from ", "copy from ")))
        return f"renamed from {source}: the move is not split into hunks"
    if not any(line.startswith("@@ ") for line in block):
        return "no content change (mode or metadata only)"
    return None


def _hunks_of(block: list[str], start_index: int) -> list[Hunk]:
    at = next(i for i, line in enumerate(block) if line.startswith("@@ "))
    header = tuple(block[:at])
    path = _header_path(header, "+++ ") or _header_path(header, "--- ") or _git_path(block[0])
    hunks: list[Hunk] = []
    current: list[str] = []
    match = None
    for line in block[at:] + ["@@ -0 +0 @@"]:  # a sentinel closes the last hunk
        found = HUNK_HEADER.match(line)
        if found is None:
            current.append(line)
            continue
        if match is not None:
            o_len = int(match.group(2)) if match.group(2) is not None else 1
            n_len = int(match.group(4)) if match.group(4) is not None else 1
            hunks.append(Hunk(start_index + len(hunks), path, int(match.group(1)), o_len, int(match.group(3)), n_len,
                              tuple(current), header, match.group(5).strip()))
        match, current = found, []
    return hunks


def split_diff(text: str) -> SplitDiff:
    """The hunks of a unified git diff (`git diff -M parent culprit`), numbered in diff order;
    binary files, renames and copies, mode-only changes and combined (merge) diffs are set aside
    with the reason."""
    hunks: list[Hunk] = []
    aside: list[SetAside] = []
    for block in _file_blocks(text):
        reason = _set_aside_reason(block)
        if reason is not None:
            aside.append(SetAside(_git_path(block[0]), reason))
            continue
        hunks += _hunks_of(block, len(hunks))
    return SplitDiff(tuple(hunks), tuple(aside))


def keep_imported(split: SplitDiff, imported: Iterable[str]) -> SplitDiff:
    """Only the hunks of files the trials imported (worktree-relative paths, at either end);
    the others are set aside ("not imported by the trial"), renumbered from 0."""
    loaded = set(imported)
    kept = [h for h in split.hunks if h.path in loaded or h.old_path in loaded]
    dropped = sorted({h.path for h in split.hunks if h not in kept})
    renumbered = tuple(Hunk(i, h.path, h.old_start, h.old_len, h.new_start, h.new_len, h.lines, h.header, h.section)
                       for i, h in enumerate(kept))
    return SplitDiff(renumbered, split.set_aside + tuple(SetAside(p, "not imported by the trial") for p in dropped))


def subset_patch(hunks: Sequence[Hunk]) -> str:
    """A patch that applies just these hunks to the parent: per file its header and the hunks in
    order, each new start shifted by the selected hunks above it only (`git apply` checks it)."""
    out: list[str] = []
    by_file: dict[str, list[Hunk]] = {}
    for hunk in sorted(hunks, key=lambda h: h.index):
        by_file.setdefault(hunk.path, []).append(hunk)
    for chosen in by_file.values():
        out += chosen[0].header
        shift = 0
        for hunk in chosen:
            # a pure insertion starts after its old line, a pure deletion before it (git's convention)
            new_start = hunk.old_start + shift + (0 if hunk.old_len else 1) - (0 if hunk.new_len else 1)
            out.append(f"@@ -{hunk.old_start},{hunk.old_len} +{new_start},{hunk.new_len} @@"
                       + (f" {hunk.section}" if hunk.section else ""))
            out += hunk.lines
            shift += hunk.delta
    return "\n".join(out) + "\n" if out else ""


class Outcome(str, Enum):
    """A subset's step against the parent, relative to the culprit's."""

    full = "full"          # the whole step
    none = "none"          # no step
    partial = "partial"    # a clear part of it
    broken = "broken"      # does not apply, build or import: recorded, never blamed
    unknown = "unknown"    # not resolved at this noise: more trials


def classify(step_log: float, ci_log: tuple[float, float], full_log: float, min_effect: float) -> Outcome:
    """A subset's outcome from its step against the parent on the log scale (`step_log`, its
    interval `ci_log`) and the culprit's step `full_log` (F), oriented so F > 0. The margin is the
    larger of the bisect's minimum effect and a quarter of F. 'partial' when the interval clears
    both 0 and F by the margin; 'full' when it lies above F/2 and the margin (nearer the whole
    step than none of it, and clearly a step); 'none' when it lies below F/2 and F less the
    margin; else 'unknown' (more trials). Deciding at F/2 rather than within a margin of each end
    lets the two halves of a round part at the noise of a CPU demo (bench/RESULTS.md)."""
    margin = max(math.log1p(min_effect), abs(full_log) / 4)
    sign = 1.0 if full_log >= 0 else -1.0
    low, high = sorted((sign * ci_log[0], sign * ci_log[1]))
    full = abs(full_log)
    if low > margin and high < full - margin:
        return Outcome.partial
    if low > max(full / 2, margin):
        return Outcome.full
    if high < min(full / 2, full - margin):
        return Outcome.none
    return Outcome.unknown


Subset = frozenset[int]


@dataclass(frozen=True)
class Search:
    """`plan`'s answer: the subsets to measure next (empty when done), or the responsible hunks
    (`found`: one, or a group that only works together) or why none is named (`reason`).
    `rounds`: the rounds of variants measured so far; `broken`: subsets that did not apply,
    build or import."""

    requests: tuple[Subset, ...] = ()
    found: Subset | None = None
    group: bool = False
    reason: str | None = None
    rounds: int = 0
    broken: tuple[Subset, ...] = ()
    path: tuple[tuple[Subset, Outcome], ...] = field(default=(), repr=False)

    @property
    def done(self) -> bool:
        return not self.requests


class _Need(Exception):
    def __init__(self, subsets: Sequence[Subset]) -> None:
        self.subsets = tuple(subsets)


def bound(hunks: int) -> int:
    """The rounds `plan` may take for one responsible hunk among `hunks`: ceil(log2 H) + 2."""
    return math.ceil(math.log2(max(hunks, 1))) + 2


def _balanced_cut(units: Sequence[Subset]) -> int:
    """Where to cut `units` (in order) so the two halves hold as near half the hunks as can be,
    at least one unit each: the search then halves hunks, not files, and stays near log2 H."""
    total, running, best, best_gap = sum(len(u) for u in units), 0, 1, None
    for cut in range(1, len(units)):
        running += len(units[cut - 1])
        gap = abs(2 * running - total)
        if best_gap is None or gap < best_gap:
            best, best_gap = cut, gap
    return best


class _Walk:
    """One replay of the search over the recorded outcomes; raises _Need at the first subset
    without one."""

    def __init__(self, results: Mapping[Subset, Outcome], budget: int) -> None:
        self.results, self.budget, self.rounds = results, budget, 0
        self.path: list[tuple[Subset, Outcome]] = []

    def measure(self, subsets: Sequence[Subset]) -> list[Outcome]:
        missing = [s for s in subsets if self.results.get(s, Outcome.unknown) == Outcome.unknown]
        if missing:
            if self.rounds >= self.budget:
                raise StopIteration
            raise _Need(missing)
        self.rounds += 1
        outcomes = [self.results[s] for s in subsets]
        self.path += list(zip(subsets, outcomes))
        return outcomes

    def narrow(self, units: list[Subset]) -> tuple[list[Subset], bool]:
        """Halve `units` until one carries the whole step; (units left, True) when the search
        had to stop at a group (neither half, nor any drop of a quarter, carries it)."""
        while len(units) > 1:
            half = _balanced_cut(units)
            a, b = units[:half], units[half:]
            out_a, out_b = self.measure([frozenset().union(*a), frozenset().union(*b)])
            if Outcome.full in (out_a, out_b):
                units = a if out_a == Outcome.full else b
                continue
            units, stuck = self.drop_quarters(units)
            if stuck:
                return units, True
        return units, False

    def drop_quarters(self, units: list[Subset]) -> tuple[list[Subset], bool]:
        """The complements of each quarter of `units` (each of two units when fewer than four):
        the first that still carries the whole step is kept; (units, True) when none does."""
        n = min(4, len(units))
        chunks = [units[i * len(units) // n:(i + 1) * len(units) // n] for i in range(n)]
        rests = [[u for u in units if u not in chunk] for chunk in chunks]
        outcomes = self.measure([frozenset().union(*rest) for rest in rests if rest])
        for rest, outcome in zip(rests, outcomes):
            if outcome == Outcome.full:
                return rest, False
        return units, True


def plan(files: Mapping[str, Sequence[int]], results: Mapping[Subset, Outcome], *, complete: bool,
         budget: int | None = None) -> Search:
    """The next subsets to measure, or the answer. `files`: path -> its kept hunks' indices (a
    file of one hunk is one unit); `results`: the outcome of every subset measured (UNKNOWN ones
    are measured again); `complete`: the kept hunks are the whole diff, so all of them together
    is the culprit itself, known to carry the step. `budget`: at most this many rounds of
    variants (default: `bound` + 2), after which the candidates left are the answer, a group."""
    every = frozenset(i for indices in files.values() for i in indices)
    if not every:
        return Search(reason="no hunk to search: the diff has no text hunk in a file the trial imported")
    walk = _Walk(results, budget if budget is not None else bound(len(every)) + 2)
    broken = tuple(s for s, o in results.items() if o == Outcome.broken)
    try:
        return _search(walk, files, every, complete, broken)
    except _Need as need:
        return Search(requests=need.subsets, rounds=walk.rounds, broken=broken, path=tuple(walk.path))
    except StopIteration:
        return Search(reason=f"not resolved within {walk.budget} rounds at this noise", rounds=walk.rounds,
                      broken=broken, path=tuple(walk.path))


def _search(walk: _Walk, files: Mapping[str, Sequence[int]], every: Subset, complete: bool,
            broken: tuple[Subset, ...]) -> Search:
    (together,) = (Outcome.full,) if complete else walk.measure([every])  # complete: the culprit itself
    if together != Outcome.full:
        why = {Outcome.broken: "the kept hunks together do not apply, build or import on the parent",
               Outcome.none: "the kept hunks together do not reproduce the step: it lies in what was set aside",
               Outcome.partial: "the kept hunks together carry only part of the step: the rest lies in what was set aside"}
        return Search(reason=why[together], rounds=walk.rounds, broken=broken, path=tuple(walk.path))
    by_file = [frozenset(indices) for indices in files.values() if indices]
    units, stuck = walk.narrow(by_file)
    if not stuck:
        units, stuck = walk.narrow([frozenset([i]) for i in sorted(units[0])])
    found = frozenset().union(*units)
    return Search(found=found, group=len(found) > 1, rounds=walk.rounds, broken=broken, path=tuple(walk.path))


@dataclass(frozen=True)
class Share:
    """A subset's part of the culprit's step: its step over the culprit's (log scale), with the
    interval of its own step over the culprit's point step."""

    share: float
    ci: tuple[float, float]


def share_of(step_log: float, ci_log: tuple[float, float], full_log: float) -> Share | None:
    """None when the culprit's step is 0 (no share to take)."""
    if not full_log:
        return None
    low, high = sorted((ci_log[0] / full_log, ci_log[1] / full_log))
    return Share(step_log / full_log, (low, high))
