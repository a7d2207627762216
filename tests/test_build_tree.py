"""Incremental builds (workers/buildtree.py) with real git, real sandbox slots, make and ccache:
the next revision builds in the slot's tree and recompiles only what changed, the compiler cache
serves a translation unit seen before and never another repository's; the fault paths (a torn
tree, a failed build, a build that fails on a reused tree, a cache ccache cannot write, a full
disk) and the containment of the stored trees."""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from pathlib import Path

import pytest

from perfbisect.gitrepo import Mirror
from perfbisect.service.settings import get_settings
from perfbisect.service.trials.phases import build_cache_summary
from perfbisect.workers import buildtree, sandbox
from perfbisect.workers.build import BUILD_DIR, BuildResult, build_revision
from perfbisect.workers.sandbox import slot
from tests.gitrepo import git

pytestmark = pytest.mark.skipif(shutil.which("ccache") is None or shutil.which("make") is None,
                                reason="ccache and make are needed (scripts/system_packages.sh)")

MAKEFILE = """T ?= tree
O ?= out
$(O)/lib.so: $(T)/a.o $(T)/b.o
\tmkdir -p $(O) && cc -shared $^ -o $@
$(T)/%.o: csrc/%.c csrc/k.h
\tmkdir -p $(O) && echo $< >> $(O)/compiled && cc -O1 -fPIC -c $< -o $@
"""
BUILD = "make -f build.mk T={build_tree} O={build_dir}"
A1 = "#include \"k.h\"\nint a(void) { return K + 1; }\n"
A2 = "#include \"k.h\"\nint a(void) { return K + 2; }\n"


def commit(root: Path, files: dict[str, str], subject: str) -> str:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", subject)
    return git(root, "rev-parse", "HEAD")


@pytest.fixture
def clib(tmp_path: Path) -> tuple[Path, list[str]]:
    """Two translation units; revision 1 changes a.c, revision 2 puts it back as it was, revision 3
    changes only the README, revision 4 breaks a.c."""
    root = tmp_path / "clib"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    shas = [commit(root, {"build.mk": MAKEFILE, "csrc/k.h": "#define K 40\n", "csrc/a.c": A1,
                          "csrc/b.c": "int b(void) { return 2; }\n", "README": "one\n"}, "initial"),
            commit(root, {"csrc/a.c": A2}, "a: two"),
            commit(root, {"csrc/a.c": A1}, "a: back to one"),
            commit(root, {"README": "two\n"}, "docs"),
            commit(root, {"csrc/a.c": "int a(void) { return }\n"}, "a: broken")]
    return root, shas


@pytest.fixture
def home(sandbox_home) -> Path:
    """A home the slots' uids can traverse, so the builds run as the sandbox user."""
    return sandbox_home


def build(repo: Path, name: str, sha: str, command: str = BUILD) -> BuildResult:
    """Check `sha` out in a slot and build it as a trial does, the repository registered as `name`;
    the result's `compiled` lists the sources make compiled."""
    mirror = Mirror(repo.parent / "mirrors", name, str(repo))
    with slot() as box:
        mirror.ensure(fetch=True)
        mirror.checkout(box.worktree, sha)
        box.give(box.worktree)
        built = build_revision(command, [], box, mirror, sha, env={}, device="cpu")
        listed = box.worktree / BUILD_DIR / "compiled"
        COMPILED[id(built)] = sorted(listed.read_text().split()) if listed.exists() else []
        return built


COMPILED: dict[int, list[str]] = {}


def info(built: BuildResult) -> dict:
    assert built.cache is not None, built.log_tail
    return built.cache["incremental"]


def compiled(built: BuildResult) -> list[str]:
    """The sources make compiled in this build."""
    return COMPILED[id(built)]


def test_the_next_revision_reuses_the_tree_and_the_cache_serves_a_unit_seen_before(clib, home) -> None:
    repo, shas = clib
    name = f"clib-{uuid.uuid4().hex[:8]}"
    first = build(repo, name, shas[0])
    assert first.ok, first.log_tail
    assert info(first)["tree_reused"] is False and (info(first)["hits"], info(first)["misses"]) == (0, 2)
    assert compiled(first) == ["csrc/a.c", "csrc/b.c"]

    second = build(repo, name, shas[1])  # a.c changed: b.o is reused from the tree, not recompiled
    assert second.ok and info(second)["tree_reused"] is True, second.log_tail
    assert compiled(second) == ["csrc/a.c"] and (info(second)["hits"], info(second)["misses"]) == (0, 1)

    third = build(repo, name, shas[2])  # a.c as in revision 0: the compiler cache has it
    assert compiled(third) == ["csrc/a.c"] and (info(third)["hits"], info(third)["misses"]) == (1, 0)
    assert info(third)["saved_s"] >= 0 and "tree reused, ccache 1 hits / 0 misses, ~" in third.cache["note"]

    docs = build(repo, name, shas[3])  # nothing the build reads changed: nothing recompiled
    assert docs.ok and compiled(docs) == [] and (info(docs)["hits"], info(docs)["misses"]) == (0, 0)
    summary = build_cache_summary([first.cache, second.cache, third.cache, docs.cache])
    assert "compiler cache 1 hits, 3 misses" in summary, summary
    rows = dict(buildtree.totals(get_settings()))
    (store_totals,) = [t for store, t in rows.items() if store.startswith(name)]
    assert store_totals["builds"] == 4 and store_totals["hits"] == 1 and store_totals["misses"] == 3
    (line,) = [line for line in buildtree.doctor_lines(get_settings()) if name in line]
    assert "4 builds" in line and "compiler cache 1 hits / 3 misses" in line and "s of build saved" in line


def test_one_repository_never_gets_another_ones_compiled_objects(clib, home) -> None:
    repo, shas = clib
    mine, theirs = f"clib-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    assert (info(build(repo, mine, shas[0]))["hits"], 0) == (0, 0)
    other = build(repo, theirs, shas[0])  # the very same sources, another repository: no hit
    assert other.ok and info(other)["tree_reused"] is False and (info(other)["hits"], info(other)["misses"]) == (0, 2)
    stores = sorted(p.name for p in buildtree.store_root(get_settings()).iterdir())
    assert any(s.startswith(mine) for s in stores) and any(s.startswith(theirs) for s in stores)


def test_a_failed_build_discards_its_tree_and_the_next_builds_clean(clib, home) -> None:
    repo, shas = clib
    name = f"clib-{uuid.uuid4().hex[:8]}"
    assert build(repo, name, shas[0]).ok
    broken = build(repo, name, shas[4])
    assert not broken.ok and "failed on the reused build tree: retried once from an empty one" in broken.log_tail
    after = build(repo, name, shas[0])  # the broken revision's tree was not kept
    assert after.ok and info(after)["tree_reused"] is False
    assert compiled(after) == ["csrc/a.c", "csrc/b.c"] and info(after)["hits"] == 2  # the cache still serves


def test_a_build_that_fails_on_a_reused_tree_is_retried_once_from_an_empty_one(clib, home) -> None:
    repo, shas = clib
    name = f"clib-{uuid.uuid4().hex[:8]}"
    picky = "test ! -e {build_tree}/stale || exit 7; " + BUILD + " && touch {build_tree}/stale"
    assert build(repo, name, shas[0], picky).ok
    again = build(repo, name, shas[1], picky)
    assert again.ok, again.log_tail
    assert info(again)["tree_reused"] is True
    assert "failed on the reused build tree: retried once from an empty one" in info(again)["warnings"]
    assert compiled(again) == ["csrc/a.c", "csrc/b.c"]


def test_a_tree_left_half_written_by_a_killed_worker_is_not_reused(clib, home) -> None:
    repo, shas = clib
    name = f"clib-{uuid.uuid4().hex[:8]}"
    assert build(repo, name, shas[0]).ok
    (state,) = buildtree.store_root(get_settings()).glob(f"{name}-*/*/{buildtree.STATE}")
    state.unlink()  # what a worker killed between taking the tree and giving it back leaves
    after = build(repo, name, shas[1])
    assert after.ok and info(after)["tree_reused"] is False and compiled(after) == ["csrc/a.c", "csrc/b.c"]
    assert not (state.parent / "tree" / "stale").exists()


def test_a_cache_ccache_cannot_write_degrades_to_a_plain_build_with_a_warning(clib, home) -> None:
    repo, shas = clib
    name = f"clib-{uuid.uuid4().hex[:8]}"
    assert build(repo, name, shas[0]).ok
    (cache,) = buildtree.store_root(get_settings()).glob(f"{name}-*/{buildtree.CCACHE}")
    shutil.rmtree(cache / "tmp", ignore_errors=True)
    (cache / "tmp").write_text("not a directory\n")  # ccache: error: Failed to create directory .../tmp
    built = build(repo, name, shas[1])
    assert built.ok, built.log_tail
    assert any(w.startswith("compiler cache off: ccache could not use") for w in info(built)["warnings"])
    assert "hits" not in info(built) and set(compiled(built)) == {"csrc/a.c"}  # b.o still from the tree
    fresh = build(repo, name, shas[2])  # the broken cache was dropped: a new one, empty
    assert fresh.ok and info(fresh)["warnings"] == [] and (info(fresh)["hits"], info(fresh)["misses"]) == (0, 1)


def test_a_full_disk_builds_without_the_cache_and_says_so(clib, home, monkeypatch) -> None:
    repo, shas = clib
    monkeypatch.setattr(get_settings(), "build_ccache_min_free_mb", 1 << 40)
    built = build(repo, f"clib-{uuid.uuid4().hex[:8]}", shas[0])
    assert built.ok and compiled(built) == ["csrc/a.c", "csrc/b.c"]
    assert any("MiB free on its disk" in w for w in info(built)["warnings"]) and "hits" not in info(built)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_the_stored_tree_holds_no_privilege_and_no_trial_can_write_it(clib, home) -> None:
    repo, shas = clib
    name = f"clib-{uuid.uuid4().hex[:8]}"
    hostile = BUILD + " && cp /bin/sh {build_tree}/rootsh && chmod 6755 {build_tree}/rootsh && chmod 777 {build_tree}"
    built = build(repo, name, shas[0], hostile)
    assert built.ok, built.log_tail
    root = buildtree.store_root(get_settings())
    (tree,) = root.glob(f"{name}-*/*/tree")
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and stat.S_IMODE(tree.parent.parent.stat().st_mode) == 0o700
    for path in [tree, *tree.rglob("*")]:
        mode = path.lstat().st_mode
        assert stat.S_ISLNK(mode) or not mode & (stat.S_ISUID | stat.S_ISGID | stat.S_IWGRP | stat.S_IWOTH), path
    slot_uid = sandbox.slot_user(sandbox.sandbox_user(), 0, get_settings()).uid
    assert (tree / "a.o").stat().st_uid == slot_uid  # built by the sandbox user
    with slot() as box:  # a trial's command, as the slot's user: the store is out of its reach
        done = box.run(f"touch {tree}/a.o || echo refused", cwd=box.path, env=box.env({}), timeout_s=30, memory=None)
    assert "refused" in done.output_tail


def test_a_build_that_recompiled_everything_saved_nothing(tmp_path):
    """A reused tree whose build hit nothing and compiled as many units as the cold build (a
    setuptools build of one changed unit, msgspec's) saved nothing, even when a quieter machine
    made it faster; fewer units compiled, or a hit, is a saving against the cold build."""
    from perfbisect.workers.buildtree import record

    assert record(tmp_path, 60.0, reused=False, stats={"hits": 0, "misses": 1}) == {"hits": 0, "misses": 1,
                                                                                   "saved_s": 0.0}
    assert record(tmp_path, 13.0, reused=True, stats={"hits": 0, "misses": 1})["saved_s"] == 0.0
    assert record(tmp_path, 1.0, reused=True, stats={"hits": 1, "misses": 0})["saved_s"] == 59.0
    (tmp_path / "x").mkdir()
    assert record(tmp_path / "x", 100.0, reused=False, stats={"hits": 0, "misses": 5})["saved_s"] == 0.0
    assert record(tmp_path / "x", 30.0, reused=True, stats={"hits": 0, "misses": 2})["saved_s"] == 70.0  # make/Ninja
