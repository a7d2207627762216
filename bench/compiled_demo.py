"""The compiled demo (issue 45) with today's builds and with incremental builds, the compiler
cache and cost-aware probes, one after the other on this machine, each in a home of its own (an
empty build cache, build tree and ccache): wall time, builds, cache hits, build seconds and the
culprits of each, and the ratio of the wall times.

    python bench/compiled_demo.py [--keep DIR] [--order plain-first|incremental-first]

Target (issue 45): incremental wall time <= 1/3 of today's, the same culprits. On a shared,
loaded machine the wall times carry its load; the build seconds and builds say where time went.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PERFBISECT = str(Path(sys.executable).with_name("perfbisect"))


def run(kind: str, root: Path) -> dict:
    """One `perfbisect demo --compiled --json` in a fresh home under `root`; its JSON line."""
    home = root / kind
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["PERFBISECT_HOME"] = str(home / "var")
    args = [PERFBISECT, "demo", "--compiled", "--json", "--path", str(home / "cppkern")]
    args += ["--plain-builds"] if kind == "plain" else []
    started = time.monotonic()
    done = subprocess.run(args, cwd=home, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"{kind}: no result (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return {**json.loads(lines[-1]), "process_wall_s": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="run in this directory and keep it (default: a temporary one, removed)")
    parser.add_argument("--order", choices=("plain-first", "incremental-first"), default="plain-first")
    args = parser.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="perfbisect-compiled-"))
    root.mkdir(parents=True, exist_ok=True)
    kinds = ["plain", "incremental"] if args.order == "plain-first" else ["incremental", "plain"]
    try:
        results = {kind: run(kind, root) for kind in kinds}
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{'builds':<12} {'wall s':>7} {'build s':>8} {'trials':>6} {'builds run':>10} {'build-cache hits':>16} "
          f"{'ccache hits/misses':>18}  culprits (planted found / false)")
    for kind in ("plain", "incremental"):
        r = results[kind]
        print(f"{kind:<12} {r['wall_s']:>7.0f} {r['build_s']:>8.0f} {r['trials']:>6} {r['builds']:>10} "
              f"{r['build_cache_hits']:>16} {r['ccache_hits']:>8}/{r['ccache_misses']:<9}  "
              f"{[s[:10] for c in r['culprits'] for s in c]} ({len(r['found'])} / {len(r['false'])})")
    ratio = results["incremental"]["wall_s"] / max(1e-9, results["plain"]["wall_s"])
    same = results["incremental"]["culprits"] == results["plain"]["culprits"]
    print(f"incremental / plain wall time: {ratio:.2f} (target <= 0.33); same culprits: {same}; "
          f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
