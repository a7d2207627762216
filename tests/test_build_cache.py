"""The build cache (workers/buildcache.py) with real git, real sandbox slots and real build
commands: a revision that changes nothing it declares reuses the build, one that changes an
input rebuilds; failed builds, torn entries and builds that copy undeclared files are never
served; then the API, the worker-to-database path and the CLI."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfbisect.cli.common import USAGE
from perfbisect.cli.main import app
from perfbisect.gitrepo import Mirror, TreeEntry
from perfbisect.service.jobs import advance
from perfbisect.service.settings import get_settings
from perfbisect.service.trials import service as trials
from perfbisect.workers import build as build_module
from perfbisect.workers import buildcache, sandbox, slotpolicy
from perfbisect.workers.build import BUILD_DIR, BuildResult, build_revision
from perfbisect.workers.runner import execute
from perfbisect.workers.sandbox import slot
from tests.gitrepo import git
from tests.test_cli_outcomes import embedded  # noqa: F401  (fixture)

# Compiles (here: concatenates) csrc/ into the build directory and stamps the run: equal stamps
# mean the second revision got the first one's output, not a run of its own.
BUILD = ("mkdir -p {build_dir} && cat csrc/*.c > {build_dir}/kern.so "
         "&& head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \\n' > {build_dir}/stamp")
INPUTS = ["setup.py", "csrc/"]


def commit(root: Path, files: dict[str, str], subject: str) -> str:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", subject)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def extlib(tmp_path: Path) -> tuple[Path, list[str]]:
    """A library with a compiled part: revisions 0 and 1 differ only outside setup.py and csrc/
    (docs, the Python wrapper), revision 2 changes the kernel source."""
    root = tmp_path / "extlib"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    shas = [commit(root, {"setup.py": "# build the extension\n", "csrc/kern.c": "int kern(void) { return 1; }\n",
                          "src/extlib/ops.py": "SPEED = 1\n", "README": "one\n"}, "initial (#1)"),
            commit(root, {"README": "two\n", "src/extlib/ops.py": "SPEED = 2\n"}, "docs and wrapper (#2)"),
            commit(root, {"csrc/kern.c": "int kern(void) { return 2; }\n"}, "kernel: faster (#3)")]
    return root, shas


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch) -> Path:
    """This test's own build cache (the session's PERFBISECT_HOME is shared by every test)."""
    root = tmp_path / "build-cache"
    monkeypatch.setattr(build_module, "build_cache_root", lambda settings: root)
    return root


def build_at(repo: Path, sha: str, command: str, inputs: list[str], user="configured",
             then: str | None = None, dependencies: list[str] | None = None) -> tuple[BuildResult, dict[str, str]]:
    """Check `sha` out in a sandbox slot and build it as a trial does (then run `then` there as
    the trial's user); returns the build and the files of the build directory."""
    mirror = Mirror(repo.parent / "mirrors", "extlib", str(repo))
    with slot(user=user) as box:
        mirror.ensure(fetch=True)
        mirror.checkout(box.worktree, sha)
        box.give(box.worktree)
        built = build_revision(command, inputs, box, mirror, sha, env={}, device="cpu",
                               dependencies=dependencies or ())
        if then:
            box.run(then, cwd=box.worktree, env=box.env({}), timeout_s=30, memory=None)
        out = box.worktree / BUILD_DIR
        files = {str(p.relative_to(out)): p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()} if out.is_dir() else {}
    return built, files


def entries(root: Path) -> list[str]:
    """The complete-looking entries of a cache (temp directories left out)."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if not p.name.startswith(buildcache.TMP_PREFIX))


def test_unchanged_inputs_reuse_the_build_and_a_changed_input_rebuilds(extlib, cache_dir) -> None:
    repo, shas = extlib
    first, out0 = build_at(repo, shas[0], BUILD, INPUTS)
    assert first.ok and first.cache["cached"] is False and first.cache["stored"] is True, first.cache
    assert first.cache["note"].startswith("built in ")

    second, out1 = build_at(repo, shas[1], BUILD, INPUTS)  # README and src/ changed: neither is declared
    assert second.ok and second.cache["cached"] is True, second.cache
    assert out1 == out0  # the same stamp: the command did not run again
    assert second.cache["built_for"] == shas[0] and second.cache["key"] == first.cache["key"]
    assert second.cache["note"].startswith(f"cached (key {first.cache['key'][:12]}, built for {shas[0][:10]}")
    assert second.seconds < first.seconds + 1

    third, out2 = build_at(repo, shas[2], BUILD, INPUTS)  # csrc/kern.c changed
    assert third.ok and third.cache["cached"] is False and third.cache["key"] != first.cache["key"]
    assert out2["stamp"] != out0["stamp"] and "return 2" in out2["kern.so"]
    assert entries(cache_dir) == sorted([first.cache["key"], third.cache["key"]])

    other_command, _ = build_at(repo, shas[1], BUILD + " # -O3", INPUTS)  # the command is in the key
    assert other_command.cache["cached"] is False


def test_the_placed_dependencies_commits_are_in_the_key(extlib, cache_dir) -> None:
    """A repository with dependencies keeps its build cache (issue 44): the same tree with the
    same dependency commits reuses the build, the same tree with another commit of a dependency
    (a descent's probe, or a bump) builds anew."""
    repo, shas = extlib
    pinned = ["minicc=" + "a" * 40 + " at minicc", "declared 0"]
    first, out0 = build_at(repo, shas[0], BUILD, INPUTS, dependencies=pinned)
    again, out1 = build_at(repo, shas[1], BUILD, INPUTS, dependencies=pinned)  # undeclared files changed only
    assert first.cache["stored"] is True and again.cache["cached"] is True and out1 == out0
    bumped, out2 = build_at(repo, shas[1], BUILD, INPUTS, dependencies=["minicc=" + "b" * 40 + " at minicc", "declared 0"])
    assert bumped.cache["cached"] is False and bumped.cache["key"] != first.cache["key"]
    assert out2["stamp"] != out0["stamp"]
    plain, _ = build_at(repo, shas[0], BUILD, INPUTS)  # no dependencies: a key of its own
    assert plain.cache["cached"] is False and plain.cache["key"] not in (first.cache["key"], bumped.cache["key"])


def test_no_declared_inputs_means_no_cache_and_the_whole_tree_is_per_revision(extlib, cache_dir) -> None:
    repo, shas = extlib
    plain, _ = build_at(repo, shas[0], BUILD, [])
    assert plain.ok and plain.cache is None and not cache_dir.exists()
    whole = [build_at(repo, sha, BUILD, ["."]) for sha in (shas[0], shas[1], shas[0])]
    assert [b.cache["cached"] for b, _ in whole] == [False, False, True]
    assert whole[2][1] == whole[0][1]


def test_a_failed_build_is_not_cached(extlib, cache_dir) -> None:
    repo, shas = extlib
    failing = "mkdir -p {build_dir} && echo half > {build_dir}/half && exit 3"
    for _ in range(2):
        failed, _ = build_at(repo, shas[0], failing, INPUTS)
        assert not failed.ok and "exited 3" in failed.log_tail
        assert failed.cache["cached"] is False and failed.cache["stored"] is False
        assert failed.cache["note"] == "build failed: not cached"
    assert entries(cache_dir) == []


def test_a_torn_entry_is_never_served(extlib, cache_dir) -> None:
    repo, shas = extlib
    first, out0 = build_at(repo, shas[0], BUILD, INPUTS)
    key = first.cache["key"]
    # A worker killed before its rename leaves the copy under its temp name; one killed while
    # deleting (or a disk full) could leave the entry without its metadata.
    os.rename(cache_dir / key, cache_dir / f"{buildcache.TMP_PREFIX}{key}-torn")
    again, out1 = build_at(repo, shas[1], BUILD, INPUTS)
    assert again.cache["cached"] is False and again.cache["stored"] is True and out1["stamp"] != out0["stamp"]
    (cache_dir / key / buildcache.META).unlink()
    third, out2 = build_at(repo, shas[1], BUILD, INPUTS)
    assert third.cache["cached"] is False and out2["stamp"] != out1["stamp"]
    assert third.cache["stored"] is True  # the damaged entry was replaced by a complete one
    fourth, out3 = build_at(repo, shas[0], BUILD, INPUTS)
    assert fourth.cache["cached"] is True and out3 == out2


def test_a_build_that_copies_undeclared_files_is_not_cached(extlib, cache_dir) -> None:
    repo, shas = extlib
    copies = BUILD + " && mkdir -p {build_dir}/extlib && cp src/extlib/ops.py {build_dir}/extlib/"
    first, _ = build_at(repo, shas[0], copies, INPUTS)
    assert first.ok and first.cache["stored"] is False
    assert "not declared build inputs: src/extlib/ops.py; declare them" in first.cache["note"]
    second, out1 = build_at(repo, shas[1], copies, INPUTS)
    assert second.cache["cached"] is False and out1["extlib/ops.py"] == "SPEED = 2\n"  # never stale
    declared, _ = build_at(repo, shas[0], copies, [*INPUTS, "src/"])
    assert declared.cache["stored"] is True


def test_a_build_that_points_at_its_worktree_is_not_cached(extlib, cache_dir) -> None:
    repo, shas = extlib
    pinned = "mkdir -p {build_dir} && pwd > {build_dir}/extlib.pth"
    built, _ = build_at(repo, shas[0], pinned, INPUTS)
    assert built.ok and built.cache["stored"] is False and "extlib.pth names the worktree" in built.cache["note"]


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_as_root_the_sandbox_user_builds_and_gets_a_copy_it_cannot_use_to_change_the_cache(
        extlib, cache_dir, monkeypatch, sandbox_home) -> None:
    repo, shas = extlib
    nobody = slotpolicy.lookup_user("nobody")
    shared = Path(tempfile.mkdtemp(prefix="perfbisect-sandbox-"))  # pytest's tmp_path is root-only
    shared.chmod(0o755)
    monkeypatch.setattr(get_settings(), "sandbox_dir", shared)
    try:
        whoami = BUILD + " && id -u > {build_dir}/uid"
        first, out0 = build_at(repo, shas[0], whoami, INPUTS, user=nobody)
        # the trial's user writes into its (restored) build directory, as Python's .pyc files do
        second, out1 = build_at(repo, shas[1], whoami, INPUTS, user=nobody,
                                then="echo changed > .perfbisect-build/kern.so && touch .perfbisect-build/new.pyc")
    finally:
        shutil.rmtree(shared)
    slot_uid = sandbox.slot_user(nobody, 0, get_settings()).uid  # the slot's own uid, in nobody's group
    assert out0["uid"].strip() == str(slot_uid) and second.cache["cached"] is True, second.cache
    assert out1["kern.so"] == "changed\n" and "new.pyc" in out1
    cached = cache_dir / first.cache["key"] / "build"
    assert (cached / "kern.so").read_text() == out0["kern.so"] and not (cached / "new.pyc").exists()
    assert (cached / "kern.so").stat().st_uid == 0  # the worker's copy, not the sandbox user's


SPECIAL = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX


def special_or_shared_write(top: Path) -> list[str]:
    """Files and directories under `top` with a setuid, setgid or sticky bit, or writable by
    group or others."""
    found = []
    for path in [top, *top.rglob("*")]:
        mode = path.lstat().st_mode
        if not stat.S_ISLNK(mode) and mode & (SPECIAL | stat.S_IWGRP | stat.S_IWOTH):
            found.append(f"{path.relative_to(top)} {oct(stat.S_IMODE(mode))}")
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_setuid_program_built_by_a_revision_is_cached_and_restored_without_privilege(
        extlib, cache_dir, monkeypatch, sandbox_home) -> None:
    """The attack of issue 22: the build (as the sandbox user) copies a shell into its build
    directory with the setuid and setgid bits; the worker (root) caches it and restores it for
    the next revision. No copy may be a root-owned setuid program, and the cache is root's alone."""
    repo, shas = extlib
    nobody = slotpolicy.lookup_user("nobody")
    slot_uid = sandbox.slot_user(nobody, 0, get_settings()).uid  # the slot's own uid, in nobody's group
    shared = Path(tempfile.mkdtemp(prefix="perfbisect-sandbox-"))
    shared.chmod(0o755)
    monkeypatch.setattr(get_settings(), "sandbox_dir", shared)
    hostile = (BUILD + " && cp /bin/sh {build_dir}/rootsh && chmod 6755 {build_dir}/rootsh"
               " && mkdir -p {build_dir}/drop && chmod 3777 {build_dir}/drop && ln -s /etc {build_dir}/etc-link")
    try:
        first, _ = build_at(repo, shas[0], hostile, INPUTS, user=nobody)
        mirror = Mirror(repo.parent / "mirrors", "extlib", str(repo))
        with slot(user=nobody) as box:  # the next revision, as a trial gets it
            mirror.checkout(box.worktree, shas[1])
            box.give(box.worktree)
            second = build_revision(hostile, INPUTS, box, mirror, shas[1], env={}, device="cpu")
            out = box.worktree / BUILD_DIR
            restored = {p.name: p.lstat() for p in out.rglob("*")}
            owners = {p.lstat().st_uid for p in [out, *out.rglob("*")]}
            leftovers = special_or_shared_write(out)
    finally:
        shutil.rmtree(shared)
    assert first.cache["stored"] is True and second.cache["cached"] is True, (first.cache, second.cache)
    cached = cache_dir / first.cache["key"] / "build"
    assert special_or_shared_write(cached) == []
    assert (cached / "rootsh").stat().st_uid == 0 and stat.S_IMODE((cached / "rootsh").stat().st_mode) == 0o755
    assert (cached / "etc-link").is_symlink() and stat.S_IMODE(Path("/etc").stat().st_mode) == 0o755  # not followed
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    assert leftovers == [] and owners == {slot_uid}  # the slot's user's, without a special bit
    assert stat.S_IMODE(restored["rootsh"].st_mode) == 0o755 and stat.S_ISLNK(restored["etc-link"].st_mode)


def test_copies_keep_no_special_bit_and_never_follow_links(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "prog").write_text("#!/bin/sh\n")
    (out / "prog").chmod(0o6777)
    (out / "sub").chmod(0o3777)
    (out / "data").write_text("x")
    (out / "data").chmod(0o444)
    outside = tmp_path / "outside"
    outside.mkdir()
    outside.chmod(0o700)
    (out / "link").symlink_to(outside)
    os.mkfifo(out / "fifo")
    os.utime(out / "data", (1_000_000, 1_000_000))
    root = tmp_path / "cache"
    assert buildcache.store(root, "k", tmp_path, "out", {}, owner=os.geteuid()) is None
    buildcache.restore(root, "k", tmp_path, "restored")
    for copy in (root / "k" / "build", tmp_path / "restored"):
        assert special_or_shared_write(copy) == [], copy
        assert stat.S_IMODE((copy / "prog").stat().st_mode) == 0o755
        assert stat.S_IMODE((copy / "data").stat().st_mode) == 0o444
        assert (copy / "data").stat().st_mtime == 1_000_000
        assert (copy / "link").is_symlink() and os.readlink(copy / "link") == str(outside)
        assert not (copy / "fifo").exists()
    assert stat.S_IMODE(outside.stat().st_mode) == 0o700 and stat.S_IMODE(root.stat().st_mode) == 0o700


def test_matching_declared_inputs() -> None:
    assert buildcache.matches("csrc/a.cu", "csrc") and buildcache.matches("csrc/sub/b.cu", "csrc/")
    assert buildcache.matches("setup.py", "setup.py") and not buildcache.matches("setup.pyc", "setup.py")
    assert not buildcache.matches("tools/setup.py", "setup.py")
    assert buildcache.matches("src/pkg/ops/x.py", "src/*/ops")
    assert not buildcache.matches("src/pkg/opsx.py", "src/*/ops")
    assert buildcache.matches("csrc/deep/k.cu", "*.cu")  # `*` crosses '/', as in git pathspecs
    assert buildcache.matches("anything/at/all", ".")
    tree = [TreeEntry("setup.py", "a" * 40, 3), TreeEntry("csrc/k.cu", "b" * 40, 5),
            TreeEntry("docs/x.md", "c" * 40, 9)]
    assert [e.path for e in buildcache.declared_files(tree, INPUTS)] == ["csrc/k.cu", "setup.py"]


def test_store_is_first_writer_wins_and_prune_keeps_the_most_recent(tmp_path: Path) -> None:
    root, out = tmp_path / "cache", tmp_path / "out"
    out.mkdir()
    (out / "lib.so").write_text("one")
    me = os.geteuid()
    assert buildcache.store(root, "k1", tmp_path, "out", {"built_for": "a"}, owner=me) is None
    (out / "lib.so").write_text("two")
    lost = buildcache.store(root, "k1", tmp_path, "out", {"built_for": "b"}, owner=me)
    assert lost == "another worker cached this key first"
    assert (root / "k1" / "build" / "lib.so").read_text() == "one" and buildcache.lookup(root, "k1")["built_for"] == "a"
    for i, key in enumerate(("k2", "k3")):
        buildcache.store(root, key, tmp_path, "out", {}, owner=me)
        os.utime(root / key, (time.time() + i + 1,) * 2)
    stale = root / f"{buildcache.TMP_PREFIX}k9-old"
    fresh = root / f"{buildcache.TMP_PREFIX}k9-copying"
    stale.mkdir()
    fresh.mkdir()
    os.utime(stale, (time.time() - buildcache.STALE_TMP_S - 60,) * 2)
    assert buildcache.prune(root, keep=1, protect="k1") == ["k2"]
    assert entries(root) == ["k1", "k3"] and not stale.exists() and fresh.exists()


# The API, the worker and the database together.

def test_api_stores_validates_and_shows_build_inputs(client, extlib) -> None:
    repo, _ = extlib
    body = {"name": "extlib", "url": str(repo), "build_command": BUILD}
    for inputs, message in [
        (["/etc/passwd"], "must be relative to the repository root"),
        (["csrc/../../etc"], "must stay inside the repository (no '..')"),
        (["csrc\\kern.c"], "String should match pattern"),
        ([" csrc"], "must not start or end with white space"),
        (["x" * 201], "at most 200 characters"),
        (["f"] * 65, "at most 64 items"),
        ([""], "at least 1 character"),
    ]:
        response = client.post("/api/repositories", json={**body, "build_inputs": inputs})
        assert response.status_code == 422 and message in response.text, (inputs, response.text)
    no_command = client.post("/api/repositories", json={"name": "extlib", "url": str(repo), "build_inputs": ["csrc"]})
    assert no_command.status_code == 422 and "give a build_command too" in no_command.text
    created = client.post("/api/repositories", json={**body, "build_inputs": ["./setup.py", "csrc/", "setup.py"]})
    assert created.status_code == 201, created.text
    assert client.get("/api/repositories/extlib").json()["build_inputs"] == ["setup.py", "csrc/"]


def test_trials_record_what_the_build_cache_did(client, session, extlib, cache_dir, tmp_path) -> None:
    """Two trials of revisions that differ only outside the inputs: the first builds, the second
    is served from the cache, and the trials API and the job page say so."""
    repo, shas = extlib
    created = client.post("/api/repositories", json={"name": "extlib", "url": str(repo), "build_command": BUILD,
                                                      "build_inputs": INPUTS})
    assert created.status_code == 201, created.text
    job = client.post("/api/jobs/compare", json={"repository": "extlib", "base": shas[0], "head": shas[1],
                                                 "benchmarks": [{"suite": "gemm", "target": "extlib.ops:matmul",
                                                                 "shapes": ["M=64,N=64,K=64,dtype=fp32"]}]})
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    trial_ids = advance.advance(session, job_id).trial_ids
    works = {}
    for trial_id in trial_ids:
        work = trials.start(session, trial_id, worker_host="test")
        works.setdefault(work.sha, work)
    assert set(works) == {shas[0], shas[1]} and works[shas[0]].build_inputs == ("setup.py", "csrc/")
    for sha in (shas[0], shas[1]):
        work = works[sha]
        result, build_s = execute(work)
        trials.record(session, work.trial_id, result, build_s=build_s, attempt=work.attempt)
    listed = {t["sha"]: t for t in client.get(f"/api/jobs/{job_id}/trials").json() if t["status"] != "running"}
    built, served = listed[shas[0]]["build_cache"], listed[shas[1]]["build_cache"]
    assert built["cached"] is False and built["stored"] is True, built
    assert served["cached"] is True and served["built_for"] == shas[0], served
    assert listed[shas[1]]["phases"]["build"] == pytest.approx(listed[shas[1]]["build_s"], abs=1e-3)
    page = client.get(f"/dashboard/jobs/{job_id}")
    assert page.status_code == 200 and "Builds: 1 built (1 stored), 1 from the build cache." in page.text


# The CLI, on its embedded database.

runner = CliRunner()


def test_cli_repo_add_and_show_build_inputs(embedded, extlib) -> None:  # noqa: F811
    repo, _ = extlib
    bad = runner.invoke(app, ["repo", "add", str(repo), "--build", BUILD, "--build-input", "/abs/path"])
    assert bad.exit_code == USAGE and "must be relative to the repository root" in bad.output, bad.output
    up = runner.invoke(app, ["repo", "add", str(repo), "--build-input", "csrc"])
    assert up.exit_code == USAGE and "give a build_command too" in up.output, up.output
    added = runner.invoke(app, ["repo", "add", str(repo), "--build", BUILD, "--build-input", "setup.py",
                                "--build-input", "csrc/", "--json"])
    assert added.exit_code == 0, added.output
    assert json.loads(added.output)["build_inputs"] == ["setup.py", "csrc/"]
    shown = runner.invoke(app, ["repo", "show", "extlib"])
    assert shown.exit_code == 0 and "build inputs" in shown.output and "setup.py, csrc/" in shown.output
    kept = runner.invoke(app, ["repo", "add", str(repo), "--import-root", "src", "--json"])  # inputs stay declared
    assert kept.exit_code == 0 and json.loads(kept.output)["build_inputs"] == ["setup.py", "csrc/"], kept.output
