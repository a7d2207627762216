"""Validating a job's benchmarks into cases, storing the suite files sent with a request, and the
benchmark sets of a repository. Flushes, never commits.

A suite file sent as `suite_source` never runs in the service: it is compiled (a syntax error is
a 422 now, not a failed trial later) and stored by its sha256; its cases carry the suite name
`source:<label>@<sha256 prefix>` and the full sha256 as `source`, and every trial of the job
imports the same content from outside the revision's worktree.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy.orm import Session

from perfbisect.kernels.cases import case_name, normalise_params, parse_shape
from perfbisect.kernels.suites import FILE_PREFIX, SOURCE_PREFIX, Suite, UnknownSuite, get_suite
from perfbisect.service.db import insert_or_skip
from perfbisect.service.errors import BadRequest, NotFound
from perfbisect.service.models import BenchmarkSet, Repository, SuiteSource, utcnow
from perfbisect.service.settings import get_settings
from perfbisect.service.suites import repository
from perfbisect.service.suites.schemas import Benchmark, BenchmarkSetCreate, BenchmarkSetRead, SuiteSourceRead

MAX_CASES = 256
CASE_NAME_LENGTH = 300  # cases.name


def source_sha256(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def _source_suite(bench: Benchmark) -> tuple[str, str]:
    """(suite name, sha256) of a benchmark's suite_source. Raises BadRequest when it does not compile."""
    try:
        compile(bench.suite_source, bench.suite, "exec")
    except (SyntaxError, ValueError) as exc:
        raise BadRequest(f"suite_source {bench.suite!r} is not valid Python: {exc}") from exc
    sha = source_sha256(bench.suite_source)
    return f"{SOURCE_PREFIX}{bench.suite}@{sha[:12]}", sha


def _check_footprint(suite: Suite, params: dict[str, Any], shape: Any) -> None:
    """A case whose tensors cannot fit any device is refused now, not as a failed trial later."""
    limit_gib = get_settings().max_case_gib
    need = suite.footprint_bytes(params)
    if need is not None and need > limit_gib * 2**30:
        raise BadRequest(f"shape {shape!r} for suite {suite.name!r} needs {need / 2**30:.3g} GiB for its inputs "
                         f"and output, over the limit of {limit_gib:g} GiB (PERFBISECT_MAX_CASE_GIB)")


def _suite_of(bench: Benchmark) -> tuple[str, Suite | None, str | None]:
    """(suite name, the built-in suite or None for a custom file, the source's sha256 or None)."""
    if bench.suite_source is not None:
        name, sha = _source_suite(bench)
        return name, None, sha
    if bench.suite.startswith(FILE_PREFIX):
        relpath = bench.suite[len(FILE_PREFIX):]
        if not relpath or ".." in relpath or relpath.startswith("/"):
            raise BadRequest(f"custom suite {bench.suite!r} must be file:<relative path inside the repository>")
        return bench.suite, None, None
    try:
        return bench.suite, get_suite(bench.suite), None
    except UnknownSuite as exc:
        raise BadRequest(str(exc)) from exc


def resolve_cases(benchmarks: list[Benchmark]) -> list[dict[str, Any]]:
    """Validate suites and shapes; return the cases as {suite, target, params, name} (plus `source`,
    the sha256 of a suite_source), normalised once here (dtype aliases, the suite's defaults, key
    order) so that the stored name is the one the harness reports. Runs no suite code and imports
    no torch. Raises BadRequest naming the bad suite or shape, a case too large for the memory
    limit, or too many cases."""
    cases: list[dict[str, Any]] = []
    for bench in benchmarks:
        suite_name, suite, source = _suite_of(bench)
        for shape in bench.shapes:
            try:
                params = normalise_params(parse_shape(shape) if isinstance(shape, str) else shape)
                if suite is not None:
                    params = suite.validate(params)
                    _check_footprint(suite, params, shape)
            except (ValueError, TypeError) as exc:
                raise BadRequest(f"shape {shape!r} for suite {suite_name!r}: {exc}") from exc
            name = case_name(suite_name, params)
            if len(name) > CASE_NAME_LENGTH:
                raise BadRequest(f"case {name[:80]!r}... is longer than {CASE_NAME_LENGTH} characters")
            if any(c["name"] == name and c["target"] == bench.target for c in cases):
                raise BadRequest(f"case {name!r} is listed twice")
            case = {"suite": suite_name, "target": bench.target, "params": params, "name": name}
            cases.append({**case, "source": source} if source else case)
    if len(cases) > MAX_CASES:
        raise BadRequest(f"{len(cases)} cases in one job: at most {MAX_CASES}")
    return cases


def store_sources(session: Session, benchmarks: list[Benchmark]) -> None:
    """Store the benchmarks' suite_source texts by sha256 (each content once, ever)."""
    rows = {source_sha256(b.suite_source): b.suite_source for b in benchmarks if b.suite_source is not None}
    insert_or_skip(session, SuiteSource, [{"sha256": sha, "content": text} for sha, text in rows.items()], ["sha256"])


def sources_read(session: Session, cases: list[dict[str, Any]]) -> list[SuiteSourceRead]:
    """The suite files of these cases, once each: suite name, sha256 and size."""
    contents = sources_of(session, cases)
    seen: dict[str, SuiteSourceRead] = {}
    for case in cases:
        sha = case.get("source")
        if sha and case["suite"] not in seen:
            seen[case["suite"]] = SuiteSourceRead(suite=case["suite"], sha256=sha,
                                                  bytes=len(contents.get(sha, "").encode()))
    return list(seen.values())


def sources_of(session: Session, cases: list[dict[str, Any]]) -> dict[str, str]:
    """sha256 -> content of the suite files these cases use (what a worker ships to the harness)."""
    return repository.sources_by_sha(session, (c["source"] for c in cases if c.get("source")))


def benchmarks_of_cases(session: Session, cases: list[dict[str, Any]]) -> list[Benchmark]:
    """Stored cases grouped back into benchmarks (one per suite and target, shapes as the params,
    in the order listed), a suite file's text read back by its sha256: resolving them again gives
    the same cases (a tracked branch's alert bisects, the PR bot's compares)."""
    contents = sources_of(session, cases)
    grouped: dict[tuple[str, str, str | None], list[dict[str, Any]]] = {}
    for case in cases:
        grouped.setdefault((case["suite"], case["target"], case.get("source")), []).append(dict(case["params"]))
    benchmarks = []
    for (suite, target, sha), shapes in grouped.items():
        if sha is None:
            benchmarks.append(Benchmark(suite=suite, target=target, shapes=shapes))
        else:  # source:<label>@<sha prefix>
            label = suite[len(SOURCE_PREFIX):].rpartition("@")[0]
            benchmarks.append(Benchmark(suite=label, suite_source=contents[sha], target=target, shapes=shapes))
    return benchmarks


def cases_for(session: Session, repo: Repository, benchmarks: list[Benchmark] | None,
              set_name: str | None = None) -> list[dict[str, Any]]:
    """A job's cases: from its benchmarks (their suite files stored), or from a benchmark set of
    the repository. Raises BadRequest, NotFound (no such set)."""
    if set_name is not None:
        return list(get_set(session, repo, set_name).cases)
    cases = resolve_cases(benchmarks or [])
    store_sources(session, benchmarks or [])
    return cases


def get_set(session: Session, repo: Repository, name: str) -> BenchmarkSet:
    found = repository.get_set(session, repo.id, name)
    if found is None:
        raise NotFound(f"no benchmark set {name!r} on repository {repo.name!r} "
                       f"(register it with POST /api/repositories/{repo.name}/benchmark-sets)")
    return found


def register_set(session: Session, repo: Repository, data: BenchmarkSetCreate) -> BenchmarkSet:
    """Create the named set, or replace the cases of an existing one (two registrations of one
    name at once make one row, the later cases win). Raises BadRequest."""
    cases = cases_for(session, repo, data.benchmarks)
    insert_or_skip(session, BenchmarkSet, [{"repository_id": repo.id, "name": data.name, "cases": cases,
                                            "created_at": utcnow()}], ["repository_id", "name"])
    found = repository.get_set(session, repo.id, data.name)
    found.cases = cases
    session.flush()
    return found


def set_read(session: Session, repo: Repository, row: BenchmarkSet) -> BenchmarkSetRead:
    return BenchmarkSetRead(name=row.name, repository=repo.name, cases=row.cases,
                            sources=sources_read(session, row.cases))


def sets_of(session: Session, repo: Repository) -> list[BenchmarkSetRead]:
    return [set_read(session, repo, row) for row in repository.sets_of(session, repo.id)]
