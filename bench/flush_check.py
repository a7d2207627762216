"""The flush self-check on this machine's device, and how its verdict moves with the flush's size:
a flush smaller than the caches (the seed's error: MI355X "cold" numbers flushed the 4 MB L2 and
left the 256 MB MALL warm) must be refused, the device layer's own flush proven cold.

    PYTHONPATH=. python3 bench/flush_check.py [--device cuda|cpu] [--repeats 3]

Prints the device report (perfbisect doctor), then one row per flush size and repeat: the median
read of a buffer half the last-level cache's size after the flush and after a warm read, their
ratio, and the verdict."""
from __future__ import annotations

import argparse

from perfbisect.kernels.harness.doctor import format_report, report
from perfbisect.kernels.harness.flushcheck import check_flush

MiB = 1 << 20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    found = report(args.device)
    print(format_report(found))
    if args.device == "cpu":
        return
    llc = found["device"]["caches"][-1]["total_bytes"]
    sizes = [("1 MiB", MiB), ("LLC/4", llc // 4), ("LLC/2", llc // 2), ("LLC", llc),
             ("device layer's", found["device"]["flush_bytes"])]
    print(f"\nbuffer read: {llc // 2 / MiB:.0f} MiB (half of the {llc / MiB:.0f} MiB last level)")
    print("| flush | MiB | after flush ms | after warm read ms | ratio | verdict |")
    print("|---|---|---|---|---|---|")
    for label, size in sizes:
        for _ in range(args.repeats):
            v = check_flush(args.device, flush_bytes=size)
            print(f"| {label} | {size / MiB:.0f} | {v.cold_ms:.4f} | {v.warm_ms:.4f} | {v.ratio:.2f} | {v.status} |")


if __name__ == "__main__":
    main()
