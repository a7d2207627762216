"""Spread and shape of one case's samples (issue 46): is a revision noisier, or bimodal?

A kernel can regress without its median moving: its run-to-run spread rises (3% to 20% after
one PR in tenstorrent/tt-metal#53821), or a slow path taken on a data-dependent fraction of
calls gives it a second mode. Both are read from the samples inside each trial (one per timed
call), in log units, each trial's samples centred on that trial's own median: what varies
between trials (process drift, a machine's rare slow mode that moves a whole trial) is left
out, so only the kernel's own call-to-call spread and shape remain.

- `spread_of`: the within-trial spread (pooled sd of the centred log samples) and the
  between-trial spread (sd of the trials' median logs) of one revision.
- `spread_rise`: a Brown-Forsythe (Levene-type) test that b's centred log samples spread wider
  than a's (a one-sided rank test on the absolute deviations), the ratio of the two robust
  spreads (1.4826 MAD: the body of the calls, not a few slow ones) and a percentile bootstrap
  interval on it (samples resampled within each side; deterministic).
- `trial_rise`: the same rise judged with the trial as the unit: a one-sided Welch t on each
  trial's log robust spread. A trial's spread is itself a draw: on the 2-core demo machine one
  trial's robust spread varies about 1.8x (log sd 0.5-0.65) between trials of the same code, on
  the target and the control alike, so two blocks of calls can read 2x wider by chance while every
  call-level test counts hundreds of calls as independent.
- `tail_excess` / `tail_grew`: b has more calls far from its trials' medians than a (Fisher's
  exact test): a slow path on a share of calls, seen with few samples.
- `modes`: a two-component normal mixture against one on the centred log samples (EM, BIC):
  a second mode carries `share` of the samples at `location` (relative to the main mode).
- `new_mode`: b has a second mode carrying at least `min_share` that a does not have.

Pure; numpy and scipy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats

Trials = Sequence[Sequence[float]]  # per trial, its positive per-call samples

# Mixture acceptance: the BIC of two components must beat one's by this much (very strong
# evidence on Kass and Raftery's scale), and the modes must stand apart by this many widths of
# the wider one. Ashman's D > 2 is the textbook bar for two clean modes, but with hundreds of
# samples the BIC also splits a flat-topped or skewed single mode in two at D ~ 2.2 (a timer's
# lattice of values did), so a mode here must stand 3 widths apart: a wide second component
# fitted to a heavy tail is not a mode either.
MODE_BIC = 10.0
MODE_SEPARATION = 3.0
MIN_MODE_SAMPLES = 40  # fewer pooled samples never make a mode
EM_ITERATIONS = 200
BOOTSTRAP = 1000


def centred_logs(trials: Trials) -> np.ndarray:
    """Every trial's log samples minus that trial's median log, pooled (non-positive and
    non-finite samples dropped)."""
    parts = [_centred(tuple(samples)) for samples in trials]
    parts = [p for p in parts if p.size]
    return np.concatenate(parts) if parts else np.zeros(0)


@lru_cache(maxsize=1 << 14)
def _centred(samples: tuple[float, ...]) -> np.ndarray:
    """One trial's centred log samples (memoised: the planner re-reads every trial each round)."""
    x = np.asarray([s for s in samples if s is not None], dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    if not x.size:
        return x
    logs = np.log(x)
    out = logs - np.median(logs)
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class Spread:
    """One revision's spread on one case, in log units (sd of log: ~ the relative spread).
    `within`: pooled within-trial sd of the call samples; `between`: sd of the trials' median
    logs (None below two trials)."""

    within: float | None
    between: float | None
    samples: int
    trials: int


def spread_of(trials: Trials) -> Spread:
    """The within- and between-trial spread of one revision's trials."""
    total, df, medians, count = 0.0, 0, [], 0
    for samples in trials:
        x = np.asarray([s for s in samples if s is not None and s > 0], dtype=float)
        if x.size:
            logs = np.log(x)
            medians.append(float(np.median(logs)))
            total += float(((logs - logs.mean()) ** 2).sum())
            df += x.size - 1
            count += x.size
    within = math.sqrt(total / df) if df > 0 else None
    between = float(np.std(medians, ddof=1)) if len(medians) >= 2 else None
    return Spread(within, between, count, len(medians))


@dataclass(frozen=True)
class SpreadRise:
    """b's spread against a's: sd of the centred log samples on each side with bootstrap
    intervals, their ratio (b/a) with its interval, and the one-sided Brown-Forsythe p."""

    before: float
    after: float
    before_ci: tuple[float, float]
    after_ci: tuple[float, float]
    ratio: float
    ratio_ci: tuple[float, float]
    pvalue: float


MAD_SD = 1.4826  # a normal's standard deviation over its median absolute deviation


def _sd(x: np.ndarray) -> np.ndarray | float:
    """The robust spread of centred log samples (the last axis): MAD_SD times their median
    distance from their trial's median. A few slow calls do not move it (they are a mode, judged
    by `tail_excess`); a wider body of calls does."""
    return MAD_SD * np.median(np.abs(x), axis=-1)


def brown_forsythe(a: np.ndarray, b: np.ndarray) -> float:
    """One-sided p that b's values lie farther from 0 (their trial medians) than a's: the
    Brown-Forsythe idea (absolute deviations from the median) with a rank test on them
    (Mann-Whitney U, normal approximation with the tie correction), so a few wild calls weigh
    as one rank each. 1.0 with fewer than two values a side or no variation."""
    da, db = np.abs(a), np.abs(b)
    na, nb = da.size, db.size
    if na < 2 or nb < 2:
        return 1.0
    both = np.concatenate([db, da])
    ranks = stats.rankdata(both)
    u = float(ranks[:nb].sum()) - nb * (nb + 1) / 2
    _, ties = np.unique(both, return_counts=True)
    n = na + nb
    var = na * nb / 12 * ((n + 1) - float((ties ** 3 - ties).sum()) / (n * (n - 1)))
    if var <= 0:
        return 1.0
    return float(stats.norm.sf((u - na * nb / 2 - 0.5) / math.sqrt(var)))


# A call this many of the earlier revision's robust widths from its trial's median is in a tail;
# a normal puts 6e-7 of its calls there.
TAIL_WIDTHS = 5.0


@dataclass(frozen=True)
class Tail:
    """Calls far from their trial's median (beyond TAIL_WIDTHS of a's robust width): their share
    on each side, the one-sided Fisher exact p that b has more, and where b's sit (exp of their
    median centred log, minus 1: +1.0 is twice the trial's median value)."""

    before: float
    after: float
    pvalue: float
    location: float


def tail_excess(a_trials: Trials, b_trials: Trials) -> Tail | None:
    """b's share of far calls against a's (None without two samples a side or a's width 0)."""
    a, b = centred_logs(a_trials), centred_logs(b_trials)
    if a.size < 2 or b.size < 2 or _sd(a) == 0:
        return None
    edge = TAIL_WIDTHS * float(_sd(a))
    far_a, far_b = np.abs(a) > edge, np.abs(b) > edge
    ka, kb = int(far_a.sum()), int(far_b.sum())
    # Fisher's exact one-sided p: at least kb of the ka + kb far calls fall on b's side
    p = float(stats.hypergeom.sf(kb - 1, a.size + b.size, ka + kb, b.size)) if kb else 1.0
    location = math.expm1(float(np.median(b[far_b]))) if kb else 0.0
    return Tail(ka / a.size, kb / b.size, p, location)


def rise_test(a_trials: Trials, b_trials: Trials, at_least: float = 0.0) -> tuple[float, float] | None:
    """The cheap half of `spread_rise`: b's spread over a's and the one-sided Brown-Forsythe p
    (None as there; p 1.0 without computing it when the ratio is below `at_least`). What the
    search navigates on; the intervals are for findings only."""
    a, b = centred_logs(a_trials), centred_logs(b_trials)
    if a.size < 2 or b.size < 2 or _sd(a) == 0:
        return None
    ratio = float(_sd(b) / _sd(a))
    return ratio, brown_forsythe(a, b) if ratio >= at_least else 1.0


def trial_rise(a_trials: Trials, b_trials: Trials) -> float:
    """One-sided p that b's trials spread wider than a's, each trial one observation (its log
    robust spread, `_sd` of its centred log samples): Welch's t. 1.0 with fewer than two trials
    a side that have a spread."""
    def logs(trials: Trials) -> np.ndarray:
        spreads = [float(_sd(x)) for x in (_centred(tuple(s)) for s in trials) if x.size >= 3]
        return np.log([s for s in spreads if s > 0])
    a, b = logs(a_trials), logs(b_trials)
    if a.size < 2 or b.size < 2:
        return 1.0
    if np.ptp(a) == 0 and np.ptp(b) == 0:  # every trial alike on each side: no doubt either way
        return 0.0 if b[0] > a[0] else 1.0
    return float(stats.ttest_ind(b, a, equal_var=False, alternative="greater").pvalue)


def spread_rise(a_trials: Trials, b_trials: Trials, confidence: float = 0.95, seed: int = 0) -> SpreadRise | None:
    """b's within-trial spread against a's (None while a side has fewer than two samples or a's
    spread is 0). The interval resamples each side's centred samples (percentile bootstrap,
    `BOOTSTRAP` draws, seeded): it treats calls as independent, so it is narrower than a rerun
    would see when calls within a trial drift together; the planner confirms on side-by-side
    blocks and requires every block to agree for that reason."""
    a, b = centred_logs(a_trials), centred_logs(b_trials)
    if a.size < 2 or b.size < 2 or _sd(a) == 0:
        return None
    rng = np.random.default_rng([seed, a.size, b.size])
    boot_a = _sd(a[rng.integers(0, a.size, (BOOTSTRAP, a.size))])
    boot_b = _sd(b[rng.integers(0, b.size, (BOOTSTRAP, b.size))])
    tail = (1 - confidence) / 2 * 100

    def interval(x: np.ndarray) -> tuple[float, float]:
        lo, hi = np.percentile(x, [tail, 100 - tail])
        return float(lo), float(hi)

    ratios = boot_b / np.maximum(boot_a, 1e-300)
    return SpreadRise(float(_sd(a)), float(_sd(b)), interval(boot_a), interval(boot_b),
                      float(_sd(b) / _sd(a)), interval(ratios), brown_forsythe(a, b))


@dataclass(frozen=True)
class Modes:
    """A two-component fit of centred log samples: `share` of them in the minor mode, at
    `location` relative to the main mode (exp of the gap of their means, minus 1: +1.0 is twice
    the main mode's value), `separation` in widths of the wider component, `bic_gain` of two
    components over one. `bimodal`: all three pass their bars (MODE_BIC, MODE_SEPARATION and the
    share given to `modes`)."""

    share: float
    location: float
    separation: float
    bic_gain: float
    bimodal: bool


def _normal_logpdf(x: np.ndarray, mean: float, sd: float) -> np.ndarray:
    return -0.5 * ((x - mean) / sd) ** 2 - math.log(sd * math.sqrt(2 * math.pi))


def _fit_two(x: np.ndarray) -> tuple[float, float, float, float, float, float]:
    """EM for two normal components, started with the main one on the median and the minor one
    on the tail farther from it. Returns (weight_minor, mean_main, sd_main, mean_minor,
    sd_minor, log-likelihood)."""
    floor = max(1e-6, 1e-3 * float(np.std(x)))
    med = float(np.median(x))
    far = x[np.abs(x - med) >= np.quantile(np.abs(x - med), 0.9)]
    tail = float(np.mean(far[far > med])) if np.sum(far > med) >= np.sum(far < med) else float(np.mean(far[far < med]))
    w, m1, s1, m2, s2 = 0.1, med, max(float(np.std(x)) / 2, floor), tail, max(float(np.std(x)) / 2, floor)
    ll = -math.inf
    for _ in range(EM_ITERATIONS):
        l1 = np.log(1 - w) + _normal_logpdf(x, m1, s1)
        l2 = np.log(w) + _normal_logpdf(x, m2, s2)
        top = np.maximum(l1, l2)
        total = top + np.log(np.exp(l1 - top) + np.exp(l2 - top))
        new_ll = float(total.sum())
        r = np.exp(l2 - total)
        w = float(np.clip(r.mean(), 1e-6, 1 - 1e-6))
        m1 = float(np.sum((1 - r) * x) / np.sum(1 - r))
        m2 = float(np.sum(r * x) / max(np.sum(r), 1e-12))
        s1 = max(math.sqrt(float(np.sum((1 - r) * (x - m1) ** 2) / np.sum(1 - r))), floor)
        s2 = max(math.sqrt(float(np.sum(r * (x - m2) ** 2) / max(np.sum(r), 1e-12))), floor)
        if new_ll - ll < 1e-9:
            break
        ll = new_ll
    if w > 0.5:  # keep the minor component second
        w, m1, s1, m2, s2 = 1 - w, m2, s2, m1, s1
    return w, m1, s1, m2, s2, ll


def modes(trials: Trials, min_share: float = 0.05) -> Modes | None:
    """The two-mode fit of one revision's centred log samples; None below MIN_MODE_SAMPLES
    samples or with no spread at all. Memoised (the planner asks again every round)."""
    return _modes(tuple(tuple(float(v) for v in t) for t in trials), min_share)


@lru_cache(maxsize=4096)
def _modes(trials: tuple[tuple[float, ...], ...], min_share: float) -> Modes | None:
    x = centred_logs(trials)
    if x.size < MIN_MODE_SAMPLES or float(np.std(x)) == 0:
        return None
    sd = max(float(np.std(x)), 1e-6)
    one = float(_normal_logpdf(x, float(x.mean()), sd).sum())
    w, m1, s1, m2, s2, two = _fit_two(x)
    gain = 2 * (two - one) - 3 * math.log(x.size)  # three more parameters: a mean, a width, a weight
    separation = abs(m2 - m1) / max(s1, s2)
    bimodal = gain > MODE_BIC and separation >= MODE_SEPARATION and w >= min_share
    return Modes(w, math.expm1(m2 - m1), separation, gain, bimodal)


def new_mode(a_trials: Trials, b_trials: Trials, min_share: float = 0.05) -> Modes | None:
    """b's second mode when a has none like it: b is bimodal with a minor mode of at least
    `min_share`, and a is not bimodal with at least half that share. None otherwise."""
    after = modes(b_trials, min_share)
    if after is None or not after.bimodal:
        return None
    before = modes(a_trials, min_share / 2)
    if before is not None and before.bimodal:
        return None
    return after


def body_ratio(a_trials: Trials, b_trials: Trials) -> float | None:
    """b's robust spread over a's with the far calls of both left out (beyond TAIL_WIDTHS of a's
    width): whether the body of the calls widened, apart from any slow path. None as `rise_test`."""
    a, b = centred_logs(a_trials), centred_logs(b_trials)
    if a.size < 2 or b.size < 2 or _sd(a) == 0:
        return None
    edge = TAIL_WIDTHS * float(_sd(a))
    a, b = a[np.abs(a) <= edge], b[np.abs(b) <= edge]
    return float(_sd(b) / _sd(a)) if a.size and b.size and _sd(a) > 0 else None


def tail_grew(a_trials: Trials, b_trials: Trials, level: float, min_share: float = 0.05) -> Tail | None:
    """b's far calls (`tail_excess`) when they exceed a's by `min_share` of the calls with the
    Fisher p below `level`: a slow path taken on a share of calls, before any mixture could be
    fitted to so few samples. None otherwise."""
    tail = tail_excess(a_trials, b_trials)
    if tail is None or tail.after - tail.before < min_share or tail.pvalue >= level:
        return None
    return tail


HISTOGRAM_BINS = 24


def histograms(a_trials: Trials, b_trials: Trials,
               bins: int = HISTOGRAM_BINS) -> tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]]:
    """Counts of both sides' centred log samples over one set of `bins` equal bins spanning
    both (the 0.5th to 99.5th percentile, so one wild sample does not flatten the plot), and
    the bin edges. Empty without samples."""
    a, b = centred_logs(a_trials), centred_logs(b_trials)
    both = np.concatenate([a, b])
    if both.size == 0:
        return (), (), ()
    lo, hi = np.percentile(both, [0.5, 99.5])
    if hi <= lo:
        lo, hi = lo - 1e-3, hi + 1e-3
    edges = np.linspace(lo, hi, bins + 1)
    count = lambda x: tuple(int(c) for c in np.histogram(np.clip(x, lo, hi), edges)[0])  # noqa: E731
    return count(a), count(b), tuple(float(e) for e in edges)
