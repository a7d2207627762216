"""The compiled demo (issue 45): cppkern's history (commits touching only Python, only tests or
docs, only one translation unit, and the planted loop order), the changed paths the service's
build costs read, its truth check, and a real setuptools build of the planted commit after its
parent in one slot: the tree and the compiler cache recompile only the changed unit."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from perfbisect.cli.compiled_demo import compiled_truth_check
from perfbisect.gitrepo import Mirror
from perfbisect.kernels.demo import compiled
from perfbisect.service.bisect.buildcost import touch_costs
from perfbisect.service.jobs.buildcosts import incremental
from perfbisect.service.jobs.schemas import JobRead
from perfbisect.workers.build import build_revision
from perfbisect.workers.sandbox import slot


@pytest.fixture(scope="module")
def cppkern(tmp_path_factory) -> tuple[Path, list[str], dict[str, list[str]]]:
    root = compiled.write_compiled_repo(tmp_path_factory.mktemp("demo") / "cppkern")
    mirror = Mirror(root.parent / "mirrors", "cppkern", str(root))
    mirror.ensure(fetch=True)
    shas = mirror.ensure(fetch=False).git.rev_list("--reverse", "HEAD").split()
    return root, shas, mirror.changed_paths(shas[0], shas[-1])


def kinds(paths: list[str]) -> set[str]:
    return {"cpp" if p.startswith("csrc/") else "py" if p.startswith("src/") else
            "tests" if p.startswith("tests/") else "other" for p in paths}


def test_the_history_mixes_python_tests_and_single_unit_commits_around_the_planted_loop_order(cppkern) -> None:
    root, shas, changed = cppkern
    assert len(shas) == 20
    per_commit = [changed.get(sha, []) for sha in shas[1:]]
    assert {"py"} in [kinds(p) for p in per_commit] and {"tests"} in [kinds(p) for p in per_commit]
    single_unit = [p for p in per_commit if kinds(p) == {"cpp"} and len(p) == 1]
    assert len(single_unit) >= 5
    assert changed[shas[compiled.PLANTED]] == ["csrc/reduce.cpp"]
    planted = Mirror(root.parent / "mirrors", "cppkern", str(root)).ensure(fetch=False).git.show(
        f"{shas[compiled.PLANTED]}:csrc/reduce.cpp")
    assert "for (long j = 0; j < n; ++j)    // one column at a time" in planted
    costs = touch_costs([changed.get(sha, []) for sha in shas], unit_seconds=4.0, full=20.0)
    assert costs[compiled.PLANTED] == 4.0 and costs[2] == 0.0 and costs[3] == 0.0  # ops.py, tests: free
    assert incremental(compiled.build_command(True)) and not incremental(compiled.build_command(False))


def test_the_range_leaves_most_translation_units_untouched_like_a_real_library(cppkern) -> None:
    """The ends share 10 of the 14 units' objects (the compiler cache serves them at the second
    end), and no commit after the first touches the header or setup.py (a full rebuild)."""
    root, shas, changed = cppkern
    touched = {p for sha in shas[1:] for p in changed.get(sha, [])}
    assert sorted(p for p in touched if p.startswith("csrc/")) == [
        "csrc/format.cpp", "csrc/parse.cpp", "csrc/reduce.cpp", "csrc/tables.cpp"]
    assert len(list((root / "csrc").glob("*.cpp"))) == len(compiled.UNITS) + 2 == 14  # + module.cpp, reduce.cpp


def job_with(culprits: list[tuple[int, int]], shas: list[str]) -> JobRead:
    now = datetime.now(timezone.utc)
    return JobRead.model_validate({
        "id": 1, "kind": "bisect", "status": "succeeded", "repository": "cppkern", "spec": {}, "revision_shas": shas,
        "progress": {}, "error": None, "created_at": now, "started_at": now, "finished_at": now,
        "culprits": [{"kind": "performance", "first_sha": shas[a], "last_sha": shas[b], "fixed_sha": None,
                      "exact": a == b} for a, b in culprits]})


def test_the_truth_check_names_the_planted_commit_and_false_culprits(cppkern) -> None:
    root, shas, _ = cppkern
    truth = compiled.ground_truth(shas, [f"s{i}" for i in range(len(shas))])
    assert compiled_truth_check(job_with([(9, 9)], shas), truth) == {"found": ["s9"], "missed": [], "false": []}
    check = compiled_truth_check(job_with([(4, 4)], shas), truth)
    assert check["found"] == [] and check["missed"] == ["s9"] and check["false"] == [f"{shas[4][:10]}..{shas[4][:10]}"]


@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is needed (scripts/system_packages.sh)")
def test_the_planted_commit_after_its_parent_recompiles_only_its_unit(cppkern, sandbox_home) -> None:
    root, shas, _ = cppkern
    mirror = Mirror(root.parent / "mirrors", f"cppkern-{sandbox_home.name}", str(root))
    built = []
    for sha in (shas[compiled.PLANTED - 1], shas[compiled.PLANTED]):
        with slot() as box:
            mirror.ensure(fetch=True)
            mirror.checkout(box.worktree, sha)
            box.give(box.worktree)
            built.append(build_revision(compiled.build_command(True), [], box, mirror, sha, env={}, device="cpu"))
            assert list((box.worktree / compiled.IMPORT_ROOT / "cppkern").glob("_native*.so")), built[-1].log_tail
    first, second = (b.cache["incremental"] for b in built)
    units = len(compiled.UNITS) + 2
    assert built[0].ok and built[1].ok and first["misses"] == units and first["hits"] == 0
    assert second["tree_reused"] is True and (second["hits"], second["misses"]) == (units - 1, 1)


def test_the_service_expects_each_revisions_build_from_the_commits_since_the_nearest_built_one(
        cppkern, monkeypatch) -> None:
    from types import SimpleNamespace

    from perfbisect.service.jobs.buildcosts import job_build_costs
    from perfbisect.service.settings import get_settings

    root, shas, _ = cppkern
    monkeypatch.setattr(get_settings(), "home", root.parent)  # mirrors_dir: the fixture's mirrors
    repo = SimpleNamespace(build_command=compiled.build_command(True), name="cppkern", url=str(root))
    session = SimpleNamespace(get=lambda model, key: repo)
    job = SimpleNamespace(id=1, repository_id=1, revision_shas=shas)
    trials = [SimpleNamespace(build_s=s, build_cache={"incremental": {}}, revision=SimpleNamespace(sha=shas[i]))
              for i, s in ((0, 20.0), (19, 5.0))]
    costs = job_build_costs(session, job, trials)  # a full build 20 s over 14 units
    unit = 20.0 / (len(compiled.UNITS) + 2)
    assert len(costs) == 20 and costs[0] == costs[19] == 0.0
    assert costs[2] == 0.0  # only Python and docs since revision 0
    assert costs[8] == pytest.approx(2 * unit) and costs[10] == pytest.approx(3 * unit)  # 2 units since 0; 3 either way
    assert job_build_costs(session, job, []) == ()  # nothing timed yet: unknown
    repo.build_command = compiled.build_command(False)
    assert job_build_costs(session, job, trials) == ()  # not incremental: midpoints as before


def test_plain_builds_without_compiled_is_one_line_and_exit_2() -> None:
    from typer.testing import CliRunner

    from perfbisect.cli.main import app

    done = CliRunner().invoke(app, ["demo", "--plain-builds"])
    assert done.exit_code == 2 and "--plain-builds applies to --compiled" in done.output
    assert "Traceback" not in done.output
