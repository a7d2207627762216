"""`perfbisect demo --compiled`: bisect cppkern (kernels/demo/compiled.py), a library with a real
C++ extension, and print what the builds cost: builds run, build-cache hits, compiler-cache hits
and misses, build seconds. With --plain-builds, today's builds (every build compiles everything,
no build tree, no compiler cache, midpoint probes) for a side-by-side comparison
(bench/compiled_demo.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import git
from rich.console import Console
from sqlalchemy import select

from perfbisect.cli.common import CLIError, prepare_database
from perfbisect.cli.runs import follow_job, register_path, submit_local
from perfbisect.kernels.demo import compiled
from perfbisect.service.db import session_scope
from perfbisect.service.jobs.schemas import BisectCreate, JobRead
from perfbisect.service.models import Trial
from perfbisect.service.settings import get_settings

# The planted step is a tenfold slowdown (-90%); a CPU trial on a shared 2-core machine varies 5-10%
# (the control's spread across trials). At 10% the steadiness check (a spread of at most ln(1.1)/2)
# paused both variants for 15-35 s a run and SAME verdicts took several trials, time no verdict
# here needs (bench/RESULTS.md, twenty-first session); 25% stays far below the planted step.
MIN_EFFECT = 0.25


def compiled_truth(path: Path, console: Console) -> dict:
    """The planted ground truth of the compiled demo repository at `path` (written first when
    `path` is absent or empty)."""
    truth_file = path / "GROUND_TRUTH.json"
    if not truth_file.exists():
        if path.exists() and any(path.iterdir()):
            raise CLIError(f"{path} exists and is not the compiled demo repository; pass --path elsewhere")
        console.print(f"writing the compiled demo repository (cppkern, C++ through setuptools) at {path}")
        compiled.write_compiled_repo(path)
    return json.loads(truth_file.read_text())


def run_compiled_demo(path: Path, incremental: bool, *, show_progress: bool,
                      console: Console) -> tuple[JobRead, dict, dict[str, Any]]:
    """Bisect the compiled demo on this machine's CPU; returns the job, the ground truth and the
    build figures (`build_figures`, with the wall seconds)."""
    truth = compiled_truth(path, console)
    prepare_database()
    settings = get_settings()
    if settings.embedded:
        settings.embedded_workers = 1
    kind = "incremental" if incremental else "plain"
    name = register_path(path, compiled.build_command(incremental), name=f"cppkern-demo-{kind}",
                         import_root=compiled.IMPORT_ROOT, build_inputs=compiled.COMPILED_INPUTS)
    root = git.Repo(path).git.rev_list("--max-parents=0", "HEAD").split()[0]
    request = BisectCreate(repository=name, good=root, bad="HEAD",
                           benchmarks=[{"suite": c["suite"], "target": c["target"], "shapes": [c["params"]]}
                                       for c in compiled.COMPILED_CASES],
                           device_class="cpu", min_effect=MIN_EFFECT, workers=1, policy=compiled.COMPILED_POLICY)
    console.print(f"bisecting cppkern with {kind} builds"
                  f"{' (a kept build tree, ccache, cost-aware probes)' if incremental else ' (each build compiles everything)'}")
    started = time.monotonic()
    job = follow_job(submit_local(request), api=None, show_progress=show_progress, console=console)
    figures = {**build_figures(job.id), "wall_s": round(time.monotonic() - started, 1), "builds_kind": kind}
    return job, truth, figures


def build_figures(job_id: int) -> dict[str, Any]:
    """What a job's builds cost: builds run, build-cache hits, compiler-cache hits and misses,
    build seconds (every trial's build phase, cache hits included)."""
    with session_scope() as session:
        rows = session.execute(select(Trial.build_s, Trial.build_cache).where(Trial.job_id == job_id)).all()
    cached = sum(1 for _, cache in rows if isinstance(cache, dict) and cache.get("cached"))
    ran = sum(1 for seconds, cache in rows if seconds and not (isinstance(cache, dict) and cache.get("cached")))
    incremental = [cache["incremental"] for _, cache in rows
                   if isinstance(cache, dict) and isinstance(cache.get("incremental"), dict)]
    return {"builds": ran, "build_cache_hits": cached,
            "ccache_hits": sum(int(i.get("hits") or 0) for i in incremental),
            "ccache_misses": sum(int(i.get("misses") or 0) for i in incremental),
            "build_s": round(sum(seconds or 0.0 for seconds, _ in rows), 1), "trials": len(rows)}


def compiled_truth_check(job: JobRead, truth: dict) -> dict[str, list[str]]:
    """The planted regression found (a culprit's range holds it), and culprits that hold none."""
    pos = {sha: i for i, sha in enumerate(job.revision_shas)}
    spans = [(pos[c.first_sha], pos[c.last_sha]) for c in job.culprits if c.kind == "performance"]
    planted = [e["index"] for e in truth["events"] if e["kind"] == "perf"]
    found = [truth["events"][k]["event"] for k, i in enumerate(planted) if any(a <= i <= b for a, b in spans)]
    missed = [truth["events"][k]["event"] for k, i in enumerate(planted) if not any(a <= i <= b for a, b in spans)]
    false = [f"{job.revision_shas[a][:10]}..{job.revision_shas[b][:10]}" for a, b in spans
             if not any(a <= i <= b for i in planted)]
    return {"found": found, "missed": missed, "false": false}


def figures_line(figures: dict[str, Any]) -> str:
    return (f"builds: {figures['builds']} run, {figures['build_cache_hits']} from the build cache; compiler cache "
            f"{figures['ccache_hits']} hits / {figures['ccache_misses']} misses; {figures['build_s']:.0f} s building "
            f"over {figures['trials']} trials; wall {figures['wall_s']:.0f} s ({figures['builds_kind']} builds)")
