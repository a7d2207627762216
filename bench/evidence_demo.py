"""The compiled-code evidence of the demo's planted culprits, without a database (issue 43).

    python bench/evidence_demo.py --device cuda                 # on a GPU: #924's exp, #930's BLOCK_K
    python bench/evidence_demo.py --device cpu --json out.json  # the CPU path: kernels, no Triton

Writes the demo repository, and for each planted event (default: fastmath_dropped, the precise exp
of #924, and block_k_small_step, #930's BLOCK_K=32) runs one profiled trial at the commit before it
and one at it over every case the event moves on that device (ground_truth.event_hits; the
nineteenth session profiled only the first, gemm 2048^3, where the H100 shows no BLOCK_K step), each in a fresh process with a fresh JIT cache (kernels/harness/runner.py), then
prints the 'why' lines and the changed kernels' metadata and op deltas (service/evidence)."""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from perfbisect.kernels import demo
from perfbisect.kernels.demo import minicc
from perfbisect.kernels.demo.ground_truth import event_hits
from perfbisect.kernels.demo.writer import load_ground_truth
from perfbisect.kernels.harness.runner import run_harness
from perfbisect.service.evidence.diff import environment_diff
from perfbisect.service.evidence.schemas import CulpritEvidence, EnvironmentSection
from perfbisect.service.evidence.service import sections
from perfbisect.service.evidence.summary import why_lines
from perfbisect.service.hunks.schemas import HunkEvidence
from perfbisect.service.trials.service import profiled_evidence

EVENTS = {"fastmath_dropped": "attention", "block_k_small_step": "gemm"}


def worktree(root: Path, sha: str) -> Path:
    """minikern at `sha`, with minicc placed at `minicc/` at the commit its pin names (as the
    worker places a declared dependency: #924 takes its exp path from minicc, issue 44)."""
    path = root.parent / "trees" / sha[:12]
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(path), sha], cwd=root, check=True)
        pin = re.search(r'REV = "([0-9a-f]+)"', (path / minicc.PIN_FILE).read_text())
        if pin:
            (path / "minicc").mkdir()
            archive = subprocess.run(["git", "archive", pin.group(1)], cwd=minicc.minicc_path(root), check=True,
                                     capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(path / "minicc")], input=archive, check=True)
    return path


def profile_at(root: Path, sha: str, cases: list[dict], device: str) -> dict:
    result = run_harness({"cases": cases, "device": device, "profile": True, "seed": 1}, worktree(root, sha),
                         timeout_s=600)
    if result.get("status") != "ok":
        print(f"  profiled trial at {sha[:10]}: {result.get('status')}: {result.get('error')}", file=sys.stderr)
    return result


def event_evidence(root: Path, truth: dict, event: str, device: str) -> CulpritEvidence:
    """The evidence of one planted event: profiled at its parent and at its commit."""
    shas = subprocess.run(["git", "rev-list", "--reverse", "--first-parent", "HEAD"], cwd=root, check=True,
                          capture_output=True, text=True).stdout.split()
    sha = next(e["sha"] for e in truth["events"] if e["event"] == event)
    parent = shas[shas.index(sha) - 1]
    pool = demo.DEMO_GPU_CASES if device == "cuda" else demo.DEMO_CPU_CASES
    cases = [c for c in pool if event_hits(event, c, device)]
    before, after = (profile_at(root, s, cases, device) for s in (parent, sha))
    kernels, compiled, autotune = sections([], profiled_evidence(before), profiled_evidence(after))
    found = CulpritEvidence(job_id=0, first_sha=sha, last_sha=sha, before_sha=parent, after_sha=sha, summary=[],
                            hunks=HunkEvidence(job_id=0, sha=sha, available=False, reason="not run here (no database)"),
                            kernels=kernels, compiled=compiled, autotune=autotune,
                            environment=EnvironmentSection(**environment_diff(before.get("device"), after.get("device"))))
    found.summary = why_lines(found)
    return found


def show(event: str, found: CulpritEvidence) -> None:
    print(f"\n== {event}: {found.before_sha[:10]} -> {found.last_sha[:10]}")
    for line in found.summary:
        print("  " + line)
    for case in found.kernels.cases:  # the kernel that carries each case's change, in numbers
        top = next(iter(case.rows), None)
        if top is not None:
            print(f"  {case.case}: {top.name} {top.before_ms:.4f} -> {top.after_ms:.4f} ms per call "
                  f"({top.calls_before} / {top.calls_after} launches)")
    for kernel in found.compiled.kernels:
        if kernel.status == "same":
            continue
        print(f"  {kernel.name} ({kernel.status})")
        for change in kernel.metadata:
            print(f"    {change.field}: {change.before} -> {change.after}")
        for level, deltas in kernel.ops.items():
            print(f"    {level}: " + ", ".join(f"{d.op} {d.before}->{d.after}" for d in deltas[:8]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--events", nargs="*", default=list(EVENTS))
    parser.add_argument("--json", type=Path, help="also write the evidence documents here")
    args = parser.parse_args()
    root = demo.write_demo_repo(Path(tempfile.mkdtemp(prefix="evidence-demo-")) / "minikern")
    truth = load_ground_truth(root)
    found = {event: event_evidence(root, truth, event, args.device) for event in args.events}
    for event, evidence in found.items():
        show(event, evidence)
    if args.json:
        args.json.write_text(json.dumps({e: f.model_dump(mode="json") for e, f in found.items()}, indent=1))


if __name__ == "__main__":
    main()
