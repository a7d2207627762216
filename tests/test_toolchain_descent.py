"""A toolchain bisect descends into the package's own history (issue 44): `tinyop` is a git
repository tagged 1.0 and 2.0, with a harmless commit and a real regression (the product
recomputed three times) between them; its wheels 1.0 and 2.0 are built from those tags. The host
pins it (`tinyop==1.0` in requirements.txt) and declares it as a dependency with a recipe that
builds it from source. The toolchain bisect names tinyop 2.0, then a child bisect over
tinyop's commits 1.0 .. 2.0, the host kept at the toolchain's commit and each tinyop commit built
with the recipe, names the regression: "tinyop 1.0 -> 2.0; inside it, tinyop <sha> '<subject>': -x%".

The version -> tag rules are pinned on literal values; the rounds run on PostgreSQL with the
harness's results fed in (as tests/test_descent_jobs.py); the end to end runs the CLI's embedded
worker, real trials, the recipe a real `pip install` from the placed source."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from perfbisect.cli.common import OK
from perfbisect.gitrepo import Mirror
from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.jobs import advance, views
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs.schemas import BisectCreate
from perfbisect.service.reports.culprits import culprit_table
from perfbisect.service.repos.dependencies import pin_commit
from perfbisect.service.repos.pins import tag_names
from perfbisect.service.repos.schemas import Dependency, PinLocation
from perfbisect.service.trials import service as trials
from tests.e2e_support import BIN, migrated_database, service_env, traversable_home
from tests.factories import create_repository
from tests.gitrepo import git
from tests.test_descent_jobs import commit, drive, step_of
from tests.test_job_rounds import CASE_BIG, CASE_SMALL, harness_result
from tests.test_toolchain_bisect import FAST, FAST_NOTE, OPS, suite_file, write_wheel

PYPROJECT = ('[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
             '[project]\nname = "tinyop"\nversion = "{version}"\n')
# three times the work: a step of about -65%, which the child reproduces within the minimum effect
# on the log scale (a tenfold step measured in two jobs apart can differ by more, on a busy machine)
SLOW = ("def scale(x, factor):\n    out = x * factor\n"
        "    for _ in range(2):  # the same work twice more\n        out = x * factor\n    return out\n")
# tinyop's history: (subject, module source, version in pyproject, tag)
HISTORY = [("tinyop 1.0", FAST, "1.0", "1.0"),
           ("tinyop: a docstring for scale", FAST_NOTE, "1.0", None),
           ("tinyop: recompute the product three times", SLOW, "1.0", None),
           ("tinyop 2.0", SLOW, "2.0", "2.0")]
REGRESSION = 2
RECIPE = ("{python} -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-deps --no-index "
          "--no-build-isolation --target {build_dir} {dep_dir}")
DEPENDENCY = {"name": "tinyop", "repository": "tinyop", "recipe": RECIPE,
              "pin": {"kind": "requirements", "file": "requirements.txt", "key": "tinyop"}}
HOST_BUILD = "mkdir -p {build_dir} && cp -r hostlib {build_dir}/"  # imported from .perfbisect-build, beside tinyop


def make_tinyop(path: Path, history: list[tuple[str, str, str, str | None]] = HISTORY) -> list[str]:
    """tinyop's git repository with `history`'s commits and tags; their shas."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    shas = []
    for subject, source, version, tag in history:
        shas.append(commit(path, {"tinyop/__init__.py": source, "pyproject.toml": PYPROJECT.format(version=version)},
                           subject))
        if tag:
            git(path, "tag", tag)
    return shas


def make_wheels(directory: Path, extra: dict[str, str] | None = None,
                history: list[tuple[str, str, str, str | None]] = HISTORY) -> Path:
    """A wheel of each tagged version of `history`, of its tag's source (and of `extra` versions)."""
    directory.mkdir(parents=True)
    for _subject, source, _version, tag in history:
        if tag:
            write_wheel(directory, tag, source)
    for version, source in (extra or {}).items():
        write_wheel(directory, version, source)
    return directory


def make_host(path: Path) -> str:
    (path / "hostlib").mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    return commit(path, {"hostlib/__init__.py": "", "hostlib/ops.py": OPS, "requirements.txt": "tinyop==1.0\n"},
                  "hostlib: scale through tinyop (#1)")


# -- the version -> tag rules, literal ------------------------------------------------------------

def test_a_version_goes_by_its_own_tag_then_its_v_tag_or_the_declared_pattern() -> None:
    assert tag_names("2.0") == ["2.0", "v2.0"]
    assert tag_names("2.0", "release-{version}") == ["release-2.0"]
    assert tag_names("3.1.0", "v{version}") == ["v3.1.0"]
    assert tag_names("1.0rc1", "rel/{version}-final") == ["rel/1.0rc1-final"]


def test_a_tag_pattern_must_hold_the_version_once() -> None:
    pin = {"kind": "requirements", "file": "requirements.txt", "key": "tinyop"}
    assert PinLocation.model_validate({**pin, "tag": "release-{version}"}).tag == "release-{version}"
    for bad in ("release", "{version}-{version}", "v {version}", "../{version}", "{ver}"):
        with pytest.raises(ValidationError, match="must hold {version} once"):
            PinLocation.model_validate({**pin, "tag": bad})


def test_versions_resolve_to_the_tagged_commits(tmp_path: Path) -> None:
    shas = make_tinyop(tmp_path / "tinyop")
    git(tmp_path / "tinyop", "tag", "v1.5", shas[1])
    git(tmp_path / "tinyop", "tag", "release-1.7", shas[2])
    mirror = Mirror(tmp_path / "mirrors", "tinyop", str(tmp_path / "tinyop"))
    mirror.ensure(fetch=False)  # cloned
    assert pin_commit(mirror, "1.0") == shas[0] and pin_commit(mirror, "2.0") == shas[3]
    assert pin_commit(mirror, "1.5") == shas[1]  # its v tag
    assert pin_commit(mirror, "1.7", "release-{version}") == shas[2]
    assert pin_commit(mirror, "1.7") is None and pin_commit(mirror, "1.5", "release-{version}") is None
    assert pin_commit(mirror, shas[2], "release-{version}") == shas[2]  # a commit pin stays itself


# -- the rounds on PostgreSQL, the harness's results fed in ---------------------------------------

@pytest.fixture
def histories(session, tmp_path: Path):
    tinyop = make_tinyop(tmp_path / "tinyop")
    host = make_host(tmp_path / "hostlib")
    create_repository(session, tmp_path / "tinyop", name="tinyop")
    create_repository(session, tmp_path / "hostlib", name="hostlib", build_command=HOST_BUILD,
                      import_root=".perfbisect-build", dependencies=[Dependency.model_validate(DEPENDENCY)])
    return host, tinyop


def result_of(tinyop: list[str]):
    """CASE_BIG at 0.6 where tinyop recomputes: a version from 2.0 on (its wheel), or in a descent
    a tinyop commit from the regression on (built from source)."""
    def truth(work, rng):
        if work.toolchain is not None:
            slow = work.toolchain.version in ("1.5", "2.0")
        else:
            slow = tinyop.index(work.pinned["tinyop"]) >= REGRESSION
        return harness_result({CASE_BIG: 0.6 if slow else 1.0, CASE_SMALL: 1.0}, rng, noise=0.01)
    return truth


def submit(session, wheelhouse: Path, host: str, versions: str = "tinyop==1.0,2.0", repository: str = "hostlib") -> int:
    body = BisectCreate(repository=repository, good=host, bad=host, toolchain=versions, wheelhouse=str(wheelhouse),
                        min_effect=0.1,
                        benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
                                     "shapes": ["M=256,N=256,K=256,dtype=fp32", "M=64,N=64,K=64,dtype=fp32"]}])
    return jobs.create_bisect(session, body, SYSTEM).id


def test_the_version_that_moved_is_bisected_between_its_commits(session, histories, client, tmp_path: Path) -> None:
    host, tinyop = histories
    parent_id = submit(session, make_wheels(tmp_path / "wheels"), host)
    peek = session.begin_nested()  # the parent's trial: the wheel of its version, never tinyop's declared source
    work = trials.start(session, advance.advance(session, parent_id).trial_ids[0], worker_host="test")
    assert work.toolchain.package == "tinyop" and work.dependencies == () and work.sha == host
    peek.rollback()
    children = drive(session, parent_id, result_of(tinyop))
    parent = jobs.get(session, parent_id)
    assert [c.last_sha for c in parent.culprits] == ["tinyop==2.0"] and len(children) == 1
    (entry,) = parent.result["descents"]
    assert entry == {"dependency": "tinyop", "culprit_sha": "tinyop==2.0", "label": "tinyop==2.0", "old": "1.0",
                     "new": "2.0", "other_files": [], "cases": [CASE_BIG], "toolchain": True, "job_id": children[0]}

    child = jobs.get(session, children[0])
    assert child.repository.name == "tinyop" and child.revision_shas == tinyop  # tag 1.0 .. tag 2.0, first-parent
    found = child.spec.descent
    assert (found.parent_job_id, found.level, found.host_sha, found.dependency) == (parent_id, 1, host, "tinyop")
    assert (found.old_pin, found.new_pin) == ("1.0", "2.0") and child.spec.toolchain is None
    assert child.spec.case_names() == [CASE_BIG]
    peek = session.begin_nested()
    work = trials.start(session, advance.advance(session, child.id).trial_ids[0], worker_host="test")
    assert work.repo_name == "hostlib" and work.sha == host and work.toolchain is None  # the host at its one commit
    assert work.pinned["tinyop"] in tinyop and [(d.name, d.recipe) for d in work.dependencies] == [("tinyop", RECIPE)]
    peek.rollback()

    drive(session, child.id, result_of(tinyop))
    session.expire_all()
    child = jobs.get(session, child.id)
    assert [c.last_sha for c in child.culprits] == [tinyop[REGRESSION]], (child.status, child.error)
    read = views.job_read(session, jobs.get(session, parent_id))
    (line,) = read.descent_lines
    assert line.startswith(f"{CASE_BIG}: tinyop 1.0 -> 2.0; inside it, tinyop {tinyop[REGRESSION][:7]} "
                           "'tinyop: recompute the product three times': -"), line
    assert -42 < step_of(line) < -38
    table = culprit_table(read)
    assert "first version that moves: tinyop 2.0 (after 1.0)" in table and line in table
    assert "When the culprit is a version" in table and f"child job {child.id} (succeeded): tinyop 1.0 -> 2.0" in table
    assert "inside the bump of tinyop 1.0..2.0 by tinyop==2.0" in culprit_table(views.job_read(session, child)).lower()
    page = client.get(f"/dashboard/jobs/{parent_id}", headers={"Accept": "text/html"}).text
    assert f'tinyop <code>1.0</code> -&gt; <code>2.0</code>: <a href="/dashboard/jobs/{child.id}">' in page
    api = client.get(f"/api/jobs/{parent_id}").json()
    assert api["descents"][0]["toolchain"] is True and api["descent_lines"] == [line]
    assert client.get(f"/api/jobs/{child.id}").json()["parent_job_id"] == parent_id


def _note(session, job_id: int, truth) -> str:
    assert drive(session, job_id, truth) == []
    read = views.job_read(session, jobs.get(session, job_id))
    table = culprit_table(read)
    assert read.status == "succeeded" and [c.last_sha for c in read.culprits] == [read.revision_shas[-1]], table
    (line,) = read.descent_lines
    assert line in table
    return line


def test_no_registered_repository_or_no_tag_is_a_note_not_a_failure(session, tmp_path: Path) -> None:
    tinyop = make_tinyop(tmp_path / "tinyop")
    host = make_host(tmp_path / "hostlib")
    wheels = make_wheels(tmp_path / "wheels", {"1.5": SLOW})
    create_repository(session, tmp_path / "hostlib", name="bare")  # declares nothing
    line = _note(session, submit(session, wheels, host, repository="bare"), result_of(tinyop))
    assert line == ("tinyop 1.0 -> 2.0: no descent: no repository of tinyop is registered: register it and declare "
                    "it on bare as a dependency (with the recipe that builds it from source) to bisect between the "
                    "versions' commits")
    create_repository(session, tmp_path / "tinyop", name="tinyop")
    line = _note(session, submit(session, wheels, host, repository="bare"), result_of(tinyop))
    assert line.startswith("tinyop 1.0 -> 2.0: no descent: the repository 'tinyop' is registered, but bare declares "
                           "no dependency tinyop"), line
    create_repository(session, tmp_path / "hostlib", name="hostlib",
                      dependencies=[Dependency.model_validate(DEPENDENCY)])
    line = _note(session, submit(session, wheels, host, "tinyop==1.0,1.5"), result_of(tinyop))
    assert line == ("tinyop 1.0 -> 1.5: no descent: tinyop has no tag for tinyop 1.5 (looked for 1.5, v1.5; "
                    "declare the pin's tag pattern if it differs)")


# -- end to end: the CLI's embedded worker, real trials, tinyop built from source by its recipe ----

@pytest.mark.e2e
def test_a_toolchain_bisect_descends_and_names_the_regressing_commit(tmp_path: Path) -> None:
    tinyop = make_tinyop(tmp_path / "tinyop")
    make_host(tmp_path / "hostlib")
    wheels = make_wheels(tmp_path / "wheels")
    env = service_env(traversable_home(), migrated_database("perfbisect_toolchain_descent"), None)

    def cli(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "perfbisect"), *args], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=timeout)

    assert cli("repo", "add", str(tmp_path / "tinyop"), "--name", "tinyop").returncode == OK
    added = cli("repo", "add", str(tmp_path / "hostlib"), "--name", "hostlib", "--build", HOST_BUILD, "--import-root",
                ".perfbisect-build", "--env", "OMP_NUM_THREADS=1", "--dependency", json.dumps(DEPENDENCY))
    assert added.returncode == OK, added.stdout + added.stderr
    done = cli("bisect", "--repo", "hostlib", "--good", "main", "--toolchain", "tinyop==1.0,2.0", "--wheelhouse",
               str(wheels), "--suite-file", str(suite_file(tmp_path)), "--target", "hostlib.ops:scale", "--shape",
               "N=262144", "--min-effect", "0.3",
               "--policy", json.dumps({"max_time_s": 0.1, "min_samples": 5, "max_samples": 20}), timeout=900)
    print(done.stdout)
    assert done.returncode == OK, done.stdout[-3000:] + done.stderr[-3000:]
    assert "first version that moves: tinyop 2.0 (after 1.0)" in done.stdout
    assert "tinyop 1.0 -> 2.0: bisecting between their commits, job 2" in done.stdout + done.stderr
    assert (f"tinyop 1.0 -> 2.0; inside it, tinyop {tinyop[REGRESSION][:7]} "
            "'tinyop: recompute the product three times': -") in done.stdout
    child = json.loads(cli("show", "2", "--json").stdout)
    assert [(c["first_sha"], c["last_sha"]) for c in child["culprits"]] == [(tinyop[REGRESSION], tinyop[REGRESSION])]
    import psycopg

    with psycopg.connect(env["DATABASE_URL"]) as db:  # each tinyop commit was built from source and imported
        placed = db.execute("SELECT r.sha, t.provenance FROM trials t JOIN revisions r ON r.id = t.revision_id "
                            "WHERE t.job_id = 2 AND t.status = 'ok'").fetchall()
    assert placed and {sha for sha, _ in placed} <= set(tinyop)
