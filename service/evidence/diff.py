"""Pure diffs of what a culprit's two ends ran and compiled (issue 43): dicts in, dicts out, no
database, no torch. The inputs are what a profiled trial stores (kernels/harness/profiling.py,
jitcache.py): the profiler's kernel table, the JIT cache's kernel summaries, the live Triton
objects (autotuner choices, registers, constexprs) and the trial's device provenance.

    kernel_diff(before_rows, after_rows)          # ranked by |per-call change|, with a headline
    compiled_diff(before_compiled, after_compiled, before_live, after_live)
    autotune_diff(before_live, after_live)        # which kernel's chosen config flipped, per key
    environment_diff(before_device, after_device)  # exactly which toolchain fields differ
"""
from __future__ import annotations

import difflib
from typing import Any

MAX_KERNEL_ROWS = 25
MAX_OP_ROWS = 40
MAX_DIFF_LINES = 400
MAX_DIFF_CHARS = 40_000
# metadata fields first in the table, in this order; any other field that differs follows
META_ORDER = ("num_warps", "num_stages", "num_ctas", "maxnreg", "shared", "n_regs", "n_spills", "target",
              "constants", "enable_fp_fusion")
ENVIRONMENT_KEYS = ("kind", "name", "driver", "cuda", "torch", "triton", "hip", "arch", "cu_count", "xcd_count",
                    "firmware", "threads", "clock", "flush_scope", "harness_version")


def _ms(value: float) -> str:
    return f"{value:+.3g} ms" if abs(value) >= 0.01 else f"{value * 1000:+.3g} us"


def kernel_diff(before: list[dict], after: list[dict]) -> dict[str, Any]:
    """Per kernel (or CPU operator) of either end: time per target call before and after, the
    change, calls per target call, grid and block; ranked by absolute change. `headline` names
    the kernel that carries most of the total change ("`k` +3.1 ms of +3.2 ms")."""
    by_name: dict[str, dict] = {}
    for side, rows in (("before", before), ("after", after)):
        for row in rows:
            entry = by_name.setdefault(row["name"], {"name": row["name"]})
            entry[f"{side}_ms"] = row.get("per_call_ms", row.get("total_ms", 0.0))
            # launches per target call (the ends may profile different numbers of calls)
            entry[f"calls_{side}"] = row.get("launches_per_call", row.get("calls"))
            entry[f"grid_{side}"], entry[f"block_{side}"] = row.get("grid"), row.get("block")
    rows = []
    for entry in by_name.values():
        entry.setdefault("before_ms", 0.0)
        entry.setdefault("after_ms", 0.0)
        entry["delta_ms"] = entry["after_ms"] - entry["before_ms"]
        entry["status"] = ("added" if "calls_before" not in entry else "removed" if "calls_after" not in entry
                           else "changed" if entry["delta_ms"] else "same")
        rows.append(entry)
    rows.sort(key=lambda r: (-abs(r["delta_ms"]), r["name"]))
    total_before = sum(r["before_ms"] for r in rows)
    total_after = sum(r["after_ms"] for r in rows)
    total = total_after - total_before
    headline = None
    if rows and rows[0]["delta_ms"]:
        headline = f"`{rows[0]['name']}` {_ms(rows[0]['delta_ms'])} of {_ms(total)}"
    return {"rows": rows[:MAX_KERNEL_ROWS], "total_before_ms": total_before, "total_after_ms": total_after,
            "total_delta_ms": total, "headline": headline}


def _with_live(kernels: list[dict], live: dict | None) -> list[dict]:
    """The JIT cache's kernels with what the loaded kernels add (registers, spills, constexprs),
    matched by compilation hash, else by name when the name is unique."""
    facts = (live or {}).get("kernels") or []
    by_hash = {f.get("hash"): f for f in facts if f.get("hash")}
    names = [f.get("name") for f in facts]
    by_name = {f.get("name"): f for f in facts if names.count(f.get("name")) == 1}
    out = []
    for kernel in kernels:
        fact = by_hash.get(kernel.get("hash")) or by_name.get(kernel["name"]) or {}
        meta = dict(kernel.get("metadata") or {})
        for key in ("n_regs", "n_spills"):
            if key in fact and key not in meta:
                meta[key] = fact[key]
        if fact.get("constants") and "constants" not in meta:
            meta["constants"] = fact["constants"]
        out.append({**kernel, "metadata": meta})
    return out


def _pairs(before: list[dict], after: list[dict]) -> list[tuple[str, dict | None, dict | None]]:
    """Kernels matched by name across the ends (the n-th compilation of a name with the n-th, in
    order of their constexprs); a name at one end only is added or removed."""
    def grouped(kernels):
        out: dict[str, list[dict]] = {}
        for k in sorted(kernels, key=lambda k: (k["name"], repr(sorted((k["metadata"].get("constants") or {}).items())))):
            out.setdefault(k["name"], []).append(k)
        return out
    b, a = grouped(before), grouped(after)
    pairs = []
    for name in sorted(set(b) | set(a)):
        left, right = b.get(name, []), a.get(name, [])
        for i in range(max(len(left), len(right))):
            label = name if max(len(left), len(right)) == 1 else f"{name}#{i + 1}"
            pairs.append((label, left[i] if i < len(left) else None, right[i] if i < len(right) else None))
    return pairs


def metadata_changes(before: dict, after: dict) -> list[dict]:
    """The metadata fields whose values differ, the performance ones first (META_ORDER)."""
    keys = [k for k in META_ORDER if k in before or k in after]
    keys += sorted((set(before) | set(after)) - set(keys))
    return [{"field": k, "before": before.get(k), "after": after.get(k)} for k in keys if before.get(k) != after.get(k)]


def op_deltas(before: dict[str, int], after: dict[str, int]) -> list[dict]:
    """Per op of either histogram whose count changed: before, after and the delta, the largest
    change first (at most MAX_OP_ROWS)."""
    rows = [{"op": op, "before": before.get(op, 0), "after": after.get(op, 0),
             "delta": after.get(op, 0) - before.get(op, 0)} for op in set(before) | set(after)]
    rows = [r for r in rows if r["delta"]]
    rows.sort(key=lambda r: (-abs(r["delta"]), r["op"]))
    return rows[:MAX_OP_ROWS]


def bounded_unified_diff(before: str, after: str, label: str) -> tuple[str | None, bool]:
    """A unified diff of two texts, at most MAX_DIFF_LINES lines and MAX_DIFF_CHARS characters;
    (None, False) when they are equal. The flag says it was cut."""
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), f"before/{label}",
                                      f"after/{label}", lineterm="", n=2))
    if not lines:
        return None, False
    cut = len(lines) > MAX_DIFF_LINES
    text = "\n".join(lines[:MAX_DIFF_LINES])
    if len(text) > MAX_DIFF_CHARS:
        text, cut = text[:MAX_DIFF_CHARS], True
    return text, cut


def kernel_code_diff(label: str, before: dict | None, after: dict | None) -> dict[str, Any]:
    """One kernel's compiled code at both ends: metadata changes, op deltas per IR level present
    at both, the bounded TTGIR diff; `status` added / removed / changed / same."""
    if before is None or after is None:
        kernel = before or after
        return {"name": label, "status": "added" if before is None else "removed", "metadata": [],
                "ops": {}, "ttgir_diff": None, "ttgir_diff_truncated": False,
                "ir_levels": kernel.get("ir_levels", [])}
    meta = metadata_changes(before.get("metadata") or {}, after.get("metadata") or {})
    levels = [lv for lv in before.get("ops", {}) if lv in after.get("ops", {})]
    ops = {lv: op_deltas(before["ops"][lv], after["ops"][lv]) for lv in levels}
    ops = {lv: rows for lv, rows in ops.items() if rows}
    ir = after.get("diff_ir") or before.get("diff_ir") or "ttgir"  # FlyDSL's: its source MLIR ("fly")
    diff, cut = bounded_unified_diff(before.get("ttgir") or "", after.get("ttgir") or "", f"{label}.{ir}")
    changed = bool(meta or ops or diff)
    return {"name": label, "status": "changed" if changed else "same", "metadata": meta, "ops": ops,
            "ttgir_diff": diff, "ttgir_diff_truncated": cut or bool(before.get("ttgir_truncated")
                                                                  or after.get("ttgir_truncated")),
            "ir_levels": sorted(set(before.get("ir_levels", [])) & set(after.get("ir_levels", []))), "diff_ir": ir}


def compiled_diff(before: dict, after: dict, before_live: dict | None = None,
                  after_live: dict | None = None) -> dict[str, Any]:
    """The compiled code of both ends (jitcache.read_cache's documents): the kernels that
    changed first. `reason` says why there is nothing to compare (no Triton kernel, no IR files)."""
    left = _with_live(before.get("kernels") or [], before_live)
    right = _with_live(after.get("kernels") or [], after_live)
    if not left and not right:
        return {"available": False, "kernels": [],
                "reason": after.get("note") or before.get("note") or "no Triton kernel was compiled at either end"}
    kernels = [kernel_code_diff(label, b, a) for label, b, a in _pairs(left, right)]
    kernels.sort(key=lambda k: (k["status"] == "same", k["name"]))
    no_ir = not any(k.get("ir_levels") for k in left + right)
    reason = "the JIT cache holds kernel metadata but no IR files: op counts and the TTGIR diff are missing" if no_ir else None
    return {"available": True, "kernels": kernels, "reason": reason}


def autotune_diff(before_live: dict | None, after_live: dict | None) -> dict[str, Any]:
    """Per autotuned kernel and key (the shape the autotuner keyed on), the configuration chosen
    at each end and whether it flipped. Unavailable when neither end autotuned a kernel."""
    def choices(live):
        return {(t["kernel"], key): cfg for t in (live or {}).get("autotune") or [] for key, cfg in t["chosen"].items()}
    b, a = choices(before_live), choices(after_live)
    if not b and not a:
        return {"available": False, "flipped": False, "choices": [],
                "reason": "no kernel was autotuned at either end (or Triton was not loaded)"}
    rows = [{"kernel": kernel, "key": key, "before": b.get((kernel, key)), "after": a.get((kernel, key)),
             "flipped": (kernel, key) in b and (kernel, key) in a and b[(kernel, key)] != a[(kernel, key)]}
            for kernel, key in sorted(set(b) | set(a))]
    return {"available": True, "flipped": any(r["flipped"] for r in rows), "choices": rows, "reason": None}


def environment_diff(before: dict | None, after: dict | None) -> dict[str, Any]:
    """Exactly which device and toolchain fields differ between the compared trials."""
    if not before or not after:
        return {"available": False, "same": None, "differences": [],
                "reason": "a compared trial recorded no device provenance"}
    diffs = [{"field": k, "before": before.get(k), "after": after.get(k)}
             for k in ENVIRONMENT_KEYS if before.get(k) != after.get(k)]
    return {"available": True, "same": not diffs, "differences": diffs, "reason": None}
