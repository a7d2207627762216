"""The built wheel: one top-level package, `perfbisect`, that works without the checkout.

`kernels` is also the name of a popular PyPI package installed on GPU nodes, exactly where the
harness runs; installing perfbisect must not shadow it (or `service`, `workers`, ...)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# One worker builds them one after another: two builds at once share the tree's build/ folder.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("packaging")]


def source_tree(into: Path) -> Path:
    """The checkout's tracked files (as they are now) copied to `into`: a build there shares no
    build/ or egg-info folder with the checkout (where a build running beside the suite failed
    now and then) and sees what a fresh clone has."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in filter(None, files.split("\0")):
        source, target = ROOT / name, into / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    return into


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    tree = source_tree(tmp_path_factory.mktemp("tree"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                           str(out), str(tree)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    [built] = out.glob("perfbisect-*.whl")
    return built


def test_the_wheel_installs_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/", 1)[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"perfbisect"}
    # the migrations and the dashboard's assets travel with it
    assert any(n.startswith("perfbisect/migrations/versions/0001_") for n in names)
    assert "perfbisect/migrations/script.py.mako" in names
    assert any(n.startswith("perfbisect/dashboards/static/vendor/") for n in names)
    # the console script runs the top-level cli/ package, shipped as perfbisect.cli
    assert "perfbisect/cli/main.py" in names and "perfbisect/cli/common.py" in names
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "perfbisect = perfbisect.cli.main:app" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_the_installed_package_imports_from_its_own_tree(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    probe = ("import perfbisect, perfbisect.kernels.harness.runner as r, perfbisect.service.migrate as m, "
             "perfbisect.workers.tasks, perfbisect.service.api, perfbisect.cli.main; "
             "print(perfbisect.__file__); print(r.HARNESS_ROOT); print(len(list(m.MIGRATIONS_DIR.glob('versions/0*.py'))))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(target), "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    package_file, harness_root, migrations = done.stdout.split()
    assert package_file == str(target / "perfbisect" / "__init__.py")
    assert harness_root == str(target)
    assert int(migrations) == len(list((ROOT / "migrations" / "versions").glob("0*.py")))


def test_building_prints_no_setuptools_warnings(tmp_path: Path) -> None:
    """The dashboard's asset folders used to be 'absent from the packages configuration' (a
    40-line warning each) and the license a deprecated TOML table: ~300 lines before `make demo`
    printed anything of its own."""
    tree = source_tree(tmp_path / "tree")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w",
                           str(tmp_path), str(tree)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout + done.stderr
    assert "BuildBackendWarning" not in output and "SetuptoolsDeprecationWarning" not in output, output[-3000:]


def test_make_test_installs_or_reports_chromium_before_the_tests() -> None:
    done = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True)
    commands = done.stdout.splitlines()
    chromium = commands.index("bash scripts/chromium.sh")
    assert chromium < min(i for i, line in enumerate(commands) if "pytest" in line)
