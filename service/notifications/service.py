"""Notifications: subscriptions (admin), the deliveries an event makes, and recording what a
delivery attempt did. Flushes, never commits; the caller sends DELIVER_NOTIFICATION for each
returned delivery id once its transaction has committed (workers/notify_tasks.py delivers).

Events: `alert` (detect raised a new alert), `culprit` (a bisect named culprits), `gate_failure`
(a pull request's compare job failed its merge gate). A subscription with a branch gets the
events of that tracked branch (its alerts and their bisects); one without gets every event of
the repository.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy.orm import Session

from perfbisect.service import outbound
from perfbisect.service.alerts import one_commit
from perfbisect.service.alerts import repository as alerts_repo
from perfbisect.service.alerts import same_change
from perfbisect.service.alerts import service as alerts
from perfbisect.service.auth.principal import Principal
from perfbisect.service.errors import NotFound
from perfbisect.service.jobs import repository as jobs_repo
from perfbisect.service.jobs import views as job_views
from perfbisect.service.models import Alert, Culprit, JobKind, JobStatus, Revision, utcnow
from perfbisect.service.notifications import events, repository
from perfbisect.service.notifications.models import Channel, Delivery, DeliveryStatus, Subscription
from perfbisect.service.notifications.schemas import SubscriptionCreate
from perfbisect.service.repos import service as repos
from perfbisect.service.repos.repository import revisions_by_sha
from perfbisect.service.webhooks.check import check_verdict


def subscribe(session: Session, data: SubscriptionCreate, actor: Principal) -> Subscription:
    """Raises NotFound for an unknown repository, OutboundRefused (422) for a URL whose host
    resolves to a non-public address not allowed (service/outbound.py). A webhook without a
    secret gets a generated one."""
    repo = repos.get(session, data.repository)
    if data.channel != Channel.email.value:
        outbound.check_url(data.target)
    secret = data.secret
    if data.channel == Channel.webhook.value and secret is None:
        secret = secrets.token_hex(32)
    subscription = Subscription(repository_id=repo.id, branch=data.branch, events=list(data.events),
                                channel=Channel(data.channel), target=data.target, secret=secret,
                                created_by_token_id=actor.token_id)
    session.add(subscription)
    session.flush()
    return subscription


def unsubscribe(session: Session, subscription_id: int) -> None:
    """Its deliveries stay in the log (without the subscription). Raises NotFound."""
    subscription = session.get(Subscription, subscription_id)
    if subscription is None:
        raise NotFound(f"no notification subscription {subscription_id}")
    session.delete(subscription)
    session.flush()


def notify(session: Session, notice: events.Notice) -> list[int]:
    """One pending delivery per subscription that wants `notice` and has not had it yet (a job
    notified twice, by a re-sent task, is delivered once); returns their ids."""
    wanting = repository.matching(session, notice.repository_id, notice.branch, notice.event)
    had = repository.notified(session, [s.id for s in wanting], notice.event, notice.payload["key"])
    rows = [Delivery(subscription_id=s.id, channel=s.channel, event=notice.event, payload=notice.payload)
            for s in wanting if s.id not in had]
    session.add_all(rows)
    session.flush()
    return [row.id for row in rows]


def alerts_raised(session: Session, alert_ids: Iterable[int]) -> list[int]:
    """The deliveries for alerts that detection has just raised."""
    ids = list(alert_ids)
    if not ids:
        return []
    alerts = [alerts_repo.get(session, alert_id) for alert_id in ids]
    branches = alerts_repo.branches(session, [a.tracked_branch_id for a in alerts if a is not None])
    return [d for a in alerts if a is not None
            for d in notify(session, events.alert_raised(branches[a.tracked_branch_id], a,
                                                         one_commit.measured(session, branches[a.tracked_branch_id], a)))]


def _revisions(session: Session, repository_id: int, culprits: Iterable[Culprit]) -> dict[str, Revision]:
    """The exact culprits' commits (their subjects name them and their PRs)."""
    return revisions_by_sha(session, repository_id, [c.last_sha for c in culprits if c.first_sha == c.last_sha])


def _known_pr(alert: Alert | None) -> dict[str, int]:
    return {alert.culprit_last_sha: alert.culprit_pr} if alert is not None and alert.culprit_pr else {}


def culprits_of_alerts(session: Session, alert_ids: Iterable[int]) -> list[int]:
    """The culprit deliveries of alerts whose culprit was named without a bisect (a one-commit
    range): the same event a bisect's culprit sends, about the culprit row the tracking stored."""
    out = []
    for alert_id in alert_ids:
        alert = alerts_repo.get(session, alert_id)
        culprit = alerts_repo.bisect_culprit(session, alert) if alert is not None else None
        job = jobs_repo.get_job(session, culprit.job_id) if culprit is not None else None
        if job is None:
            continue
        tracked = alerts_repo.branches(session, [alert.tracked_branch_id])[alert.tracked_branch_id]
        out += notify(session, events.culprits_named(job, tracked, alert.id, culprits=[culprit],
                                                     revisions=_revisions(session, job.repository_id, [culprit]),
                                                     prs=_known_pr(alert)))
    return out


def job_finished(session: Session, job_id: int) -> list[int]:
    """The deliveries for a finished job: its culprits (a bisect that named any) or its failed
    merge gate (a compare job). None for other jobs."""
    job = jobs_repo.get_job(session, job_id)
    if job is None or not job.status.finished:
        return []
    if job.kind == JobKind.bisect and job.culprits and job.status != JobStatus.cancelled:
        alert = alerts_repo.by_bisect_job(session, job_id)
        if alert is not None and same_change.twin(session, alert, alerts.culprit_of(job, alert)) is not None:
            return []  # another branch's alert is this change and was told already (one alert per change)
        tracked = alerts_repo.branches(session, [alert.tracked_branch_id])[alert.tracked_branch_id] if alert else None
        return notify(session, events.culprits_named(job, tracked, alert.id if alert else None,
                                                     revisions=_revisions(session, job.repository_id, job.culprits),
                                                     prs=_known_pr(alert)))
    if job.kind == JobKind.compare:
        verdict = check_verdict(job_views.job_read(session, job))
        if verdict.conclusion == "failure":
            return notify(session, events.gate_failed(job, verdict))
    return []


@dataclass(frozen=True)
class DeliveryWork:
    """What one attempt needs, read before it so no transaction is open during the send."""

    delivery_id: int
    channel: Channel
    target: str
    secret: str | None
    payload: dict
    attempt: int  # this attempt's number, from 1


def work_of(session: Session, delivery_id: int) -> DeliveryWork | None:
    """None when the delivery is gone, finished, or its subscription was deleted (then it is
    marked failed)."""
    delivery = repository.delivery(session, delivery_id, lock=True)
    if delivery is None or delivery.status != DeliveryStatus.pending:
        return None
    subscription = session.get(Subscription, delivery.subscription_id) if delivery.subscription_id else None
    if subscription is None:
        delivery.status, delivery.last_error = DeliveryStatus.failed, "the subscription was deleted"
        session.flush()
        return None
    return DeliveryWork(delivery.id, subscription.channel, subscription.target, subscription.secret,
                        delivery.payload, delivery.attempts + 1)


def record(session: Session, delivery_id: int, *, ok: bool, retry: bool, status: int | None, error: str | None,
           max_attempts: int) -> bool:
    """Store an attempt's outcome; returns True when another attempt should follow."""
    delivery = repository.delivery(session, delivery_id, lock=True)
    if delivery is None:
        return False
    delivery.attempts += 1
    delivery.response_status, delivery.last_error = status, error
    again = not ok and retry and delivery.attempts < max_attempts
    if ok:
        delivery.status, delivery.delivered_at = DeliveryStatus.delivered, utcnow()
    elif not again:
        delivery.status = DeliveryStatus.failed
    session.flush()
    return again
