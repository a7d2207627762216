"""Simulator histories: the JSON format of issue 4 and the noise model that draws trials from it.

```json
{"commits": 120, "samples_per_trial": 20, "process_drift_cv": 0.02,
 "control": {"value": 1252.0, "cv": 0.01},
 "cases": {"S=180180": {"cv": 0.03, "levels": [[0, 1288.2], [37, 1188.1]],
                        "bimodal": {"p": 0.1, "shift": -0.10}}},
 "unbuildable": [12, 13, 14], "wrong_results": [[50, 60]], "higher_is_better": true}
```
Revisions are 0 (good) to `commits` (bad), so a history has `commits + 1` revisions. Instead of
`commits`, `"repo": PATH, "good": REF, "bad": REF` names the revisions through a caller-given
resolver (good followed by the first-parent commits of good..bad, oldest first); every index may
then be a sha prefix. Per trial one lognormal drift factor (`process_drift_cv`) multiplies target
and control alike; every sample gets its own lognormal noise (`cv`); with probability `p` a trial
lands in a mode shifted by `shift`. The decision value of a trial is the median over its samples
of target/control. Pure apart from reading the file in `load_history`.

A case may declare a spread step, `"spread": [[40, 0.2]]` (the per-sample cv from revision 40
on), and a per-call slow path, `"slow_path": {"from": 40, "p": 0.1, "shift": 1.0}` (from revision
40 on, each call runs 1 + shift times slower with probability p): the planted steps of the
spread and mode verdicts (issue 46). `"spread_trial_cv": 0.66` makes the call-to-call spread a
draw of each trial (its cv times a lognormal factor of that cv; log sd 0.6, as one trial's robust
spread varies on the 2-core demo machine).

A case may declare `"regime": {"p": 0.4, "shift": 0.2}`: a machine whose state moves in windows
of a trial or two, which that case's control cancels only in part (a memory-bound kernel on a
shared VM whose bandwidth jumps between two levels): before each trial the state flips with
probability `p`, and in the slow state the case's ratio is lower by `shift`.

`"drift": {"round_cv": 0.012, "burst_p": 0.1, "burst": 0.06, "trend": 0.0002, "worker_cv": 0.01}`
declares drift that slows the target only (the control does not cancel it) and that trials
measured together share: a lognormal factor per round (`round_cv`), burst rounds (probability
`burst_p`, the target slower by `burst`), a slow trend (`trend` in log units per trial run so
far) and one fixed lognormal offset per worker (`worker_cv`, drawn once per simulated job).
Two finer levels (issue 46): `block_cv`, a lognormal factor per block inside a round (every
block, and every unpaired trial, which runs on its own, draws one: blocks of one round differ),
and `trial_cv`, a lognormal factor per trial (target only, so not cancelled by the control).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

RepoResolver = Callable[[str, str, str], list[str]]


class HistoryError(ValueError):
    """A history file that does not follow the format; the message names the field."""


@dataclass(frozen=True)
class CaseModel:
    """One case: per-sample cv, true target level from each listed revision on, bimodal mode."""

    cv: float
    levels: tuple[tuple[int, float], ...]
    bimodal_p: float = 0.0
    bimodal_shift: float = 0.0
    regime_p: float = 0.0
    regime_shift: float = 0.0
    spreads: tuple[tuple[int, float], ...] = ()  # (from revision, per-sample cv): a spread step
    slow_path: tuple[int, float, float] | None = None  # (from revision, p, shift): a per-call slow path
    spread_trial_cv: float = 0.0  # each trial's per-sample cv times a lognormal factor of this cv

    def cv_at(self, revision: int) -> float:
        """The per-sample cv at `revision`: `cv`, or the last `spreads` entry at or before it."""
        return next((cv for start, cv in reversed(self.spreads) if start <= revision), self.cv)

    def calls(self, revision: int, rng: np.random.Generator, size: int) -> Any:
        """Per-call factors at `revision`: a call on the slow path runs `shift` slower (its metric
        divided by 1 + shift). All ones before `slow_path` starts (no draw: the stream stays)."""
        if self.slow_path is None or revision < self.slow_path[0]:
            return np.ones(size)
        _, p, shift = self.slow_path
        return np.where(rng.random(size) < p, 1.0 / (1.0 + shift), 1.0)

    def level_at(self, revision: int) -> float:
        """The true mean of the target at `revision` (the first level also covers earlier ones)."""
        starts = [start for start, _ in self.levels]
        return self.levels[max(0, bisect.bisect_right(starts, revision) - 1)][1]


@dataclass(frozen=True)
class DriftModel:
    """Target-only drift correlated in time (see the module docstring)."""

    round_cv: float = 0.0
    burst_p: float = 0.0
    burst: float = 0.0
    trend: float = 0.0
    worker_cv: float = 0.0
    block_cv: float = 0.0
    trial_cv: float = 0.0

    def round_factor(self, rng: np.random.Generator) -> float:
        """The factor every trial of one round shares: lognormal, times a burst slowdown."""
        factor = float(_lognormal(rng, self.round_cv, ()))
        if self.burst_p and rng.random() < self.burst_p:
            factor /= 1.0 + self.burst
        return factor

    def block_factor(self, rng: np.random.Generator) -> float:
        """The factor a block's trials share (an unpaired trial is a block of its own)."""
        return float(_lognormal(rng, self.block_cv, ()))

    def trial_factor(self, rng: np.random.Generator) -> float:
        """One trial's own target-only factor."""
        return float(_lognormal(rng, self.trial_cv, ()))

    def worker_offsets(self, workers: int, rng: np.random.Generator) -> list[float]:
        return [float(_lognormal(rng, self.worker_cv, ())) for _ in range(workers)]


@dataclass(frozen=True)
class BuildModel:
    """What building costs (issue 45): each commit's touch cost (`buildcost`: the compile seconds
    its own changes cause), a full build's seconds and one trial's seconds."""

    touch_s: tuple[float, ...]
    full_s: float
    trial_s: float = 0.0


def _build_model(given: Any, n: int) -> BuildModel | None:
    """`build`: {"touch_s": [n numbers], "full_s": F, "trial_s": T}; absent: None."""
    if given is None:
        return None
    touch = given.get("touch_s") if isinstance(given, Mapping) else None
    numbers = [given.get("full_s"), given.get("trial_s", 0.0)] if isinstance(given, Mapping) else []
    if (not isinstance(touch, list) or len(touch) != n
            or any(not isinstance(v, (int, float)) or v < 0 for v in [*touch, *numbers])):
        raise HistoryError(f"build: needs touch_s (one non-negative number per revision, {n}), full_s and trial_s")
    return BuildModel(tuple(float(v) for v in touch), float(numbers[0]), float(numbers[1]))


@dataclass(frozen=True)
class History:
    """A parsed history; `shas` only when it came from a repository."""

    n_revisions: int
    cases: Mapping[str, CaseModel]
    samples_per_trial: int = 20
    process_drift_cv: float = 0.0
    control_value: float = 1.0
    control_cv: float = 0.0
    unbuildable: frozenset[int] = frozenset()
    wrong_results: tuple[tuple[int, int], ...] = ()
    higher_is_better: bool = True
    shas: tuple[str, ...] | None = None
    drift: DriftModel = DriftModel()
    build: BuildModel | None = None

    def is_wrong(self, revision: int) -> bool:
        return any(lo <= revision < hi for lo, hi in self.wrong_results)

    def draw_trial(self, revision: int, rng: np.random.Generator, target_drift: float = 1.0,
                   slow: Collection[str] = (), samples: dict[str, tuple[Any, Any]] | None = None,
                   ) -> dict[str, tuple[float, float]]:
        """One trial at `revision`: per case (decision value, median raw target). Uses `rng`.
        `target_drift` multiplies the target only (the drift the control does not cancel); the
        cases in `slow` are in the slow state of their regime. `samples`, when given, receives per
        case the trial's per-call target and control values."""
        drift = _lognormal(rng, self.process_drift_cv, ())
        result = {}
        for name, case in self.cases.items():
            mode = 1.0 + case.bimodal_shift if rng.random() < case.bimodal_p else 1.0
            if name in slow:
                mode /= 1.0 + case.regime_shift
            cv = case.cv_at(revision) * (_lognormal(rng, case.spread_trial_cv, ()) if case.spread_trial_cv else 1.0)
            target = (case.level_at(revision) * target_drift * drift * mode
                      * _lognormal(rng, cv, self.samples_per_trial)
                      * case.calls(revision, rng, self.samples_per_trial))
            control = self.control_value * drift * _lognormal(rng, self.control_cv, self.samples_per_trial)
            if samples is not None:
                samples[name] = (target, control)
            result[name] = (float(np.median(target / control)), float(np.median(target)))
        return result

    def trial_noise(self, name: str) -> float:
        """Standard deviation of one trial's log decision value under this model (large-sample
        median of a lognormal ratio, plus the bimodal mixture's spread)."""
        case = self.cases[name]
        per_sample = math.sqrt(math.log1p(case.cv ** 2) + math.log1p(self.control_cv ** 2))
        median_sd = math.sqrt(math.pi / 2) * per_sample / math.sqrt(self.samples_per_trial)
        shift = math.log1p(case.bimodal_shift) if case.bimodal_p else 0.0
        return math.sqrt(median_sd ** 2 + case.bimodal_p * (1 - case.bimodal_p) * shift ** 2)


def _lognormal(rng: np.random.Generator, cv: float, size: Any) -> Any:
    """Mean-one lognormal factors with coefficient of variation `cv`."""
    if cv <= 0:
        return np.ones(size) if size != () else 1.0
    sigma = math.sqrt(math.log1p(cv * cv))
    return np.exp(rng.normal(-sigma * sigma / 2, sigma, size))


def _index(value: Any, shas: tuple[str, ...] | None, n: int, where: str) -> int:
    if isinstance(value, str):
        if shas is None:
            raise HistoryError(f"{where}: sha prefix {value!r} needs a repo-based history")
        hits = [i for i, sha in enumerate(shas) if sha.startswith(value.lower())]
        if len(hits) != 1:
            raise HistoryError(f"{where}: sha prefix {value!r} matches {len(hits)} revisions")
        return hits[0]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
        raise HistoryError(f"{where}: {value!r} is not a revision index in 0..{n - 1}")
    return value


def _case(name: str, given: Mapping[str, Any], shas: tuple[str, ...] | None, n: int) -> CaseModel:
    levels = sorted((_index(r, shas, n, f"cases.{name}.levels"), float(v)) for r, v in given.get("levels", []))
    if not levels or any(v <= 0 for _, v in levels):
        raise HistoryError(f"cases.{name}.levels: needs positive [revision, value] pairs")
    bimodal = given.get("bimodal") or {}
    regime = given.get("regime") or {}
    slow = given.get("slow_path")
    spreads = tuple(sorted((_index(r, shas, n, f"cases.{name}.spread"), float(cv)) for r, cv in given.get("spread", [])))
    return CaseModel(cv=float(given.get("cv", 0.0)), levels=tuple(levels),
                     bimodal_p=float(bimodal.get("p", 0.0)), bimodal_shift=float(bimodal.get("shift", 0.0)),
                     regime_p=float(regime.get("p", 0.0)), regime_shift=float(regime.get("shift", 0.0)),
                     spreads=spreads, spread_trial_cv=float(given.get("spread_trial_cv", 0.0)),
                     slow_path=(_index(slow["from"], shas, n, f"cases.{name}.slow_path"), float(slow.get("p", 0.0)),
                                float(slow.get("shift", 0.0))) if slow else None)


def load_history(path_or_dict: str | Path | Mapping[str, Any],
                 repo_resolver: RepoResolver | None = None) -> History:
    """Parse a history from a JSON file path or an already-loaded dict. Reads the file; calls
    `repo_resolver(path, good, bad)` for the repo form. Raises HistoryError (a ValueError) on a
    malformed history and OSError when the file cannot be read."""
    if isinstance(path_or_dict, Mapping):
        data = path_or_dict
    else:
        try:
            data = json.loads(Path(path_or_dict).read_text())
        except json.JSONDecodeError as exc:
            raise HistoryError(f"not JSON: {exc}") from exc
    shas: tuple[str, ...] | None = None
    if "repo" in data:
        if repo_resolver is None:
            raise HistoryError("a repo-based history needs a repo resolver")
        shas = tuple(s.lower() for s in repo_resolver(str(data["repo"]), str(data["good"]), str(data["bad"])))
        n = len(shas)
    elif isinstance(data.get("commits"), int) and data["commits"] >= 1:
        n = data["commits"] + 1
    else:
        raise HistoryError("commits: needs a positive integer (or repo, good and bad)")
    if n < 2:
        raise HistoryError("the range needs at least two revisions")
    if not data.get("cases"):
        raise HistoryError("cases: needs at least one case")
    control = data.get("control") or {}
    drift = data.get("drift") or {}
    unknown = set(drift) - set(DriftModel.__dataclass_fields__)
    if unknown or any(not isinstance(v, (int, float)) or v < 0 for v in drift.values()):
        raise HistoryError(f"drift: needs non-negative numbers among {sorted(DriftModel.__dataclass_fields__)}")
    wrong = tuple((_index(lo, shas, n + 1, "wrong_results"), _index(hi, shas, n + 1, "wrong_results"))
                  for lo, hi in data.get("wrong_results", []))
    return History(
        n_revisions=n,
        cases={name: _case(name, given, shas, n) for name, given in data["cases"].items()},
        samples_per_trial=int(data.get("samples_per_trial", 20)),
        process_drift_cv=float(data.get("process_drift_cv", 0.0)),
        control_value=float(control.get("value", 1.0)),
        control_cv=float(control.get("cv", 0.0)),
        unbuildable=frozenset(_index(r, shas, n, "unbuildable") for r in data.get("unbuildable", [])),
        wrong_results=wrong,
        higher_is_better=bool(data.get("higher_is_better", True)),
        shas=shas,
        drift=DriftModel(**{k: float(v) for k, v in drift.items()}),
        build=_build_model(data.get("build"), n),
    )
