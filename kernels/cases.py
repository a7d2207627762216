"""Case names and compact shape strings.

A case is one suite plus its parameters (shape, dtype, options); its canonical name
is what the service keys time series by, so it must not depend on the order in
which a user happened to write the parameters.
"""
from __future__ import annotations

from typing import Any, Mapping

# Parameter order of the built-in suites, so "gemm K=1,M=2,N=3" and
# {"M": 2, "N": 3, "K": 1} get one name. Unknown keys follow, sorted.
_ORDER = ("B", "H", "S", "D", "M", "N", "K", "causal", "dtype")

# Matched case-insensitively ("BF16" is bf16); torch's spellings are accepted too.
DTYPE_ALIASES = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32", "torch.float32": "fp32",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16", "torch.float16": "fp16",
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "fp64": "fp64", "float64": "fp64", "double": "fp64", "torch.float64": "fp64",
}


def canonical_dtype(name: str) -> str:
    """'bfloat16' -> 'bf16'; raises ValueError for an unknown dtype."""
    key = str(name).strip().lower()
    if key not in DTYPE_ALIASES:
        raise ValueError(f"unknown dtype {name!r}; use one of fp32, fp16, bf16, fp64")
    return DTYPE_ALIASES[key]


def normalise_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The params as the harness names them: the dtype alias made canonical ('BF16',
    'bfloat16', 'torch.bfloat16' -> 'bf16'). Suites add their own defaults in validate().
    Raises ValueError for an unknown dtype."""
    params = dict(params)
    if "dtype" in params:
        params["dtype"] = canonical_dtype(params["dtype"])
    return params


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_shape(text: str) -> dict[str, Any]:
    """Parse 'M=8192,N=8192,K=8192,dtype=bf16' into a dict (ints, floats, bools, strings).

    Raises ValueError naming the offending item for an empty string, an item without
    '=', an empty key or value, or a key given twice.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty shape: expected something like 'M=512,N=512,K=512,dtype=fp32'")
    params: dict[str, Any] = {}
    for item in text.split(","):
        item = item.strip()
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise ValueError(f"bad shape item {item!r} in {text!r}: expected KEY=VALUE")
        if key in params:
            raise ValueError(f"shape key {key!r} given twice in {text!r}")
        params[key] = _parse_value(value)
    return params


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def ordered_items(params: Mapping[str, Any]) -> list[tuple[str, Any]]:
    known = [k for k in _ORDER if k in params]
    rest = sorted(k for k in params if k not in _ORDER)
    # dtype reads best last, after any suite-specific keys.
    keys = [k for k in known if k != "dtype"] + rest + (["dtype"] if "dtype" in params else [])
    return [(k, params[k]) for k in keys]


def format_shape(params: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={_format_value(v)}" for k, v in ordered_items(params))


def case_name(suite: str, params: Mapping[str, Any] | str) -> str:
    """Canonical case name, e.g. 'gemm M=512,N=512,K=512,dtype=fp32'."""
    if isinstance(params, str):
        params = parse_shape(params)
    return f"{suite} {format_shape(params)}"
