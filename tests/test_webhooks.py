"""The GitHub PR bot: the pull_request webhook (signature, repository mapping, ignored events,
the compare job it creates on a real temp git repository) and the comments it posts, with only
GitHub's servers mocked (httpx.MockTransport)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from sqlalchemy import func, select

from perfbisect.service.errors import Conflict
from perfbisect.service.jobs import resolution
from perfbisect.service.models import (
    BenchmarkSet, Culprit, CulpritKind, Job, JobKind, JobStatus, Repository, Revision, TrackedBranch,
)
from perfbisect.service.settings import get_settings
from perfbisect.service.webhooks.github import compare_marker, marker, post_job_comments
from perfbisect.service.webhooks.repo_urls import github_slug, normalized_url
from perfbisect.service.webhooks.signature import sign
from tests.factories import create_repository
from tests.gitrepo import git, make_repo
from tests.test_resolution import hung_remote, in_time  # noqa: F401 - a fixture

URL = "/api/webhooks/github"
SECRET = "s3cret"
CASE = {"suite": "gemm", "target": "minikern.gemm:matmul", "name": "gemm M=64,N=64,K=64,dtype=fp32",
        "params": {"M": 64, "N": 64, "K": 64, "dtype": "fp32"}}
BIG = {"suite": "gemm", "target": "minikern.gemm:matmul", "name": "gemm M=128,N=128,K=128,dtype=fp32",
       "params": {"M": 128, "N": 128, "K": 128, "dtype": "fp32"}}
NORM = {"suite": "rmsnorm", "target": "minikern.norm:rmsnorm", "name": "rmsnorm M=64,N=64,dtype=fp32",
        "params": {"M": 64, "N": 64, "dtype": "fp32"}}


@pytest.fixture
def settings(monkeypatch):
    """The process's settings with the webhook secret and GitHub token of each test."""
    current = get_settings()
    monkeypatch.setattr(current, "webhook_secret", SECRET)
    monkeypatch.setattr(current, "github_token", None)
    monkeypatch.setattr(current, "github_api_url", "https://github.test/api/v3")
    return current


def pr_event(base: str, head: str, *, action: str = "opened", number: int = 7, clone_url: str = "",
             full_name: str = "acme/lib") -> dict:
    return {"action": action, "number": number,
            "pull_request": {"number": number, "title": "faster gemm", "head": {"sha": head, "ref": "feature"},
                             "base": {"sha": base, "ref": "main"}},
            "repository": {"full_name": full_name, "clone_url": clone_url or f"https://github.com/{full_name}.git"}}


def deliver(client, payload: dict, *, event: str = "pull_request", secret: str | None = SECRET,
            signature: str | None = None, delivery: str | None = None):
    body = json.dumps(payload).encode()
    headers = {"X-GitHub-Event": event, "Content-Type": "application/json",
               "X-GitHub-Delivery": delivery or str(uuid.uuid4())}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    elif secret is not None:
        headers["X-Hub-Signature-256"] = sign(secret, body)
    return client.post(URL, content=body, headers=headers)


def job_count(session) -> int:
    return session.scalar(select(func.count()).select_from(Job))


def resolve(session, job_id: int, timeout_s: float = 30) -> Job:
    """What the job's first advance_job task does before planning: fetch (the remote, and the
    PR's pull ref when no branch holds its head), then resolve the job or fail it."""
    target = resolution.fetch_target(session, job_id)
    resolution.finish(session, job_id, resolution.fetch(target, timeout_s))
    job = session.get(Job, job_id)
    session.refresh(job)
    return job


@pytest.fixture
def lib(tmp_path: Path, session) -> dict:
    """A temp git repository registered as 'lib' (mirror cloned) whose main is tracked on the gemm
    case (the PR bot's cases), and whose last bisect was on rmsnorm (which a PR must not inherit).
    The PR's head commit, touching gemm.py, is made after registration, on a branch."""
    path = tmp_path / "lib"
    shas = make_repo(path, ["initial import (#1)", "add gemm (#2)", "tune tiles (#3)"])
    # a fresh name per test: mirrors are keyed by name and live for the whole test session
    repo = create_repository(session, path, name=f"lib-{uuid.uuid4().hex[:8]}")
    session.add(TrackedBranch(repository_id=repo.id, branch="main", device_class="cuda", cases=[CASE],
                              metric="ratio", min_magnitude=0.03))
    session.add(Job(kind=JobKind.bisect, repository_id=repo.id, revision_shas=shas, status=JobStatus.succeeded,
                    spec={"good": shas[0], "bad": shas[-1], "cases": [NORM], "device_class": "cpu",
                          "min_effect": 0.1, "metric": "ratio"}))
    session.flush()
    git(path, "checkout", "-q", "-b", "feature")
    (path / "gemm.py").write_text("# faster\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "faster gemm")
    return {"repo": repo, "path": path, "base": shas[-1], "head": git(path, "rev-parse", "HEAD")}


# --- URLs -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "slug"), [
    ("https://github.com/acme/kern", ("acme", "kern")),
    ("https://github.com/acme/kern.git", ("acme", "kern")),
    ("git@github.com:acme/kern.git", ("acme", "kern")),
    ("ssh://git@github.com/acme/kern.js.git", ("acme", "kern.js")),
    ("https://gitlab.com/acme/kern.git", None),
    ("/srv/git/kern", None),
])
def test_github_slug(url: str, slug) -> None:
    assert github_slug(url) == slug


def test_normalized_urls_match_across_spellings() -> None:
    assert normalized_url("git@github.com:Acme/Kern.git") == normalized_url("https://github.com/acme/kern/")
    assert normalized_url("/srv/git/kern.git") == normalized_url("/srv/git/kern/") == "/srv/git/kern"
    assert normalized_url("https://gitlab.com/a/b.git") == "gitlab.com/a/b"


# --- the webhook ------------------------------------------------------------------------------

def test_missing_or_bad_signature_is_401(client, settings, session) -> None:
    payload = pr_event("a" * 40, "b" * 40)
    missing = deliver(client, payload, secret=None)
    assert missing.status_code == 401 and "missing X-Hub-Signature-256" in missing.json()["detail"]
    wrong = deliver(client, payload, secret="not-the-secret")
    assert wrong.status_code == 401 and "does not match" in wrong.json()["detail"]
    malformed = deliver(client, payload, signature="sha1=abc")
    assert malformed.status_code == 401
    assert job_count(session) == 0


def test_good_signature_passes_and_other_events_or_actions_are_ignored(client, settings, session, sent_tasks) -> None:
    closed = deliver(client, pr_event("a" * 40, "b" * 40, action="closed"))
    assert closed.status_code == 202 and "action 'closed' is not handled" in closed.json()["message"]
    issues = deliver(client, {"action": "opened"}, event="issues")  # push is the tracker's (tests/alerts)
    assert issues.status_code == 202 and "event 'issues' is not handled" in issues.json()["message"]
    assert deliver(client, {"zen": "hi"}, event="ping").json()["message"] == "pong"
    assert job_count(session) == 0 and sent_tasks == []


def test_form_encoded_deliveries_are_read_from_the_payload_field(client, settings) -> None:
    body = urlencode({"payload": json.dumps(pr_event("a" * 40, "b" * 40, action="labeled"))}).encode()
    response = client.post(URL, content=body, headers={
        "X-GitHub-Event": "pull_request", "Content-Type": "application/x-www-form-urlencoded",
        "X-Hub-Signature-256": sign(SECRET, body), "X-GitHub-Delivery": str(uuid.uuid4())})
    assert response.status_code == 202 and "action 'labeled' is not handled" in response.json()["message"]


def test_without_a_secret_configured_the_webhook_is_off(client, settings, monkeypatch, session) -> None:
    monkeypatch.setattr(settings, "webhook_secret", None)
    response = deliver(client, pr_event("a" * 40, "b" * 40), secret=None)
    assert response.status_code == 404
    assert "PERFBISECT_WEBHOOK_SECRET" in response.json()["detail"]
    assert job_count(session) == 0


def test_unmapped_repository_is_404_naming_it(client, settings, lib, session) -> None:
    response = deliver(client, pr_event(lib["base"], lib["head"], full_name="acme/unknown"))
    assert response.status_code == 404
    assert "'acme/unknown'" in response.json()["detail"] and "POST /api/repositories" in response.json()["detail"]
    assert job_count(session) == 1  # only lib's bisect


def test_malformed_pull_request_payload_is_422(client, settings) -> None:
    response = deliver(client, {"action": "opened", "pull_request": {"number": 3}, "repository": {}})
    assert response.status_code == 422 and "pull_request.head" in response.json()["detail"]


def test_redelivered_or_replayed_deliveries_are_handled_once(client, settings, lib, session, sent_tasks) -> None:
    event = pr_event(lib["base"], lib["head"], clone_url=str(lib["path"]))
    first = deliver(client, event, delivery="d-1")
    assert first.status_code == 202, first.text
    job_id = first.json()["job_id"]
    session.get(Job, job_id).status = JobStatus.cancelled  # closed: a replay must not reopen it
    session.flush()
    redelivered = deliver(client, event, delivery="d-1")
    replayed = deliver(client, event, delivery="d-2")  # the signature covers the body, not the id
    for response in (redelivered, replayed):
        assert response.status_code == 200 and "handled before" in response.json()["message"]
    assert job_count(session) == 2 and len(sent_tasks) == 1  # the lib fixture's bisect + the compare


def test_delivery_without_an_id_is_422(client, settings) -> None:
    body = json.dumps({"zen": "hi"}).encode()
    response = client.post(URL, content=body, headers={"X-GitHub-Event": "ping", "X-Hub-Signature-256": sign(SECRET, body),
                                                       "Content-Type": "application/json"})
    assert response.status_code == 422 and "X-GitHub-Delivery" in response.json()["detail"]


def test_a_failed_delivery_can_be_redelivered(client, settings, lib, session) -> None:
    event = pr_event(lib["base"], lib["head"], full_name="acme/unknown")
    assert deliver(client, event, delivery="d-9").status_code == 404
    assert deliver(client, event, delivery="d-9").status_code == 404  # not "handled before": nothing was done


def test_repository_without_configured_benchmarks_is_422_even_after_a_bisect(client, settings, tmp_path,
                                                                             session) -> None:
    path = tmp_path / "bare"
    base, head = make_repo(path, ["one", "two"])
    repo = create_repository(session, path, name=f"bare-{uuid.uuid4().hex[:8]}")
    session.add(Job(kind=JobKind.bisect, repository_id=repo.id, revision_shas=[base, head], status=JobStatus.succeeded,
                    spec={"good": base, "bad": head, "cases": [CASE], "device_class": "cpu"}))
    session.flush()
    response = deliver(client, pr_event(base, head, clone_url=str(path)))
    assert response.status_code == 422 and "no benchmarks configured" in response.json()["detail"]
    assert job_count(session) == 1  # the bisect only


def test_pull_request_creates_a_compare_job_of_base_and_head(client, settings, lib, session, sent_tasks) -> None:
    response = deliver(client, pr_event(lib["base"], lib["head"], clone_url=str(lib["path"]) + "/"))
    assert response.status_code == 202, response.text
    body = response.json()
    job = session.get(Job, body["job_id"])
    assert job.kind == JobKind.compare and job.repository_id == lib["repo"].id
    # the head was pushed after the mirror's last fetch: the request did not fetch it, the task does
    assert job.revision_shas == [] and job.progress["phase"] == "resolving revisions"
    job = resolve(session, job.id)
    assert job.revision_shas == [lib["base"], lib["head"]]
    assert (job.spec.good_sha, job.spec.bad_sha, job.spec.pr_number) == (lib["base"], lib["head"], 7)
    assert [c["name"] for c in job.spec.cases] == [CASE["name"]]
    assert (job.spec.device_class, job.spec.min_effect) == ("cuda", 0.03)
    assert sent_tasks == [("perfbisect.advance_job", (job.id,))]
    assert body["url"] == f"/api/jobs/{job.id}"
    head_subject = session.scalars(select(Revision.subject).where(Revision.sha == lib["head"])).one()
    assert head_subject == "faster gemm"

    again = deliver(client, pr_event(lib["base"], lib["head"], action="synchronize", clone_url=str(lib["path"])))
    assert again.status_code == 202 and again.json()["job_id"] == job.id and "already have" in again.json()["message"]
    assert len(sent_tasks) == 1


def _compared_cases(client, lib, session, **event) -> list[str]:
    response = deliver(client, pr_event(lib["base"], lib["head"], clone_url=str(lib["path"]), **event))
    assert response.status_code == 202, response.text
    return sorted(c["name"] for c in resolve(session, response.json()["job_id"]).spec.cases)


def test_without_a_tracked_base_every_configured_case_is_compared(client, settings, lib, session, sent_tasks) -> None:
    session.add(BenchmarkSet(repository_id=lib["repo"].id, name="norms", cases=[NORM]))
    session.flush()
    payload = pr_event(lib["base"], lib["head"], clone_url=str(lib["path"]))
    payload["pull_request"]["base"]["ref"] = "release"  # not tracked: the sets and tracked branches, all of them
    response = deliver(client, payload)
    assert response.status_code == 202, response.text
    assert sorted(c["name"] for c in session.get(Job, response.json()["job_id"]).spec.cases) == \
        sorted([CASE["name"], NORM["name"]])


def test_a_benchmark_set_policy_plus_the_kernels_the_pr_touches(client, settings, lib, session, sent_tasks) -> None:
    repo = lib["repo"]
    session.add_all([BenchmarkSet(repository_id=repo.id, name="norms", cases=[NORM]),
                     BenchmarkSet(repository_id=repo.id, name="gemms", cases=[CASE, BIG])])
    repo.pr_policy = {"benchmark_set": "norms", "kernel_paths": {"docs/": ["rmsnorm"]}}
    session.flush()
    assert _compared_cases(client, lib, session) == [NORM["name"]]  # gemm.py is not mapped: the set only
    repo.pr_policy = {"benchmark_set": "norms", "kernel_paths": {"*.py": ["gemm"], "docs/": ["attention"]}}
    session.flush()
    (lib["path"] / "gemm.py").write_text("# faster still\n")
    git(lib["path"], "commit", "-q", "-am", "review fixes")
    lib["head"] = git(lib["path"], "rev-parse", "HEAD")
    assert _compared_cases(client, lib, session, action="synchronize") == sorted([NORM["name"], CASE["name"], BIG["name"]])


def test_the_pr_policy_is_set_by_an_admin_and_validated(client, settings, lib, session) -> None:
    name = lib["repo"].name
    policy = {"inconclusive": "failure", "kernel_paths": {"kernels/gemm/": ["gemm"]}}
    response = client.patch(f"/api/repositories/{name}", json={"pr_policy": policy})
    assert response.status_code == 200, response.text
    assert response.json()["pr_policy"]["inconclusive"] == "failure"
    assert client.get(f"/api/repositories/{name}").json()["pr_policy"]["kernel_paths"] == {"kernels/gemm/": ["gemm"]}
    assert client.patch(f"/api/repositories/{name}", json={"pr_policy": {"inconclusive": "green"}}).status_code == 422
    assert client.patch("/api/repositories/nosuch", json={"pr_policy": {}}).status_code == 404


def test_a_new_head_supersedes_the_pull_requests_open_compare(client, settings, lib, session, sent_tasks) -> None:
    first = deliver(client, pr_event(lib["base"], lib["head"], clone_url=str(lib["path"]))).json()["job_id"]
    (lib["path"] / "gemm.py").write_text("# faster still\n")
    git(lib["path"], "commit", "-q", "-am", "review fixes")
    new_head = git(lib["path"], "rev-parse", "HEAD")
    response = deliver(client, pr_event(lib["base"], new_head, action="synchronize", clone_url=str(lib["path"])))
    assert response.status_code == 202, response.text
    second = response.json()["job_id"]
    assert second != first and response.json()["superseded"] == [first]
    session.expire_all()
    assert session.get(Job, first).status == JobStatus.cancelled
    assert resolve(session, second).spec.bad_sha == new_head
    assert sent_tasks == [("perfbisect.advance_job", (first,)), ("perfbisect.advance_job", (second,))]


def test_with_a_token_each_new_head_first_starts_its_check_run(client, settings, lib, session, sent_tasks,
                                                                monkeypatch) -> None:
    monkeypatch.setattr(settings, "github_token", "tok")
    first = deliver(client, pr_event(lib["base"], lib["head"], clone_url=str(lib["path"]))).json()["job_id"]
    response = deliver(client, pr_event(lib["base"], "e" * 40, action="synchronize", clone_url=str(lib["path"])))
    second = response.json()["job_id"]
    assert sent_tasks == [("perfbisect.start_check", (first, lib["head"])), ("perfbisect.advance_job", (first,)),
                          ("perfbisect.start_check", (second, "e" * 40)), ("perfbisect.advance_job", (second,))]


def test_head_that_does_not_resolve_fails_the_job_with_the_reason(client, settings, lib, session, sent_tasks) -> None:
    response = deliver(client, pr_event(lib["base"], "d" * 40, clone_url=str(lib["path"])))
    assert response.status_code == 202, response.text
    job = resolve(session, response.json()["job_id"])
    assert job.status == JobStatus.failed and job.revision_shas == []
    assert job.error.startswith(f"could not resolve the revisions: the head {'d' * 12} of PR #7 is on no branch of "
                                f"{lib['path']}, and refs/pull/7/head could not be fetched: "), job.error


def test_a_head_only_in_the_pull_ref_is_fetched_by_the_task(client, settings, lib, session, sent_tasks) -> None:
    """A PR from a fork: its head is on no branch of the repository, only in refs/pull/<n>/head."""
    path = lib["path"]
    git(path, "update-ref", "refs/pull/7/head", lib["head"])
    git(path, "checkout", "-q", "main")
    git(path, "branch", "-q", "-D", "feature")
    response = deliver(client, pr_event(lib["base"], lib["head"], clone_url=str(path)))
    assert response.status_code == 202, response.text
    job = resolve(session, response.json()["job_id"])
    assert job.status == JobStatus.queued and job.revision_shas == [lib["base"], lib["head"]], job.error


def test_a_hung_remote_never_holds_the_webhook_request(client, settings, session, hung_remote, sent_tasks) -> None:
    """The remote accepts connections and never answers: the delivery is accepted at once, and
    the job's task gives up at the fetch timeout and fails the job saying so."""
    repo = Repository(name=f"hung-{uuid.uuid4().hex[:8]}", url=hung_remote)
    session.add(repo)
    session.flush()
    session.add(TrackedBranch(repository_id=repo.id, branch="main", device_class="cuda", cases=[CASE]))
    session.flush()
    response, took = in_time(lambda: deliver(client, pr_event("a" * 40, "b" * 40, clone_url=hung_remote)), 20)
    assert response.status_code == 202, response.text
    assert took < 5 and sent_tasks == [("perfbisect.advance_job", (response.json()["job_id"],))]
    job = client.get(response.json()["url"]).json()
    assert job["status"] == "queued" and job["progress"]["phase"] == "resolving revisions"
    job, took = in_time(lambda: resolve(session, response.json()["job_id"], timeout_s=2), 20)
    assert job.status == JobStatus.failed and "timed out after 2 s" in job.error, job.error
    assert took < 10


# --- comments ---------------------------------------------------------------------------------

class FakeGitHub:
    """GitHub's REST API for issue comments, in memory; records every request."""

    def __init__(self, existing: list[dict] | None = None, fail_posts: bool = False) -> None:
        self.requests: list[httpx.Request] = []
        self.existing = existing or []
        self.fail_posts = fail_posts

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.method == "GET":
            return httpx.Response(200, json=self.existing)
        if self.fail_posts:
            return httpx.Response(403, json={"message": "Resource not accessible by integration"})
        return httpx.Response(201 if request.method == "POST" else 200,
                              json={"id": 99, "html_url": "https://github.com/acme/kern/pull/7#issuecomment-99"})

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))

    def writes(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.method != "GET"]


@pytest.fixture
def kern(session) -> Repository:
    repo = Repository(name="kern", url="git@github.com:acme/kern.git", env={})
    session.add(repo)
    session.flush()
    return repo


def finished_job(session, repo: Repository, kind: JobKind, *, pr_number: int | None = None,
                 status: JobStatus = JobStatus.succeeded) -> Job:
    job = Job(kind=kind, repository_id=repo.id, status=status, revision_shas=["1" * 40, "2" * 40, "3" * 40],
              spec={"good": "v1", "bad": "main", "cases": [CASE], "min_effect": 0.02, "metric": "ratio",
                    "pr_number": pr_number},
              progress={"revisions": 3, "measured": 3, "trials": 9})
    session.add(job)
    session.flush()
    return job


def add_culprit(session, job: Job, first: str, last: str, pr: int | None, subject: str) -> None:
    session.add(Revision(repository_id=job.repository_id, sha=last, subject=subject, pr_number=pr))
    session.add(Culprit(job_id=job.id, kind=CulpritKind.performance, first_sha=first, last_sha=last,
                        effects={CASE["name"]: {"rel": -0.104, "ci": [-0.12, -0.09], "before": 0.97, "after": 0.87,
                                                "unit": "TFLOP/s", "before_value": 641.0, "after_value": 574.0}}))
    session.flush()


def test_compare_job_report_is_posted_on_its_pull_request(session, settings, kern, monkeypatch) -> None:
    monkeypatch.setattr(settings, "github_token", "tok")
    job = finished_job(session, kern, JobKind.compare, pr_number=7)
    github = FakeGitHub()
    [result] = post_job_comments(session, job.id, client=github.client())
    listing, post = github.requests
    assert listing.method == "GET" and listing.url.path == "/api/v3/repos/acme/kern/issues/7/comments"
    assert post.method == "POST" and post.url.path == "/api/v3/repos/acme/kern/issues/7/comments"
    assert post.headers["Authorization"] == "Bearer tok"
    assert post.headers["Accept"] == "application/vnd.github+json"
    body = json.loads(post.content)["body"]
    assert body.startswith("### perfbisect: compare succeeded") and compare_marker(7) in body
    assert "Compared `v1`..`main` in **kern**" in body and "minimum effect 2.0%" in body
    assert result == {"repository": "acme/kern", "issue_number": 7, "body": body, "posted": True,
                      "action": "created", "url": "https://github.com/acme/kern/pull/7#issuecomment-99",
                      "error": None}


def test_bisect_culprit_pull_requests_are_told_with_their_table(session, settings, kern, monkeypatch) -> None:
    monkeypatch.setattr(settings, "github_token", "tok")
    job = finished_job(session, kern, JobKind.bisect)
    add_culprit(session, job, "2" * 40, "2" * 40, 41, "drop fastmath flag (#41)")
    add_culprit(session, job, "3" * 40, "3" * 40, None, "no PR in the subject")      # nobody to tell
    add_culprit(session, job, "4" * 40, "5" * 40, 43, "a range hides the exact one")  # not exact: no blame
    github = FakeGitHub()
    results = post_job_comments(session, job.id, client=github.client())
    [post] = github.writes()
    assert post.url.path == "/api/v3/repos/acme/kern/issues/41/comments"
    body = json.loads(post.content)["body"]
    assert "this pull request caused a performance regression" in body and "`2222222222`" in body
    assert "| `2222222222` | #41 | `gemm M=64,N=64,K=64,dtype=fp32` | 0.9700 → 0.8700 | " \
           "641.0 → 574.0 TFLOP/s | -10.4% [-12.0, -9.0] |" in body
    assert [r["issue_number"] for r in results] == [41]


def test_a_second_run_edits_the_earlier_comment(session, settings, kern, monkeypatch) -> None:
    monkeypatch.setattr(settings, "github_token", "tok")
    job = finished_job(session, kern, JobKind.bisect)
    add_culprit(session, job, "2" * 40, "2" * 40, 41, "drop fastmath flag (#41)")
    github = FakeGitHub(existing=[{"id": 5, "body": "unrelated"}, {"id": 6, "body": f"old\n{marker(job.id, 41)}"}])
    [result] = post_job_comments(session, job.id, client=github.client())
    [patch] = github.writes()
    assert patch.method == "PATCH" and patch.url.path == "/api/v3/repos/acme/kern/issues/comments/6"
    assert result["action"] == "updated"


def test_every_push_to_a_pull_request_edits_its_first_report(session, settings, kern, monkeypatch) -> None:
    # opened: the first compare job posts the report; synchronize: the next push's job edits it
    monkeypatch.setattr(settings, "github_token", "tok")
    monkeypatch.setattr(settings, "public_url", "https://perf.example")
    opened = finished_job(session, kern, JobKind.compare, pr_number=7)
    github = FakeGitHub(existing=[{"id": 5, "body": "a reviewer's comment"}])
    post_job_comments(session, opened.id, client=github.client())
    [post] = github.writes()
    first = {"id": 6, "body": json.loads(post.content)["body"]}
    for _ in range(2):
        pushed = finished_job(session, kern, JobKind.compare, pr_number=7)
        github = FakeGitHub(existing=[{"id": 5, "body": "a reviewer's comment"}, first,
                                     {"id": 8, "body": "another comment"}])
        [result] = post_job_comments(session, pushed.id, client=github.client())
        [patch] = github.writes()
        assert (patch.method, patch.url.path) == ("PATCH", "/api/v3/repos/acme/kern/issues/comments/6")
        body = json.loads(patch.content)["body"]
        assert f"[job {pushed.id}](https://perf.example/dashboard/jobs/{pushed.id})" in body
        assert result["action"] == "updated"
        first = {"id": 6, "body": body}


def test_without_a_token_comments_are_rendered_not_sent(session, settings, kern) -> None:
    job = finished_job(session, kern, JobKind.compare, pr_number=7)
    github = FakeGitHub()
    [result] = post_job_comments(session, job.id, client=github.client())
    assert github.requests == [] and result["posted"] is False and "perfbisect" in result["body"]


def test_failed_post_is_reported_not_raised(session, settings, kern, monkeypatch) -> None:
    monkeypatch.setattr(settings, "github_token", "tok")
    job = finished_job(session, kern, JobKind.compare, pr_number=7)
    [result] = post_job_comments(session, job.id, client=FakeGitHub(fail_posts=True).client())
    assert result["posted"] is False and "403" in result["error"]


def test_non_github_repository_and_unfinished_job(session, settings, kern, monkeypatch) -> None:
    monkeypatch.setattr(settings, "github_token", "tok")
    local = Repository(name="local", url="/srv/git/kern", env={})
    session.add(local)
    session.flush()
    github = FakeGitHub()
    assert post_job_comments(session, finished_job(session, local, JobKind.compare, pr_number=7).id,
                             client=github.client()) == []
    running = finished_job(session, kern, JobKind.compare, pr_number=7, status=JobStatus.running)
    with pytest.raises(Conflict, match="once it has finished"):
        post_job_comments(session, running.id, client=github.client())
    assert github.requests == []
