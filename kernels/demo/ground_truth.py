"""What was planted in the demo history, and which demo cases each event must hit.
Written into the demo repository as GROUND_TRUTH.json; only tests read it."""
from __future__ import annotations

from perfbisect.kernels.cases import case_name

EVENTS = {
    "rms_blocks": {
        "kind": "perf", "direction": "slower",
        "mechanism": "RMSNorm walks the rows in blocks (8 rows on the CPU: six small ops per block, 128 "
                     "blocks; grids of 1024 rows on the GPU: 16 launches)"},
    "rms_weight_check": {
        "kind": "perf", "direction": "slower", "interacts_with": "rms_blocks",
        "mechanism": "the weight is checked for NaN/inf and all zeros where rows are normalized: two "
                     "reductions and two host round trips per call, which the row blocks of rms_blocks "
                     "repeat per block (128 per CPU call, 32 host syncs per GPU call): a few percent "
                     "without the blocks, about 30% with them"},
    "swizzle_off_bf16": {
        "kind": "perf", "direction": "slower",
        "mechanism": "GROUP_M dropped from the bf16 tile config: row-major launch order, no "
                     "L2 reuse of B panels on the GPU, B re-packed for every tile on the CPU"},
    "import_broken": {
        "kind": "import_error",
        "mechanism": "cdiv renamed to ceil_div in _utils; attention.py still imports cdiv"},
    "import_fixed": {"kind": "import_fixed", "fixes": "import_broken"},
    "fastmath_dropped": {
        "kind": "perf", "direction": "slower",
        "mechanism": "score tile scaled separately and exponentiated with precise exp "
                     "(libdevice on the GPU, fp64 on the CPU) instead of exp2 with log2(e) folded "
                     "into the scale; costs more at long sequence lengths on the GPU"},
    "block_k_small_step": {
        "kind": "perf", "direction": "slower",
        "mechanism": "bf16 BLOCK_K 64 -> 32: twice the K iterations (and twice the addmm calls "
                     "per tile on the CPU)"},
    "k_tail_dropped": {
        "kind": "wrong_results",
        "mechanism": "K-loop trip count K // BLOCK_K: the tail of K is never loaded when K is "
                     "not a multiple of the K tile (BLOCK_K on the GPU and on the CPU)"},
    "k_tail_fixed": {"kind": "wrong_results_fixed", "fixes": "k_tail_dropped"},
    "fp32_self_check": {
        "kind": "spread", "direction": "bimodal",
        "mechanism": "the CPU path checks one fp32 call in four against a float64 matmul, about twice "
                     "the call's own cost: the median hardly moves, a quarter of the calls form a slow "
                     "second mode (a noisier or bimodal finding, never a speed step)"},
    "swizzle_partial_recovery": {
        "kind": "perf", "direction": "faster", "recovers": "swizzle_off_bf16",
        "mechanism": "grouped launch order for bf16 again, but GROUP_M=4 instead of 8: less L2 "
                     "reuse than before the loss on the GPU, shorter runs per packed B panel on "
                     "the CPU"},
}


# The responsible hunk(s) of each planted performance event (issue 43), per device: a fragment of
# an added line of each hunk that carries the step there (several: hunks that only work together,
# such as a call and the definition it needs). Every other hunk of the event's commit is harmless
# on that device: the cleanup's wording, and the other device's code path. An empty list: no hunk
# of the commit carries the step (the localization must name none).
RESPONSIBLE_HUNKS = {
    "rms_blocks": {"cpu": ["range(0, x.shape[0], 8)"], "cuda": ["grids of at most 1024 rows"]},
    "rms_weight_check": {"cpu": ["def _check_weight(w):"], "cuda": ["def _check_weight(w):", "_check_weight(weight)"]},
    "swizzle_off_bf16": {"cpu": ["torch.bfloat16: GemmConfig("], "cuda": ["torch.bfloat16: GemmConfig("]},
    # none: #924's step is the minicc pin it bumps (a file no trial imports, set aside); the
    # descent into minicc names its commit (issue 44), and a hunk named here would be harmless
    "fastmath_dropped": {"cpu": [], "cuda": []},
    "block_k_small_step": {"cpu": ["torch.bfloat16: GemmConfig(128, 256, 32"],
                           "cuda": ["torch.bfloat16: GemmConfig(128, 256, 32"]},
    "swizzle_partial_recovery": {"cpu": ["group_m=4"], "cuda": ["group_m=4"]},
}


def event_hits(event: str, case: dict, device: str) -> bool:
    """Whether a planted event changes this case (suite + params) on this device."""
    suite, params = case["suite"], case["params"]
    if event in ("swizzle_off_bf16", "block_k_small_step", "swizzle_partial_recovery"):
        return suite == "gemm" and params.get("dtype") == "bf16"
    if event in ("rms_blocks", "rms_weight_check"):
        return suite == "rmsnorm"
    if event == "fastmath_dropped":
        return suite == "attention"
    if event == "fp32_self_check":  # the check is on the CPU path only
        return suite == "gemm" and params.get("dtype") == "fp32" and device == "cpu"
    if event in ("k_tail_dropped", "k_tail_fixed"):
        # by then BLOCK_K is 32 for both bf16 and fp32, on the GPU and on the CPU
        k_tile = 32
        return suite == "gemm" and params["K"] % k_tile != 0
    return event in ("import_broken", "import_fixed")  # every case fails to import


def ground_truth(shas: list[str], subjects: list[str], events: dict[int, str],
                 cpu_cases: list[dict], gpu_cases: list[dict]) -> dict:
    """The GROUND_TRUTH.json document. Commit indices count first-parent commits from
    the root (index 0); an event's parent is index - 1."""
    out = []
    for index, key in sorted(events.items()):
        info = dict(EVENTS[key])
        if key in RESPONSIBLE_HUNKS:
            info["hunks"] = RESPONSIBLE_HUNKS[key]
        out.append({"event": key, "index": index, "sha": shas[index], "parent": shas[index - 1],
                    "subject": subjects[index], **info,
                    "cases": {"cpu": [case_name(c["suite"], c["params"]) for c in cpu_cases
                                      if event_hits(key, c, "cpu")],
                              "cuda": [case_name(c["suite"], c["params"]) for c in gpu_cases
                                       if event_hits(key, c, "cuda")]}})
    return {"commits": len(shas), "first": shas[0], "last": shas[-1], "events": out,
            "interactions": [{"events": sorted([key, EVENTS[key]["interacts_with"]]), "case_suite": "rmsnorm",
                              "kind": "sub-additive"}
                             for key in sorted(set(events.values())) if EVENTS[key].get("interacts_with")]}
