"""The attribution report of one job as plain data (stored as job.result["attribution"], read
as AttributionRead) and its sentences: "reverting #950 alone recovers 19.6%; #930 alone 11.6%;
both 21.3%: they interact (-9.5%): #930 costs 1.4% without #950, 11.6% with it". Pure."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from perfbisect.service.bisect.attribution import (HEAD, AttributionConfig, CaseAttribution, CleanSet, Estimate,
                                                   Variant, attribute_case, parse_variant, variant_key)
from perfbisect.service.bisect.model import Observation, RevisionState
from perfbisect.service.jobs.logs import exit_code
from perfbisect.service.job_spec import AttributeSpec
from perfbisect.service.models import JobStatus


def failure_words(status: str, reason: str | None) -> str:
    if status == "revert_conflict":
        return reason or "does not revert cleanly at the head"
    what = "does not build" if status == "build_error" else "does not import"
    code = exit_code(reason)  # never the log's text: the report is public (service/jobs/logs.py)
    return f"{what} with the revert" + (f": exit {code}" if code is not None else "")


def pct(rel: float) -> str:
    return f"{rel * 100:+.1f}%"


def _estimate(e: Estimate) -> dict[str, Any]:
    return {"rel": e.rel, "ci": list(e.ci), "paired": e.paired}


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def build(spec: AttributeSpec, values: Mapping[Variant, Observation], raw: Mapping[Variant, Observation],
          broken: Mapping[Variant, str], units: Mapping[str, tuple[str | None, bool]],
          config: AttributionConfig) -> dict[str, Any]:
    """The report: culprits (clean or why not), variants, and per case the recoveries, the
    interaction and the sentences. `values`, `raw`: per arm, the decision values and the metric
    per case with the side-by-side block of each."""
    labels = [c.label for c in spec.culprits]
    culprits = [{"index": i, "label": c.label, "first_sha": c.first_sha, "last_sha": c.last_sha,
                 "subject": c.subject, "reverts_cleanly": (i,) not in broken,
                 "problem": broken.get((i,))} for i, c in enumerate(spec.culprits)]
    empty = Observation(RevisionState.ok)
    variants = [{"key": key, "culprits": list(parse_variant(key)), "problem": broken.get(parse_variant(key)),
                 "trials": values.get(parse_variant(key), empty).trials()} for key in spec.variants]
    cases = [_case(case, tuple(found), values, raw, broken, units.get(case, (None, True)), labels, config)
             for case, found in spec.case_culprits.items()]
    return {"culprits": culprits, "variants": variants, "cases": cases,
            "head_trials": values.get(HEAD, empty).trials()}


def _case(case: str, culprits: tuple[int, ...], values: Mapping[Variant, Observation],
          raw: Mapping[Variant, Observation], broken, unit: tuple[str | None, bool], labels: Sequence[str],
          config: AttributionConfig) -> dict[str, Any]:
    arms = {arm: list(o.values[case]) for arm, o in values.items() if o.values.get(case)}
    metric_of = {arm: list(o.values[case]) for arm, o in raw.items() if o.values.get(case)}
    result = attribute_case(case, culprits, values, config)
    # the same arithmetic on the metric itself (TFLOP/s, GB/s): noisier than the ratio, which
    # cancels the machine's drift, but in the unit a kernel author reads
    in_metric = attribute_case(case, culprits, raw, config)
    rows = []
    for variant, estimate in sorted(result.recoveries.items(), key=lambda kv: (len(kv[0]), kv[0])):
        metric = in_metric.recoveries.get(variant)
        rows.append({"variant": variant_key(variant), "culprits": list(variant), **_estimate(estimate),
                     "ratio": _median(arms[variant]), "value": _median(metric_of.get(variant, [])),
                     "metric": _estimate(metric) if metric else None, "trials": len(arms[variant]),
                     "blocks": result.blocks(variant)})
    return {
        "case": case, "culprits": list(culprits), "unit": unit[0], "higher_is_better": unit[1],
        "head": {"ratio": _median(arms.get(HEAD, [])), "value": _median(metric_of.get(HEAD, [])),
                 "trials": len(arms.get(HEAD, []))},
        "recoveries": rows, "together": variant_key(result.together) if result.together else None,
        "interaction": _estimate(result.interaction) if result.interaction else None, "verdict": result.verdict,
        "interaction_metric": _estimate(in_metric.interaction) if in_metric.interaction else None,
        "conditional": _conditional(result),
        "clean_sets": [{"variant": variant_key(c.culprits), "culprits": list(c.culprits), **_estimate(c.recovery),
                        "short": [variant_key(v) for v in c.short]} for c in result.clean],
        "words": words(result, labels, {v: r for v, r in broken.items() if set(v) <= set(culprits)}),
    }


def _conditional(result: CaseAttribution) -> list[dict[str, Any]]:
    """For two culprits: what each costs with the other in (its single revert at the head) and
    without it (reverting both against reverting the other alone)."""
    if result.together is None or len(result.together) != 2 or result.contrasts is None:
        return []
    a, b = result.together
    return [{"culprit": mine, "other": other, "with_other": _estimate(result.recoveries[(mine,)]),
             "without_other": _estimate(result.contrasts.of({result.together: 1.0, (other,): -1.0}))}
            for mine, other in ((a, b), (b, a))]


def words(result: CaseAttribution, labels: Sequence[str], broken: Mapping[Variant, str]) -> str:
    """One plain sentence per case."""
    def name(variant: Variant) -> str:
        return " and ".join(labels[i] for i in variant)

    parts = []
    singles = sorted((v, e) for v, e in result.recoveries.items() if len(v) == 1)
    for n, (variant, estimate) in enumerate(singles):
        what = "recovers " if estimate.rel >= 0 else "costs "
        if n:  # "#930 alone 1.4%", the verb said once unless the sign turns
            what = "" if (estimate.rel >= 0) == (singles[0][1].rel >= 0) else what
        parts.append(f"{'reverting ' if n == 0 else ''}{name(variant)} alone {what}{abs(estimate.rel) * 100:.1f}%")
    text = "; ".join(parts)
    if result.together is not None and result.interaction is not None:
        both = result.recoveries[result.together]
        text += f"; {'both' if len(result.together) == 2 else 'all together'} {both.rel * 100:.1f}%"
        text += ": " + _interaction_words(result, labels)
        if result.verdict == "interact":
            clean = clean_set_words(result, labels)
            text += ". " + clean[0].upper() + clean[1:]
    combos = [v for v in result.recoveries if len(v) > 1]
    if result.together is None and combos:  # some single did not revert: say what the largest set does
        largest = max(combos, key=lambda v: (len(v), v))
        rel = result.recoveries[largest].rel
        text += (f"{'; ' if text else ''}reverting {name(largest)} together "
                 f"{'recovers' if rel >= 0 else 'costs'} {abs(rel) * 100:.1f}%")
    for variant, problem in sorted(broken.items()):
        if len(variant) == 1:
            text += f"{'; ' if text else ''}{name(variant)} {problem}"
    if not text:
        text = "no variant could be measured"
    return text[0].upper() + text[1:] + "."


def _interaction_words(result: CaseAttribution, labels: Sequence[str]) -> str:
    term = result.interaction
    interval = f"({pct(term.rel)}, 95% CI {pct(term.ci[0])} to {pct(term.ci[1])})"
    if result.verdict == "additive":
        return f"their costs add up, no interaction {interval}"
    if result.verdict == "undetermined":
        return f"whether they interact is not resolved at this noise {interval}"
    head = f"they interact {interval}"
    if len(result.together) != 2:
        return head
    a, b = result.together
    both = result.recoveries[result.together].log
    # say it of the culprit whose cost depends most on the other: the smallest share of its cost
    # with the other in that is left without it (the motivating case: #930's 10.4% became 1.4%)
    costs = {i: (result.recoveries[(i,)].log, both - result.recoveries[(j,)].log) for i, j in ((a, b), (b, a))}
    mine = min(costs, key=lambda i: abs(costs[i][1]) / max(abs(costs[i][0]), 1e-9))
    other = b if mine == a else a
    with_other, without = costs[mine]
    return (f"{head}: {labels[mine]} costs {math.expm1(with_other) * 100:.1f}% with {labels[other]} in, "
            f"{math.expm1(without) * 100:.1f}% without it")


def _set_name(variant: Variant, labels: Sequence[str]) -> str:
    """'#950 alone', '{#930, #950} together'."""
    if len(variant) == 1:
        return f"{labels[variant[0]]} alone"
    return "{" + ", ".join(labels[i] for i in variant) + "} together"


def _none_smaller(clean: CleanSet) -> str:
    if len(clean.culprits) == 2:
        return "neither alone does"
    every_subset = len(clean.short) == 2 ** len(clean.culprits) - 2
    return "no smaller set of them does" if every_subset else "none alone does"


def clean_set_words(result: CaseAttribution, labels: Sequence[str]) -> str:
    """The clean sets as a clause: 'reverting {#930, #950} together recovers 9.7%; neither alone
    does', or where fewer culprits recover the loss: 'reverting #950 alone recovers as much as
    both (9.7% of 9.7%); #930 alone does not'; without clean sets (some set neither clearly
    recovers nor falls short), that this is not resolved."""
    if not result.clean or result.together is None:
        return "which of them must be reverted to recover the loss is not resolved at this noise"
    every = result.together
    loss = result.recoveries[every]
    whole = "both" if len(every) == 2 else f"all {len(every)}"
    clauses = []
    for clean in result.clean:
        size = abs(clean.recovery.rel) * 100
        if clean.culprits == every:
            clauses.append(f"reverting {_set_name(every, labels)} recovers {size:.1f}%; {_none_smaller(clean)}")
        else:
            clauses.append(f"reverting {_set_name(clean.culprits, labels)} recovers as much as {whole} "
                           f"({size:.1f}% of {abs(loss.rel) * 100:.1f}%)")
    others = [v for v in sorted(result.recoveries, key=lambda v: (len(v), v))
              if not any(set(c.culprits) <= set(v) for c in result.clean)]
    if others and every not in [c.culprits for c in result.clean]:
        clauses.append(f"{_set_name(others[0], labels)} does not" if len(others) == 1
                       else "no other set measured does")
    return "; ".join(clauses)


def status_of(attribution: dict[str, Any], head_failed: bool) -> JobStatus:
    if head_failed:
        return JobStatus.failed
    if any(c["verdict"] == "undetermined" for c in attribution["cases"]):
        return JobStatus.inconclusive
    return JobStatus.succeeded
