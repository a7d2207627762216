"""Where one trial's time goes: run trials of the demo repository at one revision and print
their phases (checkout and build excluded: a worktree is checked out once here), the time from
launch to the first timed sample and the share of the trial spent in timed kernel calls.

    python bench/trial_phases.py --device cpu --trials 4                       # fork + caches
    python bench/trial_phases.py --device cpu --trials 4 --launcher subprocess --fresh-jit
    python bench/trial_phases.py --device cuda --cases attention --trials 4

"--launcher subprocess --fresh-jit" is the trial as it was before the fork server and the
revision caches (a new interpreter, an empty Triton cache, the reference recomputed).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfbisect.kernels import demo  # noqa: E402
from perfbisect.kernels.harness.caches import revision_caches  # noqa: E402
from perfbisect.kernels.harness.phases import timed_kernel_seconds  # noqa: E402
from perfbisect.kernels.harness.runner import run_harness  # noqa: E402

COLUMNS = ("start", "import", "compile", "inputs_reference", "timing", "teardown", "process",
           "first_sample")
CASES = {
    "demo-cpu": demo.DEMO_CPU_CASES,
    "demo-gpu": demo.DEMO_GPU_CASES,
    "attention": [c for c in demo.DEMO_GPU_CASES if c["suite"] == "attention"][:2],
}


def worktree_at(base: Path, index: int) -> tuple[Path, str]:
    repo = demo.write_demo_repo(base / "minikern")
    shas = subprocess.run(["git", "rev-list", "--first-parent", "--reverse", "HEAD"], cwd=repo,
                          check=True, capture_output=True, text=True).stdout.split()
    tree = base / "tree"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), shas[index]], cwd=repo,
                   check=True)
    return tree, shas[index]


def run(args) -> list[dict]:
    base = Path(tempfile.mkdtemp(prefix="perfbisect-phases-"))
    tree, sha = worktree_at(base, args.revision)
    caches = None if args.fresh_jit else revision_caches(base / "cache", sha)
    policy = demo.DEMO_GPU_POLICY if args.device == "cuda" else demo.DEMO_CPU_POLICY
    spec = {"cases": CASES[args.cases], "device": args.device, "cold": True, "policy": policy,
            "seed": int(sha[:8], 16)}
    results = []
    for n in range(args.trials):
        started = time.perf_counter()
        result = run_harness(spec, tree, caches=caches, launcher=args.launcher, timeout_s=600)
        wall = time.perf_counter() - started
        phases = result.get("phases") or {}
        phases["timed_kernels"] = timed_kernel_seconds(result.get("cases") or [])
        results.append({"status": result["status"], "launcher": result.get("launcher"),
                        "wall_s": wall, "phases": phases,
                        "reference_cache": result.get("reference_cache"),
                        "cases": {c["name"]: c["status"] for c in result.get("cases") or []}})
        print(f"trial {n}: {result['status']} via {result.get('launcher')}, {wall:.2f} s, "
              + " ".join(f"{k}={phases.get(k, 0):.3f}" for k in COLUMNS + ("timed_kernels",)),
              flush=True)
        if result["status"] != "ok":
            print(result.get("error"), result.get("log_tail"))
    return results


def summary(results: list[dict], label: str) -> str:
    def med(key):
        return statistics.median(r["phases"].get(key, 0.0) for r in results)

    later = results[1:] or results  # the first trial of a revision fills its caches
    lines = [f"{label}: {len(results)} trials, median seconds (first trial / later trials)"]
    for key in COLUMNS + ("timed_kernels",):
        first = results[0]["phases"].get(key, 0.0)
        rest = statistics.median(r["phases"].get(key, 0.0) for r in later)
        lines.append(f"  {key:<17} {first:8.3f} {rest:8.3f}")
    share = med("timed_kernels") / med("process") if med("process") else 0.0
    lines.append(f"  timed kernels / trial process wall: {share:.1%}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--cases", default=None, choices=tuple(CASES))
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--revision", type=int, default=19, help="first-parent index in the demo")
    parser.add_argument("--launcher", default="auto", choices=("auto", "fork-server", "subprocess"))
    parser.add_argument("--fresh-jit", action="store_true", help="no revision caches")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.cases = args.cases or ("demo-gpu" if args.device == "cuda" else "demo-cpu")
    results = run(args)
    label = (f"{args.cases} on {args.device}, launcher {args.launcher}, "
             f"{'fresh JIT cache per trial' if args.fresh_jit else 'revision caches'}")
    print(summary(results, label))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "results": results}, indent=1))


if __name__ == "__main__":
    main()
