"""The CLI on a real-world repository layout: a src/ package that must be installed before it
imports, bisected with a benchmark file kept outside its history (`--suite-file`), `--build`
into the per-revision build directory and `--import-root` pointing at it; `repo add|list|show|
add-set`; and the API's validation messages, not tracebacks, for bad input."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfbisect.cli.common import OK, USAGE
from perfbisect.cli.main import app
from tests.e2e_support import BIN, service_env
from tests.gitrepo import git
from tests.test_cli_outcomes import embedded  # noqa: F401  (fixture)

runner = CliRunner()
INSTALL = "{python} -m pip install -q --no-deps --no-build-isolation --target {build_dir} ."
SUITE = """
    import torch

    METRIC = "GB/s"

    def make_inputs(params, device, generator):
        return (torch.randn(params["N"], generator=generator, device=device),)

    def bytes_moved(params):
        return 8 * params["N"]

    def reference(inputs, params):
        return inputs[0].double() * 2

    def control(inputs, params):
        return inputs[0] * 2

    def call_target(fn, inputs, params):
        # the target's signature changed across history: scale(x) became scale(x, factor)
        import inspect

        takes_factor = len(inspect.signature(fn).parameters) > 1
        return fn(inputs[0], 2.0) if takes_factor else fn(inputs[0])
"""
PYPROJECT = """
    [build-system]
    requires = ["setuptools"]
    build-backend = "setuptools.build_meta"

    [project]
    name = "scalepkg"
    version = "0.1"

    [tool.setuptools.packages.find]
    where = ["src"]
"""
FAST = "def scale(x):\n    return x * 2.0\n"
FAST_FACTOR = "def scale(x, factor):\n    return x * factor\n"
SLOW_FACTOR = ("def scale(x, factor):\n    out = x * factor\n"
               "    for _ in range(30):  # the regression: the same work thirty times over\n"
               "        out = x * factor\n    return out\n")


def commit(root: Path, files: dict[str, str], subject: str) -> str:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", subject)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def scalepkg(tmp_path: Path) -> tuple[Path, list[str]]:
    """A src/ layout package that only imports once installed; the suite file is not in it.
    The target's signature changes at the second commit, the slowdown lands at the fourth."""
    root = tmp_path / "scalepkg"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    shas = [commit(root, {"pyproject.toml": PYPROJECT, "src/scalepkg/__init__.py": "",
                          "src/scalepkg/ops.py": FAST}, "initial (#1)"),
            commit(root, {"src/scalepkg/ops.py": FAST_FACTOR}, "scale: take the factor (#2)"),
            commit(root, {"NOTES": "one"}, "notes (#3)"),
            commit(root, {"src/scalepkg/ops.py": SLOW_FACTOR}, "scale: recompute (#4)"),
            commit(root, {"NOTES": "two"}, "notes (#5)")]
    return root, shas


@pytest.mark.e2e
def test_bisect_an_installed_src_layout_with_a_suite_file_outside_it(scalepkg, tmp_path: Path) -> None:
    root, shas = scalepkg
    suite = tmp_path / "bench_scale.py"
    suite.write_text(textwrap.dedent(SUITE))
    env = service_env(tmp_path / "home", None, None)
    args = ["bisect", "--repo", str(root), "--good", shas[0], "--bad", "main", "--suite-file", str(suite),
            "--target", "scalepkg.ops:scale", "--shape", "N=262144", "--build", INSTALL,
            "--import-root", ".perfbisect-build", "--env", "OMP_NUM_THREADS=1", "--min-effect", "0.3",
            "--policy", json.dumps({"max_time_s": 0.1, "min_samples": 5, "max_samples": 20}), "--json"]
    done = subprocess.run([str(BIN / "perfbisect"), *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == OK, done.stderr[-3000:]
    job = json.loads(done.stdout)
    # One culprit holding the planted commit: exactly it, or (when a trial of it failed on a
    # loaded runner) the range up to the next measured commit.
    [culprit] = job["culprits"]
    assert culprit["first_sha"] == shas[3] and culprit["last_sha"] in (shas[3], shas[4]), culprit
    source = job["spec"]["suite_sources"][0]
    assert source["suite"].startswith("source:bench_scale.py@") and len(source["sha256"]) == 64
    with sqlite3.connect(tmp_path / "home" / "perfbisect.sqlite") as db:
        builds = db.execute("SELECT build_s FROM trials WHERE status = 'ok'").fetchall()
        registered = db.execute("SELECT import_root, env, build_command FROM repositories").fetchone()
    assert builds and all(b is not None and b > 0 for (b,) in builds)  # the install ran, and was timed, per trial
    assert registered[0] == ".perfbisect-build" and json.loads(registered[1]) == {"OMP_NUM_THREADS": "1"}
    assert registered[2] == INSTALL
    # `perfbisect attribute`: the one culprit reverted at main (forced: one culprit is attributed
    # only when asked), installed and measured beside main; reverting it recovers the slowdown
    done = subprocess.run([str(BIN / "perfbisect"), "attribute", str(job["id"]), "--json"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == OK, done.stderr[-3000:]
    attributed = json.loads(done.stdout)["attribution"]
    assert [c["last_sha"] for c in attributed["culprits"]] == [culprit["last_sha"]]
    [case] = attributed["cases"]
    [reverted] = case["recoveries"]
    assert reverted["variant"] == "0" and reverted["ci"][0] > 1.0, case  # more than twice as fast
    assert case["interaction"] is None and case["words"].startswith("Reverting ")
    missing = subprocess.run([str(BIN / "perfbisect"), "attribute", "999"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == USAGE and "no job 999" in missing.stderr and "Traceback" not in missing.stderr


def test_repo_add_list_show_and_a_benchmark_set(embedded, scalepkg, tmp_path: Path) -> None:
    root, _ = scalepkg
    suite = tmp_path / "bench_scale.py"
    suite.write_text(textwrap.dedent(SUITE))
    added = runner.invoke(app, ["repo", "add", str(root), "--build", INSTALL, "--import-root", ".perfbisect-build",
                                "--env", "A=1", "--json"])
    assert added.exit_code == 0, added.output
    assert json.loads(added.output)["import_root"] == ".perfbisect-build"
    listed = runner.invoke(app, ["repo", "list"])
    assert listed.exit_code == 0 and "scalepkg" in listed.output and "A=1" in listed.output
    made = runner.invoke(app, ["repo", "add-set", "scalepkg", "scale", "--suite-file", str(suite),
                               "--target", "scalepkg.ops:scale", "--shape", "N=1024", "--shape", "N=4096"])
    assert made.exit_code == 0, made.output
    shown = json.loads(runner.invoke(app, ["repo", "show", "scalepkg", "--json"]).output)
    (bench_set,) = shown["benchmark_sets"]
    assert bench_set["name"] == "scale" and [c["params"] for c in bench_set["cases"]] == [{"N": 1024}, {"N": 4096}]
    assert bench_set["sources"][0]["bytes"] == len(textwrap.dedent(SUITE).encode())
    missing = runner.invoke(app, ["repo", "show", "nope"])
    assert missing.exit_code == USAGE and "no repository 'nope'" in missing.output


@pytest.mark.parametrize(("args", "message"), [
    (["--suite", "gemm", "--target", "not a target", "--shape", "M=64,N=64,K=64"],
     "target must look like module.path:function"),
    (["--suite", "gemm", "--target", "m:f", "--shape", "M=64,N=64,K=64", "--env", "NOEQUALS"],
     "--env takes KEY=VALUE"),
    (["--suite-file", "/no/such/suite.py", "--target", "m:f", "--shape", "N=1"], "cannot read --suite-file"),
    (["--target", "m:f"], "give one of --suite or --suite-file"),
    (["--suite", "gemm", "--target", "m:f"], "give --target and at least one --shape"),
    ([], "or benchmark_set"),
    (["--suite", "gemm", "--target", "m:f", "--shape", "M=64,N=64,K=64", "--import-root", "../up"],
     "import_root is a relative path inside the repository"),
])
def test_cli_bad_input_is_the_api_message(embedded, scalepkg, args, message) -> None:
    root, _ = scalepkg
    for command in (["bisect", "--good", "HEAD~1", "--bad", "HEAD"], ["compare", "--base", "HEAD~1", "--head", "HEAD"]):
        result = runner.invoke(app, [*command, "--repo", str(root), *args])
        assert result.exit_code == USAGE, result.output
        assert message in result.output and "Traceback" not in result.output


@pytest.mark.e2e
def test_measure_and_compare_with_a_suite_file(embedded, scalepkg, tmp_path: Path) -> None:
    """`measure` builds and times one revision with the outside suite; `compare` names the head's
    slowdown against its base (the target's signature is the same at both ends here)."""
    root, shas = scalepkg
    suite = tmp_path / "bench_scale.py"
    suite.write_text(textwrap.dedent(SUITE))
    common = ["--suite-file", str(suite), "--target", "scalepkg.ops:scale", "--build", INSTALL,
              "--import-root", ".perfbisect-build"]
    measured = runner.invoke(app, ["measure", "--repo", str(root), "--rev", shas[0], "--case", "N=65536",
                                   *common, "--json"])
    assert measured.exit_code == 0, measured.output
    trial = json.loads(measured.output)
    assert trial["status"] == "ok" and trial["phases"]["build"] > 0
    assert trial["cases"][0]["name"].startswith("source:bench_scale.py@")
    compared = runner.invoke(app, ["compare", "--repo", str(root), "--base", shas[2], "--head", shas[3], *common,
                                   "--shape", "N=262144", "--min-effect", "0.3", "--pr", "4", "--json"])
    assert compared.exit_code == OK, compared.output
    job = json.loads(compared.output[compared.output.index("{"):])
    assert job["kind"] == "compare" and job["outcome"]["verdict"] == "regressed"
    assert job["spec"]["pr_number"] == 4


def test_track_a_branch_with_a_suite_file_or_a_benchmark_set(embedded, scalepkg, tmp_path: Path) -> None:
    root, shas = scalepkg
    suite = tmp_path / "bench_scale.py"
    suite.write_text(textwrap.dedent(SUITE))
    neither = runner.invoke(app, ["track", "add", "--repo", str(root), "--no-start"])
    assert neither.exit_code == USAGE and "or --benchmark-set" in " ".join(neither.output.split())
    # the suite file is measured at the last two heads of main, outside the history it measures
    added = runner.invoke(app, ["track", "add", "--repo", str(root), "--suite-file", str(suite), "--target",
                                "scalepkg.ops:scale", "--shape", "N=4096", "--backfill-depth", "2", "--trials", "1",
                                "--build", INSTALL, "--import-root", ".perfbisect-build"])
    assert added.exit_code == OK, added.output
    [tracked] = json.loads(runner.invoke(app, ["track", "list", "--json"]).output)
    [case] = tracked["cases"]
    assert case["name"].startswith("source:bench_scale.py@") and case["name"].endswith(" N=4096")
    with sqlite3.connect(embedded / "perfbisect.sqlite") as db:
        measured = db.execute("SELECT r.sha FROM measurements m JOIN trials t ON t.id = m.trial_id "
                              "JOIN revisions r ON r.id = t.revision_id").fetchall()
    assert {sha for (sha,) in measured} == set(shas[-2:])
    # a benchmark set registered on the repository, on another device class's track
    made = runner.invoke(app, ["repo", "add-set", "scalepkg", "scale", "--suite-file", str(suite),
                               "--target", "scalepkg.ops:scale", "--shape", "N=1024"])
    assert made.exit_code == OK, made.output
    by_set = runner.invoke(app, ["track", "add", "--repo", "scalepkg", "--benchmark-set", "scale", "--branch", "main",
                                 "--device-class", "cuda", "--no-start"])
    assert by_set.exit_code == OK, by_set.output
    tracked = json.loads(runner.invoke(app, ["track", "list", "--json"]).output)
    assert [c["params"] for c in tracked[1]["cases"]] == [{"N": 1024}]


@pytest.mark.e2e
def test_bisect_localize_waits_for_its_localization(tmp_path: Path) -> None:
    """Embedded, `bisect --localize` follows the localization job before it exits, and its report
    carries the culprit's hunk (it used to exit after the bisect: the localization was cut off
    part-way and the report said it was still running; Liger on the H100, bench/RESULTS.md)."""
    root = tmp_path / "scalesrc"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    shas = [commit(root, {"src/scalepkg/__init__.py": "", "src/scalepkg/ops.py": FAST_FACTOR}, "initial (#1)"),
            commit(root, {"NOTES": "one"}, "notes (#2)"),
            commit(root, {"src/scalepkg/ops.py": SLOW_FACTOR, "src/scalepkg/__init__.py": '"""scalepkg."""\n'},
                   "cleanup: docstrings; scale: recompute (#3)")]
    suite = tmp_path / "bench_scale.py"
    suite.write_text(textwrap.dedent(SUITE))
    env = service_env(tmp_path / "home", None, None)
    args = ["bisect", "--repo", str(root), "--good", shas[0], "--bad", "main", "--suite-file", str(suite),
            "--target", "scalepkg.ops:scale", "--shape", "N=262144", "--import-root", "src",
            "--env", "OMP_NUM_THREADS=1", "--min-effect", "0.3", "--localize", "--evidence",
            "--policy", json.dumps({"max_time_s": 0.1, "min_samples": 5, "max_samples": 20}), "--json"]
    done = subprocess.run([str(BIN / "perfbisect"), *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == OK, done.stderr[-3000:]
    [culprit] = json.loads(done.stdout)["culprits"]
    assert culprit["last_sha"] == shas[2]
    hunk = [line for line in culprit["why"] if line.startswith(("hunk", "hunks"))]
    assert hunk and "src/scalepkg/ops.py" in hunk[0] and "__init__" not in hunk[0], culprit["why"]
    with sqlite3.connect(tmp_path / "home" / "perfbisect.sqlite") as db:
        statuses = db.execute("SELECT kind, status FROM jobs ORDER BY id").fetchall()
    assert statuses[1] == ("localize", "succeeded"), statuses


@pytest.mark.e2e
def test_show_follow_resumes_a_job_whose_embedded_process_was_killed(scalepkg, tmp_path: Path) -> None:
    """Embedded, a bisect's trials run in the CLI's own process: killed mid-job, it leaves the job
    running with a trial no one runs. `perfbisect show ID --follow` resumes it (the trial re-runs
    once its heartbeat is stale) and reports the culprit; it used to wait forever."""
    root, shas = scalepkg
    suite = tmp_path / "bench_scale.py"
    suite.write_text(textwrap.dedent(SUITE))
    env = service_env(tmp_path / "home", None, None, PERFBISECT_HEARTBEAT_TIMEOUT_S="5",
                      PERFBISECT_RECONCILE_INTERVAL_S="1")
    args = ["bisect", "--repo", str(root), "--good", shas[0], "--bad", "main", "--suite-file", str(suite),
            "--target", "scalepkg.ops:scale", "--shape", "N=262144", "--build", INSTALL,
            "--import-root", ".perfbisect-build", "--env", "OMP_NUM_THREADS=1", "--min-effect", "0.3",
            "--policy", json.dumps({"max_time_s": 0.1, "min_samples": 5, "max_samples": 20}), "--json"]
    first = subprocess.Popen([str(BIN / "perfbisect"), *args], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    database = tmp_path / "home" / "perfbisect.sqlite"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # some trials stored, the job not finished
            if database.exists():
                with sqlite3.connect(database) as db:
                    try:
                        done_trials = db.execute("SELECT count(*) FROM trials WHERE status = 'ok'").fetchone()[0]
                    except sqlite3.OperationalError:  # not migrated yet
                        done_trials = 0
                if done_trials >= 2:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("the first process stored no trial in 300 s")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    with sqlite3.connect(database) as db:
        [(status,)] = db.execute("SELECT status FROM jobs").fetchall()
    assert status in ("queued", "running")
    done = subprocess.run([str(BIN / "perfbisect"), "show", "1", "--follow", "--json"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == OK, done.stderr[-3000:]
    job = json.loads(done.stdout)
    assert job["status"] == "succeeded"
    [culprit] = job["culprits"]
    assert culprit["first_sha"] == shas[3], culprit
