"""Where one trial's time goes: run trials of the demo repository at one revision and print
their phases (checkout and build excluded: a worktree is checked out once here), the time from
launch to the first timed sample and the share of the trial spent in timed kernel calls.

    python bench/trial_phases.py --device cpu --trials 4                       # fork + caches
    python bench/trial_phases.py --device cpu --trials 4 --launcher subprocess --fresh-jit
    python bench/trial_phases.py --device cuda --cases attention --trials 4

"--launcher subprocess --fresh-jit" is the trial as it was before the fork server and the
revision caches (a new interpreter, an empty Triton cache, the reference recomputed).

"--sandbox slot" runs each trial as a worker does, in a sandbox slot taken and wiped per trial
(the slot's uid and limits, the worktree copied into it); "--sandbox namespaces" adds the
bubblewrap namespaces (kernels/harness/contain/bwrap.py). As root both run the trial as the slot's uid.

    python bench/trial_phases.py --device cpu --trials 6 --sandbox slot          # containment before
    python bench/trial_phases.py --device cpu --trials 6 --sandbox namespaces    # and with namespaces
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
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


def contained_trial(args, spec: dict, tree: Path, sha: str) -> dict:
    """One trial in a sandbox slot taken for it, as a worker runs it (the copy is not timed)."""
    os.environ.setdefault("PERFBISECT_HOME", tempfile.mkdtemp(prefix="perfbisect-phases-home-"))
    Path(os.environ["PERFBISECT_HOME"]).chmod(0o711)
    os.environ["PERFBISECT_SANDBOX_NAMESPACES"] = "auto" if args.sandbox == "namespaces" else "off"
    from perfbisect.service.settings import get_settings
    from perfbisect.workers import sandbox
    from perfbisect.workers.trialcache import caches_for

    with sandbox.slot() as box:
        shutil.copytree(tree, box.worktree, symlinks=True)
        caches = None if args.fresh_jit else caches_for(get_settings(), sha, {}, box.cache_root)
        box.give(box.worktree, *([caches.jit_dir, caches.reference_dir] if caches else []))
        if args.sandbox == "namespaces" and not box.contained:
            raise SystemExit("bubblewrap cannot make namespaces here (see the log above)")
        fork = "subprocess" if args.launcher == "subprocess" else "fork-server"
        return run_harness(spec, box.worktree, caches=caches, timeout_s=600, base_env=box.env({}),
                           scratch_root=box.scratch, launch=box.launcher("as" if args.device == "cpu" else "data",
                                                                         fork=fork, caches=caches))


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
        if args.sandbox == "none":
            result = run_harness(spec, tree, caches=caches, launcher=args.launcher, timeout_s=600)
        else:
            result = contained_trial(args, spec, tree, sha)
        wall = time.perf_counter() - started
        phases = result.get("phases") or {}
        phases["timed_kernels"] = timed_kernel_seconds(result.get("cases") or [])
        results.append({"status": result["status"], "launcher": result.get("launcher"),
                        "wall_s": wall, "phases": phases,
                        "reference_cache": result.get("reference_cache"),
                        "cases": {c["name"]: c["status"] for c in result.get("cases") or []},
                        "ratios": {c["name"]: c.get("median_ratio") for c in result.get("cases") or []}})
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
    parser.add_argument("--sandbox", default="none", choices=("none", "slot", "namespaces"),
                        help="run each trial in a worker's sandbox slot, without or with namespaces")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.cases = args.cases or ("demo-gpu" if args.device == "cuda" else "demo-cpu")
    results = run(args)
    label = (f"{args.cases} on {args.device}, launcher {args.launcher}, sandbox {args.sandbox}, "
             f"{'fresh JIT cache per trial' if args.fresh_jit else 'revision caches'}")
    print(summary(results, label))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "results": results}, indent=1))


if __name__ == "__main__":
    main()
