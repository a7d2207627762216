"""`perfbisect bisect` and `perfbisect compare`: the API's request built from the options
(suites built in, in the repository, a local suite file, or a benchmark set of the repository),
submitted on this machine's database or to --api, followed, and reported with the job's exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from perfbisect.cli.common import (
    ApiOpt, BuildOpt, DeviceClassOpt, EnvOpt, FailOn, FailOnOpt, ImportRootOpt, JsonOpt, MetricOpt, MinEffectOpt,
    SetOpt, ShapeOpt, SuiteFileOpt, SuiteOpt, TargetOpt, WideOpt, CLIError, benchmarks_of, console, exit_code,
    exit_with, parse_env, user_errors, validated,
)

# Shown under the options; click keeps a paragraph that starts with \b as written (no re-wrapping).
BISECT_EXAMPLES = """\b
Examples:
  perfbisect bisect --repo ./minikern --good v1.0 --bad main \\
      --suite gemm --target minikern.gemm:matmul \\
      --shape M=8192,N=8192,K=8192,dtype=bf16 --shape M=4096,N=4096,K=4096,dtype=fp16
  perfbisect bisect --repo minikern --good v1.0 --bad main --benchmark-set nightly \\
      --device-class h200 --min-effect 0.01 --workers 4 --fail-on regression
  perfbisect bisect --repo minikern --good v1.0 --bad main --suite-file ./my_suite.py \\
      --target minikern.ops:fused --shape B=8,N=4096 --api http://perfbisect.internal:8000"""
COMPARE_EXAMPLES = """\b
Examples:
  perfbisect compare --repo minikern --base main --head my-branch --benchmark-set nightly
  perfbisect compare --repo ./minikern --base origin/main --head HEAD --suite gemm \\
      --target minikern.gemm:matmul --shape M=4096,N=4096,K=4096,dtype=bf16 --fail-on regression"""


def _finish(job, as_json: bool, wide: bool, fail_on: FailOn) -> None:
    from perfbisect.cli import runs  # the job machinery: only once a job has run (start-up time)

    runs.print_job(job, as_json, wide=wide)
    exit_with(exit_code(job, fail_on))


def bisect(
    repo: Annotated[str, typer.Option(help="registered repository name, or a local path to register")],
    good: Annotated[str, typer.Option(help="ref where performance was good (with --toolchain: the one commit "
                                      "measured)")],
    bad: Annotated[Optional[str], typer.Option(help="later ref where it is bad (with --toolchain: leave it out, or "
                                               "name the same commit)")] = None,
    suite: SuiteOpt = None, suite_file: SuiteFileOpt = None, benchmark_set: SetOpt = None,
    target: TargetOpt = None, shape: ShapeOpt = None,
    toolchain: Annotated[Optional[str], typer.Option(
        help="bisect prebuilt versions of a package at the commit --good names: PACKAGE==V1,V2,... (in that "
             "order), or PACKAGE>=V1,<=V2 / PACKAGE (the --wheelhouse's versions, in version order); the culprit is "
             "the first version that moves")] = None,
    wheelhouse: Annotated[Optional[str], typer.Option(
        help="with --toolchain: a directory of wheels the workers install each version from (no network)")] = None,
    device_class: DeviceClassOpt = "cpu",
    min_effect: MinEffectOpt = None,
    metric: MetricOpt = "ratio",
    workers: Annotated[int, typer.Option(help="revisions measured per round")] = 1,
    build: BuildOpt = None, import_root: ImportRootOpt = None, env: EnvOpt = None,
    policy: Annotated[Optional[str], typer.Option(help='harness sample policy as JSON, e.g. {"max_time_s": 0.5}')] = None,
    check_accuracy: Annotated[bool, typer.Option(
        help="also check accuracy at every revision (accuracy-only trials, side by side with the search)")] = False,
    scan: Annotated[Optional[str], typer.Option(
        help="interior revisions measured with the ends, so a step undone inside the range is seen "
             "(default: 3 for ranges over 32 commits, else 0); auto: enough that no stretch between measured "
             "revisions is wider than --max-gap commits, and more beside a step seen")] = None,
    max_gap: Annotated[Optional[int], typer.Option(
        help="with --scan auto: the widest stretch of commits left unmeasured (default 6: a step that lasts "
             "6 commits is seen wherever it sits)")] = None,
    attribute: Annotated[Optional[bool], typer.Option(
        "--attribute/--no-attribute", help="afterwards, measure the bad end with each culprit reverted (alone and "
        "together): by default when two or more culprits moved one case")] = None,
    localize: Annotated[bool, typer.Option(
        "--localize", help="afterwards, search each performance culprit's diff for the hunks that carry its step "
        "(subsets of its hunks applied to its parent, side by side with the culprit)")] = False,
    side_by_side: Annotated[bool, typer.Option(
        "--side-by-side/--no-side-by-side", help="confirm a culprit only on its two revisions measured side by side "
        "(A B B A on one worker), so drift the control does not cancel cannot make one; --no-side-by-side: on all "
        "their trials, fewer trials on a quiet machine")] = True,
    evidence: Annotated[bool, typer.Option(
        "--evidence/--no-evidence", help="once the culprits are known, profile one extra trial at each end of "
        "each (kernels, compiled code, autotuner choice): the report's 'why' block")] = False,
    api: ApiOpt = None, as_json: JsonOpt = False, fail_on: FailOnOpt = FailOn.never, wide: WideOpt = False,
) -> None:
    """Bisect good..bad, follow its progress, print every culprit with the step per shape.

    Exit codes: 0 a verdict for every case, 1 --fail-on matched, 2 bad input or unreachable
    service, 3 a case could not be measured, 4 inconclusive, 5 cancelled, 130 Ctrl-C."""
    from perfbisect.service.jobs.schemas import MAX_SCAN, BisectCreate

    with user_errors():
        try:
            parsed_policy = json.loads(policy) if policy else None
        except json.JSONDecodeError as exc:
            raise CLIError(f"--policy is not JSON: {exc}") from None
        if scan is not None and scan != "auto" and not scan.isdigit():
            raise CLIError(f"--scan is a number of interior revisions (0 to {MAX_SCAN}) or auto, not {scan!r}")
        if bad is None and toolchain is None:
            raise CLIError("--bad is required (it may be left out only with --toolchain)")
        axis = {}
        if toolchain is not None or wheelhouse is not None:
            axis = {"toolchain": toolchain, "wheelhouse": str(Path(wheelhouse).resolve()) if wheelhouse else None}
        request = validated(BisectCreate, repository=repo, good=good, bad=good if bad is None else bad, **axis,
                            benchmarks=benchmarks_of(suite, suite_file, target, shape), benchmark_set=benchmark_set,
                            device_class=device_class, min_effect=min_effect, metric=metric, workers=workers,
                            policy=parsed_policy, check_accuracy=check_accuracy, scan=scan, max_gap=max_gap,
                            attribute=attribute, side_by_side=side_by_side, evidence=evidence,
                            localize=localize)
        job = _submit(request, api, build, import_root, env, show_progress=not as_json, console=console())
    _finish(job, as_json, wide, fail_on)


def compare(
    repo: Annotated[str, typer.Option(help="registered repository name, or a local path to register")],
    base: Annotated[str, typer.Option(help="the base ref (on the branch)")],
    head: Annotated[str, typer.Option(help="the head ref (e.g. a pull request's)")],
    suite: SuiteOpt = None, suite_file: SuiteFileOpt = None, benchmark_set: SetOpt = None,
    target: TargetOpt = None, shape: ShapeOpt = None,
    device_class: DeviceClassOpt = "cpu",
    min_effect: MinEffectOpt = None,
    metric: MetricOpt = "ratio",
    pr: Annotated[Optional[int], typer.Option(help="the pull request's number, shown in the report")] = None,
    side_by_side: Annotated[bool, typer.Option(
        "--side-by-side/--no-side-by-side", help="measure base and head side by side (A B B A on one worker) and "
        "decide on their within-block differences; --no-side-by-side: separate trials in turn")] = True,
    evidence: Annotated[bool, typer.Option(
        "--evidence/--no-evidence", help="once the culprits are known, profile one extra trial at each end of "
        "each (kernels, compiled code, autotuner choice): the report's 'why' block")] = False,
    build: BuildOpt = None, import_root: ImportRootOpt = None, env: EnvOpt = None,
    api: ApiOpt = None, as_json: JsonOpt = False, fail_on: FailOnOpt = FailOn.never, wide: WideOpt = False,
) -> None:
    """Compare head against base on every case (a two-revision job), with bisect's report and exit codes."""
    from perfbisect.service.jobs.schemas import CompareCreate

    with user_errors():
        request = validated(CompareCreate, repository=repo, base=base, head=head,
                            benchmarks=benchmarks_of(suite, suite_file, target, shape), benchmark_set=benchmark_set,
                            device_class=device_class, min_effect=min_effect, metric=metric, pr_number=pr,
                            side_by_side=side_by_side, evidence=evidence)
        job = _submit(request, api, build, import_root, env, show_progress=not as_json, console=console())
    _finish(job, as_json, wide, fail_on)


def _submit(request, api: str | None, build: str | None, import_root: str | None, env_items: list[str] | None,
            *, show_progress: bool, console):
    from perfbisect.cli import runs  # the job machinery, torch's import chain included: not at start-up

    env = parse_env(env_items)
    if api and (build is not None or import_root is not None or env is not None):
        raise CLIError("--build, --import-root and --env register a local path; with --api, register the "
                       "repository first (`perfbisect repo add ... --api URL`)")
    job = runs.run_job(request, api=api, repo_settings=runs.RepoSettings(build, import_root, env),
                       show_progress=show_progress, console=console)
    from perfbisect.cli.descents import follow_descents

    api = api.rstrip("/") if api else None
    job = runs.follow_attribution(job, api=api, show_progress=show_progress, console=console)
    job = runs.follow_localization(job, api=api, show_progress=show_progress, console=console)
    read = (lambda job_id: runs.read_remote(api, job_id)) if api else runs.read_local
    return follow_descents(job, read, lambda child: runs.follow_job(child, api=api, show_progress=show_progress,
                                                                    console=console), console)
