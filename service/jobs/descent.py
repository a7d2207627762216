"""Descent into dependency bumps (issue 44): when a bisect confirms a culprit whose diff moves a
declared pin, a child bisect runs over the dependency's first-parent range, old pin to new pin,
with the host kept at the culprit (service/job_spec.py:Descent); a child's own culprit may bump a
dependency of the dependency (level 2). The rules are pure (service/bisect/descent.py); this
module reads the pins from the mirrors (local reads), writes the children and, at read time,
assembles the chain the report names. Flushes, never commits.

The parent records its children in `job.result["descents"]` ({job_id, dependency, culprit_sha,
label, old, new, other_files} or, for a bump that could not be bisected, its `error`); a child
names its parent in `spec.descent.parent_job_id`: links both ways.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from perfbisect.gitrepo import GitError, validate_ref
from perfbisect.service.bisect import descent as rules
from perfbisect.service.errors import PerfbisectError
from perfbisect.service.job_spec import BisectSpec, Descent, Toolchain, descent_of, toolchain_of
from perfbisect.service.jobs import repository, resolution
from perfbisect.service.models import Culprit, CulpritKind, Job, JobKind, JobStatus, Repository, Revision
from perfbisect.service.repos import dependencies
from perfbisect.service.repos import repository as repos_repo
from perfbisect.service.repos import service as repos
from perfbisect.service.repos.pins import tag_names
from perfbisect.service.repos.schemas import Dependency
from perfbisect.service.toolchains.rules import version_of

SHARED = ("cases", "device_class", "min_effect", "metric", "policy", "workers", "max_trials", "side_by_side",
          "suite_sources")


def level_of(job: Job) -> int:
    found = descent_of(job.spec)
    return found.level if found else 0


def _label(culprit: Culprit, revisions: dict[str, Revision]) -> tuple[str, str]:
    rev = revisions.get(culprit.last_sha)
    if "==" in culprit.last_sha:  # a toolchain bisect's version: its label whole ("tinyop==2.0")
        label = culprit.last_sha
    else:
        label = f"#{rev.pr_number}" if rev is not None and rev.pr_number else culprit.last_sha[:7]
    return label, rev.subject if rev is not None else ""


def _effects(culprit: Culprit) -> dict[str, tuple[float, tuple[float, float]]]:
    return {case: (e["rel"], (e["ci"][0], e["ci"][1])) for case, e in (culprit.effects or {}).items()}


def steps_of(session: Session, job: Job, entries: Sequence[dict[str, Any]] = ()) -> list[rules.Step]:
    """The job's confirmed performance culprits as the pure rules' Steps, each with the bumps of
    `entries` (descents entries) its commit made and the files it changed besides the pins."""
    culprits = performance_culprits(session, job)
    revisions = repos_repo.revisions_by_sha(session, job.repository_id, [c.last_sha for c in culprits])
    steps = []
    for c in culprits:
        label, subject = _label(c, revisions)
        own = [e for e in entries if e["culprit_sha"] == c.last_sha]
        moved = tuple(_bump(e) for e in own)
        steps.append(rules.Step(label, subject, c.first_sha == c.last_sha, _effects(c), moved,
                                tuple(own[0].get("other_files", ())) if own else ()))
    return steps


def _bump(entry: dict[str, Any]) -> rules.Bump:
    return rules.Bump(entry["dependency"], entry["old"], entry["new"], entry.get("toolchain", False))


def _parent_sha(job: Job, sha: str) -> str | None:
    index = job.revision_shas.index(sha) if sha in job.revision_shas else 0
    return job.revision_shas[index - 1] if index > 0 else None


def _host(session: Session, job: Job) -> tuple[int, str, dict[str, str], str]:
    """The host repository id, its commit, the fixed outer dependencies, and the path of names
    of `job`'s own repository from the host ("" for the host itself)."""
    found, axis = descent_of(job.spec), toolchain_of(job.spec)
    if found is None:  # the host itself: a toolchain bisect's host stays at its one commit
        return job.repository_id, axis.commit if axis is not None and axis.commit else "", {}, ""
    return found.host_repository_id, found.host_sha, {**found.fixed}, found.dependency


def maybe_descend(session: Session, job: Job) -> list[Job]:
    """After bisect `job` concluded (culprits written): a child bisect for each declared pin an
    exact culprit moved, up to the deepest level; the children are recorded on the job. Local git
    reads only; a bump that cannot be bisected is recorded with its reason, never raised."""
    if job.kind != JobKind.bisect or not job.spec.descend or job.status == JobStatus.cancelled:
        return []
    axis = toolchain_of(job.spec)
    if axis is not None:
        return _toolchain_descents(session, job, axis)
    repo = job.repository
    if not repo.dependencies:
        return []
    from perfbisect.service.attribution.service import moved_cases  # it imports jobs at module level

    mirror = repos.mirror_of(repo)
    entries, steps = [], []
    for culprit in (c for c in performance_culprits(session, job) if c.first_sha == c.last_sha):
        parent_sha = _parent_sha(job, culprit.last_sha)
        if parent_sha is None:
            continue
        try:
            found = dependencies.bumps_of(repo, mirror, parent_sha, culprit.last_sha)
        except GitError:
            continue
        moved = moved_cases(job, culprit)  # the cases the bisect concluded it moved
        for bump in found.bumps:
            entries.append({"dependency": bump.dependency, "culprit_sha": culprit.last_sha, "old": bump.old,
                            "new": bump.new, "other_files": list(found.other_files), "cases": moved})
    if not entries:
        return []
    steps = steps_of(session, job, entries)
    if level_of(job) >= rules.MAX_LEVEL:
        for entry in entries:
            entry["error"] = f"already {rules.MAX_LEVEL} levels below the bisect asked for: not descended further"
    children = []
    for plan in rules.plan(steps, level_of(job)):
        entry = next(e for e in entries if e["culprit_sha"] == _culprit_sha(session, job, plan.culprit)
                     and e["dependency"] == plan.bump.dependency)
        entry["label"] = steps[plan.culprit].label
        child = _child(session, job, entry, plan.level)
        if child is not None:
            entry["job_id"] = child.id
            children.append(child)
    job.result = {**(job.result or {}), "descents": entries}
    return children


def _toolchain_descents(session: Session, job: Job, axis: Toolchain) -> list[Job]:
    """After a toolchain bisect concluded: for each exact culprit (version V, after version U), a
    child bisect inside the package's registered repository over U's commit .. V's commit (the
    host stays at the toolchain's commit; each trial builds the package from source at the trial's
    commit with its declared recipe). Where the host declares no dependency for the package, or a
    version has no tag there, the entry records why ("no descent: ..."), never raised."""
    from perfbisect.service.attribution.service import moved_cases  # it imports jobs at module level

    dep = dependencies.for_package(job.repository, axis.package)
    entries, children = [], []
    for culprit in (c for c in performance_culprits(session, job) if c.first_sha == c.last_sha):
        before = _parent_sha(job, culprit.last_sha)
        if before is None:
            continue
        entry = {"dependency": dep.name if dep else axis.package, "culprit_sha": culprit.last_sha,
                 "label": culprit.last_sha, "old": version_of(before), "new": version_of(culprit.last_sha),
                 "other_files": [], "cases": moved_cases(job, culprit), "toolchain": True}
        entries.append(entry)
        entry["error"] = _cannot_descend(session, job.repository, axis.package, dep, entry)
        child = _child(session, job, entry, 1) if entry["error"] is None else None
        if child is not None:
            entry["job_id"] = child.id
            children.append(child)
    job.result = {**(job.result or {}), "descents": [{k: v for k, v in e.items() if v is not None} for e in entries]}
    return children


def _cannot_descend(session: Session, host: Repository, package: str, dep: Dependency | None,
                    entry: dict[str, Any]) -> str | None:
    """Why a toolchain bisect's step between two versions of `package` cannot be bisected inside
    the package's repository (None: it can): no dependency `dep` declared for the package on the
    host, its repository not registered, or a version without its tag there. Local git reads."""
    if dep is None:
        named = repos_repo.get_by_name(session, package)
        return (f"the repository {package!r} is registered, but {host.name} declares no dependency {package} "
                "(its pin and the recipe that builds it from source) to build its commits with" if named else
                f"no repository of {package} is registered: register it and declare it on {host.name} as a "
                "dependency (with the recipe that builds it from source) to bisect between the versions' commits")
    dep_repo = repos_repo.get_by_name(session, dep.repository)
    if dep_repo is None:
        return f"the dependency's repository {dep.repository!r} is no longer registered"
    mirror = repos.mirror_of(dep_repo)
    for version in (entry["old"], entry["new"]):
        try:
            found = dependencies.pin_commit(mirror, version, dep.pin.tag)
        except GitError as exc:
            return f"cannot read {dep.repository}: {exc}"
        if found is None:
            return (f"{dep.repository} has no tag for {package} {version} (looked for "
                    f"{', '.join(tag_names(version, dep.pin.tag))}; declare the pin's tag pattern if it differs)")
    return None


def _culprit_sha(session: Session, job: Job, index: int) -> str:
    return performance_culprits(session, job)[index].last_sha


def performance_culprits(session: Session, job: Job) -> list[Culprit]:
    """The job's performance culprits as stored now (written in the round that concludes it)."""
    from perfbisect.service.attribution.service import culprits_of  # the attribution's import of jobs is module-level

    return [c for c in culprits_of(session, job.id) if c.kind == CulpritKind.performance]


def _child(session: Session, parent: Job, entry: dict[str, Any], level: int) -> Job | None:
    """The child bisect of one bump (or None, with `entry["error"]` saying why not)."""
    dep = next(d for d in dependencies.declared(parent.repository) if d.name == entry["dependency"])
    dep_repo = repos_repo.get_by_name(session, dep.repository)
    if dep_repo is None:
        entry["error"] = f"the dependency's repository {dep.repository!r} is no longer registered"
        return None
    mirror = repos.mirror_of(dep_repo)
    good, bad = (dependencies.pin_commit(mirror, entry["old"], dep.pin.tag),
                 dependencies.pin_commit(mirror, entry["new"], dep.pin.tag))
    try:
        # pins the mirror does not hold yet: the child's first task fetches and resolves them (or fails)
        resolved = resolution.bisect_range(mirror, good, bad) if good and bad else None
        good, bad = good or validate_ref(entry["old"]), bad or validate_ref(entry["new"])
    except GitError as exc:
        entry["error"] = f"cannot bisect {dep.repository} {entry['old'][:7]}..{entry['new'][:7]}: {exc}"
        return None
    host_id, host_sha, fixed, path = _host(session, parent)
    if path:  # a child's culprit: its dependency stays there, the one inside it moves
        fixed[path] = entry["culprit_sha"]
    descent = Descent(parent_job_id=parent.id, level=level, host_repository_id=host_id,
                      host_sha=host_sha or entry["culprit_sha"], dependency=f"{path}/{dep.name}" if path else dep.name,
                      culprit_sha=entry["culprit_sha"], label=entry.get("label", ""), old_pin=entry["old"],
                      new_pin=entry["new"], fixed=fixed)
    shared = parent.spec.model_dump(include=set(SHARED), exclude_unset=True)
    moved = set(entry.get("cases") or ())  # only the cases the bump's culprit moved: the others would not step
    shared["cases"] = [c for c in parent.spec.cases if c["name"] in moved] or parent.spec.cases
    spec = BisectSpec(good=good, bad=bad, attribute=False, descent=descent, **shared)
    from perfbisect.service.jobs.service import create_child

    try:
        return create_child(session, dep_repo, spec, resolved, parent.submitter_token_id)
    except PerfbisectError as exc:  # a quota, a race: the parent keeps its own answer
        entry["error"] = f"the child bisect was not started: {exc}"
        return None


def descents_of(job: Job) -> list[dict[str, Any]]:
    return list((job.result or {}).get("descents") or [])


def findings(session: Session, job: Job, max_depth: int = rules.MAX_LEVEL) -> list[rules.Finding]:
    """Per descended bump of `job` and per case the bump's culprit moved: the chain down through
    the finished children (and their children), or what is left outside the bump."""
    out = []
    entries = [e for e in descents_of(job) if e.get("job_id")]
    steps = {s.label: s for s in steps_of(session, job, entries)}
    for entry in entries:
        child = repository.get_job(session, entry["job_id"])
        parent_step = steps.get(entry.get("label", ""))
        if child is None or parent_step is None or not child.status.finished:
            continue
        bump = _bump(entry)
        child_steps = steps_of(session, child, descents_of(child))
        deeper = findings(session, child, max_depth - 1) if max_depth > 1 else []
        for case in entry.get("cases") or parent_step.effects:  # the cases the culprit moved
            found = rules.conclude(case, parent_step, bump, child_steps, child.spec.min_effect)
            below = next((f for f in deeper if f.case == case and found.explained
                          and f.chain[0].label == found.chain[1].label), None)
            out.append(rules.deeper(found, below) if below is not None else found)
    return out


def lines(session: Session, job: Job) -> list[str]:
    """The report's lines of `job`'s descents: a chain or what is left outside per case, and the
    children still running or not started."""
    out = [f"{f.case}: {rules.chain_line(f)}" for f in findings(session, job)]
    for entry in descents_of(job):
        if entry.get("toolchain"):
            name = str(_bump(entry))
        else:
            name = f"{entry.get('label') or entry['culprit_sha'][:7]} bumps {entry['dependency']}"
        if entry.get("error"):
            out.append(f"{name}: {'no descent' if entry.get('toolchain') else 'not descended'}: {entry['error']}")
            continue
        child = repository.get_job(session, entry["job_id"])
        if child is not None and not child.status.finished:
            out.append(f"{name}: descending, job {child.id} ({child.status.value})")
    return out


def parents_line(job: Job) -> str | None:
    """A child's line: which bump of which job it bisects."""
    found = descent_of(job.spec)
    if found is None:
        return None
    return (f"inside the bump of {found.dependency} {found.old_pin[:7]}..{found.new_pin[:7]} by "
            f"{found.label or found.culprit_sha[:7]} of job {found.parent_job_id} (level {found.level})")


def child_ids(session: Session, jobs: Sequence[Job]) -> list[int]:
    return [e["job_id"] for job in jobs for e in descents_of(job) if e.get("job_id")]
