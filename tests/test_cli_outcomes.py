"""The CLI's outcomes and exit codes on the embedded SQLite database: jobs driven through
advance_job's rounds with the harness's results fed in (a wrong target, a missing device, a noisy
run, a regression), then read back with `perfbisect show`; and one clear line for a path that is
not a git repository or an API that does not answer."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfbisect.service.auth.principal import SYSTEM
from perfbisect.cli.common import FAILED, INCONCLUSIVE, OK, REGRESSION, USAGE
from perfbisect.cli.main import app
from perfbisect.service.job_spec import load as load_spec
from tests.gitrepo import make_repo
from tests.test_job_rounds import CASE_BIG, CASE_SMALL, harness_result

runner = CliRunner()
IMPORT = "ModuleNotFoundError: No module named 'minikern.nope'"
NO_CUDA = "device 'cuda' requested but torch sees no CUDA device"


@pytest.fixture
def embedded(tmp_path: Path, monkeypatch) -> Path:
    """The embedded default for this test: SQLite under its own PERFBISECT_HOME (settings and
    engine are cached per process, so the caches are cleared on the way in and out)."""
    from perfbisect.service.db import get_engine, get_sessionmaker
    from perfbisect.service.settings import get_settings

    def clear() -> None:
        for cached in (get_settings, get_engine, get_sessionmaker):
            cached.cache_clear()

    home = tmp_path / "home"
    monkeypatch.delenv("DATABASE_URL")
    monkeypatch.setenv("PERFBISECT_HOME", str(home))
    clear()
    from perfbisect.cli.common import prepare_database

    prepare_database()
    yield home
    monkeypatch.undo()
    clear()


def finished_job(tmp_path: Path, truth, **spec) -> int:
    """A bisect over a 17-commit repository, its rounds driven like the tasks drive them."""
    from perfbisect.service.db import session_scope
    from perfbisect.service.jobs import advance
    from perfbisect.service.jobs import service as jobs
    from perfbisect.service.jobs.schemas import BisectCreate
    from perfbisect.service.trials import service as trials
    from tests.factories import create_repository

    path = tmp_path / "lib"
    make_repo(path, [f"change {i} (#{100 + i})" for i in range(17)])
    with session_scope() as session:
        create_repository(session, path, name="lib")
        job = jobs.create_bisect(session, BisectCreate(
            repository="lib", good="HEAD~16", bad="main", benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
            "shapes": ["M=256,N=256,K=256,dtype=fp32", "M=64,N=64,K=64,dtype=fp32"]}], **spec), SYSTEM)
        job_id, shas = job.id, job.revision_shas
    rng = random.Random(3)
    for _ in range(60):
        with session_scope() as session:
            trial_ids = advance.advance(session, job_id).trial_ids
        if not trial_ids:
            return job_id
        for trial_id in trial_ids:
            with session_scope() as session:
                work = trials.start(session, trial_id, worker_host="test")
                trials.record(session, trial_id, truth(shas.index(work.sha), rng), build_s=0.0)
    raise AssertionError("the job did not finish")


def failing(status: str, error: str):
    return lambda i, rng: {**harness_result({}, rng, status=status), "error": error}


def test_a_wrong_target_exits_failed_with_its_error(embedded, tmp_path) -> None:
    job_id = finished_job(tmp_path, failing("import_error", IMPORT))
    result = runner.invoke(app, ["show", str(job_id)])
    assert result.exit_code == FAILED, result.output
    assert "verdict: FAILED (0 regressed, 0 improved, 0 unchanged, 0 inconclusive, 2 failed)" in result.output
    assert "import failed at the good end" in result.output and IMPORT in result.output
    assert "No performance step" not in result.output


def test_a_missing_device_exits_failed_naming_it(embedded, tmp_path) -> None:
    job_id = finished_job(tmp_path, failing("error", NO_CUDA), device_class="cuda")
    result = runner.invoke(app, ["show", str(job_id)])
    assert result.exit_code == FAILED and "CUDA missing at the good end" in result.output and NO_CUDA in result.output


def test_a_noisy_run_exits_inconclusive_with_a_warning(embedded, tmp_path) -> None:
    job_id = finished_job(tmp_path, lambda i, rng: harness_result(
        {CASE_BIG: rng.lognormvariate(0, 0.15), CASE_SMALL: rng.lognormvariate(0, 0.15)}, rng), max_trials=6)
    result = runner.invoke(app, ["show", str(job_id)])
    assert result.exit_code == INCONCLUSIVE, result.output
    assert "warning: noisy run: the smallest step it could detect is" in result.output
    assert "too noisy for the minimum effect" in result.output


def test_a_regression_exits_0_or_1_with_fail_on(embedded, tmp_path) -> None:
    job_id = finished_job(tmp_path, lambda i, rng: harness_result({CASE_BIG: 0.7 if i >= 9 else 1.0, CASE_SMALL: 1.0}, rng))
    shown = runner.invoke(app, ["show", str(job_id)])
    assert shown.exit_code == OK and "verdict: REGRESSED (1 regressed, 0 improved, 1 unchanged" in shown.output
    assert "regression" in shown.output and max(map(len, shown.output.splitlines())) <= 100
    assert runner.invoke(app, ["show", str(job_id), "--fail-on", "regression"]).exit_code == REGRESSION
    assert runner.invoke(app, ["show", str(job_id), "--json"]).output.count('"outcome": "regressed"') == 1


def test_a_path_that_is_not_a_git_repository_says_so(embedded, tmp_path) -> None:
    args = ["--good", "HEAD~1", "--bad", "HEAD", "--suite", "gemm", "--target", "m:f", "--shape", "M=1,N=1,K=1"]
    plain = tmp_path / "plain"
    plain.mkdir()
    result = runner.invoke(app, ["bisect", "--repo", str(plain), *args])
    assert result.exit_code == USAGE and f"{plain} is not a git repository" in result.output
    missing = runner.invoke(app, ["bisect", "--repo", str(tmp_path / "nowhere"), *args])
    assert missing.exit_code == USAGE and "does not exist" in missing.output and "Traceback" not in missing.output


def test_an_unreachable_api_is_one_line(embedded) -> None:
    args = ["--repo", "lib", "--good", "a", "--bad", "b", "--suite", "gemm", "--target", "m:f", "--shape", "M=1,N=1,K=1"]
    result = runner.invoke(app, ["bisect", *args, "--api", "http://127.0.0.1:9"])
    assert result.exit_code == USAGE
    assert result.output.startswith("error: cannot reach the API at http://127.0.0.1:9/api/jobs/bisect")
    assert len(result.output.strip().splitlines()) == 1
    shown = runner.invoke(app, ["show", "1", "--api", "http://127.0.0.1:9"])
    assert shown.exit_code == USAGE and "cannot reach the API" in shown.output


def test_an_unreachable_broker_is_one_line_and_fails_the_job(tmp_path: Path) -> None:
    import subprocess

    from tests.e2e_support import BIN, service_env

    make_repo(tmp_path / "lib", ["one (#1)", "two (#2)"])
    env = service_env(tmp_path / "home", f"sqlite:///{tmp_path / 'db.sqlite'}", "redis://127.0.0.1:9/0")
    done = subprocess.run([str(BIN / "perfbisect"), "bisect", "--repo", str(tmp_path / "lib"), "--good", "HEAD~1",
                           "--bad", "HEAD", "--suite", "gemm", "--target", "m:f", "--shape", "M=8,N=8,K=8"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == USAGE, done.stderr[-3000:]
    assert done.stderr.startswith("error: cannot reach the broker at redis://127.0.0.1:9/0") and "Traceback" not in done.stderr
    shown = subprocess.run([str(BIN / "perfbisect"), "show", "1"], env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == FAILED and "could not queue the job" in shown.stdout


def test_the_demo_report_counts_the_cases_with_nothing_planted_that_ended_unchanged(demo_repo, capsys) -> None:
    """Issue 28: a null case ending inconclusive is what 'one story about noise' measures, so the
    demo says how many cases with no planted step (on its device) ended unchanged."""
    from types import SimpleNamespace

    from perfbisect.kernels import demo
    from perfbisect.kernels.cases import case_name
    from perfbisect.kernels.demo.writer import load_ground_truth
    from perfbisect.cli.runs import print_truth_check, unchanged_check

    truth = load_ground_truth(demo_repo)
    stepped = {c for e in truth["events"] if e["kind"] == "perf" for c in e["cases"]["cpu"]}
    names = [case_name(c["suite"], c["params"]) for c in demo.DEMO_CPU_CASES]
    null = [n for n in names if n not in stepped]
    assert null and len(null) < len(names)
    outcomes = [SimpleNamespace(case=n, outcome="inconclusive" if n == null[0] else "unchanged" if n in null
                                else "regressed") for n in names]
    job = SimpleNamespace(spec=load_spec({"device_class": "cpu"}, "bisect"), outcome=SimpleNamespace(cases=outcomes, shapes=[]),
                          revision_shas=[], culprits=[], attribution=None)
    check = unchanged_check(job, truth)
    assert check == {"unchanged": null[1:], "not_unchanged": [f"{null[0]}: inconclusive"]}
    print_truth_check(job, truth)
    assert (f"cases with no planted step unchanged: {len(null) - 1}/{len(null)}; not unchanged: {null[0]}: inconclusive"
            in capsys.readouterr().out)


def test_the_demo_truth_check_scores_the_planted_spread_event_and_every_other_shape_finding(demo_repo, capsys) -> None:
    """Issue 46: the planted slow path (#949, the fp32 gemm) is found by a noisier or bimodal
    finding on its case whose range holds it; a finding anywhere else is false."""
    from types import SimpleNamespace

    from perfbisect.cli.runs import print_truth_check, shape_check
    from perfbisect.kernels.demo.writer import load_ground_truth

    truth = load_ground_truth(demo_repo)
    shas = [f"{i:040x}" for i in range(truth["commits"])]
    event = next(e for e in truth["events"] if e["event"] == "fp32_self_check")
    [fp32] = event["cases"]["cpu"]
    at = event["index"]

    def job_with(*shapes) -> SimpleNamespace:
        found = [SimpleNamespace(kind=kind, case=case, first_sha=shas[first], last_sha=shas[last])
                 for kind, case, first, last in shapes]
        return SimpleNamespace(spec=load_spec({"device_class": "cpu"}, "bisect"), revision_shas=shas, culprits=[],
                               attribution=None, outcome=SimpleNamespace(cases=[], shapes=found))

    assert shape_check(job_with(("bimodal", fp32, at, at)), truth) == {
        "spread_found": ["fp32_self_check"], "spread_missed": [], "spread_false": []}
    wrong = shape_check(job_with(("noisier", fp32, at - 3, at - 1), ("noisier", "rmsnorm M=1024,N=1024,dtype=fp32", at, at)),
                        truth)
    assert wrong == {"spread_found": [], "spread_missed": ["fp32_self_check"],
                     "spread_false": [f"noisier at {shas[at - 1][:10]} on {fp32}",
                                      f"noisier at {shas[at][:10]} on rmsnorm M=1024,N=1024,dtype=fp32"]}
    gpu = job_with(("noisier", fp32, at, at))
    gpu.spec = load_spec({"device_class": "cuda"}, "bisect")
    assert shape_check(gpu, truth)["spread_missed"] == []  # the self-check is on the CPU path only
    print_truth_check(job_with(("bimodal", fp32, at - 1, at)), truth)
    assert ("planted spread events found: 1/1 (fp32_self_check); other noisier or bimodal findings: 0"
            in capsys.readouterr().out)


def test_the_demo_truth_check_scores_each_culprit_per_case(demo_repo, capsys) -> None:
    """Issue 23: a planted commit named as a step on a case its event does not change is a false
    culprit (seen: the bf16 gemm culprit #945 reported -22% on RMSNorm, which the check scored
    right because #945 holds a planted event). Scored per (culprit, case), for performance and
    correctness culprits alike."""
    from types import SimpleNamespace

    from perfbisect.kernels.demo.writer import load_ground_truth
    from perfbisect.cli.runs import print_truth_check, truth_check
    from perfbisect.service.jobs.schemas import CaseEffectRead, CulpritRead, WrongCaseRead

    truth = load_ground_truth(demo_repo)
    events = {e["event"]: e for e in truth["events"]}
    shas = [f"{i:040x}" for i in range(truth["commits"])]
    swizzle, blocks, k_tail = events["swizzle_off_bf16"], events["rms_blocks"], events["k_tail_dropped"]
    gemm_bf16, rms = swizzle["cases"]["cpu"][0], blocks["cases"]["cpu"][0]
    k_wrong = k_tail["cases"]["cpu"][0]
    k_right = next(c for c in events["block_k_small_step"]["cases"]["cpu"] if c not in k_tail["cases"]["cpu"])
    step, flat = CaseEffectRead(rel=-0.22, ci=(-0.3, -0.14), before=1, after=0.78), \
        CaseEffectRead(rel=-0.01, ci=(-0.05, 0.03), before=1, after=0.99)

    def at(index: int, kind: str = "performance", first: int | None = None, **fields) -> CulpritRead:
        return CulpritRead(kind=kind, first_sha=shas[index if first is None else first], last_sha=shas[index],
                           fixed_sha=None, exact=first is None, **fields)

    culprits = [
        at(swizzle["index"], pr_number=945, effects={gemm_bf16: step, rms: step, k_right: flat}),
        at(events["rms_weight_check"]["index"], first=blocks["index"], effects={rms: step}),
        at(k_tail["index"], "correctness", pr_number=935, wrong_cases={k_wrong: WrongCaseRead(), k_right: WrongCaseRead()}),
    ]
    job = SimpleNamespace(spec=load_spec({"device_class": "cpu", "min_effect": 0.15}, "bisect"), revision_shas=shas, culprits=culprits,
                          outcome=None, attribution=None)
    check = truth_check(job, truth)
    assert check["false"] == [f"#945 on {rms}", f"#935 on {k_right}"]
    assert {"swizzle_off_bf16", "rms_blocks", "rms_weight_check", "k_tail_dropped"} <= set(check["found"])
    print_truth_check(job, truth)
    out = capsys.readouterr().out
    assert f"false culprits (commit, case): 2\n  false: #945 on {rms}\n  false: #935 on {k_right}\n" in out


def test_the_demo_ends_with_the_next_step_for_a_newcomer() -> None:
    """Issue 42: the demo ended with no next step; its last line names the server and the job's page."""
    from perfbisect.cli.runs import next_step

    assert next_step(12) == ("next: run `perfbisect serve` and open http://127.0.0.1:8000/dashboard/jobs/12 "
                             "to see the culprits and their charts")
