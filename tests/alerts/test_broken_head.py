"""A tracked head that fails to build or import is a finding: a `broken` alert, raised and
notified like a regression, named at once when it is one commit past a working head, never
bisected (a bisect skips what does not build), and fixed by the next head that works. Real
PostgreSQL and git; the harness is the edge (tests/alerts/test_loop_service.py)."""

from __future__ import annotations

from sqlalchemy import select

from perfbisect.service.alerts import bot
from perfbisect.service.alerts import service as alerts
from perfbisect.service.alerts.schemas import AlertUpdate
from perfbisect.service.jobs import advance
from perfbisect.service.jobs import repository as jobs_repo
from perfbisect.service.models import Alert, AlertKind, AlertStatus
from perfbisect.service.notifications import service as notifications
from perfbisect.service.notifications.models import Delivery
from perfbisect.service.tracking import service as tracking
from perfbisect.service.trials import service as trials
from tests.alerts.test_loop_service import CASE_NAME, lib, result, track  # noqa: F401 (lib: a fixture)
from tests.gitrepo import git
from tests.test_notifications import subscribe

IMPORT_ERROR = {"status": "import_error", "error": "ModuleNotFoundError: No module named 'lib.gemm'",
                "device": {"name": "test-cpu", "torch": "2.13"}, "harness_version": "1", "cases": []}


def run(session, lib, tracked, index: int | None, broken: set[int]) -> None:
    """A run of the branch (a push of commit `index`, or the first backfill) whose heads in
    `broken` fail to import and the others measure 1.0."""
    if index is not None:
        git(lib["path"], "update-ref", "refs/heads/main", lib["shas"][index])
    started = tracking.start_run(session, tracked.id, lib["shas"][index] if index is not None else None)
    while True:
        planned = advance.advance(session, started.job.id)
        if planned.finished or not planned.trial_ids:
            return
        for trial in jobs_repo.trials_of(session, started.job.id):
            if trial.id in planned.trial_ids:
                failed = lib["shas"].index(trial.revision.sha) in broken
                trials.record(session, trial.id, IMPORT_ERROR if failed else result({CASE_NAME: 1.0}))


def test_a_head_that_fails_to_import_raises_a_broken_alert_fixed_by_the_next_head_that_works(session, lib) -> None:
    shas, name = lib["shas"], lib["repo"].name
    subscribe(session, name, "webhook", "https://hooks.example/x", ["alert"])
    tracked = track(session, lib, backfill_every=1, backfill_depth=8)
    run(session, lib, tracked, None, set())
    assert alerts.detect(session, tracked.id).raised == []

    run(session, lib, tracked, 8, {8})
    found = alerts.detect(session, tracked.id)
    [alert_id] = found.raised
    alert = alerts.get(session, alert_id)
    assert (alert.kind, alert.status, alert.before_sha, alert.last_sha) == (AlertKind.broken, AlertStatus.new,
                                                                            shas[7], shas[8])
    assert (alert.culprit_first_sha, alert.culprit_last_sha, alert.cases) == (shas[8], shas[8], [])
    assert alert.note == f"the head {shas[8][:10]} failed: import_error" and found.bisect_job_ids == []
    [delivery] = session.scalars(select(Delivery).where(
        Delivery.id.in_(notifications.alerts_raised(session, found.raised)))).all()
    assert delivery.payload["title"] == (f"perfbisect: broken on {name}@main (cpu), the head {shas[8][:10]} fails to "
                                         f"build or import (the head {shas[8][:10]} failed: import_error)")
    # what the culprit's PR would be told (a local repository has no GitHub slug: nothing is posted)
    assert bot.comment_work(session, alert_id) is None
    assert bot._table(session, alert, "ratio") == [
        f"The head `{shas[8][:10]}` fails to build or import (the head {shas[8][:10]} failed: import_error)."]
    alerts.triage(session, alert_id, AlertUpdate(status="acknowledged"), "alice")

    run(session, lib, tracked, 9, {8, 9})  # still broken: the same alert, not a second one
    assert alerts.detect(session, tracked.id).raised == []
    assert session.get(Alert, alert_id).status == AlertStatus.acknowledged

    run(session, lib, tracked, 10, {8, 9})  # the next head that works fixes it
    again = alerts.detect(session, tracked.id)
    assert again.raised == [] and alert_id in again.comment_alert_ids
    assert session.get(Alert, alert_id).status == AlertStatus.fixed
    assert session.scalars(select(Alert).where(Alert.tracked_branch_id == tracked.id)).all() == [alert]
