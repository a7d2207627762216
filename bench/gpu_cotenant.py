"""A co-tenant on the same GPU, for runs that must hold when the machine drifts (issue 23): bursts
of bf16 matmuls (compute and HBM traffic) alternate with idle spells of random length, and the
process stops by itself after --seconds. It prints each burst, so a run's log shows when the GPU
was shared.

    python3 bench/gpu_cotenant.py --seconds 120 --busy 5 20 --idle 5 20 &
"""
from __future__ import annotations

import argparse
import random
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="stop after this long")
    parser.add_argument("--busy", type=float, nargs=2, default=(5.0, 20.0), help="burst length range, s")
    parser.add_argument("--idle", type=float, nargs=2, default=(5.0, 20.0), help="idle spell range, s")
    parser.add_argument("--size", type=int, default=8192, help="matmul side")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    a = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        busy = min(rng.uniform(*args.busy), end - time.monotonic())
        print(f"cotenant: busy {busy:.1f} s", flush=True)
        stop = time.monotonic() + busy
        while time.monotonic() < stop:
            for _ in range(8):
                a @ b
            torch.cuda.synchronize()
        idle = min(rng.uniform(*args.idle), max(0.0, end - time.monotonic()))
        print(f"cotenant: idle {idle:.1f} s", flush=True)
        time.sleep(idle)


if __name__ == "__main__":
    main()
