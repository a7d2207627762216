"""How often the attribution calls an interaction, with its estimates paired on side-by-side blocks
or pooled over every trial, under drift between blocks that the control does not cancel.

Simulates an attribution job's rounds with the pure planner (service/bisect/attribution.py): each
variant's requested trials in blocks `head v v head` (as service/attribution/service.py sends
them), every trial's log value = the arm's true log + the block's drift (normal, sd --drift,
shared by the block's four trials) + trial noise (normal, sd --noise). Three ways to conclude:

- paired: this branch, the planner to its end (variants judged on their blocks, the cap on the
  variants' trials) and the paired estimates;
- paired, first round: the same estimates on the first round's two blocks a variant only;
- pooled, first round: main before this branch (pooled estimates; the bad end running in every
  block reached the trial cap after the first round, so every side-by-side attribution stopped
  there).

Scenarios: the demo's RMSNorm pair as a CPU run measured it (#905 reverted x2.874, #908 x1.803,
both x2.943: -43% interaction), the same pair with a false third culprit that costs nothing, and
an additive pair (costs 20% and 25% that multiply: no interaction). Prints, per scenario and
drift, the share of runs whose verdict is `interact`, and the mean trials a variant.

    python bench/attribution_pairing.py --runs 300 --noise 0.10 --drift 0 0.1 0.2
"""

from __future__ import annotations

import argparse
import math
import random

from perfbisect.service.bisect.attribution import (HEAD, AttributionConfig, attribute_case, observed, plan_round,
                                                   variants_of)

SCENARIOS = {
    "demo pair (-43%)": {(0,): math.log(2.874), (1,): math.log(1.803), (0, 1): math.log(2.943)},
    "demo pair + false 3rd": {(0,): math.log(2.874), (1,): math.log(1.803), (2,): 0.0, (0, 1): math.log(2.943),
                              (0, 2): math.log(2.874), (1, 2): math.log(1.803), (0, 1, 2): math.log(2.943)},
    "additive 20%, 25%": {(0,): math.log(1.20), (1,): math.log(1.25), (0, 1): math.log(1.20 * 1.25)},
}


def one_run(truth: dict, config: AttributionConfig, noise: float, drift: float, rng: random.Random):
    culprits = sorted({c for v in truth for c in v})
    variants = variants_of(culprits)
    logs: dict = {v: [] for v in [HEAD, *variants]}
    ids: dict = {v: [] for v in logs}
    attempts = {v: 0 for v in logs}
    block = 0
    first = None
    while True:
        arms = {v: observed({"c": [math.exp(x) for x in logs[v]]}, {"c": ids[v]}) for v in logs if logs[v]}
        plan = plan_round({"c": tuple(culprits)}, variants, arms, attempts, set(), config)
        if first is None and block:
            first = arms
        if plan.done:
            return arms, first, attempts
        for variant, n in plan.requests.items():
            if variant == HEAD:
                continue
            for _ in range(-(-n // 2)):
                block += 1
                shift = rng.gauss(0.0, drift)
                for arm in (HEAD, variant, variant, HEAD):
                    logs[arm].append(truth.get(arm, 0.0) + shift + rng.gauss(0.0, noise))
                    ids[arm].append(block)
                    attempts[arm] += 1


def unblocked(arms):
    return {v: observed({"c": list(o.values["c"])}) for v, o in arms.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--noise", type=float, default=0.10, help="per-trial sd of the log value")
    parser.add_argument("--drift", type=float, nargs="+", default=[0.0, 0.1, 0.2],
                        help="sd of the log drift shared by a block's trials")
    parser.add_argument("--min-effect", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    config = AttributionConfig(min_effect=args.min_effect)
    print(f"{args.runs} runs each, trial noise {args.noise}, minimum effect {args.min_effect}")
    print("| scenario | drift | interact: paired | paired, first round | pooled, first round (main) "
          "| trials a variant (paired) |")
    print("|---|---|---|---|---|---|")
    for name, truth in SCENARIOS.items():
        culprits = tuple(sorted({c for v in truth for c in v}))
        for drift in args.drift:
            rng = random.Random(args.seed)
            called = [0, 0, 0]
            trials = 0
            for _ in range(args.runs):
                arms, first, attempts = one_run(truth, config, args.noise, drift, rng)
                for k, measured in enumerate((arms, first, unblocked(first))):
                    called[k] += attribute_case("c", culprits, measured, config).verdict == "interact"
                trials += sum(n for v, n in attempts.items() if v != HEAD) / (len(attempts) - 1)
            shares = " | ".join(f"{c / args.runs:.1%}" for c in called)
            print(f"| {name} | {drift} | {shares} | {trials / args.runs:.1f} |")


if __name__ == "__main__":
    main()
