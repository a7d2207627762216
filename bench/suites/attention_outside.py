"""A suite file kept outside the bisected repository (perfbisect --suite-file): the demo
repository's attention, benchmarked against torch's SDPA, for the GPU check in bench/RESULTS.md.

    perfbisect measure --repo MINIKERN --rev HEAD --suite-file bench/suites/attention_outside.py \
        --target minikern.attention:attention --case B=2,H=32,S=1024,D=128,dtype=bf16 --device cuda
"""
import torch

METRIC = "TFLOP/s"


def validate(params):
    missing = {"B", "H", "S", "D"} - set(params)
    if missing:
        raise ValueError(f"attention_outside: missing {sorted(missing)}")
    return {**params, "dtype": params.get("dtype", "bf16")}


def make_inputs(params, device, generator):
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[params["dtype"]]
    shape = (params["B"], params["H"], params["S"], params["D"])
    return tuple(torch.randn(shape, generator=generator, device=device).to(dtype) for _ in range(3))


def flops(params):
    return 4.0 * params["B"] * params["H"] * params["S"] ** 2 * params["D"]


def call_target(fn, inputs, params):
    return fn(*inputs, False)  # minikern's attention(q, k, v, causal)


def control(inputs, params):
    return torch.nn.functional.scaled_dot_product_attention(*inputs)


def reference(inputs, params):
    q, k, v = (t.float() for t in inputs)  # fp32: ample against bf16's tolerance
    return torch.softmax(q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5, dim=-1) @ v
