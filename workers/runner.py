"""What a worker does for one trial, outside any database session: take a sandbox slot, check
out the revision in it, build it, run the harness in a fresh process, all contained (see
workers/sandbox.py). Every failure comes back as a result dict, redacted of the service's secrets and of the
repository's env values."""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from perfbisect.gitrepo import GitError, Mirror, PatchDoesNotApply, RevertConflict, apply_patch
from perfbisect.kernels.harness.phases import add_worker_phases
from perfbisect.kernels.harness.runner import run_harness
from perfbisect.service.settings import get_settings
from perfbisect.service.trials.service import DependencyWork, ToolchainWork, TrialWork
from perfbisect.workers.build import build_revision
from perfbisect.workers.deps import PlacementError, Placed, place
from perfbisect.workers.redact import redact_tree
from perfbisect.workers.sandbox import SandboxError, Slot, slot
from perfbisect.workers.toolchains import ToolchainUnavailable, environment
from perfbisect.workers.trialcache import caches_for, revision_seed

StopCheck = Callable[[], bool]


def worker_slot() -> str:
    """Who runs the trial: host and process id (shown with the trial; the pid finds the process)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def failure(status: str, message: str) -> dict[str, Any]:
    return {"status": status, "error": message, "cases": [], "device": None}


def device_of(device_class: str) -> str:
    return "cpu" if device_class == "cpu" else "cuda"


def harness_spec(cases: list[dict[str, Any]], device_class: str, policy: dict[str, Any] | None,
                 sha: str | None = None, suite_sources: dict[str, str] | None = None) -> dict[str, Any]:
    """The trial spec; every trial of one revision gets the same seed (from its sha), so the
    revision's accuracy reference is computed once. `suite_sources` (sha256 -> text) are the
    suite files sent with the job: the harness runner writes them next to the trial."""
    trial: dict[str, Any] = {"cases": [{k: c[k] for k in ("suite", "target", "params", "source") if k in c}
                                       for c in cases],
                             "device": device_of(device_class), "cold": True}
    if suite_sources:
        trial["suite_sources"] = suite_sources
    if get_settings().gpu_caches and trial["device"] != "cpu":
        trial["gpu_caches"] = get_settings().gpu_caches  # the trial's sandbox gets no PERFBISECT_* variable
    if sha is not None:
        trial["seed"] = revision_seed(sha)
    if policy:
        trial["policy"] = policy
    return trial


def run_in_slot(box: Slot, mirror: Mirror, sha: str, *, build_command: str | None, env: dict[str, str],
                trial_spec: dict[str, Any], import_root: str, build_inputs: Sequence[str] = (),
                should_stop: StopCheck | None = None,
                build_network: bool = False,
                reverts: Sequence[tuple[str, str]] = (), patch: str | None = None,
                dependencies: Sequence[DependencyWork] = (),
                pinned: Mapping[str, str] | None = None,
                toolchain: ToolchainWork | None = None) -> tuple[dict[str, Any], float | None]:
    """Check out `sha` into the slot, revert the culprit ranges of `reverts` on it (an
    attribution variant), build it (from the build cache where `build_inputs` are declared and
    nothing was reverted: the cache is keyed by the commit's tree and the placed dependencies'
    commits) and measure it; returns
    (result, build seconds), the result carrying the checkout and build phases too, and under
    "build" what the build cache did. A revert that does not apply is a `revert_conflict`, and so
    is a `patch` (a subset of a culprit's hunks, applied at its parent) that does not apply.
    Declared `dependencies` are placed at the pins of `sha` (or at `pinned`, a descent's commits)
    before the build (workers/deps.py); the result lists them under "dependencies". A `toolchain`
    version (a toolchain bisect) is installed from its wheelhouse into a cached environment
    (workers/toolchains.py), first on the build's and the trial's PYTHONPATH, shown read-only in
    the sandbox; the trial runs in a subprocess (a fork server has imported the worker's own
    torch) and the result names it under "toolchain"."""
    settings = get_settings()
    started = time.perf_counter()
    try:
        mirror.ensure(fetch=False)
        mirror.checkout(box.worktree, sha)
        if reverts:
            mirror.revert(box.worktree, reverts)
            build_inputs = ()
        if patch:
            apply_patch(box.worktree, patch)
            build_inputs = ()
    except (RevertConflict, PatchDoesNotApply) as exc:
        return add_worker_phases(failure("revert_conflict", str(exc)), time.perf_counter() - started, None), None
    except GitError as exc:
        return add_worker_phases(failure("worker_error", f"checkout failed: {exc}"), time.perf_counter() - started, None), None
    try:
        placed = place(box, dependencies, mirror, sha, box.worktree, pinned or {}, env=env, should_stop=should_stop,
                       network=build_network)
    except PlacementError as exc:
        return add_worker_phases(failure("build_error", str(exc)), time.perf_counter() - started, None), None
    tool: dict[str, str] | None = None
    if toolchain is not None:
        try:
            site, tool = environment(toolchain)
        except ToolchainUnavailable as exc:
            return add_worker_phases(failure("build_error", str(exc)), time.perf_counter() - started, None), None
        box.readonly = (str(site),)
        env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)}
    checkout_s = time.perf_counter() - started
    box.give(box.worktree)
    build = build_revision(build_command, build_inputs, box, mirror, sha, env=env, device=trial_spec["device"],
                           should_stop=should_stop, network=build_network,
                           dependencies=dependency_basis(placed, dependencies))
    if not build.ok:
        status = "cancelled" if build.stopped == "cancelled" else "build_error"
        return add_worker_phases(with_build(failure(status, build.log_tail), build.cache), checkout_s,
                                 build.seconds), build.seconds
    caches = caches_for(settings, cache_key(sha, placed, tool), env, box.cache_root, repository=mirror.path.name)
    box.give(caches.jit_dir, caches.reference_dir)  # the slot's user fills its caches of the revision
    # RLIMIT_AS breaks the CUDA driver's address-space reservations: cap data on GPUs instead.
    memory = "as" if trial_spec["device"] == "cpu" else "data"
    result = run_harness(trial_spec, box.worktree, import_root=import_root, env=env, timeout_s=settings.trial_timeout_s,
                         base_env=box.env({}), scratch_root=box.scratch, caches=caches,
                         launch=box.launcher(memory, should_stop, caches=caches,
                                             fork="subprocess" if tool else settings.trial_launcher),
                         preload=settings.trial_preload)
    if placed:
        result = {**result, "dependencies": [{"name": p.key, "sha": p.sha, "path": p.path} for p in placed]}
    if tool:
        result = {**result, "toolchain": tool}
    return add_worker_phases(with_build(result, build.cache), checkout_s, build.seconds), build.seconds


def dependency_basis(placed: Sequence[Placed], declared: Sequence[DependencyWork]) -> list[str]:
    """What the build cache's key holds of the dependencies: each placed one's commit and place,
    and a digest of their declarations (a changed recipe builds them anew)."""
    if not placed:
        return []
    digest = hashlib.sha256(repr(tuple(declared)).encode()).hexdigest()
    return [f"{p.key}={p.sha} at {p.path}" for p in placed] + [f"declared {digest}"]


def cache_key(sha: str, placed: Sequence[Placed], tool: Mapping[str, str] | None = None) -> str:
    """The revision whose JIT and reference caches a trial uses: `sha`, or with dependencies
    placed or a toolchain installed a sha-shaped digest of `sha` and theirs (a descent measures
    one host commit with several dependency commits, a toolchain bisect with several versions:
    none may load what another compiled)."""
    if not placed and not tool:
        return sha
    parts = [sha, *(f"{p.key}={p.sha}" for p in placed)]
    if tool:
        parts.append(f"{tool['package']}=={tool['version']}@{tool['sha256']}")
    return hashlib.sha1(" ".join(parts).encode()).hexdigest()


def with_build(result: dict[str, Any], cache: dict[str, Any] | None) -> dict[str, Any]:
    """The result with what the build cache did (nothing where no inputs are declared)."""
    return {**result, "build": cache} if cache is not None else result


def may_download(repo_name: str) -> bool:
    """Whether the repository's builds may use the network (PERFBISECT_BUILD_NETWORK_REPOS)."""
    allowed = get_settings().build_network_repos
    return repo_name in {name.strip() for name in allowed.split(",") if name.strip()}


def execute(work: TrialWork, should_stop: StopCheck | None = None) -> tuple[dict[str, Any], float | None]:
    """Run one trial; returns (harness result, build seconds). `should_stop` is polled while
    repository code runs; when it says so, everything the trial started is killed."""
    settings = get_settings()
    mirror = Mirror(settings.mirrors_dir.resolve(), work.repo_name, work.repo_url)
    trial_spec = harness_spec(work.cases, work.device_class, work.policy, work.sha, work.suite_sources)
    if work.accuracy_only:
        trial_spec["accuracy_only"] = True  # a correctness sweep: the accuracy check, no timing loop
    if work.profile:
        trial_spec["profile"] = True  # a culprit's evidence (issue 43): profiled, never timed
    try:
        with slot() as box:
            result, build_s = run_in_slot(box, mirror, work.sha, build_command=work.build_command, env=work.env,
                                          trial_spec=trial_spec, import_root=work.import_root, build_inputs=work.build_inputs,
                                          should_stop=should_stop, build_network=may_download(work.repo_name),
                                          reverts=work.reverts, patch=work.patch, dependencies=work.dependencies,
                                          pinned=work.pinned, toolchain=work.toolchain)
    except SandboxError as exc:
        result, build_s = failure("worker_error", f"sandbox: {exc}"), None
    return redact_tree(result, work.env.values()), build_s  # the repository's env values too
