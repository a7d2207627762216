"""Validate the harness on the demo repository: for each planted revision and its
parent, run N trials (fresh processes, interleaved parent/child) and print the metric
of target and control, the step per case, the CV of the trial medians, the
wrong-results and import-error verdicts, and hot-versus-cold on a small shape.

    PYTHONPATH=. python3 bench/gpu_validate.py --device cuda --trials 5 --out $OUT
    .venv/bin/python bench/gpu_validate.py --device cpu --trials 3
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

from perfbisect.kernels.cases import case_name  # noqa: E402
from perfbisect.kernels.demo import DEMO_CPU_CASES, DEMO_CPU_POLICY, DEMO_GPU_CASES, DEMO_GPU_POLICY, write_demo_repo  # noqa: E402
from perfbisect.kernels.demo.ground_truth import event_hits  # noqa: E402
from perfbisect.kernels.demo.writer import load_ground_truth  # noqa: E402
from perfbisect.kernels.harness.runner import run_harness  # noqa: E402


def worktree(repo: Path, sha: str, root: Path) -> Path:
    path = root / sha[:10]
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(path), sha], cwd=repo,
                       check=True)
    return path


def trial(tree: Path, cases, device, policy, cold=True, seed=1234) -> dict:
    spec = {"cases": cases, "device": device, "policy": policy, "cold": cold, "seed": seed}
    return run_harness(spec, tree, timeout_s=600)


def medians(results: list[dict], name: str, key: str) -> list[float]:
    out = []
    for res in results:
        for case in res.get("cases", []):
            if case["name"] == name and case[key] is not None:
                out.append(case[key])
    return out


def metric_of(results, name, side):
    vals = [c["metric"][side] for r in results for c in r.get("cases", []) if c["name"] == name
            and c["metric"][side] is not None]
    return statistics.median(vals) if vals else float("nan")


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.mean(values) if len(values) > 1 else float("nan")


def compare_event(event, repo, trees_root, cases, device, policy, trials, log) -> list[dict]:
    hit = [c for c in cases if event_hits(event["event"], c, device)]
    parent = worktree(repo, event["parent"], trees_root)
    child = worktree(repo, event["sha"], trees_root)
    runs = {"parent": [], "child": []}
    for t in range(trials):  # interleave the two revisions so drift hits both alike
        for side, tree in (("parent", parent), ("child", child)):
            res = trial(tree, hit, device, policy, seed=1234 + t)
            runs[side].append(res)
            log.append({"event": event["event"], "side": side, "result": res})
    rows = []
    for case in hit:
        name = case_name(case["suite"], case["params"])
        p_ratio, c_ratio = medians(runs["parent"], name, "median_ratio"), medians(runs["child"], name, "median_ratio")
        p_t, c_t = medians(runs["parent"], name, "median_target_ms"), medians(runs["child"], name, "median_target_ms")
        rows.append({
            "event": event["event"], "index": event["index"], "case": name,
            "unit": runs["parent"][0]["cases"][0]["metric"]["name"] if runs["parent"][0].get("cases") else "?",
            "parent_target": metric_of(runs["parent"], name, "target"),
            "child_target": metric_of(runs["child"], name, "target"),
            "parent_control": metric_of(runs["parent"], name, "control"),
            "child_control": metric_of(runs["child"], name, "control"),
            # step in target speed (time ratio) and in the control ratio
            "step_raw": statistics.median(p_t) / statistics.median(c_t) - 1 if p_t and c_t else float("nan"),
            "step_ratio": statistics.median(c_ratio) / statistics.median(p_ratio) - 1 if p_ratio and c_ratio else float("nan"),
            "cv_parent": cv(p_t), "cv_child": cv(c_t), "trials": len(p_t),
            "cv_ratio_parent": cv(p_ratio), "cv_ratio_child": cv(c_ratio),
            "statuses": sorted({r["status"] for r in runs["parent"] + runs["child"]}),
        })
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--events", default="", help="comma-separated event keys (default: all perf)")
    ap.add_argument("--smoke", default="", help="comma-separated commit indices: one trial each, "
                    "all cases, printed as tables (compile and accuracy check)")
    args = ap.parse_args()
    cases = DEMO_GPU_CASES if args.device == "cuda" else DEMO_CPU_CASES
    policy = DEMO_GPU_POLICY if args.device == "cuda" else DEMO_CPU_POLICY
    if args.smoke:
        return smoke([int(i) for i in args.smoke.split(",")], cases, args.device, policy)
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_demo_repo(Path(tmp) / "minikern")
        trees = Path(tmp) / "trees"
        trees.mkdir()
        truth = load_ground_truth(repo)
        wanted = set(filter(None, args.events.split(",")))
        log, rows = [], []
        for event in truth["events"]:
            if event["kind"] != "perf" or (wanted and event["event"] not in wanted):
                continue
            rows += compare_event(event, repo, trees, cases, args.device, policy, args.trials, log)
            print_rows(rows[-len([c for c in cases if event_hits(event["event"], c, args.device)]):])
        checks = failure_checks(truth, repo, trees, cases, args.device, policy)
        hot_cold = hot_vs_cold(repo, trees, truth["last"], cases[0], args.device, policy)
    summary = {"device": args.device, "trials": args.trials, "rows": rows, "checks": checks,
               "hot_vs_cold": hot_cold, "wall_s": round(time.time() - started, 1)}
    print(json.dumps({"checks": checks, "hot_vs_cold": hot_cold}, indent=1))
    print(f"wall {summary['wall_s']} s")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"validate_{args.device}.json").write_text(json.dumps(summary, indent=1))
        (args.out / f"trials_{args.device}.json").write_text(json.dumps(log))
    return 0


def smoke(indices, cases, device, policy) -> int:
    from perfbisect.kernels.report import format_result
    with tempfile.TemporaryDirectory() as tmp:
        repo = write_demo_repo(Path(tmp) / "minikern")
        shas = subprocess.run(["git", "rev-list", "--reverse", "--first-parent", "HEAD"], cwd=repo,
                              capture_output=True, text=True, check=True).stdout.split()
        for index in indices:
            start = time.time()
            res = trial(worktree(repo, shas[index], Path(tmp)), cases, device, policy)
            print(f"== commit {index} ({time.time() - start:.1f} s)")
            print(format_result(res), flush=True)
            if res["status"] != "ok" or any(c["status"] not in ("ok", "wrong_results") for c in res["cases"]):
                print(res.get("log_tail") or "")
    return 0


def print_rows(rows):
    for r in rows:
        print(f"{r['event']:<26} {r['case']:<52} {r['unit']:>7} target {r['parent_target']:9.2f} -> "
              f"{r['child_target']:9.2f}  control {r['parent_control']:9.2f} / {r['child_control']:9.2f}  "
              f"step raw {r['step_raw']:+7.1%} ratio {r['step_ratio']:+7.1%}  "
              f"cv {r['cv_parent']:.1%}/{r['cv_child']:.1%} (ratio {r['cv_ratio_parent']:.1%}/"
              f"{r['cv_ratio_child']:.1%})  n={r['trials']} {r['statuses']}",
              flush=True)


def failure_checks(truth, repo, trees, cases, device, policy) -> dict:
    out = {}
    for event in truth["events"]:
        if event["kind"] == "wrong_results":
            hit = [c for c in cases if event_hits(event["event"], c, device)]
            res = trial(worktree(repo, event["sha"], trees), hit, device, policy)
            out[event["event"]] = [{"case": c["name"], "status": c["status"],
                                    "accuracy_error": c["accuracy_error"],
                                    "metric": c["metric"]["target"]} for c in res["cases"]]
        if event["kind"] == "import_error":
            res = trial(worktree(repo, event["sha"], trees), cases[:1], device, policy)
            out[event["event"]] = {"status": res["status"], "error": res["error"]}
    return out


def hot_vs_cold(repo, trees, sha, case, device, policy) -> dict:
    tree = worktree(repo, sha, trees)
    out = {"case": case_name(case["suite"], case["params"])}
    for cold in (True, False):
        res = trial(tree, [case], device, policy, cold=cold)
        c = res["cases"][0]
        out["cold" if cold else "hot"] = {"target_ms": c["median_target_ms"],
                                          "control_ms": c["median_control_ms"]}
    out["control_cold_over_hot"] = out["cold"]["control_ms"] / out["hot"]["control_ms"] - 1
    out["target_cold_over_hot"] = out["cold"]["target_ms"] / out["hot"]["target_ms"] - 1
    return out


if __name__ == "__main__":
    sys.exit(main())
