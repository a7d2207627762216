"""Starting a trial and storing what the harness returned. Flushes, never commits."""

from __future__ import annotations

import hashlib
import json
import logging
import socket
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import null
from sqlalchemy.orm import Session

from perfbisect.kernels.harness.result import vendor_identity
from perfbisect.service.errors import NotFound
from perfbisect.service.jobs import repository as jobs_repo
from perfbisect.service.toolchains.rules import same_package, version_of
from perfbisect.service.job_spec import AttributeSpec, JobSpec, LocalizeSpec, descent_of, toolchain_of
from perfbisect.service.hunks.variants import hunk_patch, trial_cases
from perfbisect.service.models import (Job, JobStatus, Measurement, MeasurementSamples, Repository, Revision, Trial, TrialStatus,
                            utcnow)
from perfbisect.service.repos.redaction import env_secrets, scrub
from perfbisect.service.settings import get_settings
from perfbisect.service.suites import service as suites
from perfbisect.service.trials import repository as trials_repo


log = logging.getLogger(__name__)


class TrialGone(NotFound):
    """The trial row was deleted (its job was removed) before a worker took it."""


@dataclass(frozen=True)
class DependencyWork:
    """A declared dependency to place in the trial's worktree (service/repos/schemas.Dependency)
    with the mirror of its history, and the dependencies it pins in turn (`inner`)."""

    name: str
    repo_name: str
    repo_url: str
    pin: dict[str, Any]  # PinLocation: kind, file, key
    path: str  # where its tree goes, relative to the worktree (or to its host dependency's tree)
    recipe: str | None = None
    inner: tuple[DependencyWork, ...] = ()


MAX_DEPTH = 3  # the host and two levels of dependencies


def dependency_work(session: Session, repo: Repository, depth: int = 1) -> tuple[DependencyWork, ...]:
    """The dependencies of `repo` to place, with theirs, to the host and two levels (a dependency
    whose repository is no longer registered is not placed)."""
    from perfbisect.service.repos.dependencies import declared
    from perfbisect.service.repos.repository import get_by_name

    out = []
    for dep in declared(repo) if depth < MAX_DEPTH else ():
        owner = get_by_name(session, dep.repository)
        if owner is not None:
            out.append(DependencyWork(dep.name, owner.name, owner.url, dep.pin.model_dump(), dep.placed_at(),
                                      dep.recipe, dependency_work(session, owner, depth + 1)))
    return tuple(out)


@dataclass(frozen=True)
class TrialWork:
    """Everything a worker needs to run a trial without holding a database session."""

    trial_id: int
    job_id: int
    repo_name: str
    repo_url: str
    build_command: str | None
    import_root: str
    env: dict[str, str]
    sha: str
    cases: list[dict[str, Any]]
    device_class: str
    policy: dict[str, Any] | None
    attempt: int = 1
    accuracy_only: bool = False
    profile: bool = False  # a culprit's profiled trial (issue 43): the harness profiles, never times
    suite_sources: dict[str, str] = field(default_factory=dict)  # sha256 -> text of the suite files sent with the job
    build_inputs: tuple[str, ...] = ()  # declared build inputs: the build cache's key (none: build every trial)
    reverts: tuple[tuple[str, str], ...] = ()  # attribution: culprit ranges (first, last) reverted at `sha`
    patch: str | None = None  # hunk localization: a subset of a culprit's hunks applied at its parent `sha`
    dependencies: tuple[DependencyWork, ...] = ()  # placed in the worktree at the pins `sha` names
    pinned: dict[str, str] = field(default_factory=dict)  # a descent: dependency path of names -> the commit placed
    toolchain: ToolchainWork | None = None  # a toolchain bisect: the version installed for this trial


@dataclass(frozen=True)
class ToolchainWork:
    """The version of a package a toolchain bisect's trial runs with (workers/toolchains.py
    installs its wheel from the wheelhouse into a cached environment)."""

    package: str
    version: str
    wheelhouse: str


def beating(trial: Trial, now: datetime, timeout_s: float) -> bool:
    """Whether a running trial's worker has said it is alive within `timeout_s`."""
    last = trial.heartbeat_at or trial.started_at
    return last is not None and (now - last).total_seconds() < timeout_s


def start(session: Session, trial_id: int, worker_host: str | None = None) -> TrialWork | None:
    """Mark the trial running and return its work; None when there is nothing to do (already
    finished, its job was cancelled, or another worker is running it and beating). A trial
    left `running` by a dead worker (no heartbeat) is run again, as a new attempt."""
    trial = session.get(Trial, trial_id, with_for_update=True)
    if trial is None:
        raise TrialGone(f"trial {trial_id} no longer exists")
    job = session.get_one(Job, trial.job_id)
    if trial.status.finished:
        return None
    if job.status.finished:
        trial.status = TrialStatus.cancelled
        return None
    now = utcnow()
    if trial.status == TrialStatus.running and beating(trial, now, get_settings().heartbeat_timeout_s):
        return None  # a duplicate message (re-sent, or restored by the broker): the live run owns it
    trial.status, trial.started_at, trial.heartbeat_at = TrialStatus.running, now, now
    trial.attempts += 1
    trial.worker_host = worker_host or socket.gethostname()
    sha = session.get_one(Revision, trial.revision_id).sha
    descent = descent_of(job.spec)  # a bisect inside a bump: the host at its culprit
    axis = toolchain_of(job.spec)  # a toolchain bisect: the repository at its commit, the revision a version
    repo = session.get_one(Repository, descent.host_repository_id if descent else job.repository_id)
    deps = dependency_work(session, repo)
    tool = ToolchainWork(axis.package, version_of(sha), axis.wheelhouse) if axis is not None else None
    if axis is not None:  # the package is its version's wheel, never its declared source (that is the descent's)
        sha = axis.commit
        deps = tuple(d for d in deps if not same_package(d.name, axis.package))
    return TrialWork(
        trial_id=trial.id, job_id=job.id, repo_name=repo.name, repo_url=repo.url,
        build_command=repo.build_command, import_root=repo.import_root, env=dict(repo.env),
        sha=descent.host_sha if descent else sha, cases=trial_cases(job.spec, trial.variant),
        device_class=trial.device_class, policy=job.spec.policy,
        attempt=trial.attempts,
        accuracy_only=trial.accuracy_only,
        profile=trial.profile,
        suite_sources=suites.sources_of(session, job.spec.cases),
        # the cache keys the tree and the placed dependencies' commits; a toolchain job's versions: none
        build_inputs=() if axis else tuple(repo.build_inputs or ()),
        reverts=reverts_of(job.spec, trial.variant),
        patch=hunk_patch(job.spec, trial.variant) if isinstance(job.spec, LocalizeSpec) else None,
        dependencies=deps,
        pinned={**descent.fixed, descent.dependency: sha} if descent else {},
        toolchain=tool,
    )


def reverts_of(spec: JobSpec, variant: str | None) -> tuple[tuple[str, str], ...]:
    """The culprit ranges an attribution trial reverts: its variant's culprits, in branch order."""
    if not variant or not isinstance(spec, AttributeSpec):
        return ()
    culprits = [spec.culprits[int(i)] for i in sorted(variant.split("+"), key=int)]
    return tuple((c.first_sha, c.last_sha) for c in culprits)


def check_in(session: Session, trial_id: int, attempt: int, *, beat: bool) -> bool:
    """A running trial's worker, every second or so: record the heartbeat (when `beat`) and
    learn whether to go on. False when the job was cancelled, the trial is finished or gone,
    or a newer attempt took it over (its worker was presumed dead)."""
    trial = session.get(Trial, trial_id)
    if trial is None or trial.status != TrialStatus.running or trial.attempts != attempt:
        return False
    if session.get_one(Job, trial.job_id).status.finished:
        return False
    if beat:
        trial.heartbeat_at = utcnow()
    return True


def fingerprint(repo_name: str, device: dict[str, Any]) -> str:
    """conbench's rule: only measurements with equal fingerprints are compared."""
    basis = {"repo": repo_name, **{k: device.get(k) for k in ("name", "driver", "cuda", "torch", "triton")},
             **vendor_identity(device), "harness": device.get("harness_version")}
    tool = device.get("toolchain")
    if isinstance(tool, dict):  # a toolchain bisect's version (only then: other fingerprints stay as they were),
        basis["toolchain"] = {k: tool.get(k) for k in ("package", "version", "sha256")}  # not how it was installed
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]


_TRIAL_STATUS = {s.value: s for s in TrialStatus}
RAW_SAMPLE_KEYS = ("target_ms", "control_ms", "ratio", "clock_mhz", "dropped_throttled")


def record(session: Session, trial_id: int, result: dict[str, Any], *, build_s: float | None = None,
           attempt: int | None = None) -> Trial | None:
    """Store a harness result (or a build failure shaped like one). The first result wins: a
    duplicate delivery of the same trial does not overwrite it, and a result of an attempt that
    was superseded (its worker was presumed dead) is dropped. Returns None if nothing was stored."""
    trial = session.get(Trial, trial_id, with_for_update=True)
    if trial is None:
        raise TrialGone(f"trial {trial_id} no longer exists")
    if trial.status.finished or (attempt is not None and trial.attempts != attempt):
        return None
    job = session.get_one(Job, trial.job_id)
    if result.get("status") == "cancelled" and job.status != JobStatus.cancelled:
        return None  # stopped because another attempt took over: that one stores the result
    repo = session.get_one(Repository, job.repository_id)
    result = _without_env(result, env_secrets(repo.env))
    device = result.get("device") or {}
    if result.get("toolchain") and device:  # the version it ran with is part of its environment
        device = {**device, "toolchain": result["toolchain"]}
    trial.status = _TRIAL_STATUS.get(result.get("status", "error"), TrialStatus.error)
    trial.failure_reason = result.get("error")
    trial.device = device.get("name")
    trial.provenance = device or null()  # SQL NULL: None would store a JSON null, which IS NOT NULL
    trial.fingerprint = fingerprint(repo.name, {**device, "harness_version": result.get("harness_version")})
    trial.finished_at = utcnow()
    trial.build_s = build_s
    trial.build_cache = result.get("build")
    trial.run_s = result.get("wall_s")
    trial.phases = result.get("phases")
    trial.imported = result.get("imported") or null()  # hunk localization keeps these files' hunks
    if job.status == JobStatus.cancelled:
        trial.status = TrialStatus.cancelled
    cases = jobs_repo.cases_by_name(session, repo.id, [c["name"] for c in result.get("cases", [])])
    if trial.status == TrialStatus.ok:
        missing = _missing_cases(trial_cases(job.spec, trial.variant), result.get("cases", []))
        if missing:  # a name mismatch would drop every value silently: fail the trial loudly instead
            trial.status, trial.failure_reason = TrialStatus.error, missing
            log.error("trial %s of job %s: %s", trial.id, job.id, missing)
    if trial.profile:  # its findings only: no measurement, so never a timing statistic (issue 43)
        trial.evidence = profiled_evidence(result)
        session.flush()
        return trial
    stored: list[int] = []
    for case in result.get("cases", []):
        row = cases.get((case["suite"], case["target"], case["name"]))
        if row is None:
            continue
        metric = case.get("metric") or {}
        measured = Measurement(
            trial_id=trial.id, case_id=row.id, status=case.get("status", "error"), error=case.get("error"),
            ratio=case.get("median_ratio"), value=metric.get("target"), control_value=metric.get("control"),
            unit=metric.get("name"), higher_is_better=metric.get("higher_is_better", True),
            accuracy_error=case.get("accuracy_error"),
        )
        measured.raw = MeasurementSamples(samples={k: case.get(k) for k in RAW_SAMPLE_KEYS})
        session.add(measured)
        stored.append(row.id)
    session.flush()
    if descent_of(job.spec) is None and toolchain_of(job.spec) is None:  # not a point of its history
        trials_repo.refresh_case_points(session, trial, stored)
    session.flush()
    return trial


def profiled_evidence(result: dict[str, Any]) -> dict[str, Any]:
    """What a profiled trial found: per case its status, error and the profiler's table, and the
    compiled code (JIT cache and live Triton objects) the harness read after the cases."""
    cases = {c["name"]: {"status": c.get("status"), "error": c.get("error"), "profile": c.get("profile")}
             for c in result.get("cases", []) if isinstance(c, dict) and "name" in c}
    return {"cases": cases, **(result.get("evidence") or {})}


def _without_env(result: dict[str, Any], secrets: tuple[str, ...]) -> dict[str, Any]:
    """The result with the repository's env values scrubbed from what its code printed (the
    trial's and each case's error), whichever worker sent it."""
    if not secrets:
        return result
    cases = [{**c, "error": scrub(c["error"], secrets)} if isinstance(c.get("error"), str) else c
             for c in result.get("cases", [])]
    error = result.get("error")
    return {**result, "cases": cases, "error": scrub(error, secrets) if isinstance(error, str) else error}


def _missing_cases(requested: list[dict[str, Any]], returned: list[dict[str, Any]]) -> str | None:
    """The error for a trial that reported ok without a measurement of every requested case."""
    got = {(c.get("suite"), c.get("target"), c.get("name")) for c in returned}
    missing = [c["name"] for c in requested if (c["suite"], c["target"], c["name"]) not in got]
    if not missing:
        return None
    names = ", ".join(sorted({str(c.get("name")) for c in returned})) or "none"
    return (f"no measurement stored for {len(missing)} requested case(s) ({', '.join(missing)}): "
            f"the harness reported ok but named its cases {names}")
