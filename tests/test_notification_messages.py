"""What each channel says (issue 42, "messages with everything needed to act"): a culprit
notification for a regression and one for wrong results, rendered for the webhook (its JSON),
Slack and email, carry the culprit's PR number and subject, each case's step with its unit (the
ratio to the control and TFLOP/s before → after) or the error against the tolerance, and links
to the dashboard pages of the alert, the job and the case's chart. One renderer
(service/alerts/render.py) writes them all, so the expected strings are literal."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from perfbisect.service.models import AlertKind, Culprit, CulpritKind, Job, JobKind, JobStatus, Revision, TrackedBranch
from perfbisect.service.alerts import service as alerts
from perfbisect.service.notifications import channels
from perfbisect.service.notifications import service as notifications
from perfbisect.service.notifications.models import Delivery
from perfbisect.service.repos.repository import revisions_by_sha
from perfbisect.service.settings import get_settings
from perfbisect.service.tracking import service as tracking
from tests.alerts.test_alert_bot import _bisected, alert  # noqa: F401 (alert: a fixture)
from tests.alerts.test_loop_service import CASE_NAME, lib, measure, result, step_at, track  # noqa: F401 (lib)
from tests.gitrepo import git
from tests.test_notifications import subscribe

BASE = "https://perf.example"


@pytest.fixture
def public_url(monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "public_url", BASE + "/")


def bisect_with(session, lib, kind: CulpritKind, effects: dict) -> Job:  # noqa: F811
    """A finished bisect of `lib` whose one exact culprit is commit 12 ("change 12 (#112)"),
    with the commit's row as the bisect's revision sync stores it."""
    shas = lib["shas"]
    if not revisions_by_sha(session, lib["repo"].id, [shas[12]]):
        session.add(Revision(repository_id=lib["repo"].id, sha=shas[12], subject="change 12 (#112)"))
    job = Job(kind=JobKind.bisect, repository_id=lib["repo"].id, status=JobStatus.succeeded,
              revision_shas=[shas[11], shas[12]], progress={},
              spec={"good": shas[11], "bad": shas[12], "min_effect": 0.02, "metric": "ratio"})
    session.add(job)
    session.flush()
    session.add(Culprit(job_id=job.id, kind=kind, first_sha=shas[12], last_sha=shas[12], effects=effects))
    session.flush()
    session.expire_all()
    return job


def delivered(session, lib, job: Job) -> dict:  # noqa: F811
    subscribe(session, lib["repo"].name, "webhook", "http://127.0.0.1:9/a", ["culprit"])
    [delivery_id] = notifications.job_finished(session, job.id)
    return session.get(Delivery, delivery_id).payload


def links(lib, job: Job) -> list[str]:  # noqa: F811
    name = lib["repo"].name
    return [f"bisect job {job.id}: {BASE}/dashboard/jobs/{job.id}",
            f"chart: gemm M=64: {BASE}/dashboard/repositories/{name}?case=gemm%20M%3D64"]


def test_a_regression_culprit_names_its_pr_with_units_and_pages_in_every_channel(session, lib, public_url) -> None:  # noqa: F811
    job = bisect_with(session, lib, CulpritKind.performance, {"gemm M=64": {
        "rel": -0.576, "ci": [-0.59, -0.56], "before": 1.0, "after": 0.424,
        "before_value": 612.0, "after_value": 259.5, "unit": "TFLOP/s"}})
    payload = delivered(session, lib, job)
    sha, name = lib["shas"][12], lib["repo"].name
    title = f"perfbisect: bisect {job.id} of {name} named 1 culprit: #112 change 12 ({sha[:10]})"
    lines = [f"culprit #112 change 12 ({sha[:10]})",
             "  gemm M=64: -57.6% [-59.0%, -56.0%], ratio to the control 1 → 0.424, 612 → 259.5 TFLOP/s"]
    assert (payload["title"], payload["lines"]) == (title, lines)
    webhook = json.loads(channels.webhook_body(payload))
    assert webhook["job"]["culprits"][0]["pr_number"] == 112
    assert webhook["job"]["culprits"][0]["subject"] == "change 12 (#112)"
    assert [f"{x['label']}: {x['url']}" for x in webhook["links"]] == links(lib, job)
    text = "\n".join([title, *lines, *links(lib, job)])
    assert json.loads(channels.slack_body(payload)) == {"text": text}
    mail = channels.email_message("perfbisect@example.com", "team@example.com", payload)
    assert (mail["Subject"], mail.get_content()) == (title, text + "\n")


def test_a_wrong_results_culprit_gives_the_error_against_the_tolerance(session, lib, public_url) -> None:  # noqa: F811
    job = bisect_with(session, lib, CulpritKind.correctness, {"gemm M=64": {
        "error": 0.3125, "tolerance": 0.01, "message": "max abs error 0.3125 > tolerance 0.01"}})
    payload = delivered(session, lib, job)
    sha = lib["shas"][12]
    lines = [f"culprit #112 change 12 ({sha[:10]}): wrong results",
             "  gemm M=64: wrong results, error 0.3125 against tolerance 0.01"]
    assert payload["lines"] == lines
    text = channels.slack_body(payload).decode()
    assert "n/a" not in text and "100.0%" not in text
    mail = channels.email_message("perfbisect@example.com", "team@example.com", payload)
    assert mail.get_content() == "\n".join([payload["title"], *lines, *links(lib, job)]) + "\n"


def test_a_failed_gate_links_the_pull_request_the_job_and_the_charts(session, lib, public_url) -> None:  # noqa: F811
    repo = lib["repo"]
    repo.url = "https://github.com/acme/kern.git"
    job = Job(kind=JobKind.compare, repository_id=repo.id, status=JobStatus.succeeded,
              revision_shas=[lib["shas"][11], lib["shas"][12]], progress={},
              spec={"good": "main", "bad": "pr", "min_effect": 0.02, "metric": "ratio", "pr_number": 973})
    session.add(job)
    session.flush()
    session.add(Culprit(job_id=job.id, kind=CulpritKind.performance, first_sha=lib["shas"][12],
                        last_sha=lib["shas"][12], effects={"gemm M=64": {"rel": -0.2, "ci": [-0.21, -0.19],
                                                                         "before": 1.0, "after": 0.8}}))
    session.flush()
    session.expire_all()
    subscribe(session, repo.name, "slack", "https://hooks.example/a", ["gate_failure"])
    [delivery_id] = notifications.job_finished(session, job.id)
    text = json.loads(channels.slack_body(session.get(Delivery, delivery_id).payload))["text"]
    assert text.endswith("\n".join(["PR #973: https://github.com/acme/kern/pull/973",
                                    f"compare job {job.id}: {BASE}/dashboard/jobs/{job.id}",
                                    f"chart: gemm M=64: {BASE}/dashboard/repositories/{repo.name}?case=gemm%20M%3D64"]))


@pytest.mark.parametrize(("kind", "effects", "cell"), [
    (CulpritKind.performance, {"gemm M=1": {"rel": -0.554, "ci": [-0.58, -0.52], "before": 0.967, "after": 0.431,
                                            "unit": "TFLOP/s", "before_value": 641.0, "after_value": 286.0}},
     "<td>641 → 286 TFLOP/s</td>"),
    (CulpritKind.correctness, {"gemm M=1": {"error": 0.31, "tolerance": 0.01}},
     "<td>error 0.31 against tolerance 0.01</td>"),
])
def test_the_alert_page_shows_before_after_with_units_or_the_error_against_the_tolerance(
        client, session, alert, kind, effects, cell) -> None:  # noqa: F811
    if kind == CulpritKind.correctness:
        alert.kind = AlertKind.wrong_results
        alert.cases[0].kind, alert.cases[0].rel = AlertKind.wrong_results, None
    _bisected(session, alert, kind, effects)
    html = client.get(f"/dashboard/alerts/{alert.id}").text
    assert '<th scope="col">ratio to the control, before</th>' in html and cell in html


def wrong_with_error(case_values: dict) -> dict:
    """A harness result whose wrong cases carry the error and the message naming the tolerance."""
    out = result(case_values)
    for case in out["cases"]:
        if case["status"] == "wrong_results":
            case["accuracy_error"], case["error"] = 0.25, "max abs error 0.25 above tolerance 0.01"
    return out


def raised(session, lib, values, as_result=result) -> dict:  # noqa: F811
    subscribe(session, lib["repo"].name, "email", "team@example.com", ["alert"])
    tracked = track(session, lib)
    measure(session, tracking.start_run(session, tracked.id).job.id, values, as_result)
    for index in (11, 13, 15):
        git(lib["path"], "update-ref", "refs/heads/main", lib["shas"][index])
        measure(session, tracking.start_run(session, tracked.id, lib["shas"][index]).job.id, values, as_result)
    [delivery_id] = notifications.alerts_raised(session, alerts.detect(session, tracked.id).raised)
    return session.get(Delivery, delivery_id).payload


def test_a_raised_regression_gives_the_step_with_its_unit_and_the_pages(session, lib, public_url) -> None:  # noqa: F811
    payload = raised(session, lib, step_at(lib, 10))
    [line] = payload["lines"]
    assert " step of the ratio to the control in " in payload["title"]
    assert line.startswith(f"{CASE_NAME}: -") and ", ratio to the control " in line and line.endswith(" TFLOP/s")
    alert_id = payload["alert"]["id"]
    assert [x["url"] for x in payload["links"]] == [
        f"{BASE}/dashboard/alerts/{alert_id}",
        f"{BASE}/dashboard/repositories/{lib['repo'].name}?case={quote(CASE_NAME, safe='')}"]


def test_a_raised_wrong_results_alert_gives_the_error_against_the_tolerance(session, lib, public_url) -> None:  # noqa: F811
    shas = lib["shas"]
    payload = raised(session, lib, lambda sha: {CASE_NAME: "wrong" if shas.index(sha) >= 9 else 1.0},
                     wrong_with_error)
    assert payload["lines"] == [f"{CASE_NAME}: wrong results, error 0.25 against tolerance 0.01"]
    assert payload["title"].endswith(f"first wrong in {shas[8][:10]}..{shas[11][:10]}") and "%" not in payload["title"]


def test_a_one_commit_alerts_comment_links_the_track_job_that_named_it(session, alert, monkeypatch) -> None:  # noqa: F811
    from perfbisect.service.alerts import bot

    monkeypatch.setattr(get_settings(), "public_url", BASE)
    job = Job(kind=JobKind.track, repository_id=session.get(TrackedBranch, alert.tracked_branch_id).repository_id, status=JobStatus.succeeded,
              revision_shas=[alert.last_sha], progress={},
              spec={"min_effect": 0.05, "cases": [], "tracked_branch_id": alert.tracked_branch_id})
    session.add(job)
    session.flush()
    session.add(Culprit(job_id=job.id, kind=CulpritKind.performance, first_sha=alert.last_sha,
                        last_sha=alert.last_sha, effects={}))
    session.flush()
    work = bot.comment_work(session, alert.id)
    assert f"[track job {job.id}]({BASE}/dashboard/jobs/{job.id})" in work.links
