"""Descent into a dependency bump on the real PostgreSQL, the harness's results fed in directly
(like tests/test_attribution_job.py): a host repository pins `minicc` in `minicc.pin`
(`REV = "..."`); its commit #945 bumps the pin over a range of minicc holding one harmless
change and one regression. The host's bisect names #945, starts a child bisect over minicc's
range with the host kept at #945, and the child names minicc's culprit: the report gives the chain.
Registration refuses a pin that matches nothing, a pin that is not a commit of the dependency,
an unregistered dependency repository and an unregistered submodule URL, writing nothing."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from perfbisect.service.auth.principal import SYSTEM
from perfbisect.service.errors import BadRequest
from perfbisect.service.jobs import advance, views
from perfbisect.service.jobs import service as jobs
from perfbisect.service.jobs.schemas import BisectCreate
from perfbisect.service.models import Repository
from perfbisect.service.reports.culprits import culprit_table
from perfbisect.service.repos import repository as repos_repo
from perfbisect.service.repos.schemas import Dependency
from perfbisect.service.trials import service as trials
from tests.factories import create_repository
from tests.gitrepo import git
from tests.test_job_rounds import CASE_BIG, CASE_SMALL, harness_result

MINICC = ["minicc: first", "minicc: tidy docs", "minicc: rename a helper", "drop fastmath", "minicc: more docs"]
REGRESSION = 3  # minicc's commit that costs CASE_BIG 30%
DEPENDENCY = {"name": "minicc", "repository": "minicc", "pin": {"kind": "assign", "file": "minicc.pin", "key": "REV"}}


def commit(path: Path, files: dict[str, str], subject: str) -> str:
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", subject)
    return git(path, "rev-parse", "HEAD")


def make_minicc(path: Path) -> list[str]:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    return [commit(path, {"minicc/__init__.py": f"FASTMATH = {i < REGRESSION}\nSTEP = {i}\n"}, subject)
            for i, subject in enumerate(MINICC)]


def make_host(path: Path, minicc: list[str]) -> list[str]:
    """Nine commits; #945 (index 5) bumps minicc from its first commit to its last."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    shas = []
    for i in range(9):
        pin = minicc[-1] if i >= 5 else minicc[0]
        subject = "bump minicc (#945)" if i == 5 else f"host change {i} (#{930 + i})"
        files = {"minicc.pin": f'# the code generator\nREV = "{pin}"\n', "history.txt": f"{i}\n"}
        if i == 5:
            files["tests/test_minicc.py"] = "# follows the bump\n"
        shas.append(commit(path, files, subject))
    return shas


@pytest.fixture
def histories(session, tmp_path: Path):
    minicc = make_minicc(tmp_path / "minicc")
    host = make_host(tmp_path / "host", minicc)
    create_repository(session, tmp_path / "minicc", name="minicc")
    create_repository(session, tmp_path / "host", name="host", dependencies=[Dependency.model_validate(DEPENDENCY)])
    return host, minicc


def result_of(host: list[str], minicc: list[str]):
    """CASE_BIG at 0.7 when the minicc placed holds the regression: the pin of the host's commit,
    or the commit a descent pins."""
    def truth(work, rng):
        placed = work.pinned.get("minicc") or (minicc[-1] if host.index(work.sha) >= 5 else minicc[0])
        return harness_result({CASE_BIG: 0.7 if minicc.index(placed) >= REGRESSION else 1.0, CASE_SMALL: 1.0}, rng,
                              noise=0.01)
    return truth


def drive(session, job_id: int, truth) -> list[int]:
    """advance -> start -> record like the tasks do; returns the child jobs the last round started."""
    rng = random.Random(5)
    for _ in range(60):
        planned = advance.advance(session, job_id)
        session.flush()
        if not planned.trial_ids:
            return planned.children
        for trial_id in planned.trial_ids:
            work = trials.start(session, trial_id, worker_host="test")
            if work is not None:
                trials.record(session, trial_id, truth(work, rng), build_s=0.0)
    raise AssertionError("job did not finish")


def step_of(line: str) -> float:
    """The percent step at the end of a chain line ("...: -29.8% [-30.7%, -29.0%]")."""
    return float(line.rsplit("': ", 1)[1].split("%")[0])


def submit(session) -> int:
    body = BisectCreate(repository="host", good="HEAD~8", bad="main",
                        benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
                                     "shapes": ["M=256,N=256,K=256,dtype=fp32", "M=64,N=64,K=64,dtype=fp32"]}])
    return jobs.create_bisect(session, body, SYSTEM).id


def test_a_bump_is_descended_and_the_dependency_culprit_named(session, histories, client) -> None:
    host, minicc = histories
    parent_id = submit(session)
    children = drive(session, parent_id, result_of(host, minicc))
    parent = jobs.get(session, parent_id)
    assert [c.last_sha for c in parent.culprits] == [host[5]]
    assert len(children) == 1, (parent.result.get('descents'), parent.repository.dependencies, [(c.first_sha, c.last_sha, c.kind) for c in parent.culprits])
    (entry,) = parent.result["descents"]
    assert entry == {"dependency": "minicc", "culprit_sha": host[5], "old": minicc[0], "new": minicc[-1],
                     "other_files": ["history.txt", "tests/test_minicc.py"], "cases": [CASE_BIG], "label": "#945",
                     "job_id": children[0]}

    child = jobs.get(session, children[0])
    assert child.repository.name == "minicc" and child.revision_shas == minicc  # first-parent, old pin .. new pin
    found = child.spec.descent
    assert (found.parent_job_id, found.level, found.host_sha, found.dependency) == (parent_id, 1, host[5], "minicc")
    assert child.spec.attribute is False
    assert child.spec.case_names() == [CASE_BIG]  # only the case the bump moved

    peek = session.begin_nested()  # a look at the first trial's work, undone: the child is driven from the start
    first = advance.advance(session, child.id)
    work = trials.start(session, first.trial_ids[0], worker_host="test")
    assert work.repo_name == "host" and work.sha == host[5]  # the host at its culprit
    assert work.pinned["minicc"] in minicc and [d.name for d in work.dependencies] == ["minicc"]
    assert work.build_inputs == ()  # the build cache keys the host's tree alone: not with a dependency placed
    peek.rollback()

    drive(session, child.id, result_of(host, minicc))
    session.expire_all()  # read back as a new request would
    child = jobs.get(session, child.id)
    assert [c.last_sha for c in child.culprits] == [minicc[REGRESSION]], (child.status, child.error, child.result)
    read = views.job_read(session, jobs.get(session, parent_id))
    assert read.descents[0].job_id == child.id and read.descents[0].status == child.status.value
    (line,) = read.descent_lines  # CASE_SMALL did not move: only CASE_BIG's chain
    assert line.startswith(f"{CASE_BIG}: #945 bumps minicc {minicc[0][:7]}..{minicc[-1][:7]}; inside it, minicc "
                           f"{minicc[REGRESSION][:7]} 'drop fastmath': -")
    assert -32 < step_of(line) < -28
    assert "When the culprit is a bump" in culprit_table(read) and line in culprit_table(read)
    child_read = views.job_read(session, child)
    assert child_read.parent_job_id == parent_id
    assert f"of job {parent_id} (level 1" in culprit_table(child_read)
    page = client.get(f"/dashboard/jobs/{parent_id}", headers={"Accept": "text/html"}).text
    assert "When the culprit is a bump" in page and f'<a href="/dashboard/jobs/{child.id}">bisect #{child.id}</a>' in page
    page = client.get(f"/dashboard/jobs/{child.id}", headers={"Accept": "text/html"}).text
    assert f'<a href="/dashboard/jobs/{parent_id}">bisect #{parent_id}</a> (level 1)' in page
    api = client.get(f"/api/jobs/{parent_id}").json()
    assert api["descents"][0]["url"] == f"/api/jobs/{child.id}" and api["descent_lines"] == [line]
    assert client.get(f"/api/jobs/{child.id}").json()["parent_job_id"] == parent_id


def test_no_descent_when_asked_not_to(session, histories) -> None:
    host, minicc = histories
    body = BisectCreate(repository="host", good="HEAD~8", bad="main", descend=False,
                        benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
                                     "shapes": ["M=256,N=256,K=256,dtype=fp32"]}])
    job_id = jobs.create_bisect(session, body, SYSTEM).id
    assert drive(session, job_id, result_of(host, minicc)) == []
    assert "descents" not in jobs.get(session, job_id).result


def _refused(session, path: Path, words: str, **kw) -> None:
    before = session.query(Repository).count()
    with pytest.raises(BadRequest, match=words):
        create_repository(session, path, name="host2", **kw)
    assert session.query(Repository).count() == before and repos_repo.get_by_name(session, "host2") is None


def test_bad_declarations_are_refused(session, histories, tmp_path: Path) -> None:
    path = tmp_path / "host"
    wrong_key = {**DEPENDENCY, "pin": {"kind": "assign", "file": "minicc.pin", "key": "MINICC_REV"}}
    _refused(session, path, 'the pin matches nothing at main: minicc.pin has no line MINICC_REV = "<commit>"',
             dependencies=[Dependency.model_validate(wrong_key)])
    no_file = {**DEPENDENCY, "pin": {"kind": "json", "file": "deps.json", "key": "minicc"}}
    _refused(session, path, "the pin matches nothing at main: deps.json is not in",
             dependencies=[Dependency.model_validate(no_file)])
    _refused(session, path, "dependency repository 'nope' is not registered",
             dependencies=[Dependency.model_validate({**DEPENDENCY, "repository": "nope"})])
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    commit(other, {"x.txt": "x"}, "unrelated")
    create_repository(session, other, name="other")
    _refused(session, path, "the pin '[0-9a-f]{40}' at main is not a commit of the registered repository other",
             dependencies=[Dependency.model_validate({**DEPENDENCY, "repository": "other"})])


def test_submodules_need_no_declaration_but_a_registered_url(session, histories, tmp_path: Path) -> None:
    host, minicc = histories
    sub = tmp_path / "subhost"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main")
    commit(sub, {"a.txt": "a"}, "first")
    git(sub, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(tmp_path / "minicc"), "third_party/minicc")
    git(sub, "commit", "-q", "-m", "add minicc")
    repo = create_repository(session, sub, name="subhost")
    assert repo.dependencies == [{"name": "minicc", "repository": "minicc",
                                  "pin": {"kind": "submodule", "file": "third_party/minicc"}}]

    lone = tmp_path / "lonely"
    lone.mkdir()
    git(lone, "init", "-q", "-b", "main")
    commit(lone, {"b.txt": "b"}, "first")
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    git(stranger, "init", "-q", "-b", "main")
    commit(stranger, {"s.txt": "s"}, "first")
    git(lone, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(stranger), "vendor/stranger")
    git(lone, "commit", "-q", "-m", "add stranger")
    _refused(session, lone, f"submodule vendor/stranger points at {stranger}, which is not a registered repository")


def test_two_levels_name_the_dependency_of_the_dependency(session, tmp_path: Path) -> None:
    """minicc pins minilib in its own minilib.pin; its commit 2 bumps minilib across minilib's
    regression. The host's bisect names #945, the child names minicc's bump of minilib, and the
    grandchild (level 2) names minilib's culprit: the report gives the chain through both bumps."""
    minilib_path, minicc_path, host_path = tmp_path / "minilib", tmp_path / "minicc", tmp_path / "host"
    minilib = make_minicc(minilib_path)  # the same shape of history: the regression at REGRESSION
    minicc_path.mkdir()
    git(minicc_path, "init", "-q", "-b", "main")
    minicc = [commit(minicc_path, {"minilib.pin": f'REV = "{minilib[-1] if i >= 2 else minilib[0]}"\n',
                                   "minicc/__init__.py": f"STEP = {i}\n"},
                     "bump minilib" if i == 2 else f"minicc: change {i}") for i in range(4)]
    host = make_host(host_path, minicc)
    create_repository(session, minilib_path, name="minilib")
    inner = {"name": "minilib", "repository": "minilib", "pin": {"kind": "assign", "file": "minilib.pin", "key": "REV"}}
    create_repository(session, minicc_path, name="minicc", dependencies=[Dependency.model_validate(inner)])
    create_repository(session, host_path, name="host", dependencies=[Dependency.model_validate(DEPENDENCY)])

    def truth(work, rng):
        placed = work.pinned.get("minicc") or (minicc[-1] if host.index(work.sha) >= 5 else minicc[0])
        lib = work.pinned.get("minicc/minilib") or (minilib[-1] if minicc.index(placed) >= 2 else minilib[0])
        return harness_result({CASE_BIG: 0.7 if minilib.index(lib) >= REGRESSION else 1.0, CASE_SMALL: 1.0}, rng,
                              noise=0.01)

    parent_id = submit(session)
    (child_id,) = drive(session, parent_id, truth)
    (grandchild_id,) = drive(session, child_id, truth)
    grandchild = jobs.get(session, grandchild_id)
    found = grandchild.spec.descent
    assert (found.level, found.dependency, found.host_sha, found.fixed) == (2, "minicc/minilib", host[5],
                                                                             {"minicc": minicc[2]})
    assert grandchild.revision_shas == minilib
    assert drive(session, grandchild_id, truth) == []  # level 2 is the deepest
    session.expire_all()
    assert [c.last_sha for c in jobs.get(session, grandchild_id).culprits] == [minilib[REGRESSION]]
    (line,) = views.job_read(session, jobs.get(session, parent_id)).descent_lines
    assert line.startswith(f"{CASE_BIG}: #945 bumps minicc {minicc[0][:7]}..{minicc[-1][:7]}; inside it, minicc "
                           f"{minicc[2][:7]} 'bump minilib', which bumps minilib {minilib[0][:7]}..{minilib[-1][:7]}; "
                           f"inside it, minilib {minilib[REGRESSION][:7]} 'drop fastmath': -"), line
    assert -32 < step_of(line) < -28


def test_a_pin_the_mirror_does_not_hold_yet_is_fetched_by_the_child(session, histories, tmp_path: Path) -> None:
    """minicc gets a commit after it was registered and the host bumps to it: the child is created
    resolving (its first task fetches minicc's mirror) and then bisects the range as usual."""
    from perfbisect.service.jobs import resolution

    host, minicc = histories
    later = commit(tmp_path / "minicc", {"minicc/__init__.py": "FASTMATH = False\nSTEP = 9\n"}, "minicc: later")
    bump = commit(tmp_path / "host", {"minicc.pin": f'REV = "{later}"\n'}, "bump minicc again (#960)")
    body = BisectCreate(repository="host", good=host[-1], bad=bump,
                        benchmarks=[{"suite": "gemm", "target": "minikern.gemm:matmul",
                                     "shapes": ["M=256,N=256,K=256,dtype=fp32"]}])
    parent_id = jobs.create_bisect(session, body, SYSTEM).id

    def truth(work, rng):  # #960 makes CASE_BIG faster
        placed = work.pinned.get("minicc") or (later if work.sha == bump else minicc[-1])
        return harness_result({CASE_BIG: 1.4 if placed == later else 1.0}, rng, noise=0.01)

    (child_id,) = drive(session, parent_id, truth)
    child = jobs.get(session, child_id)
    assert resolution.unresolved(child) and child.revision_shas == []
    stamp = resolution.fetch(resolution.fetch_target(session, child_id), 30)
    resolution.finish(session, child_id, stamp)
    assert jobs.get(session, child_id).revision_shas == [minicc[-1], later]
    drive(session, child_id, truth)
    session.expire_all()
    assert [c.last_sha for c in jobs.get(session, child_id).culprits] == [later]
