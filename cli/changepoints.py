"""`perfbisect changepoints SERIES.json [--json]`: the change-point detector on any series.

SERIES.json is a JSON list of numbers (oldest first) or an object {"values": [...]}. The detector
(service.bisect.changepoints) is imported when the command runs, so the CLI starts without
numpy, scipy or torch."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from perfbisect.cli.common import CLIError, console


def read_series(path: Path) -> list[float]:
    """The numbers in `path`; raises CLIError with what is wrong with the file."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise CLIError(f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CLIError(f"{path} cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise CLIError(f"{path} is not JSON: {exc}") from None
    values = data.get("values") if isinstance(data, dict) else data
    if not isinstance(values, list):
        raise CLIError(f'{path} must hold a JSON list of numbers or {{"values": [...]}}')
    bad = next((i for i, v in enumerate(values)
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)), None)
    if bad is not None:
        raise CLIError(f"{path}: value {bad} is {json.dumps(values[bad])}, not a finite number")
    return [float(v) for v in values]


def _number(value: float) -> float | None:
    return value if math.isfinite(value) else None  # JSON has no nan: a rel over a zero level


def report(values: list[float], *, min_magnitude: float, pvalue: float, trend_pvalue: float,
           min_size: int) -> dict[str, Any]:
    from perfbisect.service.bisect.changepoints import compute_change_points

    try:
        points = compute_change_points(values, min_magnitude=min_magnitude, pvalue=pvalue,
                                       trend_pvalue=trend_pvalue, min_size=min_size)
    except ValueError as exc:
        raise CLIError(str(exc)) from exc
    return {"change_points": [{"index": p.index, "before": p.mean_before, "after": p.mean_after,
                               "rel": _number(p.rel), "pvalue": p.pvalue} for p in points]}


def format_table(result: dict[str, Any], count: int) -> str:
    points = result["change_points"]
    lines = [f"{len(points)} change point{'s' * (len(points) != 1)} in {count} values"]
    if points:
        lines.append(f"{'index':>7} {'before':>12} {'after':>12} {'change':>9} {'p-value':>9}")
        for p in points:
            rel = "n/a" if p["rel"] is None else f"{100 * p['rel']:+.1f}%"
            lines.append(f"{p['index']:>7} {p['before']:>12.5g} {p['after']:>12.5g} {rel:>9} {p['pvalue']:>9.1e}")
    return "\n".join(lines)


def changepoints(
    series: Annotated[Path, typer.Argument(help="JSON list of numbers, oldest first, or {\"values\": [...]}")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    min_magnitude: Annotated[float, typer.Option(help="smallest |after/before - 1| kept")] = 0.0,
    pvalue: Annotated[float, typer.Option(help="level test threshold (corrected for the search)")] = 0.001,
    trend_pvalue: Annotated[float, typer.Option(help="jump-over-trend test threshold")] = 0.001,
    min_size: Annotated[int, typer.Option(help="fewest points in a level")] = 5,
) -> None:
    """Change points of a series: where its level steps (index = first point of the new level)."""
    try:
        values = read_series(series)
        result = report(values, min_magnitude=min_magnitude, pvalue=pvalue, trend_pvalue=trend_pvalue,
                        min_size=min_size)
    except CLIError as exc:
        from rich.markup import escape  # rich only for a command that prints (start-up time)

        console().print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True, highlight=False)
        raise typer.Exit(2) from None
    print(json.dumps(result, indent=2) if as_json else format_table(result, len(values)))
