"""The toolchain axis end to end (issue 44): a tiny pure-Python package `tinyop`, built here as
wheels of four versions (2.0 recomputes its result thirty times over: a real code change, no
sleep), a host repository whose kernel calls it, and a toolchain bisect over the versions at one
commit of the host, on PostgreSQL with the CLI's embedded worker: it names tinyop==2.0. And the bad
inputs: 422 through the API and exit 2 through the CLI, nothing written."""

from __future__ import annotations

import base64
import hashlib
import json
import random
import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfbisect.cli.common import OK, USAGE
from perfbisect.cli.main import app
from tests.e2e_support import BIN, migrated_database, service_env, traversable_home
from tests.gitrepo import git
from tests.test_cli_outcomes import embedded  # noqa: F401  (fixture)

FAST = "def scale(x, factor):\n    return x * factor\n"
FAST_NOTE = "# 1.1: a docstring, nothing else\ndef scale(x, factor):\n    \"\"\"x times factor.\"\"\"\n    return x * factor\n"
SLOW = ("def scale(x, factor):\n    out = x * factor\n"
        "    for _ in range(30):  # 2.0: the same work thirty times over\n        out = x * factor\n    return out\n")
SLOW_NOTE = "# 2.1: a comment, nothing else\n" + SLOW
VERSIONS = {"1.0": FAST, "1.1": FAST_NOTE, "2.0": SLOW, "2.1": SLOW_NOTE}
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
        return fn(inputs[0])
"""
OPS = "import tinyop\n\n\ndef scale(x):\n    return tinyop.scale(x, 2.0)\n"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(directory: Path, version: str, source: str, package: str = "tinyop") -> Path:
    """A pure-Python wheel of `package` at `version` whose module is `source` (what `pip wheel`
    makes of a one-module project, written with zipfile: no network, no build backend)."""
    info = f"{package}-{version}.dist-info"
    files = {f"{package}/__init__.py": source.encode(),
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: perfbisect-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             f"{info}/top_level.txt": f"{package}\n".encode()}
    record = "\n".join([*(_record_line(n, d) for n, d in files.items()), f"{info}/RECORD,,"]) + "\n"
    path = directory / f"{package}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{info}/RECORD", record)
    return path


@pytest.fixture
def wheelhouse(tmp_path: Path) -> Path:
    directory = tmp_path / "wheelhouse"
    directory.mkdir()
    for version, source in VERSIONS.items():
        write_wheel(directory, version, source)
    return directory


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, list[str]]:
    """A repository whose kernel calls tinyop; two commits (a range for the bad-input case)."""
    root = tmp_path / "hostlib"
    (root / "hostlib").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "hostlib/__init__.py").write_text("")
    (root / "hostlib/ops.py").write_text(OPS)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "hostlib: scale through tinyop (#1)")
    first = git(root, "rev-parse", "HEAD")
    (root / "NOTES").write_text("notes\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "notes (#2)")
    return root, [first, git(root, "rev-parse", "HEAD")]


def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "bench_tinyop.py"
    path.write_text(textwrap.dedent(SUITE))
    return path


@pytest.mark.e2e
def test_a_toolchain_bisect_names_the_planted_version(wheelhouse, host, tmp_path: Path) -> None:
    root, shas = host
    env = service_env(traversable_home(), migrated_database("perfbisect_toolchain"), None)
    args = ["bisect", "--repo", str(root), "--good", "main", "--toolchain", "tinyop==1.0,1.1,2.0,2.1",
            "--wheelhouse", str(wheelhouse), "--suite-file", str(suite_file(tmp_path)), "--target",
            "hostlib.ops:scale", "--shape", "N=262144", "--env", "OMP_NUM_THREADS=1", "--min-effect", "0.3",
            "--policy", json.dumps({"max_time_s": 0.1, "min_samples": 5, "max_samples": 20})]
    done = subprocess.run([str(BIN / "perfbisect"), *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=900)
    print(done.stdout)
    assert done.returncode == OK, done.stdout[-3000:] + done.stderr[-3000:]
    assert "toolchain tinyop at " + shas[1][:10] in done.stdout
    shown = subprocess.run([str(BIN / "perfbisect"), "show", "1", "--json"], env=env, capture_output=True,
                           text=True, timeout=120)
    job = json.loads(shown.stdout)
    [culprit] = job["culprits"]
    assert (culprit["first_sha"], culprit["last_sha"]) == ("tinyop==2.0", "tinyop==2.0"), culprit
    assert job["spec"]["toolchain"] == {"package": "tinyop", "versions": ["1.0", "1.1", "2.0", "2.1"],
                                        "wheelhouse": str(wheelhouse), "commit": shas[1]}
    assert job["revision_shas"] == ["tinyop==1.0", "tinyop==1.1", "tinyop==2.0", "tinyop==2.1"]
    assert next(iter(culprit["effects"].values()))["rel"] < -0.3
    # every trial ran the host's one commit with its version installed, recorded in its environment
    import psycopg

    with psycopg.connect(env["DATABASE_URL"]) as db:
        rows = db.execute("SELECT r.sha, t.provenance -> 'toolchain', t.fingerprint FROM trials t "
                          "JOIN revisions r ON r.id = t.revision_id WHERE t.status = 'ok'").fetchall()
        points = db.execute("SELECT count(*) FROM case_points").fetchone()[0]
    assert rows and all(tool["version"] == sha.split("==")[1] and tool["wheel"].startswith(f"tinyop-{tool['version']}-")
                        for sha, tool, _ in rows)
    fingerprints = {sha: {fp for s, _, fp in rows if s == sha} for sha, _, _ in rows}
    assert all(len(fps) == 1 for fps in fingerprints.values()), fingerprints  # one per version, however installed
    assert len({fp for fps in fingerprints.values() for fp in fps}) == len(fingerprints)  # the version is in it
    assert points == 0  # versions are not points of the repository's history


def test_a_toolchain_job_plans_versions_and_reports_the_first_that_moves(client, submit_client, session, wheelhouse,
                                                                        host) -> None:
    """Through the API and the service's rounds (advance, start, record, the harness's results fed
    in as the worker returns them): every trial runs the one commit with its revision's version,
    records it, and the job, its report and its page name tinyop==2.0."""
    from perfbisect.service.jobs import advance
    from perfbisect.service.trials import service as trials
    from tests.test_job_rounds import CASE_BIG, harness_result

    root, shas = host
    assert client.post("/api/repositories", json={"name": "hostlib", "url": str(root)}).status_code == 201
    body = {"repository": "hostlib", "good": shas[1], "bad": shas[1], "toolchain": "tinyop>=1.0",
            "wheelhouse": str(wheelhouse), "benchmarks": [{"suite": "gemm", "target": "minikern.gemm:matmul",
                                                            "shapes": ["M=256,N=256,K=256,dtype=fp32"]}]}
    refused = submit_client.post("/api/jobs/bisect", json=body)
    assert refused.status_code == 403 and "needs the admin scope" in refused.text  # a wheel is code that runs
    accepted = client.post("/api/jobs/bisect", json=body)
    assert accepted.status_code == 202, accepted.text
    job_id = accepted.json()["id"]
    rng, seen = random.Random(5), []
    for _ in range(40):
        trial_ids = advance.advance(session, job_id).trial_ids
        session.flush()
        if not trial_ids:
            break
        for trial_id in trial_ids:
            work = trials.start(session, trial_id, worker_host="test")
            assert work.sha == shas[1] and work.build_inputs == ()  # the one commit, no build cache
            version = work.toolchain.version
            seen.append(version)
            result = harness_result({CASE_BIG: 0.6 if version >= "2.0" else 1.0}, rng)
            installed = "cached" if seen.count(version) > 1 else "installed"  # as the worker says it
            tool = {"package": "tinyop", "version": version, "sha256": version * 8, "environment": installed}
            trials.record(session, trial_id, {**result, "toolchain": tool}, build_s=0.0)
    job = client.get(f"/api/jobs/{job_id}").json()
    assert job["status"] == "succeeded" and set(seen) <= {"1.0", "1.1", "2.0", "2.1"}
    assert job["revision_shas"] == ["tinyop==1.0", "tinyop==1.1", "tinyop==2.0", "tinyop==2.1"]
    assert [(c["first_sha"], c["last_sha"]) for c in job["culprits"]] == [("tinyop==2.0", "tinyop==2.0")]
    assert job["spec"]["toolchain"]["commit"] == shas[1] and job["spec"].get("descend", True)  # into its commits
    trials_read = client.get(f"/api/jobs/{job_id}/trials").json()
    by_version = {t["sha"]: {u["fingerprint"] for u in trials_read if u["sha"] == t["sha"]} for t in trials_read}
    assert all(len(fps) == 1 for fps in by_version.values())  # installed or served from the cache: one fingerprint
    assert len({fp for fps in by_version.values() for fp in fps}) == len(by_version)  # the version is in it
    report = client.get(f"/api/jobs/{job_id}/report").text
    assert f"toolchain tinyop at {shas[1][:10]}: versions 1.0, 1.1, 2.0, 2.1" in report
    assert "first version that moves: tinyop 2.0 (after 1.1)" in report and "at tinyop==2.0" in report
    assert "tinyop 1.1 -> 2.0: no descent: no repository of tinyop is registered" in report  # hostlib declares none
    markdown = client.get(f"/api/jobs/{job_id}/report?format=markdown").text
    assert "first version that moves: tinyop 2.0 (after 1.1)" in markdown and "`tinyop==2.0`" in markdown
    page = client.get(f"/dashboard/jobs/{job_id}", headers={"Accept": "text/html"}).text
    assert "Toolchain bisect: tinyop at" in page and "<code>2.1</code>" in page and "at <code>tinyop==2.0</code>" in page


def test_a_toolchain_job_whose_ref_needs_a_fetch_is_resolved_by_its_task(client, session, wheelhouse, host,
                                                                         monkeypatch) -> None:
    """A ref the mirror cannot answer exactly is resolved by the job's first task, as a range is:
    the versions become its revisions at the commit; a `bad` that names another commit fails it."""
    from perfbisect.service.jobs import resolution
    from perfbisect.service.settings import get_settings

    root, shas = host
    assert client.post("/api/repositories", json={"name": "hostlib", "url": str(root)}).status_code == 201
    monkeypatch.setattr(get_settings(), "mirror_fresh_s", 0.0)  # as if the last fetch were old
    body = {"repository": "hostlib", "good": "main", "bad": "main", "toolchain": "tinyop==1.0,2.0",
            "wheelhouse": str(wheelhouse), "benchmarks": [{"suite": "gemm", "target": "minikern.gemm:matmul",
                                                            "shapes": ["M=64,N=64,K=64,dtype=fp32"]}]}
    later = client.post("/api/jobs/bisect", json=body)
    apart = client.post("/api/jobs/bisect", json={**body, "good": "main~1"})
    assert later.status_code == apart.status_code == 202 and later.json()["revisions"] == 0
    for response in (later, apart):
        target = resolution.fetch_target(session, response.json()["id"])
        resolution.finish(session, response.json()["id"], target.mirror.fetch_once(target.since, 30))
    resolved = client.get(later.json()["url"]).json()
    assert resolved["status"] == "queued" and resolved["revision_shas"] == ["tinyop==1.0", "tinyop==2.0"]
    assert resolved["spec"]["toolchain"]["commit"] == shas[1] and resolved["spec"]["bad_sha"] == "tinyop==2.0"
    failed = client.get(apart.json()["url"]).json()
    assert failed["status"] == "failed" and "a toolchain bisect measures one commit" in failed["error"]


runner = CliRunner()


def test_the_api_refuses_bad_toolchain_input(client, wheelhouse, host, tmp_path: Path) -> None:
    root, shas = host
    assert client.post("/api/repositories", json={"name": "hostlib", "url": str(root)}).status_code == 201
    base = {"repository": "hostlib", "good": shas[1], "bad": shas[1], "suite": "file:bench.py",
            "target": "hostlib.ops:scale", "shapes": [{"N": 1024}], "wheelhouse": str(wheelhouse)}
    cases = [
        ({"toolchain": "tinyop==1.0,1.5"}, "has no wheel of tinyop 1.5 (it has: 1.0, 1.1, 2.0, 2.1)"),
        ({"toolchain": "tinyop~~1"}, "is neither ==V1,V2,... nor a version range"),
        ({"toolchain": "tinyop==1.0"}, "needs two versions or more"),
        ({"toolchain": "tinyop>=2.1"}, "has 1 version(s) of tinyop>=2.1 (2.1)"),
        ({"toolchain": "tinyop==1.0,2.0", "good": shas[0]}, "a toolchain bisect measures one commit"),
        ({"toolchain": "tinyop==1.0,2.0", "wheelhouse": str(tmp_path / "nowhere")}, "No such file or directory"),
        ({"toolchain": "tinyop==1.0,2.0", "wheelhouse": None}, "toolchain and wheelhouse go together"),
        ({"toolchain": "tinyop==1.0,2.0", "localize": True}, "localize does not apply"),
    ]
    for change, message in cases:
        response = client.post("/api/jobs/bisect", json={**base, **change})
        assert response.status_code == 422, (change, response.text)
        assert message in json.dumps(response.json()), (change, response.text)
    assert client.get("/api/jobs").json() == []  # nothing written


def test_the_cli_refuses_bad_toolchain_input(embedded, wheelhouse, host, tmp_path: Path) -> None:  # noqa: F811
    root, shas = host
    common = ["bisect", "--repo", str(root), "--suite-file", str(suite_file(tmp_path)), "--target",
              "hostlib.ops:scale", "--shape", "N=1024", "--wheelhouse", str(wheelhouse)]
    for extra, message in [
        (["--good", "main", "--toolchain", "tinyop==1.0,9.9"], "has no wheel of tinyop 9.9"),
        (["--good", "main", "--toolchain", "tinyop=1.0"], "is neither ==V1,V2,... nor a version range"),
        (["--good", shas[0], "--bad", shas[1], "--toolchain", "tinyop==1.0,2.0"], "measures one commit"),
    ]:
        result = runner.invoke(app, [*common, *extra])
        assert result.exit_code == USAGE, result.output
        assert message in result.output and "Traceback" not in result.output, result.output
    listed = runner.invoke(app, ["jobs"])
    assert "tinyop" not in listed.output and "bisect" not in listed.output, listed.output


def test_the_environment_is_cached_per_version_and_read_only_in_the_sandbox(sandbox_home, wheelhouse) -> None:
    """The worker installs a version once (pip from the wheelhouse, no index) and serves it again
    from its cache; repository code in a slot imports it but cannot change it, not even as the
    slot's own uid: it is shown read-only, and the service's home around it stays hidden."""
    import sys

    from perfbisect.kernels.harness.contain import bwrap
    from perfbisect.service.trials.service import ToolchainWork
    from perfbisect.workers import sandbox
    from perfbisect.workers.toolchains import ToolchainUnavailable, environment

    site, first = environment(ToolchainWork("tinyop", "2.0", str(wheelhouse)))
    again, second = environment(ToolchainWork("tinyop", "2.0", str(wheelhouse)))
    assert site == again and (first["environment"], second["environment"]) == ("installed", "cached")
    assert first["wheel"] == "tinyop-2.0-py3-none-any.whl" and len(first["sha256"]) == 64
    assert "range(30)" in (site / "tinyop/__init__.py").read_text()
    other, _ = environment(ToolchainWork("tinyop", "1.0", str(wheelhouse)))
    assert other != site and "range(30)" not in (other / "tinyop/__init__.py").read_text()
    with pytest.raises(ToolchainUnavailable, match="has no wheel of tinyop 9.9"):
        environment(ToolchainWork("tinyop", "9.9", str(wheelhouse)))
    args = bwrap.argv(bwrap.View(writable=("/srv/slot-0",), readonly=(str(site),), private=str(sandbox_home)))
    assert ("--ro-bind", str(site)) in list(zip(args, args[1:]))
    probe = (f"{sys.executable} -c 'import tinyop; print(\"imported\", tinyop.__file__)'; "
             f"echo planted > {site}/tinyop/__init__.py && echo wrote; ls {sandbox_home}/mirrors || echo no-home")
    with sandbox.slot() as box:
        box.worktree.mkdir()
        box.give(box.worktree)
        box.readonly = (str(site),)
        done = box.run(probe, cwd=box.worktree, env=box.env({"PYTHONPATH": str(site)}), timeout_s=60, memory=None)
    assert f"imported {site}/tinyop/__init__.py" in done.output_tail, done.output_tail
    assert "wrote" not in done.output_tail and "range(30)" in (site / "tinyop/__init__.py").read_text()
    if box.contained:
        assert "no-home" in done.output_tail, done.output_tail
