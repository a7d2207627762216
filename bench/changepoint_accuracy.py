"""Change-point accuracy (issue 10): perfbisect's detector on the Turing Change Point Dataset,
beside three baselines, plus false alarms and exact hits on perf-like synthetic histories.

    python bench/changepoint_accuracy.py [TCPD_DIR] [--synthetic N] [--published] [--loso]

TCPD_DIR (or $TCPD_DIR) is a checkout of github.com/alan-turing-institute/TCPD (nothing from it
is committed here): annotations.json and datasets/NAME/NAME.json. Datasets whose JSON is absent (those the
repository builds by downloading) and multivariate ones are listed and skipped; missing values
are filled by linear interpolation so indices stay those the annotators saw.

Score: TCPDBench's F1 with a 5-point margin: the start (index 0) counts as a change point in
every annotation and every prediction; precision is against the union of the annotators' points,
recall is averaged over annotators, a true point is matched at most once. Methods:
- zero: predicts only the start;
- binseg: plain binary segmentation of the mean (L2 cost, a split kept while it lowers the cost
  by more than 3 log(n) sigma^2 with sigma from the MAD of first differences, at most 5 points,
  as R changepoint's BinSeg defaults: Q = 5, MBIC-like penalty);
- old: perfbisect's previous detector (E-Divisive alpha = 1 + Welch p < 0.001, commit 700129e);
- perfbisect: service.bisect.changepoints.compute_change_points with its defaults;
- ensemble: service.bisect.changepoints.vote_change_points with its defaults (the points a
  majority of six detectors, window 30/35/40 x min_size 4/5, agree on within 2);
- rpt_binseg, rpt_pelt, where ruptures is installed (the `bench` extra): ruptures' Binseg and
  Pelt, L2 cost on the standardised series, min_size 2, jump 1, penalty 3 log(n);
- with --published, where installed: otava (apache-otava's compute_change_points, defaults:
  window 50, p 0.001) and e_divisive (MongoDB signal-processing-algorithms, p 0.05, 100
  permutations).

False alerts per 1,000 points: every point predicted on TCPD's series that no annotator marked
a change in (bank, quality_control_5), and, over all series, the predicted points farther than
the margin from every annotator's points. --loso: the detector over a fixed grid of its
settings, each series scored with the settings best on the other series (leave one series out),
beside the defaults: the defaults were chosen on TCPD, the held-out figure is not; the same for
the ensemble over its quorum and members (VOTE_GRID), and with the quorum fixed at a majority.
At a fixed false-alarm rate: each method's knob (p-values, ruptures' penalty) set to the loosest
value with at most 1 false alert per 1,000 points on the unannotated series, then scored on all.

Synthetic histories (perf-like, positive levels near 100): noise only (Gaussian 1-2%, bimodal
noise p 0.1-0.5 shift 3-8%, seasonal period 7 amplitude 3%, a smooth trend of 10-40% over the
history) for false change points per 100 points; and 1-3 steps of 5-10% with 1-2% noise,
levels of 6-40 points, for steps found at the exact index and within 2 points; and a step in
the last 3-15 points of 40 (the detection delay of a tracked branch), found at its index.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfbisect.service.bisect.changepoints import compute_change_points, vote_change_points  # noqa: E402

MARGIN = 5


# ---- scoring (TCPDBench's definition) -----------------------------------------------------------

def matched(truth: set[int], predicted: set[int], margin: int = MARGIN) -> int:
    """True points with a prediction within `margin`, each prediction used at most once."""
    free, hits = set(predicted), 0
    for tau in sorted(truth):
        near = sorted((abs(tau - x), x) for x in free if abs(tau - x) <= margin)
        if near:
            free.remove(near[0][1])
            hits += 1
    return hits


def f1_score(annotations: dict[str, list[int]], predicted: list[int]) -> tuple[float, float, float]:
    per_annotator = [set(points) | {0} for points in annotations.values()]
    union = set().union(*per_annotator)
    x = set(predicted) | {0}
    precision = matched(union, x) / len(x)
    recall = sum(matched(t, x) / len(t) for t in per_annotator) / len(per_annotator)
    return 2 * precision * recall / (precision + recall), precision, recall


# ---- methods --------------------------------------------------------------------------------------

def zero(_: np.ndarray) -> list[int]:
    return []


def mbic_penalty(x: np.ndarray) -> float:
    """3 log(n) sigma^2, sigma from the MAD of first differences (R changepoint's MBIC-like
    default for a change in mean), the penalty of every binary segmentation and PELT row."""
    d = np.diff(x)
    sigma = 1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2) or np.std(d) / math.sqrt(2) or 1.0
    return 3 * math.log(x.size) * sigma ** 2


def binseg(x: np.ndarray, max_points: int = 5) -> list[int]:
    """Plain binary segmentation of the mean with a BIC-like penalty (see the module doc)."""
    penalty = mbic_penalty(x)
    found, segments = [], [(0, x.size)]
    while segments and len(found) < max_points:
        gains = []
        for lo, hi in segments:
            seg = x[lo:hi]
            if seg.size < 4:
                continue
            c = np.cumsum(seg - seg.mean())[:-1]
            m = np.arange(1, seg.size, dtype=float)
            gain = c ** 2 * seg.size / (m * (seg.size - m))  # RSS drop of the best single split
            k = int(np.argmax(gain[1:-1])) + 1
            gains.append((gain[k], lo, hi, lo + k + 1))
        if not gains:
            break
        gain, lo, hi, tau = max(gains)
        if gain <= penalty:
            break
        found.append(tau)
        segments.remove((lo, hi))
        segments += [(lo, tau), (tau, hi)]
    return sorted(found)


def old_detector(x: np.ndarray) -> list[int]:
    """The detector this issue replaced (E-Divisive alpha = 1, Welch p < 0.001, min size 3)."""
    from scipy import stats

    def welch(a, b):
        if np.ptp(np.concatenate([a, b])) == 0:
            return 1.0
        p = stats.ttest_ind(a, b, equal_var=False).pvalue
        return 1.0 if math.isnan(p) else p

    n, min_size = x.size, 3
    if n < 2 * min_size:
        return []
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = np.abs(x[:, None] - x[None, :]).cumsum(0).cumsum(1)

    def block(r0, r1, c0, c1):
        return p[r1, c1] - p[r0, c1] - p[r1, c0] + p[r0, c0]

    def best(lo, hi):
        out, best_q = None, -np.inf
        for tau in range(lo + min_size, hi - min_size + 1):
            m, k = tau - lo, hi - tau
            q = m * k / (m + k) * (2 * block(lo, tau, tau, hi) / (m * k) - block(lo, tau, lo, tau) / (m * (m - 1))
                                   - block(tau, hi, tau, hi) / (k * (k - 1)))
            if q > best_q:
                out, best_q = tau, q
        return out

    found, segments = [], [(0, n)]
    while segments:
        lo, hi = segments.pop()
        tau = best(lo, hi)
        if tau is None or welch(x[lo:tau], x[tau:hi]) >= 0.001:
            continue
        found.append(tau)
        segments += [(lo, tau), (tau, hi)]
    while True:
        bounds = [0, *sorted(found), n]
        weak = [(welch(x[bounds[i - 1]:bounds[i]], x[bounds[i]:bounds[i + 1]]), bounds[i]) for i in range(1, len(bounds) - 1)]
        weak = [w for w in weak if w[0] >= 0.001]
        if not weak:
            return sorted(found)
        found.remove(max(weak)[1])


def perfbisect(x: np.ndarray) -> list[int]:
    return [p.index for p in compute_change_points(x)]


def ensemble(x: np.ndarray) -> list[int]:
    return [p.index for p in vote_change_points(x)]


METHODS = {"zero": zero, "binseg": binseg, "old": old_detector, "perfbisect": perfbisect, "ensemble": ensemble}


def add_ruptures() -> None:
    """ruptures' Binseg and Pelt when installed (`pip install -e '.[bench]'`): L2 cost on the
    standardised series with the penalty 3 log(n), i.e. R changepoint's MBIC for a change in mean
    of unit variance (with sigma from first differences instead, as binseg, both put 30-40 points
    on a series: F1 0.54 and 0.52). Its breakpoints end a segment, so they are the first index of
    the next level, as perfbisect's; the last one (the series' end) is dropped."""
    try:
        import ruptures as rpt
    except ImportError:
        print("(ruptures not installed, pip install -e '.[bench]': its rows are left out)")
        return

    def rows(algorithm):
        def detect(x: np.ndarray, penalty_scale: float = 1.0) -> list[int]:
            z = (x - x.mean()) / (x.std() or 1.0)
            found = algorithm(model="l2", min_size=2, jump=1).fit(z).predict(pen=penalty_scale * 3 * math.log(x.size))
            return [int(b) for b in found[:-1]]
        return detect
    METHODS["rpt_binseg"] = rows(rpt.Binseg)
    METHODS["rpt_pelt"] = rows(rpt.Pelt)


def add_published_detectors() -> None:
    """Apache Otava's and MongoDB's detectors, when installed (they are not perfbisect's
    dependencies: otava pulls in BigQuery and Slack clients, signal-processing-algorithms pins
    numpy < 2). Run in a venv that has them to compare."""
    try:
        from otava.analysis import compute_change_points as otava_change_points
    except ImportError:
        print("(apache-otava not installed: its row is left out)")
    else:
        METHODS["otava"] = lambda x: sorted(int(c.index) for c in otava_change_points(list(x))[0])
    try:
        from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive
    except ImportError:
        print("(signal-processing-algorithms not installed: its row is left out)")
    else:
        def mongodb(x: np.ndarray) -> list[int]:
            np.random.seed(0)  # its permutation test draws from numpy's global generator
            return sorted(int(i) for i in e_divisive(x, pvalue=0.05, permutations=100))
        METHODS["e_divisive"] = mongodb


# ---- TCPD -----------------------------------------------------------------------------------------

def load_tcpd(root: Path) -> tuple[dict[str, tuple[np.ndarray, dict]], list[str]]:
    annotations = json.loads((root / "annotations.json").read_text())
    series, skipped = {}, []
    for name in sorted(annotations):
        path = root / "datasets" / name / f"{name}.json"
        if not path.is_file():
            skipped.append(f"{name} (not in the checkout)")
            continue
        data = json.loads(path.read_text())
        if data["n_dim"] != 1:
            skipped.append(f"{name} ({data['n_dim']} dimensions)")
            continue
        raw = np.array([np.nan if v is None else v for v in data["series"][0]["raw"]], dtype=float)
        known = ~np.isnan(raw)
        raw[~known] = np.interp(np.flatnonzero(~known), np.flatnonzero(known), raw[known])
        series[name] = (raw, annotations[name])
    return series, skipped


def false_alerts(series: dict[str, tuple[np.ndarray, dict]], predicted: dict[str, list[int]]) -> tuple[float, float]:
    """Per 1,000 points: the points predicted on the series no annotator marked a change in, and
    over all series the points farther than the margin from every annotator's points."""
    quiet = [name for name, (_, ann) in series.items() if not any(ann.values())]
    on_quiet = sum(len(predicted[name]) for name in quiet) / sum(series[name][0].size for name in quiet)
    unmatched = sum(sum(all(abs(p - t) > MARGIN for t in set().union(*ann.values())) for p in predicted[name])
                    for name, (_, ann) in series.items())
    return 1000 * on_quiet, 1000 * unmatched / sum(x.size for x, _ in series.values())


# Each method's knob, strictest last: the loosest setting with at most FALSE_RATE false alerts per
# 1,000 points on TCPD's unannotated series is the one scored at that fixed false-alarm rate.
FALSE_RATE = 1.0
PENALTY_SCALES = (1, 1.5, 2, 3, 5, 8)
PVALUE_SCALES = (10, 3, 1, 0.3, 0.1)


def operating_points() -> dict[str, list[tuple[str, object]]]:
    """(label, detector) per method, loosest first: perfbisect's p-values scaled, ruptures'
    penalty 3 log(n) scaled. Methods whose module is absent are left out."""
    out: dict[str, list[tuple[str, object]]] = {"perfbisect": [
        (f"p x{k}", lambda x, k=k: [p.index for p in compute_change_points(x, pvalue=0.001 * k,
                                                                              trend_pvalue=0.002 * k)])
        for k in PVALUE_SCALES], "ensemble": [
        (f"p x{k}", lambda x, k=k: [p.index for p in vote_change_points(x, pvalue=0.001 * k, trend_pvalue=0.002 * k)])
        for k in PVALUE_SCALES]}
    for method in ("rpt_binseg", "rpt_pelt"):
        if method in METHODS:
            out[method] = [(f"pen x{k}", lambda x, k=k, m=method: METHODS[m](x, penalty_scale=k))
                           for k in PENALTY_SCALES]
    return out


def fixed_false_rate_table(series: dict[str, tuple[np.ndarray, dict]]) -> None:
    """Precision, recall and F1 at the loosest setting with at most FALSE_RATE false alerts per
    1,000 points on the unannotated series (chosen on those series alone, then scored on all)."""
    quiet = {name: item for name, item in series.items() if not any(item[1].values())}
    size = sum(x.size for x, _ in quiet.values())
    print(f"\nat <= {FALSE_RATE:g} false alert per 1,000 points on the {len(quiet)} unannotated series "
          f"({size} points; the loosest setting that holds it):")
    print(f"{'':11s} {'setting':>9s} {'F1':>6s} {'prec':>6s} {'recall':>6s}  false/1000: unannotated, all")
    for method, settings in operating_points().items():
        for label, detect in settings:
            if 1000 * sum(len(detect(x)) for x, _ in quiet.values()) / size <= FALSE_RATE:
                break
        else:
            print(f"{method:11s} {'none':>9s}")
            continue
        predicted = {name: detect(x) for name, (x, _) in series.items()}
        scores = np.array([f1_score(ann, predicted[name]) for name, (_, ann) in series.items()])
        on_quiet, unmatched = false_alerts(series, predicted)
        print(f"{method:11s} {label:>9s} {scores[:, 0].mean():6.3f} {scores[:, 1].mean():6.3f} "
              f"{scores[:, 2].mean():6.3f}  {on_quiet:6.2f} {unmatched:6.2f}")


def tcpd_table(series: dict[str, tuple[np.ndarray, dict]]) -> None:
    rows, total = {}, sum(x.size for x, _ in series.values())
    print(f"{'':11s} {'F1':>6s} {'prec':>6s} {'recall':>6s} {'pts/series':>10s}   false alerts/1000 pts: "
          f"unannotated series, all series")
    for method, detect in METHODS.items():
        start = time.perf_counter()
        predicted = {name: detect(x) for name, (x, _) in series.items()}
        scores = [(name, *f1_score(ann, predicted[name]), len(predicted[name])) for name, (_, ann) in series.items()]
        rows[method] = scores
        on_quiet, unmatched = false_alerts(series, predicted)
        print(f"{method:11s} {np.mean([s[1] for s in scores]):6.3f} {np.mean([s[2] for s in scores]):6.3f} "
              f"{np.mean([s[3] for s in scores]):6.3f} {np.mean([s[4] for s in scores]):10.2f}   {on_quiet:6.2f} "
              f"{unmatched:6.2f}   ({1e6 * (time.perf_counter() - start) / total:.0f} ms per 1,000 points)")
    print("\nper series F1 (points predicted):")
    print(f"{'series':20s}" + "".join(f"{m:>16s}" for m in METHODS))
    for i, name in enumerate(series):
        print(f"{name:20s}" + "".join(f"{rows[m][i][1]:10.3f} ({rows[m][i][4]:2d})" for m in METHODS))


# The settings the leave-one-series-out figure chooses among (the defaults are one of them).
GRID = {"window": (30, 35, 40), "min_size": (4, 5), "trend_pvalue": (0.001, 0.002, 0.003), "min_sigmas": (1.5, 2.0)}


# The ensemble's settings (vote_change_points): quorum and the members' windows and min_sizes.
VOTE_GRID = {"quorum": (1 / 3, 1 / 2, 2 / 3), "windows": ((30, 35, 40), (25, 35, 45)), "min_sizes": ((4, 5), (3, 4, 5))}


def loso_table(series: dict[str, tuple[np.ndarray, dict]], detector=compute_change_points, grid=None,
               label: str = "perfbisect") -> None:
    """Mean F1 when each series is scored with the grid's settings best on the other series."""
    grid = GRID if grid is None else grid
    configs = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    names = list(series)
    f1 = np.array([[f1_score(series[name][1], [p.index for p in detector(series[name][0], **cfg)])[0]
                    for name in names] for cfg in configs])
    held_out, chosen = [], []
    for i in range(len(names)):
        best = int(np.argmax(np.delete(f1, i, axis=1).mean(axis=1)))
        held_out.append(f1[best, i])
        chosen.append(best)
    top = max(set(chosen), key=chosen.count)
    print(f"\n{label}: leave one series out over {len(configs)} settings ({', '.join(grid)}): F1 {np.mean(held_out):.3f}; "
          f"grid's range at fixed settings {f1.mean(axis=1).min():.3f}-{f1.mean(axis=1).max():.3f}; "
          f"chosen most often ({chosen.count(top)} of {len(names)}): {configs[top]}")


# ---- synthetic perf-like histories ----------------------------------------------------------------

def noise_only(rng: np.random.Generator, n: int, kind: str) -> np.ndarray:
    base = 100 + rng.normal(0, rng.uniform(1, 2), n)
    if kind == "bimodal":
        base += 100 * rng.uniform(0.03, 0.08) * (rng.random(n) < rng.uniform(0.1, 0.5))
    elif kind == "seasonal":
        base += 3 * np.sin(2 * np.pi * np.arange(n) / 7 + rng.uniform(0, 7))
    elif kind == "trend":
        base *= 1 + rng.uniform(0.1, 0.4) * np.sin(np.linspace(0, rng.uniform(0.5, 1.5) * np.pi / 2, n))
    return base


def stepped(rng: np.random.Generator) -> tuple[np.ndarray, list[int]]:
    lengths = rng.integers(6, 41, size=rng.integers(2, 5))
    level, values, steps = 100.0, [], []
    for i, length in enumerate(lengths):
        if i:
            level *= 1 + rng.choice([-1, 1]) * rng.uniform(0.05, 0.10)
            steps.append(len(values))
        values += list(level + rng.normal(0, level * rng.uniform(0.01, 0.02), length))
    return np.array(values), steps


def synthetic_table(count: int) -> None:
    rng = np.random.default_rng(10)
    methods = [m for m in METHODS if m != "zero"]
    print(f"\nsynthetic, {count} histories per row (n 40-200):")
    print(f"{'history':22s}" + "".join(f"{m:>12s}" for m in methods))
    for kind in ("gaussian", "bimodal", "seasonal", "trend"):
        histories = [noise_only(rng, int(rng.integers(40, 201)), kind) for _ in range(count)]
        total = sum(h.size for h in histories)
        cells = [100 * sum(len(METHODS[m](h)) for h in histories) / total for m in methods]
        print(f"{kind + ' false/100pts':22s}" + "".join(f"{c:12.2f}" for c in cells))
    cases = [stepped(rng) for _ in range(count)]
    true_steps = sum(len(s) for _, s in cases)
    predicted = {m: [set(METHODS[m](x)) for x, _ in cases] for m in methods}
    for label, tol in (("steps exact", 0), ("steps within 2", 2)):
        cells = [sum(matched(set(s), got, tol) for (_, s), got in zip(cases, predicted[m])) / true_steps
                 for m in methods]
        print(f"{label:22s}" + "".join(f"{c:12.3f}" for c in cells))
    extra = [sum(len(got) - matched(set(s), got, 2) for (_, s), got in zip(cases, predicted[m])) / true_steps
             for m in methods]
    print(f"{'extra points per step':22s}" + "".join(f"{c:12.3f}" for c in extra))
    newest_step_table(rng, count)


def newest_step_table(rng: np.random.Generator, count: int) -> None:
    """How soon a step at the end of a history is seen: a tracked branch runs the detector at
    every new head, so the points after the newest step are the detection delay."""
    print(f"\nnewest step (5-10%, 1-2% noise, 40 points) found at its index, {count} histories per column:")
    afters = (3, 4, 5, 6, 8, 10, 15)
    print(f"{'points after it':22s}" + "".join(f"{k:>7d}" for k in afters))
    for min_size in (3, 5):
        cells = []
        for after in afters:
            found = 0
            for _ in range(count):
                x = 100 + rng.normal(0, rng.uniform(1, 2), 40)
                x[40 - after:] += rng.choice([-1, 1]) * rng.uniform(5, 10)
                found += (40 - after) in {p.index for p in compute_change_points(x, min_size=min_size)}
            cells.append(found / count)
        print(f"{f'min_size={min_size}':22s}" + "".join(f"{c:7.2f}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tcpd", type=Path, nargs="?", default=os.environ.get("TCPD_DIR"),
                        help="a TCPD checkout (annotations.json, datasets/); default $TCPD_DIR")
    parser.add_argument("--synthetic", type=int, default=100, help="histories per synthetic row (0: none)")
    parser.add_argument("--published", action="store_true",
                        help="also run apache-otava and signal-processing-algorithms if installed (slow)")
    parser.add_argument("--loso", action="store_true",
                        help="also score the detector's settings chosen leaving each series out (a few minutes)")
    args = parser.parse_args()
    if args.tcpd is None or not (Path(args.tcpd) / "annotations.json").is_file():
        parser.error(f"{args.tcpd} holds no annotations.json: pass a TCPD checkout or set TCPD_DIR")
    add_ruptures()
    if args.published:
        add_published_detectors()
    series, skipped = load_tcpd(Path(args.tcpd))
    print(f"TCPD: {len(series)} univariate series; skipped: {', '.join(skipped) or 'none'}")
    tcpd_table(series)
    fixed_false_rate_table(series)
    if args.loso:
        loso_table(series)
        loso_table(series, vote_change_points, VOTE_GRID, "ensemble")
        loso_table(series, vote_change_points, {**VOTE_GRID, "quorum": (1 / 2,)}, "ensemble, majority quorum")
    if args.synthetic:
        synthetic_table(args.synthetic)


if __name__ == "__main__":
    main()
