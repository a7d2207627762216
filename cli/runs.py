"""What the CLI commands do, kept apart from argument parsing."""

from __future__ import annotations

import json
import re
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
from pydantic import ValidationError
from rich.console import Console
from rich.text import Text

from perfbisect.cli.common import CLIError, Interrupted, prepare_database, validation_message
from perfbisect.cli.descents import demo_dependencies, follow_descents
from perfbisect.cli.follow import (FINISHED, attribute_local, attribute_remote, cancel_local, cancel_remote,
                                   embedded_stalled, follow, read_local, read_remote, submit_local, submit_remote)
from perfbisect.cli.hunks import localization_id
from perfbisect.gitrepo import GitError, Mirror
from perfbisect.kernels import demo
from perfbisect.service.db import session_scope
from perfbisect.service.errors import PerfbisectError
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs.schemas import Benchmark, BisectCreate, CompareCreate, JobRead
from perfbisect.service.reports.culprits import moved_effects, pr_label, report_lines, where
from perfbisect.service.repos import repository as repositories
from perfbisect.service.repos import service as repos
from perfbisect.service.repos.schemas import RepositoryCreate
from perfbisect.service.settings import get_settings
from perfbisect.service.suites.service import resolve_cases, source_sha256

GROUND_TRUTH_FILE = "GROUND_TRUTH.json"
# The planted CPU steps are 25% or more and a CPU trial is noisy (cv 4-7% of the control ratio on
# a shared 2-core machine): a 15% minimum lets 3 trials say SAME where nothing was planted.
DEMO_MIN_EFFECT = {"cpu": 0.15, "cuda": 0.02}


@dataclass(frozen=True)
class RepoSettings:
    """What the CLI sets on a repository it registers (None: leave as registered)."""

    build: str | None = None
    import_root: str | None = None
    env: dict[str, str] | None = None


def register_path(path: Path, build: str | None, name: str | None = None, import_root: str | None = None,
                  env: dict[str, str] | None = None, *, build_inputs: list[str] | None = None,
                  dependencies: list[dict[str, Any]] | None = None) -> str:
    """Register a local repository by path (idempotent; the settings given replace the registered
    ones); returns its name. The CLI acts as the operator on its own database, so the path it is
    given is an allowed root. Raises CLIError with the API's validation message."""
    url = str(path.resolve())
    name = name or re.sub(r"[^A-Za-z0-9_.-]", "-", path.resolve().name) or "repo"
    with session_scope() as session:
        existing = repositories.get_by_name(session, name)
        if existing is not None and existing.url != url:
            raise CLIError(f"a repository named {name!r} is registered for {existing.url}, not {url}")
        settings = (("build_command", build), ("build_inputs", build_inputs), ("import_root", import_root), ("env", env),
                    ("dependencies", dependencies))
        given = {k: v for k, v in settings if v is not None}
        # Validated together with what stays registered (declared inputs need a build command).
        kept = {} if existing is None else {"build_command": existing.build_command,
                                            "build_inputs": list(existing.build_inputs or [])}
        try:
            data = RepositoryCreate(name=name, url=url, **{**kept, **given})
        except ValidationError as exc:
            raise CLIError(validation_message(exc)) from None
        if existing is not None:
            for key in set(given) - {"dependencies"}:
                setattr(existing, key, getattr(data, key))
            if dependencies is not None:  # checked against the mirrors, as a registration's
                try:
                    repos.set_dependencies(session, existing, data.dependencies)
                except PerfbisectError as exc:
                    raise CLIError(exc.message) from exc
            return name
        try:
            repos.create(session, data, local_roots=[*get_settings().allowed_local_roots, Path(url)])
        except PerfbisectError as exc:
            raise CLIError(exc.message) from exc
    return name


def follow_job(job_id: int, *, api: str | None, show_progress: bool, console: Console) -> JobRead:
    """Follow to the end. Ctrl-C cancels an embedded job (its trials run in this process); a job
    on an API server or on workers keeps running, and the message says how to follow or cancel it.
    Raises Interrupted on Ctrl-C, CLIError when the job cannot be read."""
    try:
        if api:
            return follow(lambda: read_remote(api, job_id), console, show=show_progress)
        return follow(lambda: read_local(job_id), console, show=show_progress, stalled=embedded_stalled)
    except KeyboardInterrupt:
        if api or not get_settings().embedded:
            where = f" --api {api}" if api else ""
            raise Interrupted(job_id, f"detached from job {job_id}, which keeps running: follow it with "
                                      f"`perfbisect show {job_id}{where}`, cancel it with "
                                      f"`perfbisect cancel {job_id}{where}`") from None
        job = cancel_local(job_id)
        raise Interrupted(job_id, f"job {job_id} {job.status} (a trial already running finishes first)") from None


def local_repository(repository: str, settings: RepoSettings) -> str:
    """A registered name as it is (its settings updated when given); a path registered
    (idempotent). Raises CLIError for a path that does not exist or is not a git repository."""
    path = Path(repository).expanduser()
    if path.exists():
        try:
            git.Repo(path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise CLIError(f"{path} is not a git repository: give the path of a git checkout "
                           "or the name of a registered repository") from None
        return register_path(path, settings.build, import_root=settings.import_root, env=settings.env)
    if "/" in repository or repository.startswith(("~", ".")):
        raise CLIError(f"{path} does not exist (and no repository is registered under that name)")
    if settings != RepoSettings():
        raise CLIError("--build, --import-root and --env apply to a repository given by its path")
    return repository


def run_job(request: BisectCreate | CompareCreate, *, api: str | None, repo_settings: RepoSettings = RepoSettings(),
            show_progress: bool, console: Console) -> JobRead:
    """Submit a bisect or compare (on this machine's database, or to `api`) and follow it to the end."""
    if api:
        api = api.rstrip("/")
        return follow_job(submit_remote(api, request), api=api, show_progress=show_progress, console=console)
    prepare_database()
    request = request.model_copy(update={"repository": local_repository(request.repository, repo_settings)})
    job_id = submit_local(request)
    return follow_job(job_id, api=None, show_progress=show_progress, console=console)


def follow_localization(job: JobRead, *, api: str | None, show_progress: bool, console: Console) -> JobRead:
    """Follow the localization job that a bisect asked to `localize` started (issue 43), then read
    the bisect again so its report carries the hunks. Embedded only: its trials run in this
    process, which must not exit first (a `perfbisect bisect --localize` did, and its
    localization stopped part-way); on an API server the workers run it, and `show` reads it."""
    if api:
        return job
    localized = localization_id(job.id)
    if localized is None:
        return job
    console.print(f"localizing the culprits' hunks: job {localized}")
    follow_job(localized, api=None, show_progress=show_progress, console=console)
    return read_local(job.id)


def follow_attribution(job: JobRead, *, api: str | None, show_progress: bool, console: Console) -> JobRead:
    """A bisect that went on to attribute its culprits at the head: follow that job too, then
    read the bisect again (its read carries the attribution)."""
    if job.attribution_job_id is None or job.attribution is not None:
        return job
    console.print(f"attributing the culprits at the head: job {job.attribution_job_id}")
    follow_job(job.attribution_job_id, api=api, show_progress=show_progress, console=console)
    return read_remote(api, job.id) if api else read_local(job.id)


def attribute_job(job_id: int, api: str | None, *, show_progress: bool, console: Console) -> JobRead:
    """`perfbisect attribute ID`: start (or find) the attribution of bisect `job_id`, follow it,
    return the bisect's read with it."""
    if api:
        api = api.rstrip("/")
        attribution_id = attribute_remote(api, job_id)
    else:
        prepare_database()
        attribution_id = attribute_local(job_id)
    console.print(f"attributing the culprits of job {job_id} at its bad end: job {attribution_id}")
    follow_job(attribution_id, api=api, show_progress=show_progress, console=console)
    return read_remote(api, job_id) if api else read_local(job_id)


def _demo_request(repo_name: str, path: Path, device: str, workers: int, evidence: bool = False) -> BisectCreate:
    cases = demo.DEMO_GPU_CASES if device == "cuda" else demo.DEMO_CPU_CASES
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for case in cases:
        grouped[(case["suite"], case["target"])].append(case["params"])
    root = git.Repo(path).git.rev_list("--max-parents=0", "HEAD").split()[0]
    return BisectCreate(
        repository=repo_name, good=root, bad="HEAD",
        benchmarks=[{"suite": s, "target": t, "shapes": shapes} for (s, t), shapes in grouped.items()],
        device_class=device, min_effect=DEMO_MIN_EFFECT[device], workers=workers,
        policy=demo.DEMO_CPU_POLICY if device == "cpu" else demo.DEMO_GPU_POLICY,
        check_accuracy=True,  # every planted wrong-results range is found, not only where the search builds
        evidence=evidence,  # a profiled trial at each end of every culprit: the report's 'why' (issue 43)
        localize=True,  # then each culprit's responsible hunk (issue 43)
    )


def demo_repo_truth(path: Path, console: Console) -> dict:
    """The planted ground truth of the demo repository at `path`, writing the repository first
    when `path` is empty or absent."""
    if not (path / GROUND_TRUTH_FILE).exists():
        if path.exists() and any(path.iterdir()):
            raise CLIError(f"{path} exists and is not the demo repository; pass --path elsewhere")
        console.print(f"writing the demo kernel repository at {path}")
        demo.write_demo_repo(path)
    return json.loads((path / GROUND_TRUTH_FILE).read_text())


def demo_device(device: str) -> str:
    """The demo's device: "auto" is cuda where torch sees a GPU (ROCm's included), else cpu."""
    if device != "auto":
        return device
    import torch  # only to look for a GPU: torch takes seconds to import

    return "cuda" if torch.cuda.is_available() else "cpu"


def run_demo(path: Path, device: str, workers: int | None = None, *, show_progress: bool,
             console: Console, evidence: bool = False) -> tuple[JobRead, dict]:
    device = demo_device(device)
    if workers is None:
        # One trial at a time, on a CPU too: two side by side share the last-level cache and the
        # memory bandwidth, and the bf16 gemm (memory-bound here) slows more than its compute-bound
        # control, so the ratio does not cancel the neighbour; its trial noise then hid the
        # smallest planted step in 2 of 10 runs (bench/RESULTS.md). One GPU, one trial.
        workers = 1
    truth = demo_repo_truth(path, console)
    prepare_database()
    settings = get_settings()
    if settings.embedded:  # W revisions per round, run side by side in this process
        settings.embedded_workers = workers
    deps = demo_dependencies(path, device, register_path)  # minicc, which #924 bumps (issue 44)
    name = register_path(path, demo.DEMO_BUILD_COMMAND, name=f"minikern-demo-{device}", dependencies=deps or None)
    request = _demo_request(name, path, device, workers, evidence)
    console.print(f"bisecting {len(request.benchmarks)} suite(s) on {device} over the demo history")
    job_id = submit_local(request)
    job = follow_job(job_id, api=None, show_progress=show_progress, console=console)
    job = follow_attribution(job, api=None, show_progress=show_progress, console=console)
    job = follow_localization(job, api=None, show_progress=show_progress, console=console)
    return follow_descents(job, read_local, lambda child: follow_job(child, api=None, show_progress=show_progress,
                                                                    console=console), console), truth


def print_job(job: JobRead, as_json: bool, *, wide: bool = False) -> None:
    """The report on stdout: JSON, or the text report coloured when stdout is a terminal."""
    if as_json:
        print(job.model_dump_json(indent=2))
        return
    out = Console(width=10_000 if wide else 100, soft_wrap=True, highlight=False)
    out.print(Text("\n").join(report_lines(job, wide=wide)))


def next_step(job_id: int, base: str = "http://127.0.0.1:8000") -> str:
    """The demo's last line: where a newcomer sees what it found (the job's page, served by
    `perfbisect serve` from the same database)."""
    return f"next: run `perfbisect serve` and open {base}/dashboard/jobs/{job_id} to see the culprits and their charts"


def truth_check(job: JobRead, truth: dict) -> dict[str, list[str]]:
    """Match culprits with the demo's planted events (only the CLI's check and the tests read
    the ground truth; the service never does). An event is found if a culprit's range holds it;
    a culprit is false on each case it names that no planted event of its range changes."""
    pos = {sha: i for i, sha in enumerate(job.revision_shas)}
    spans = {kind: [(pos[c.first_sha], pos[c.last_sha]) for c in job.culprits if c.kind == kind]
             for kind in ("performance", "correctness")}
    found, missed = [], []
    for event in truth["events"]:
        kind = TRUTH_KINDS.get(event["kind"])
        if kind is None:
            continue
        hit = any(first <= event["index"] <= last for first, last in spans[kind])
        (found if hit else missed).append(event["event"])
    return {"found": found, "missed": missed, "false": false_culprits(job, truth), **unchanged_check(job, truth),
            **shape_check(job, truth)}


def shape_check(job: JobRead, truth: dict) -> dict[str, list[str]]:
    """The planted spread events (issue 46) against the job's noisier and bimodal findings: an
    event is found when a finding on one of its cases holds its commit; every other finding is
    false ("noisier at #930 on rmsnorm M=1024,N=1024"). Events that change no case on the job's
    device are left out."""
    device = job.spec.device_class
    pos = {sha: i for i, sha in enumerate(job.revision_shas)}
    shapes = [(s, pos.get(s.first_sha, -1), pos.get(s.last_sha, -1)) for s in (job.outcome.shapes if job.outcome else [])]
    events = [e for e in truth["events"] if e["kind"] == "spread" and e["cases"].get(device)]
    hit = lambda e, s, first, last: s.case in e["cases"][device] and first <= e["index"] <= last  # noqa: E731
    found = [e["event"] for e in events if any(hit(e, *f) for f in shapes)]
    false = [f"{s.kind} at {s.last_sha[:10]} on {s.case}" for s, first, last in shapes
             if not any(hit(e, s, first, last) for e in events)]
    return {"spread_found": found, "spread_missed": [e["event"] for e in events if e["event"] not in found],
            "spread_false": false}


TRUTH_KINDS = {"perf": "performance", "wrong_results": "correctness"}


def false_culprits(job: JobRead, truth: dict) -> list[str]:
    """Each (culprit, case) the job names that the ground truth does not: no planted event of
    the culprit's kind in its range changes that case on the job's device ("#945 on rmsnorm
    M=1024,N=1024"). A performance culprit names the cases the report shows for it (those that
    moved), a correctness culprit the cases that failed the accuracy check."""
    device = job.spec.device_class
    pos = {sha: i for i, sha in enumerate(job.revision_shas)}
    out = []
    for c in job.culprits:
        first, last = pos[c.first_sha], pos[c.last_sha]
        planted = {case for e in truth["events"] if TRUTH_KINDS.get(e["kind"]) == c.kind
                   and first <= e["index"] <= last for case in e["cases"].get(device, [])}
        named = moved_effects(job, c) if c.kind == "performance" else c.wrong_cases
        out += [f"{pr_label(c) or where(c)} on {case}" for case in sorted(named) if case not in planted]
    return out


def unchanged_check(job: JobRead, truth: dict) -> dict[str, list[str]]:
    """The cases no planted performance step touches on the job's device, which should end
    unchanged: those that did, and the others with their outcome ("case: inconclusive")."""
    device = job.spec.device_class
    stepped = {case for e in truth["events"] if e["kind"] == "perf" for case in e["cases"].get(device, [])}
    quiet = [c for c in (job.outcome.cases if job.outcome else []) if c.case not in stepped]
    return {"unchanged": [c.case for c in quiet if c.outcome == "unchanged"],
            "not_unchanged": [f"{c.case}: {c.outcome}" for c in quiet if c.outcome != "unchanged"]}


def print_truth_check(job: JobRead, truth: dict) -> None:
    check = truth_check(job, truth)
    total = len(check["found"]) + len(check["missed"])
    print(f"\nplanted events found: {len(check['found'])}/{total} ({', '.join(check['found']) or 'none'})"
          + (f"; missed: {', '.join(check['missed'])}" if check["missed"] else ""))
    print(f"false culprits (commit, case): {len(check['false'])}")
    for item in check["false"]:
        print(f"  false: {item}")
    quiet = len(check["unchanged"]) + len(check["not_unchanged"])
    print(f"cases with no planted step unchanged: {len(check['unchanged'])}/{quiet}"
          + (f"; not unchanged: {', '.join(check['not_unchanged'])}" if check["not_unchanged"] else ""))
    print(f"planted spread events found: {len(check['spread_found'])}/{len(check['spread_found']) + len(check['spread_missed'])}"
          + (f" ({', '.join(check['spread_found'])})" if check["spread_found"] else "")
          + f"; other noisier or bimodal findings: {len(check['spread_false'])}")
    for item in check["spread_false"]:
        print(f"  false: {item}")
    found = interaction_check(job, truth)
    print(f"planted interaction found: {found['found']}/{found['planted']}"
          + (f"; interactions not planted: {', '.join(found['extra'])}" if found["extra"] else ""))


def interaction_check(job: JobRead, truth: dict) -> dict:
    """Whether the attribution called the planted pair's interaction, on a case of its suite,
    between the culprits that hold its two events; and any interaction called elsewhere."""
    index = {e["event"]: e["index"] for e in truth["events"]}
    pos = {sha: i for i, sha in enumerate(job.revision_shas)}
    planted = truth.get("interactions", [])
    attribution = job.attribution
    called = []
    for case in attribution.cases if attribution else []:
        if case.verdict != "interact" or not case.together:
            continue
        spans = [(pos.get(c.first_sha, -1), pos.get(c.last_sha, -1)) for c in attribution.culprits
                 if c.index in case.culprits and str(c.index) in case.together.split("+")]
        called.append((case.case, spans))
    found, matched = 0, set()
    for pair in planted:
        events = [index[e] for e in pair["events"]]
        for n, (case, spans) in enumerate(called):
            holds = all(any(a <= i <= b for a, b in spans) for i in events)
            if holds and case.startswith(pair["case_suite"] + " "):
                found += 1
                matched.add(n)
                break
    extra = [case for n, (case, _spans) in enumerate(called) if n not in matched]
    return {"found": found, "planted": len(planted), "extra": extra}


def run_measure(repo: Path, rev: str, bench: dict[str, Any], device: str, build: str | None,
                import_root: str) -> dict[str, Any]:
    """One trial of `bench` (a request's benchmark: suite or suite_source, target, shapes) at `rev`."""
    from perfbisect.workers.runner import harness_spec, run_in_slot  # the worker side: only `measure` runs a trial
    from perfbisect.workers.sandbox import SandboxError, slot

    if not (repo / ".git").exists() and not (repo / "HEAD").exists():
        raise CLIError(f"{repo} is not a git repository")
    try:
        benchmark = Benchmark(**bench)
        resolved = resolve_cases([benchmark])
    except PerfbisectError as exc:
        raise CLIError(f"bad --case: {exc.message}") from exc
    except ValidationError as exc:
        raise CLIError(validation_message(exc)) from exc
    source = benchmark.suite_source
    with tempfile.TemporaryDirectory(prefix="perfbisect-measure-") as tmp:
        mirror = Mirror(Path(tmp), "measure", str(repo.resolve()))
        try:
            mirror.ensure(fetch=False)
            sha = mirror.resolve(rev)
        except GitError as exc:
            raise CLIError(str(exc)) from exc
        spec = harness_spec(resolved, device, None, suite_sources={source_sha256(source): source} if source else None)
        try:
            with slot() as box:
                result, _ = run_in_slot(box, mirror, sha, build_command=build, env={}, trial_spec=spec,
                                        import_root=import_root)
        except SandboxError as exc:
            raise CLIError(str(exc)) from exc
        return result


def first_parent_shas(path: str, good: str, bad: str) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        mirror = Mirror(Path(tmp), "sim", str(Path(path).resolve()))
        try:
            mirror.ensure(fetch=False)
            g, b = mirror.resolve(good), mirror.resolve(bad)
            return [c.sha for c in mirror.first_parent_range(g, b)]
        except GitError as exc:
            raise CLIError(str(exc)) from exc


def run_simulation(history: Path, workers: int, seed: int) -> tuple[dict, str]:
    from perfbisect.service.bisect.simulate import format_simulation, load_history, simulate  # only `simulate`

    if not history.exists():
        raise CLIError(f"{history} does not exist")
    try:
        loaded = load_history(history, repo_resolver=first_parent_shas)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise CLIError(f"{history}: {exc}") from exc
    result = simulate(loaded, workers=workers, seed=seed)
    return result, format_simulation(result)


def read_job(job_id: int, api: str | None = None) -> JobRead:
    if api:
        return read_remote(api.rstrip("/"), job_id)
    prepare_database()
    try:
        return read_local(job_id)
    except PerfbisectError as exc:
        raise CLIError(exc.message) from exc


def watch_job(job_id: int, api: str | None, console: Console) -> JobRead:
    """`show --follow`: follow a job this process did not submit until it finishes. Ctrl-C only
    detaches (the job goes on wherever its trials run). Embedded, this process runs the embedded
    server's reconciler (not its tracked-branch polls): a job an earlier process left unfinished
    (its CLI killed, or cut off at exit) is resumed here, its trials re-run once their dead
    process's heartbeat is stale."""
    read = (lambda: read_remote(api.rstrip("/"), job_id)) if api else (lambda: read_local(job_id))
    if not api:
        prepare_database()
        if get_settings().embedded and read_local(job_id).status not in FINISHED:
            from perfbisect.dispatch import start_embedded_reconciler

            start_embedded_reconciler(periodic=False)
    try:
        return follow(read, console)
    except PerfbisectError as exc:
        raise CLIError(exc.message) from exc
    except KeyboardInterrupt:
        raise Interrupted(job_id, f"stopped following job {job_id}, which keeps running") from None


def cancel_job(job_id: int, api: str | None = None) -> JobRead:
    if api:
        return cancel_remote(api.rstrip("/"), job_id)
    prepare_database()
    try:
        with session_scope() as session:
            jobs.cancel(session, job_id)
    except PerfbisectError as exc:
        raise CLIError(exc.message) from exc
    return read_local(job_id)

