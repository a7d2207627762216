"""Dependencies placed by the worker (workers/deps.py), in a real sandbox slot: the tree of the
pin the revision names (or the commit a descent pins) at the declared path, its recipe run
contained like a build; a pin that is not a commit of the dependency fails the build. And the
bad declarations through the API (422, nothing registered) and the CLI (one line, exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfbisect.cli.main import app
from perfbisect.gitrepo import Mirror
from perfbisect.service.settings import get_settings
from perfbisect.service.trials.service import DependencyWork
from perfbisect.workers.build import BUILD_DIR
from perfbisect.workers.deps import PlacementError, place
from perfbisect.workers.sandbox import slot
from tests.test_cli_outcomes import embedded  # noqa: F401  (fixture)
from tests.test_descent_jobs import DEPENDENCY, make_host, make_minicc

RECIPE = "mkdir -p {build_dir} && cp -r {dep_dir}/minicc {build_dir}/ && id -u > {build_dir}/recipe_uid"


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, list[str], Path, list[str]]:
    minicc = make_minicc(tmp_path / "minicc")
    host = make_host(tmp_path / "host", minicc)
    return tmp_path / "host", host, tmp_path / "minicc", minicc


def placed_step(host_path: Path, sha: str, minicc_path: Path, pinned: dict[str, str], recipe: str | None = None):
    """Place minicc in a slot's checkout of the host at `sha`; returns (placements, STEP of the
    tree placed, STEP of the recipe's copy or None)."""
    dep = DependencyWork("minicc", "minicc-w", str(minicc_path), DEPENDENCY["pin"], "third_party/minicc", recipe)
    mirror = Mirror(get_settings().mirrors_dir.resolve(), "host-w", str(host_path))
    with slot() as box:
        mirror.ensure(fetch=True)
        mirror.checkout(box.worktree, sha)
        done = place(box, [dep], mirror, sha, box.worktree, pinned, env={})
        tree = (box.worktree / "third_party/minicc/minicc/__init__.py").read_text()
        built = box.worktree / BUILD_DIR / "minicc/__init__.py"
        copied = built.read_text() if built.exists() else None
    step = lambda text: int(text.split("STEP = ")[1]) if text else None  # noqa: E731
    return done, step(tree), step(copied)


def test_the_pin_of_each_revision_is_placed(pair) -> None:
    host_path, host, minicc_path, minicc = pair
    done, before, _ = placed_step(host_path, host[4], minicc_path, {})
    assert before == 0 and [(p.key, p.sha, p.path) for p in done] == [("minicc", minicc[0], "third_party/minicc")]
    _, after, _ = placed_step(host_path, host[5], minicc_path, {})
    assert after == 4


def test_a_descent_pins_the_dependency_and_the_recipe_runs_contained(pair) -> None:
    host_path, host, minicc_path, minicc = pair
    done, tree, copied = placed_step(host_path, host[5], minicc_path, {"minicc": minicc[2]}, RECIPE)
    assert tree == copied == 2 and done[0].sha == minicc[2]


def test_a_pin_that_is_not_a_commit_fails_the_build(pair) -> None:
    host_path, host, minicc_path, _ = pair
    with pytest.raises(PlacementError, match="the pin '0{40}' is not a commit of minicc-w"):
        placed_step(host_path, host[5], minicc_path, {"minicc": "0" * 40})


def test_a_failing_recipe_fails_the_build(pair) -> None:
    host_path, host, minicc_path, _ = pair
    with pytest.raises(PlacementError, match="dependency minicc: the recipe failed: build command exited 3"):
        placed_step(host_path, host[5], minicc_path, {}, "exit 3")


def test_the_api_refuses_a_pin_that_matches_nothing(client, pair) -> None:
    host_path, _, minicc_path, _ = pair
    assert client.post("/api/repositories", json={"name": "minicc", "url": str(minicc_path)}).status_code == 201
    bad = {**DEPENDENCY, "pin": {"kind": "json", "file": "minicc.pin", "key": "rev"}}
    response = client.post("/api/repositories", json={"name": "host", "url": str(host_path), "dependencies": [bad]})
    assert response.status_code == 422 and response.headers["content-type"].startswith("application/problem+json")
    assert "dependency minicc: the pin matches nothing at main: minicc.pin is not JSON" in response.json()["detail"]
    assert client.get("/api/repositories/host").status_code == 404
    no_key = {**DEPENDENCY, "pin": {"kind": "requirements", "file": "minicc.pin"}}
    response = client.post("/api/repositories", json={"name": "host", "url": str(host_path), "dependencies": [no_key]})
    assert response.status_code == 422 and "a requirements pin needs a key" in json.dumps(response.json()["detail"])
    good = client.post("/api/repositories", json={"name": "host", "url": str(host_path), "dependencies": [DEPENDENCY]})
    assert good.status_code == 201, good.text
    assert good.json()["dependencies"] == [{**DEPENDENCY, "path": None, "recipe": None,
                                            "pin": {**DEPENDENCY["pin"], "tag": None}}]


runner = CliRunner()


def test_the_cli_declares_dependencies_and_refuses_bad_ones(embedded, pair) -> None:  # noqa: F811
    host_path, _, minicc_path, _ = pair
    assert runner.invoke(app, ["repo", "add", str(minicc_path)]).exit_code == 0
    bad = runner.invoke(app, ["repo", "add", str(host_path), "--dependency", "minicc=assign:minicc.pin:NOPE"])
    assert bad.exit_code == 2 and 'minicc.pin has no line NOPE = "<commit>"' in bad.output, bad.output
    assert "Traceback" not in bad.output and len(bad.output.strip().splitlines()) == 1
    shape = runner.invoke(app, ["repo", "add", str(host_path), "--dependency", "minicc"])
    assert shape.exit_code == 2 and "write NAME=KIND:FILE:KEY" in shape.output
    listed = runner.invoke(app, ["repo", "list", "--json"])
    assert [r["name"] for r in json.loads(listed.output)] == ["minicc"]  # nothing half-registered
    added = runner.invoke(app, ["repo", "add", str(host_path), "--dependency", "minicc=assign:minicc.pin:REV"])
    assert added.exit_code == 0 and "dependency minicc (minicc): assign minicc.pin REV" in added.output, added.output
    # the JSON form sets where it is placed; its history's repository is NAME unless given, as above
    placed = runner.invoke(app, ["repo", "add", str(host_path), "--json", "--dependency",
                                 '{"name": "minicc", "path": "minicc", "pin": {"kind": "assign", "file": "minicc.pin", '
                                 '"key": "REV"}}'])
    assert placed.exit_code == 0, placed.output
    assert [(d["repository"], d["path"]) for d in json.loads(placed.output)["dependencies"]] == [("minicc", "minicc")]
    tagged = runner.invoke(app, ["repo", "add", str(host_path), "--dependency",
                                 '{"name": "minicc", "pin": {"kind": "assign", "file": "minicc.pin", "key": "REV", '
                                 '"tag": "release-{version}"}}'])
    assert tagged.exit_code == 0 and "assign minicc.pin REV; tags: release-{version}" in tagged.output, tagged.output
