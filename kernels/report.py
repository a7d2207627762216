"""A readable table of one trial result, for `perfbisect measure`."""
from __future__ import annotations

import statistics


def _fmt(value, spec: str = ".3g") -> str:
    return "-" if value is None else format(value, spec)


def _noise(ratios: list[float]) -> str:
    """The standard error of the median ratio relative to it (1.2533 sd / sqrt(n) / median): the
    uncertainty of the number a bisect compares, which many samples shrink. One sample's spread
    (hundreds of percent under load) says little about it."""
    values = [r for r in ratios if r == r and r > 0]
    if len(values) < 3:
        return "-"
    median = statistics.median(values)
    return f"±{1.2533 * statistics.stdev(values) / len(values) ** 0.5 / median:.1%}"


def _balance_note(case: dict) -> str | None:
    """Where one side's call is many times the other's, say how the samples were balanced: the
    control cancels the machine's drift only over the same stretch of time as the target."""
    repeats = case.get("repeats") or {}
    t_med, c_med = case.get("median_target_ms"), case.get("median_control_ms")
    if not t_med or not c_med or max(repeats.get("target", 1), repeats.get("control", 1)) == 1:
        return None
    slower, times = ("target", t_med / c_med) if t_med > c_med else ("control", c_med / t_med)
    faster = "control" if slower == "target" else "target"
    return (f"  {case['name']}: a {slower} call takes {times:.0f}x a {faster} call; each sample times "
            f"{repeats[faster]} {faster} calls against one {slower} call, so both see the same stretch "
            "of the machine")


def format_result(result: dict) -> str:
    """Header (status, device, wall time) then one row per case: target and control
    metric, control/target ratio and the relative standard error of that median ratio, samples,
    accuracy error against tolerance, status."""
    device = result.get("device") or {}
    lines = [f"trial {result.get('status')}  device {device.get('kind')}: {device.get('name', '?')}"
             f"  torch {device.get('torch')}  triton {device.get('triton')}"
             f"  wall {result.get('wall_s', 0):.1f} s"]
    if result.get("error"):
        lines.append(f"error: {result['error']}")
    phases = result.get("phases") or {}
    if phases:  # where the trial's time went (kernels/harness/phases.py)
        shown = ("start", "import", "compile", "inputs_reference", "timing", "teardown", "first_sample")
        lines.append("phases (s): " + "  ".join(f"{name} {phases[name]:.2f}" for name in shown if name in phases)
                     + f"  via {result.get('launcher', '?')}"
                     + (f" (preloaded by the revision's server: {', '.join(result['preloaded'])})"
                        if result.get("preloaded") else ""))
    header = ("case", "target", "control", "unit", "ratio", "±ratio", "n", "accuracy", "status")
    rows = [header]
    for case in result.get("cases", []):
        metric = case["metric"]
        accuracy = f"{_fmt(case['accuracy_error'], '.1e')}/{_fmt(case['tolerance'], '.0e')}"
        rows.append((case["name"], _fmt(metric["target"], ".4g"), _fmt(metric["control"], ".4g"),
                     metric["name"], _fmt(case["median_ratio"], ".3f"), _noise(case["ratio"]),
                     str(len(case["target_ms"])), accuracy, case["status"]))
    if len(rows) > 1:
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for row in rows:
            lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        errors = [(c["name"], c["error"]) for c in result.get("cases", []) if c.get("error")]
        lines += [f"  {name}: {error.splitlines()[0]}" for name, error in errors]
        lines += [line for case in result.get("cases", []) if (line := _balance_note(case))]
    return "\n".join(lines)
