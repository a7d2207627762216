"""The evidence in words: the report's "why" block (one line per kind) and the single line the
PR comment and the alert page show."""
from __future__ import annotations

from typing import TYPE_CHECKING

from perfbisect.service.hunks.report import why_lines as hunk_why

if TYPE_CHECKING:
    from perfbisect.service.evidence.schemas import (
        CompiledSection,
        CulpritEvidence,
        KernelCode,
    )

MAX_OPS_SHOWN = 3


def _value(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={v}" for k, v in value.items()) + "}"
    return "-" if value is None else str(value)


def code_line(kernel: KernelCode) -> str:
    """`softmax_kernel: num_stages 3->4, shared 0->16; ptx ex2.approx.f32 -4, ex2.approx.ftz.f32 +2`."""
    if kernel.status in ("added", "removed"):
        return f"{kernel.name}: {kernel.status}"
    parts = [", ".join(f"{c.field} {_value(c.before)}->{_value(c.after)}" for c in kernel.metadata[:4])]
    level = next((lv for lv in ("ptx", "amdgcn", "llir", "ttgir", "ttir", "fly") if kernel.ops.get(lv)), None)
    if level:
        ops = ", ".join(f"{d.op} {d.delta:+d}" for d in kernel.ops[level][:MAX_OPS_SHOWN])
        parts.append(f"{level} {ops}")
    elif kernel.ttgir_diff:
        parts.append(f"{kernel.diff_ir.upper()} differs")
    return f"{kernel.name}: " + "; ".join(p for p in parts if p)


def compiled_line(section: CompiledSection) -> str | None:
    changed = [k for k in section.kernels if k.status != "same"]
    if not changed:
        return "compiled: the same code at both ends" if section.kernels else None
    more = f" (+{len(changed) - 2} more)" if len(changed) > 2 else ""
    return "compiled: " + " | ".join(code_line(k) for k in changed[:2]) + more


def why_lines(evidence: CulpritEvidence) -> list[str]:
    """One line per kind of evidence: what it shows, or why there is none."""
    found = evidence.hunks.available and evidence.hunks.culprit is not None
    lines: list[str] = hunk_why(evidence.hunks) if found else []  # the hunk first; its absence last
    for case in evidence.kernels.cases:
        if case.headline:
            lines.append(f"kernel ({case.case}): {case.headline} per call")
    if evidence.compiled.available:
        line = compiled_line(evidence.compiled)
        if line:
            lines.append(line)
    if evidence.autotune.available:
        flips = [c for c in evidence.autotune.choices if c.flipped]
        lines.append(f"autotuner: the step comes with a flipped configuration: {flips[0].kernel} chose "
                     f"{_value(flips[0].before)} -> {_value(flips[0].after)} at {flips[0].key}"
                     + (f" (+{len(flips) - 1} more)" if len(flips) > 1 else "")
                     if flips else "autotuner: the same configuration at both ends")
    env = evidence.environment
    if env.available and not env.same:
        lines.append("environment differs: " + ", ".join(f"{d.field} {_value(d.before)}->{_value(d.after)}"
                                                         for d in env.differences))
    for kind, section in (("kernel", evidence.kernels), ("compiled-code", evidence.compiled),
                          ("autotuner", evidence.autotune)):
        if section.reason and (not section.available or kind == "compiled-code"):
            lines.append(f"no {kind} evidence, because {section.reason}" if not section.available
                         else f"partial {kind} evidence: {section.reason}")
    return lines if found else lines + hunk_why(evidence.hunks)

