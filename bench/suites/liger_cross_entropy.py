"""Liger-Kernel's fused cross entropy (`liger_kernel.ops.cross_entropy:cross_entropy_forward`)
against torch's `cross_entropy`, a suite file kept outside Liger's history (perfbisect
--suite-file), for the real-library bisect recorded in bench/RESULTS.md.

Liger's forward computes the loss and, when the logits require grad (`HAS_GRADIENTS`, as in
training), writes the gradient into them in place: a second pass over the vocabulary, which the
#1266 change (exp -> exp2) touches too. So setup() marks the logits as requiring grad (without
it the kernel skips that pass and reads the logits once), the timed calls run on logits the first
call overwrote (the kernel's work does not depend on the values), the control runs on them
detached (no autograd graph) and the accuracy check uses a pristine copy made in setup(). The target is imported without running
`liger_kernel/ops/__init__.py`, which imports every op of the revision (and, in some revisions,
backends a node may lack), and called with the keyword arguments its signature at that revision
names, so the same file serves the whole history. `liger_kernel/utils.py` tries `import peft` at
import time for a flag the cross entropy never reads; on a node with peft (and so transformers)
installed that import was most of a trial (4.8 s of 6.2 s on the H200), so the suite makes it
fail as it does where peft is missing (`PEFT_AVAILABLE = False`), unless peft is already loaded.
"""
import importlib
import importlib.util
import inspect
import sys
import types
from pathlib import Path

import torch

METRIC = "GB/s"  # the logits are read twice (softmax, gradient) and written once (the gradient)
TOLERANCE = 1e-2
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def validate(params):
    missing = {"BT", "V"} - set(params)
    if missing:
        raise ValueError(f"liger_cross_entropy: missing {sorted(missing)}")
    params = {**params, "dtype": params.get("dtype", "bf16")}
    if params["dtype"] not in DTYPES:
        raise ValueError(f"liger_cross_entropy: dtype must be one of {sorted(DTYPES)}")
    return params


def make_inputs(params, device, generator):
    logits = torch.randn((params["BT"], params["V"]), generator=generator, device=device).to(DTYPES[params["dtype"]])
    target = torch.randint(0, params["V"], (params["BT"],), generator=generator, device=device)
    return logits, target


def setup(inputs, params):
    logits, target = inputs
    return logits.requires_grad_(True), target, logits.detach().clone()


def bytes_moved(params):
    return 3.0 * params["BT"] * params["V"] * DTYPES[params["dtype"]].itemsize


def resolve_target(target):
    module_name, _, name = target.partition(":")
    package = Path(importlib.util.find_spec("liger_kernel").submodule_search_locations[0])
    sys.modules.setdefault("peft", None)  # `import peft` raises ImportError: liger's except branch
    if "liger_kernel.ops" not in sys.modules:
        ops = types.ModuleType("liger_kernel.ops")
        ops.__path__ = [str(package / "ops")]
        sys.modules["liger_kernel.ops"] = ops
    return getattr(importlib.import_module(module_name), name)


def call_target(fn, inputs, params):
    logits, target, _ = inputs
    arguments = {"_input": logits, "target": target, "weight": None, "ignore_index": -100, "lse_square_scale": 0.0,
                 "label_smoothing": 0.0, "reduction": "mean", "softcap": None, "return_z_loss": False}
    accepted = inspect.signature(fn).parameters
    return fn(**{k: v for k, v in arguments.items() if k in accepted})[0]  # the loss


def control(inputs, params):
    logits, target, _ = inputs
    return torch.nn.functional.cross_entropy(logits.detach(), target)


def reference(inputs, params):
    _, target, pristine = inputs
    return torch.nn.functional.cross_entropy(pristine.float(), target)
