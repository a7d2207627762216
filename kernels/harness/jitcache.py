"""What a trial's Triton JIT cache says about the kernels it compiled (issue 43), stdlib only.

Triton 3.x writes one directory per compiled kernel under TRITON_CACHE_DIR, named by the
compilation's hash: `<name>.json` (the metadata: num_warps, num_stages, num_ctas, maxnreg,
shared, target, ...), the IR of each stage (`.ttir`, `.ttgir`, `.llir`, then `.ptx` on NVIDIA or
`.amdgcn` on ROCm), the binary (`.cubin`, `.hsaco`) and a `__grp__<name>.json` that lists them.

    summaries = read_cache(Path(os.environ["TRITON_CACHE_DIR"]))   # -> list of kernel summaries

Each summary is small and JSON-ready: the metadata that matters for performance, the registers
and spills where the compiled code says (AMDGCN's own comments; NVIDIA's come from the loaded
kernel, `profiling.live_kernels`), an op histogram per IR level, and the TTGIR text (bounded),
so the service can diff two ends without the files. Parsers are pure: text in, dict out.

FlyDSL (ROCm) keeps no IR files in its runtime cache: `FLYDSL_RUNTIME_CACHE_DIR/<func>_<key>/<hash>.pkl`
holds a pickled CompiledArtifact (the module's source MLIR and the lowered module with its binary).
So a profiled trial keeps the IR by construction: it sets FLYDSL_DUMP_IR=1 with a dump directory
of its own and turns FlyDSL's disk cache off for that trial (every kernel compiles, so every one is
dumped): `<dump dir>/<kernel>/00_origin.mlir`, one `.mlir` per pass, `NN_llvm_ir.ll` and
`NN_final_isa.s` (AMDGCN). `read_flydsl` summarises those like a Triton kernel (the source MLIR's op
histogram with fastmath flags, LLVM IR, AMDGCN with registers, spills and occupancy) and, where a
kernel has no dump, reads the source MLIR out of the cache's pickle with `pickletools.genops`, which
parses the opcodes and never runs them: a repository's pickle cannot execute here.
"""
from __future__ import annotations

import json
import pickletools
import re
from collections import Counter
from pathlib import Path

IR_LEVELS = ("ttir", "ttgir", "llir", "ptx", "amdgcn")
MAX_FILE_BYTES = 4 << 20      # an IR file larger than this is skipped, not read (its histogram absent)
MAX_TTGIR_CHARS = 200_000     # what the stored TTGIR keeps, for the service's bounded diff
MAX_TTGIR_TOTAL = 1_000_000   # and all kernels' together: past it, later kernels keep none (truncated)
MAX_KERNELS = 64              # a trial compiling more is summarised on its first 64 (by name)
META_KEYS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "shared", "enable_fp_fusion",
             "cluster_dims", "waves_per_eu", "matrix_instr_nonkdim", "kpack", "ptx_version",
             "global_scratch_size", "tmem_size", "triton_version", "constants")

_MLIR_OP = re.compile(r"^\s*(?:%[^=]*=\s*)?\"?([a-z_][a-z0-9_]*\.[a-z0-9_.]+)\"?")
_LLIR_INST = re.compile(r"^\s+(?:%[\w.\"-]+\s*=\s*)?(?:tail\s+|musttail\s+|notail\s+)?([a-z][a-z0-9_]*)\b(.*)")
_LLIR_CALLEE = re.compile(r"@([\w.$-]+)\s*\(")
_PTX_INST = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*)")
_GCN_INST = re.compile(r"^\s+([a-z][a-z0-9_]*)(?:\s|$)")
_GCN_COUNTS = {"n_regs": re.compile(r";\s*NumVgprs:\s*(\d+)"), "n_sgprs": re.compile(r";\s*NumSgprs:\s*(\d+)"),
               "n_spills": re.compile(r";\s*VGPRs?\s*[Ss]pill(?:ed)?:?\s*(\d+)|\.vgpr_spill_count:\s*(\d+)"),
               "scratch": re.compile(r";\s*ScratchSize:\s*(\d+)"),
               "occupancy": re.compile(r";\s*Occupancy:\s*(\d+)")}
_FASTMATH = re.compile(r"fastmath\s*<\s*([a-z, ]+)>")
_PTX_MAXNREG = re.compile(r"^\s*\.maxnreg\s+(\d+)", re.M)


def mlir_ops(text: str, fastmath: bool = False) -> Counter:
    """Op histogram of an MLIR module (TTIR, TTGIR): `dialect.op` per operation line; attribute
    aliases (`#blocked = ...`), `module`, block labels and `loc(...)` lines are not ops. With
    `fastmath`, an op carrying fastmath flags is counted with them (`arith.mulf<fast>`)."""
    ops: Counter = Counter()
    for line in text.splitlines():
        stripped = line.lstrip()
        if not stripped or stripped[0] in "#}^/" or stripped.startswith(("module", "loc(")):
            continue
        found = _MLIR_OP.match(line)
        if found:
            flags = _FASTMATH.search(line) if fastmath else None
            ops[found.group(1) + (f"<{flags.group(1).replace(' ', '')}>" if flags else "")] += 1
    return ops


def llir_ops(text: str) -> Counter:
    """Instruction histogram of LLVM IR function bodies; a call is named by its callee
    (`call @llvm.nvvm.ex2.approx.f`), so intrinsics that appear or vanish show."""
    ops: Counter = Counter()
    for line in text.splitlines():
        if not line.startswith((" ", "\t")) or line.lstrip().startswith(";"):
            continue
        found = _LLIR_INST.match(line)
        if not found:
            continue
        op = found.group(1)
        if op == "call":
            callee = _LLIR_CALLEE.search(found.group(2))
            op = f"call @{callee.group(1)}" if callee else op
        ops[op] += 1
    return ops


def ptx_ops(text: str) -> Counter:
    """Instruction histogram of PTX, opcodes with their modifiers (`ex2.approx.ftz.f32`,
    `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`); directives, labels, comments and
    braces are not instructions."""
    ops: Counter = Counter()
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped[0] in ".{}/$" or stripped.endswith(":") or stripped.startswith("//"):
            continue
        found = _PTX_INST.match(stripped)
        if found:
            ops[found.group(1)] += 1
    return ops


def amdgcn_ops(text: str) -> Counter:
    """Instruction histogram of AMDGCN assembly (`v_exp_f32_e32`, `v_mfma_f32_32x32x8_bf16`):
    indented mnemonic lines; directives (`.`), comments (`;`) and labels are not."""
    ops: Counter = Counter()
    for line in text.splitlines():
        if not line[:1].isspace():
            continue
        stripped = line.strip()
        if not stripped or stripped[0] in ".;" or stripped.endswith(":"):
            continue
        found = _GCN_INST.match(line)
        if found:
            ops[found.group(1)] += 1
    return ops


def flydsl_ops(text: str) -> Counter:
    """Op histogram of FlyDSL's source MLIR with each op's fastmath flags (`arith.mulf<fast>`,
    `math.exp2<contract,afn>`): a flag that stops reaching the builder (the motivating case's #930)
    shows as ops moving between keys."""
    return mlir_ops(text, fastmath=True)


PARSERS = {"ttir": mlir_ops, "ttgir": mlir_ops, "llir": llir_ops, "ptx": ptx_ops, "amdgcn": amdgcn_ops,
           "fly": flydsl_ops}
DIFF_LEVELS = ("ttgir", "fly")  # the IR a kernel's bounded text (and the service's unified diff) is of


def amdgcn_resources(text: str) -> dict[str, int]:
    """Registers, spills, scratch and occupancy as the AMDGPU backend's comments give them."""
    out: dict[str, int] = {}
    for key, pattern in _GCN_COUNTS.items():
        found = pattern.search(text)
        if found:
            out[key] = int(next(g for g in found.groups() if g is not None))
    return out


def metadata_summary(meta: dict) -> dict:
    """The metadata fields that matter for performance, and the target as `backend:arch`."""
    out = {key: meta[key] for key in META_KEYS if key in meta}
    target = meta.get("target")
    if isinstance(target, dict):
        out["target"] = f"{target.get('backend')}:{target.get('arch')}"
    elif target is not None:
        out["target"] = str(target)
    return out


def summarize_kernel(name: str, meta: dict, texts: dict[str, str]) -> dict:
    """One compiled kernel: its metadata summary, resources, op histogram per IR level present
    and the TTGIR text (bounded). `texts` maps an IR level to the file's text."""
    summary = {"name": name, "hash": meta.get("hash"), "metadata": metadata_summary(meta),
               "ops": {level: dict(PARSERS[level](text)) for level, text in texts.items() if level in PARSERS},
               "ir_levels": sorted(texts)}
    if "amdgcn" in texts:
        summary["metadata"].update(amdgcn_resources(texts["amdgcn"]))
    if "ptx" in texts and "maxnreg" not in summary["metadata"]:
        found = _PTX_MAXNREG.search(texts["ptx"])
        if found:
            summary["metadata"]["maxnreg"] = int(found.group(1))
    level = next((lv for lv in DIFF_LEVELS if lv in texts), None)
    if level:
        summary["ttgir"] = texts[level][:MAX_TTGIR_CHARS]
        summary["ttgir_truncated"] = len(texts[level]) > MAX_TTGIR_CHARS
        summary["diff_ir"] = level
    return summary


def _kernel_dirs(root: Path) -> list[tuple[str, Path, dict]]:
    """(name, directory, metadata) of every compiled kernel: a directory holding `<name>.json`
    whose JSON has a `name` (the `__grp__` files and launcher stubs are not kernels)."""
    found = []
    for meta_path in sorted(root.glob("*/*.json")):
        if meta_path.name.startswith("__grp__"):
            continue
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("name") == meta_path.stem:
            found.append((meta_path.stem, meta_path.parent, meta))
    return found


def _within_budget(kernels: list[dict], budget: int | None = None) -> None:
    """Drop the TTGIR text of the kernels past MAX_TTGIR_TOTAL characters in all (marked truncated),
    so a trial that compiles many kernels stores a bounded document."""
    left = MAX_TTGIR_TOTAL if budget is None else budget
    for kernel in kernels:
        size = len(kernel.get("ttgir") or "")
        if size > left:
            kernel["ttgir"], kernel["ttgir_truncated"] = "", True
        left -= min(size, max(left, 0))


def read_cache(root: Path | None) -> dict:
    """Every kernel compiled in the JIT cache at `root`: {"kernels": [...], "note": why empty}.
    Never raises: a missing directory or one without kernels (or without IR files) is a note."""
    if root is None or not Path(root).is_dir():
        return {"kernels": [], "note": "no Triton JIT cache directory for this trial"}
    kernels = []
    for name, directory, meta in _kernel_dirs(Path(root))[:MAX_KERNELS]:
        texts = {}
        for level in IR_LEVELS:
            path = directory / f"{name}.{level}"
            try:
                if path.is_file() and path.stat().st_size <= MAX_FILE_BYTES:
                    texts[level] = path.read_text(errors="replace")
            except OSError:
                continue
        kernels.append(summarize_kernel(name, meta, texts))
    _within_budget(kernels)
    if not kernels:
        return {"kernels": [], "note": "the trial compiled no Triton kernel (its JIT cache holds none)"}
    if not any(k["ir_levels"] for k in kernels):
        return {"kernels": kernels, "note": "the JIT cache holds kernel metadata but no IR files"}
    return {"kernels": kernels, "note": None}


FLYDSL_DUMP_DIR = "FLYDSL_DUMP_DIR"


def flydsl_dump_env(directory: str) -> dict[str, str]:
    """The environment that makes FlyDSL keep every kernel's IR in `directory` during one trial:
    dumps on, and its disk cache off so that every kernel compiles (and is dumped) in this trial."""
    return {"FLYDSL_DUMP_IR": "1", FLYDSL_DUMP_DIR: directory, "FLYDSL_RUNTIME_ENABLE_CACHE": "0"}


FLYDSL_FILES = (("fly", "00_origin.mlir"), ("llir", "*_llvm_ir.ll"), ("amdgcn", "*_final_isa.s"))
_GFX = re.compile(r"\b(gfx[0-9a-f]{3,4})\b")
_PICKLED_KEYS = ("entry", "source_ir")
_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"}
_MEMO_OPS = {"MEMOIZE", "BINPUT", "LONG_BINPUT", "PUT"}


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace") if path.is_file() and path.stat().st_size <= MAX_FILE_BYTES else None
    except OSError:
        return None


def _flydsl_kernel(name: str, texts: dict[str, str], key: str | None = None) -> dict:
    """A FlyDSL kernel's summary: the target from the IR (`rocm:gfx942`), the rest as Triton's."""
    arch = next((found.group(1) for text in texts.values() for found in [_GFX.search(text)] if found), None)
    return summarize_kernel(name, {"hash": key, **({"target": f"rocm:{arch}"} if arch else {})}, texts)


def pickled_strings(data: bytes, keys: tuple[str, ...] = _PICKLED_KEYS) -> dict[str, str]:
    """The string value pickled right after each of `keys` (a state dict's items), read with
    pickletools.genops: opcodes parsed, never executed. {} for a stream that does not parse."""
    found: dict[str, str] = {}
    key = None
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in _MEMO_OPS:
                continue
            if op.name in _STRING_OPS:
                if key is not None:
                    found.setdefault(key, arg)
                    key = None
                elif arg in keys:
                    key = arg
                continue
            key = None
    except Exception:  # a truncated or foreign stream: what was read so far
        return found
    return found


def read_flydsl(dump_root: Path | None, cache_root: Path | None = None) -> list[dict]:
    """FlyDSL kernels of a trial: one per directory of its IR dump (see the module docstring), then
    one per cache pickle whose kernel has no dump (its source MLIR only). At most MAX_KERNELS."""
    kernels: dict[str, dict] = {}
    if dump_root is not None and Path(dump_root).is_dir():
        for directory in sorted(p for p in Path(dump_root).iterdir() if p.is_dir()):
            texts = {}
            for level, pattern in FLYDSL_FILES:
                paths = sorted(directory.glob(pattern))
                text = _read_text(paths[-1]) if paths else None
                if text is not None:
                    texts[level] = text
            if texts:
                kernels[directory.name] = _flydsl_kernel(directory.name, texts)
    if cache_root is not None and Path(cache_root).is_dir():
        for path in sorted(Path(cache_root).glob("*/*.pkl")):
            try:
                data = path.read_bytes() if path.stat().st_size <= MAX_FILE_BYTES else b""
            except OSError:
                continue
            state = pickled_strings(data)
            name = state.get("entry") or path.parent.name
            if name not in kernels and state.get("source_ir"):
                kernels[name] = _flydsl_kernel(name, {"fly": state["source_ir"]}, path.stem)
    return [kernels[name] for name in sorted(kernels)][:MAX_KERNELS]
