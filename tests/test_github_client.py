"""The one GitHub client and the merge gate, with GitHub's servers mocked at the edge
(httpx.MockTransport): rate-limit answers are waited out as GitHub asks, 5xx are retried,
permission errors are not, the bot's comment is found on any page, and a compare job sets a
check run (or a commit status where the token cannot) whose conclusion gates the merge, updating
the run already on its head rather than adding a second."""

from __future__ import annotations

import json

import httpx
import pytest

from perfbisect.service.jobs.schemas import JobRead
from perfbisect.service.models import Culprit, CulpritKind, Job, JobKind, JobStatus, Repository
from perfbisect.service.settings import get_settings
from perfbisect.service.webhooks.check import GatePolicy, check_verdict
from perfbisect.service.webhooks.github import post_check, start_check
from perfbisect.service.integrations.github.client import GitHubClient, rate_limit_wait

API = "https://github.test/api/v3"
CASE = "gemm M=64,N=64,K=64,dtype=fp32"


class Script:
    """Answers requests from a list of (method, path-suffix) -> response rules, in order of use."""

    def __init__(self, *answers: httpx.Response | dict) -> None:
        self.answers, self.requests = list(answers), []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        return answer if isinstance(answer, httpx.Response) else httpx.Response(200, json=answer)


def client_for(script: Script, sleeps: list[float]) -> GitHubClient:
    return GitHubClient(httpx.Client(transport=httpx.MockTransport(script)), API, "acme", "kern", "tok",
                        sleep=sleeps.append)


def test_a_rate_limit_answer_is_waited_out_as_github_asks() -> None:
    limited = httpx.Response(403, headers={"Retry-After": "7"}, json={"message": "secondary rate limit"})
    script, sleeps = Script(limited, {"id": 1, "html_url": "u"}), []
    assert client_for(script, sleeps).request("POST", f"{API}/repos/acme/kern/issues/1/comments").json()["id"] == 1
    assert sleeps == [7.0] and len(script.requests) == 2


def test_rate_limit_reset_and_caps() -> None:
    reset = httpx.Response(403, headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1030"})
    assert rate_limit_wait(reset, now=1000.0) == 30.0
    assert rate_limit_wait(httpx.Response(429)) == 60.0
    assert rate_limit_wait(httpx.Response(403, json={"message": "Resource not accessible"})) is None
    script, sleeps = Script(httpx.Response(429, headers={"Retry-After": "3600"}), {}), []
    client_for(script, sleeps).request("GET", f"{API}/x")
    assert sleeps == [120.0]  # never longer than max_wait


def test_server_errors_back_off_and_permission_errors_are_raised_at_once() -> None:
    script, sleeps = Script(httpx.Response(502), httpx.Response(503), {"ok": True}), []
    assert client_for(script, sleeps).request("GET", f"{API}/x").json() == {"ok": True}
    assert sleeps == [1.0, 2.0]
    script, sleeps = Script(httpx.Response(403, json={"message": "Resource not accessible by integration"})), []
    with pytest.raises(httpx.HTTPStatusError):
        client_for(script, sleeps).request("POST", f"{API}/x")
    assert sleeps == [] and len(script.requests) == 1
    script, sleeps = Script(*[httpx.Response(500)] * 4), []
    with pytest.raises(httpx.HTTPStatusError):
        client_for(script, sleeps).request("GET", f"{API}/x")
    assert len(script.requests) == 4  # attempts


def test_the_bots_comment_is_found_on_a_later_page() -> None:
    page2 = f"{API}/repositories/1/issues/7/comments?per_page=100&page=2"
    first = httpx.Response(200, json=[{"id": i, "body": "someone else"} for i in range(100)],
                           headers={"Link": f'<{page2}>; rel="next", <{page2}>; rel="last"'})
    second = httpx.Response(200, json=[{"id": 555, "body": "old report\n<!-- mark -->"}])
    script, sleeps = Script(first, second, {"id": 555, "html_url": "https://github.com/c/555"}), []
    action, url = client_for(script, sleeps).upsert_comment(7, "new report\n<!-- mark -->", "<!-- mark -->")
    assert (action, url) == ("updated", "https://github.com/c/555")
    get1, get2, patch = script.requests
    assert get1.url.params["per_page"] == "100" and str(get2.url) == page2
    assert patch.method == "PATCH" and patch.url.path.endswith("/issues/comments/555")


def _outcome(cases: dict[str, str], detectable: float = 0.02) -> dict:
    """A job's outcome JSON: case -> outcome, with a reason for the undecided ones."""
    reasons = {"inconclusive": "too noisy for the minimum effect: the smallest step this run could detect is 7.5%",
               "failed": "build failed at the bad end"}
    return {"verdict": "unchanged", "counts": {},
            "cases": [{"case": c, "outcome": o, "reason": reasons.get(o)} for c, o in cases.items()],
            "noise": [{"case": c, "noise": 0.05, "control_spread": None, "throttled": 0, "samples": 30,
                       "detectable": 0.075 if o == "inconclusive" else detectable, "noisy": o == "inconclusive"}
                      for c, o in cases.items()]}


def _job(kind: str, status: str, effects: dict | None = None, wrong: bool = False,
         outcome: dict[str, str] | None = None, unconfirmed: frozenset[str] = frozenset()) -> JobRead:
    culprits = []
    if effects:
        culprits.append({"kind": "performance", "first_sha": "b" * 40, "last_sha": "b" * 40, "fixed_sha": None,
                         "exact": True, "effects": {c: {"rel": r, "ci": ci, "before": 1, "after": 1 + r,
                                                        "confirmed": c not in unconfirmed}
                                                    for c, (r, ci) in effects.items()}})
    if wrong:
        culprits.append({"kind": "correctness", "first_sha": "c" * 40, "last_sha": "c" * 40, "fixed_sha": None,
                         "exact": True})
    if outcome is None:  # every case decided, as its culprits say
        outcome = {c: ("regressed" if r < 0 else "improved") for c, (r, _) in (effects or {}).items()} or {CASE: "unchanged"}
    return JobRead.model_validate({"id": 3, "kind": kind, "status": status, "repository": "kern",
                                   "spec": {"min_effect": 0.02, "cases": [{"name": c} for c in outcome]},
                                   "progress": {}, "revision_shas": ["a" * 40, "b" * 40],
                                   "error": None, "created_at": "2026-12-01T00:00:00Z", "started_at": None,
                                   "finished_at": None, "culprits": culprits, "outcome": _outcome(outcome)})


def test_check_verdict_fails_on_a_passed_regression_only() -> None:
    assert check_verdict(_job("compare", "succeeded", {CASE: (-0.2, (-0.25, -0.15))})).conclusion == "failure"
    noisy = check_verdict(_job("compare", "succeeded", {CASE: (-0.018, (-0.05, 0.01))}, outcome={CASE: "unchanged"}))
    assert noisy.conclusion == "success" and "No case moved" in noisy.summary
    better = check_verdict(_job("compare", "succeeded", {CASE: (1.31, (1.2, 1.4))}))
    assert better.conclusion == "success" and better.title.startswith("1 improved")
    assert check_verdict(_job("compare", "succeeded", wrong=True)).conclusion == "failure"
    assert check_verdict(_job("compare", "failed")).conclusion == "neutral"


OTHER = "rmsnorm M=4096,N=4096,dtype=bf16"


def test_a_step_its_own_verdict_did_not_confirm_never_fails_the_gate() -> None:
    # the interval excludes 0 at more than the minimum effect, but the case's verdict at the
    # culprit was not DIFFERENT (its noise raised what the job can tell): the case is undecided
    job = _job("compare", "inconclusive", {CASE: (-0.2, (-0.25, -0.15))}, outcome={CASE: "inconclusive"},
               unconfirmed=frozenset({CASE}))
    verdict = check_verdict(job)
    assert verdict.conclusion == "neutral" and "regressed" not in verdict.title, verdict
    assert CASE in verdict.summary


def test_an_inconclusive_compare_is_never_green_and_says_what_was_not_decided() -> None:
    verdict = check_verdict(_job("compare", "inconclusive", outcome={CASE: "unchanged", OTHER: "inconclusive"}))
    assert verdict.conclusion == "neutral"
    assert verdict.title.startswith("not decided: 1 case inconclusive (smallest detectable step 7.5%")
    assert f"not decided (inconclusive): `{OTHER}`: too noisy" in verdict.summary
    assert "smallest detectable step 7.5%" in verdict.summary and CASE not in verdict.summary
    strict = check_verdict(_job("compare", "inconclusive", outcome={OTHER: "inconclusive"}),
                           GatePolicy(inconclusive="failure"))
    assert strict.conclusion == "failure" and "not decided" in strict.title


def test_a_failed_case_or_job_is_neutral_or_failure_by_policy_and_named() -> None:
    failed = _job("compare", "failed", outcome={CASE: "unchanged", OTHER: "failed"})
    verdict = check_verdict(failed)
    assert (verdict.conclusion, verdict.title) == ("neutral", "not decided: 1 case failed")
    assert f"not decided (failed): `{OTHER}`: build failed at the bad end" in verdict.summary
    assert check_verdict(failed, GatePolicy(failed="failure")).conclusion == "failure"
    assert check_verdict(failed, GatePolicy(inconclusive="failure")).conclusion == "neutral"
    # a case of the request without any outcome (the job stopped before deciding it) is not decided
    job = _job("compare", "succeeded", outcome={CASE: "unchanged"})
    job.spec.cases.append({"name": OTHER})
    missing = check_verdict(job)
    assert missing.conclusion == "neutral" and f"`{OTHER}`: not measured" in missing.summary


def test_a_regression_fails_the_gate_and_still_names_the_undecided_cases() -> None:
    verdict = check_verdict(_job("compare", "inconclusive", {CASE: (-0.2, (-0.25, -0.15))},
                                 outcome={CASE: "regressed", OTHER: "inconclusive"}))
    assert verdict.conclusion == "failure" and verdict.title.startswith("1 case regressed, 1 case not decided")
    assert f"`{OTHER}`" in verdict.summary


@pytest.fixture
def github_settings(monkeypatch):
    current = get_settings()
    monkeypatch.setattr(current, "github_token", "tok")
    monkeypatch.setattr(current, "github_api_url", API)
    monkeypatch.setattr(current, "public_url", "https://perf.example")
    return current


def _compare_job(session, status=JobStatus.succeeded, outcome: dict[str, str] | None = None,
                 pr_policy: dict | None = None, regressed: bool = True) -> Job:
    repo = Repository(name="kern", url="https://github.com/acme/kern", env={}, pr_policy=pr_policy or {})
    session.add(repo)
    session.flush()
    job = Job(kind=JobKind.compare, repository_id=repo.id, status=status, revision_shas=["a" * 40, "b" * 40],
              spec={"good": "a" * 40, "bad": "b" * 40, "cases": [], "min_effect": 0.02, "pr_number": 7},
              progress={}, result={"outcome": _outcome(outcome or {CASE: "regressed"})})
    session.add(job)
    session.flush()
    if not regressed:
        return job
    session.add(Culprit(job_id=job.id, kind=CulpritKind.performance, first_sha="b" * 40, last_sha="b" * 40,
                        effects={CASE: {"rel": -0.2, "ci": [-0.25, -0.15], "before": 1.0, "after": 0.8}}))
    session.flush()
    return job


NO_RUNS = {"total_count": 0, "check_runs": []}


def test_compare_job_sets_a_failing_check_run_on_its_head(session, github_settings) -> None:
    job = _compare_job(session)
    script = Script(NO_RUNS, httpx.Response(201, json={"id": 1}))
    result = post_check(session, job.id, client=httpx.Client(transport=httpx.MockTransport(script)))
    listing, request = script.requests
    assert listing.url.path == f"/api/v3/repos/acme/kern/commits/{'b' * 40}/check-runs"
    assert listing.url.params["check_name"] == "perfbisect"
    body = json.loads(request.content)
    assert (request.method, request.url.path) == ("POST", "/api/v3/repos/acme/kern/check-runs")
    assert (body["head_sha"], body["conclusion"], body["status"]) == ("b" * 40, "failure", "completed")
    assert body["details_url"] == f"https://perf.example/dashboard/jobs/{job.id}"
    assert result["via"] == "check_run" and result["posted"] and result["error"] is None


def test_the_check_run_already_on_the_head_is_updated_not_doubled(session, github_settings) -> None:
    job = _compare_job(session)
    page2 = f"{API}/repos/acme/kern/commits/{'b' * 40}/check-runs?check_name=perfbisect&per_page=100&page=2"
    first = httpx.Response(200, json={"total_count": 101, "check_runs": [{"id": 5, "name": "lint"}] * 100},
                           headers={"Link": f'<{page2}>; rel="next"'})
    ours = {"total_count": 101, "check_runs": [{"id": 42, "name": "perfbisect", "status": "in_progress"}]}
    script = Script(first, ours, {"id": 42})
    result = post_check(session, job.id, client=httpx.Client(transport=httpx.MockTransport(script)))
    update = script.requests[2]
    assert (update.method, update.url.path) == ("PATCH", "/api/v3/repos/acme/kern/check-runs/42")
    body = json.loads(update.content)
    assert (body["status"], body["conclusion"]) == ("completed", "failure") and "head_sha" not in body
    assert result["via"] == "check_run" and result["posted"] and len(script.requests) == 3


def test_without_check_permission_a_commit_status_is_set(session, github_settings) -> None:
    job = _compare_job(session)
    script = Script(NO_RUNS, httpx.Response(403, json={"message": "Resource not accessible by personal access token"}),
                    httpx.Response(201, json={"id": 2}))
    result = post_check(session, job.id, client=httpx.Client(transport=httpx.MockTransport(script)))
    status = script.requests[2]
    assert status.url.path == f"/api/v3/repos/acme/kern/statuses/{'b' * 40}"
    assert json.loads(status.content)["state"] == "failure" and result["via"] == "status"


@pytest.mark.parametrize(("status", "outcome", "policy", "conclusion", "title"), [
    (JobStatus.inconclusive, {CASE: "unchanged", OTHER: "inconclusive"}, {}, "neutral", "not decided: 1 case inconclusive"),
    (JobStatus.inconclusive, {OTHER: "inconclusive"}, {"inconclusive": "failure"}, "failure", "not decided"),
    (JobStatus.failed, {CASE: "failed"}, {}, "neutral", "not decided: 1 case failed"),
    (JobStatus.failed, {CASE: "failed"}, {"failed": "failure"}, "failure", "not decided: 1 case failed"),
    (JobStatus.succeeded, {CASE: "unchanged", OTHER: "improved"}, {"inconclusive": "failure"}, "success",
     "no performance change"),
])
def test_each_outcome_reaches_github_as_its_check_run(session, github_settings, status, outcome, policy,
                                                      conclusion, title) -> None:
    job = _compare_job(session, status, outcome, policy, regressed=False)
    script = Script(NO_RUNS, httpx.Response(201, json={"id": 1}))
    result = post_check(session, job.id, client=httpx.Client(transport=httpx.MockTransport(script)))
    _, request = script.requests
    body = json.loads(request.content)
    assert (body["conclusion"], result["conclusion"]) == (conclusion, conclusion)
    assert body["output"]["title"].startswith(title)
    for case, decided in outcome.items():  # the text names every case that was not decided
        assert (f"`{case}`" in body["output"]["summary"]) == (decided in ("inconclusive", "failed"))


def test_an_inconclusive_compare_sets_an_inconclusive_commit_status(session, github_settings) -> None:
    job = _compare_job(session, JobStatus.inconclusive, {OTHER: "inconclusive"}, regressed=False)
    script = Script(httpx.Response(403, json={"message": "Resource not accessible by personal access token"}),
                    httpx.Response(201, json={"id": 2}))
    post_check(session, job.id, client=httpx.Client(transport=httpx.MockTransport(script)))
    status = json.loads(script.requests[1].content)  # the listing refused: a commit status straight away
    assert status["description"].startswith("inconclusive: not decided: 1 case inconclusive")


class CheckRuns:
    """GitHub's check runs of one repository, in memory: listed by commit and name, created, updated."""

    def __init__(self) -> None:
        self.runs: list[dict] = []
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        parts = request.url.path.split("/")
        if request.method == "GET":
            runs = [r for r in self.runs if r["head_sha"] == parts[-2] and r["name"] == request.url.params["check_name"]]
            return httpx.Response(200, json={"total_count": len(runs), "check_runs": runs})
        body = json.loads(request.content)
        if request.method == "POST":
            self.runs.append({"id": len(self.runs) + 1, **body})
            return httpx.Response(201, json=self.runs[-1])
        run = next(r for r in self.runs if r["id"] == int(parts[-1]))
        run.update(body)
        return httpx.Response(200, json=run)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))


def test_each_push_starts_a_check_run_on_its_head_and_the_finished_job_updates_it(session, github_settings) -> None:
    github = CheckRuns()
    opened = _compare_job(session, JobStatus.running)
    assert start_check(session, opened.id, "b" * 40, client=github.client())["posted"]
    [run] = [dict(r) for r in github.runs]  # a copy: the fake updates its own in place
    assert (run["head_sha"], run["status"], run["name"]) == ("b" * 40, "in_progress", "perfbisect")
    assert "conclusion" not in run and run["details_url"] == f"https://perf.example/dashboard/jobs/{opened.id}"

    opened.status = JobStatus.succeeded
    session.flush()
    assert post_check(session, opened.id, client=github.client())["posted"]
    [done] = github.runs
    assert (done["id"], done["status"], done["conclusion"]) == (run["id"], "completed", "failure")
    assert done["output"]["title"] == "1 case regressed (threshold 2.0%)"
    assert [r.method for r in github.requests] == ["GET", "POST", "GET", "PATCH"]

    # synchronize: the next push's job starts the run of its own head, and a finished job never
    # turns its completed run back to in progress
    pushed = Job(kind=JobKind.compare, repository_id=opened.repository_id, status=JobStatus.queued,
                 revision_shas=["a" * 40, "d" * 40], spec=dict(opened.spec), progress={})
    session.add(pushed)
    session.flush()
    assert start_check(session, pushed.id, "d" * 40, client=github.client())["posted"]
    assert start_check(session, opened.id, "b" * 40, client=github.client()) is None
    assert [(r["head_sha"][0], r["status"]) for r in github.runs] == [("b", "completed"), ("d", "in_progress")]


def test_a_token_without_check_runs_marks_the_new_head_pending(session, github_settings) -> None:
    job = _compare_job(session, JobStatus.queued)
    script = Script(httpx.Response(403, json={"message": "Resource not accessible by personal access token"}),
                    httpx.Response(201, json={"id": 3}))
    result = start_check(session, job.id, "b" * 40, client=httpx.Client(transport=httpx.MockTransport(script)))
    status = script.requests[1]
    assert status.url.path == f"/api/v3/repos/acme/kern/statuses/{'b' * 40}"
    assert json.loads(status.content) == {"state": "pending", "context": "perfbisect",
                                          "description": "measuring this head",
                                          "target_url": f"https://perf.example/dashboard/jobs/{job.id}"}
    assert (result["via"], result["posted"]) == ("status", True)
