"""The PR bot of the loop: the culprit's PR found through GitHub's commit-to-PR lookup (or the
subject's `(#123)` when the lookup fails), a comment there, a fixed alert told on both PRs, and
a second run edits instead of posting again. GitHub's servers mocked (httpx.MockTransport)."""

from __future__ import annotations

import json

import httpx
import pytest

from perfbisect.service.alerts import bot
from perfbisect.service.models import (
    Alert,
    AlertCase,
    AlertKind,
    AlertStatus,
    Case,
    Culprit,
    CulpritKind,
    Job,
    JobKind,
    JobStatus,
    Repository,
    Revision,
    TrackedBranch,
)
from perfbisect.service.settings import get_settings

CULPRIT, FIX = "c" * 40, "f" * 40


class FakeGitHub:
    """Commit-to-PR lookups and issue comments, in memory, paged as GitHub pages them (per_page,
    page, a Link header with rel="next"); records every request."""

    def __init__(self, pulls: dict[str, list[dict]] | None = None, lookup_status: int = 200) -> None:
        self.pulls = pulls or {}
        self.lookup_status = lookup_status
        self.comments: dict[int, list[dict]] = {}
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        parts = request.url.path.split("/")
        if parts[-1] == "pulls":
            return httpx.Response(self.lookup_status, json=self.pulls.get(parts[-2], []))
        if request.method == "GET":
            return self._page(request, self.comments.get(int(parts[-2]), []))
        text = json.loads(request.content)["body"]
        if request.method == "PATCH":
            comment = next(c for cs in self.comments.values() for c in cs if c["id"] == int(parts[-1]))
            comment["body"] = text
            return httpx.Response(200, json={"id": comment["id"], "html_url": f"https://github.test/c/{comment['id']}"})
        pr = int(parts[-2])
        comment = {"id": 100_000 + len(self.comments.setdefault(pr, [])), "body": text}
        self.comments[pr].append(comment)
        return httpx.Response(201, json={"id": comment["id"], "html_url": f"https://github.test/pull/{pr}#c"})

    @staticmethod
    def _page(request: httpx.Request, items: list[dict]) -> httpx.Response:
        per_page, page = int(request.url.params.get("per_page", 30)), int(request.url.params.get("page", 1))
        headers = {}
        if page * per_page < len(items):
            headers["Link"] = f'<{request.url.copy_merge_params({"page": page + 1})}>; rel="next"'
        return httpx.Response(200, json=items[(page - 1) * per_page:page * per_page], headers=headers)

    def client(self) -> httpx.Client:
        return httpx.Client(transport=httpx.MockTransport(self))


@pytest.fixture
def token(monkeypatch):
    settings = get_settings()
    monkeypatch.setattr(settings, "github_token", "tok")
    monkeypatch.setattr(settings, "github_api_url", "https://github.test/api/v3")
    return settings


@pytest.fixture
def alert(session) -> Alert:
    repo = Repository(name="kern-bot", url="https://github.com/acme/kern.git", env={})
    session.add(repo)
    session.flush()
    case = Case(repository_id=repo.id, suite="gemm", target="k:mm", name="gemm M=1", params={})
    tracked = TrackedBranch(repository_id=repo.id, branch="main", device_class="cuda", cases=[], trials_per_head=3)
    session.add_all([case, tracked,
                     Revision(repository_id=repo.id, sha=CULPRIT, subject="gemm: retune tiles (#912)", pr_number=912),
                     Revision(repository_id=repo.id, sha=FIX, subject="gemm: swizzle again (#945)", pr_number=945)])
    session.flush()
    row = Alert(tracked_branch_id=tracked.id, kind=AlertKind.regression, status=AlertStatus.new, before_sha="a" * 40,
                first_sha="b" * 40, last_sha=CULPRIT, magnitude=0.2, culprit_first_sha=CULPRIT,
                culprit_last_sha=CULPRIT, comments={}, detections=1)
    row.cases = [AlertCase(case=case, kind=AlertKind.regression, rel=-0.2, pvalue=1e-5, mean_before=1.0, mean_after=0.8)]
    session.add(row)
    session.flush()
    return row


def test_the_culprits_pull_request_is_found_by_the_commit_lookup_and_told(session, token, alert) -> None:
    github = FakeGitHub(pulls={CULPRIT: [{"number": 77, "merged_at": None}, {"number": 912, "merged_at": "2026"}]})
    outcome = bot.post(bot.comment_work(session, alert.id), client=github.client())
    assert outcome["culprit_pr"] == 912  # the merged PR, not the other open one
    [comment] = outcome["comments"]
    assert comment["posted"] and comment["pr"] == 912
    assert "regression on `main`" in comment["body"] and "-20.0%" in comment["body"]
    lookup = github.requests[0]
    assert lookup.url.path == f"/api/v3/repos/acme/kern/commits/{CULPRIT}/pulls"
    assert lookup.headers["Authorization"] == "Bearer tok"
    bot.record(session, alert.id, outcome)
    assert alert.culprit_pr == 912 and alert.comments == {"912": "https://github.test/pull/912#c"}

    again = bot.post(bot.comment_work(session, alert.id), client=github.client())
    assert [r.method for r in github.requests[-2:]] == ["GET", "PATCH"] and again["comments"][0]["posted"]


def test_a_failed_lookup_falls_back_to_the_subject(session, token, alert) -> None:
    github = FakeGitHub(lookup_status=404)
    outcome = bot.post(bot.comment_work(session, alert.id), client=github.client())
    assert outcome["culprit_pr"] == 912 and outcome["comments"][0]["posted"]


def test_a_fixed_alert_is_told_on_the_culprit_and_on_the_fixing_pull_request(session, token, alert) -> None:
    fixer = Alert(tracked_branch_id=alert.tracked_branch_id, kind=AlertKind.improvement, status=AlertStatus.new,
                  before_sha="d" * 40, first_sha="e" * 40, last_sha=FIX, magnitude=0.25, culprit_first_sha=FIX,
                  culprit_last_sha=FIX, comments={}, detections=1)
    session.add(fixer)
    session.flush()
    alert.status, alert.fixed_by_id = AlertStatus.fixed, fixer.id
    session.flush()
    github = FakeGitHub(pulls={CULPRIT: [{"number": 912}], FIX: [{"number": 945}]})
    outcome = bot.post(bot.comment_work(session, alert.id), client=github.client())
    by_pr = {c["pr"]: c["body"] for c in outcome["comments"]}
    assert set(by_pr) == {912, 945}
    assert "**Fixed**" in by_pr[912] and "`ffffffffff` (#945)" in by_pr[912]
    assert "restored the level lost in alert" in by_pr[945]
    bot.record(session, alert.id, outcome)
    assert fixer.culprit_pr == 945


def test_without_a_token_nothing_is_sent_and_ranges_or_closed_alerts_get_no_comment(session, alert) -> None:
    outcome = bot.post(bot.comment_work(session, alert.id))
    assert outcome["culprit_pr"] == 912 and not outcome["comments"][0]["posted"]
    alert.status = AlertStatus.expected
    assert bot.comment_work(session, alert.id) is None
    alert.status, alert.culprit_first_sha = AlertStatus.new, "9" * 40
    assert bot.comment_work(session, alert.id) is None


def _bisected(session, alert: Alert, kind: CulpritKind, effects: dict) -> None:
    tracked = session.get(TrackedBranch, alert.tracked_branch_id)
    job = Job(kind=JobKind.bisect, repository_id=tracked.repository_id, status=JobStatus.succeeded,
              revision_shas=["a" * 40, CULPRIT], spec={"min_effect": 0.05, "cases": []}, progress={})
    session.add(job)
    session.flush()
    session.add(Culprit(job_id=job.id, kind=kind, first_sha=CULPRIT, last_sha=CULPRIT, effects=effects))
    alert.bisect_job_id = job.id
    session.flush()


def test_the_alert_comment_has_units_interval_metric_and_links(session, token, alert, monkeypatch) -> None:
    monkeypatch.setattr(token, "public_url", "https://perf.example/")
    _bisected(session, alert, CulpritKind.performance, {"gemm M=1": {
        "rel": -0.554, "ci": [-0.58, -0.52], "before": 0.967, "after": 0.431, "unit": "TFLOP/s",
        "before_value": 641.0, "after_value": 286.0}})
    body = bot.post(bot.comment_work(session, alert.id), client=FakeGitHub().client())["comments"][0]["body"]
    assert "| case | ratio to the control (higher is faster), before → after | measured, before → after " \
           "| step [95% CI] |" in body
    assert "| `gemm M=1` | 0.967 → 0.431 | 641 → 286 TFLOP/s | -55.4% [-58.0%, -52.0%] |" in body
    assert f"[alert #{alert.id}](https://perf.example/dashboard/alerts/{alert.id})" in body
    assert f"[bisect job {alert.bisect_job_id}](https://perf.example/dashboard/jobs/{alert.bisect_job_id})" in body
    assert "[chart: gemm M=1](https://perf.example/dashboard/repositories/kern-bot?case=gemm%20M%3D1)" in body


def test_a_wrong_results_alert_comment_names_the_error_and_tolerance(session, token, alert) -> None:
    alert.kind = AlertKind.wrong_results
    alert.cases[0].kind, alert.cases[0].rel = AlertKind.wrong_results, None
    _bisected(session, alert, CulpritKind.correctness, {"gemm M=1": {"error": 0.31, "tolerance": 0.01}})
    body = bot.post(bot.comment_work(session, alert.id), client=FakeGitHub().client())["comments"][0]["body"]
    assert "| `gemm M=1` | passes → wrong results (error 0.31 against tolerance 0.01) | – | – |" in body


def test_an_unbisected_alert_says_it_has_no_interval(session, token, alert) -> None:
    body = bot.post(bot.comment_work(session, alert.id), client=FakeGitHub().client())["comments"][0]["body"]
    assert "| `gemm M=1` | 1 → 0.8 | – | -20.0% (p=1e-05, no interval: not bisected) |" in body


def test_on_a_busy_pull_request_the_bot_edits_its_own_comment_on_page_three(session, token, alert) -> None:
    github = FakeGitHub(pulls={CULPRIT: [{"number": 912}]})
    first = bot.post(bot.comment_work(session, alert.id), client=github.client())["comments"][0]
    assert first["posted"]
    [ours] = github.comments[912]
    ours["body"] = ours["body"].replace("-20.0%", "-19.0%")  # what the earlier run wrote
    others = [{"id": 7_000 + i, "body": f"review comment {i}"} for i in range(249)]
    github.comments[912] = others[:230] + [ours] + others[230:]  # 250 comments, ours the 231st: page 3
    github.requests.clear()

    again = bot.post(bot.comment_work(session, alert.id), client=github.client())["comments"][0]

    pages = [r for r in github.requests if r.method == "GET" and r.url.path.endswith("/issues/912/comments")]
    assert [r.url.params.get("page", "1") for r in pages] == ["1", "2", "3"]
    assert all(r.headers["Authorization"] == "Bearer tok" for r in pages)
    [edit] = [r for r in github.requests if r.method != "GET"]
    assert (edit.method, edit.url.path) == ("PATCH", f"/api/v3/repos/acme/kern/issues/comments/{ours['id']}")
    assert again["posted"] and again["url"] == f"https://github.test/c/{ours['id']}"
    assert len(github.comments[912]) == 250 and "-20.0%" in github.comments[912][230]["body"]


def test_a_one_commit_alert_says_no_bisect_ran(session, token, alert) -> None:
    body = bot.post(bot.comment_work(session, alert.id), client=FakeGitHub().client())["comments"][0]["body"]
    assert "a bisect named" not in body
    assert ("Tracking measured `cccccccccc` (gemm: retune tiles (#912)) and the commit before it and found the step "
            "between them, so no bisect was needed:") in body
    _bisected(session, alert, CulpritKind.performance, {})
    body = bot.post(bot.comment_work(session, alert.id), client=FakeGitHub().client())["comments"][0]["body"]
    assert "Tracking found the step and a bisect named `cccccccccc` (gemm: retune tiles (#912)):" in body
