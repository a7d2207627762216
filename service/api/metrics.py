"""GET /metrics: the Prometheus exposition (prometheus-client), computed at scrape time from the
database (and, with a broker, from Redis). Nothing is counted in a process's memory, so every
`serve` process answers the same numbers and no multiprocess directory is needed; the workers
expose nothing themselves, since what they do (trials, their phases and failures, heartbeats,
deliveries) is written to the database anyway. Each scrape costs one aggregate query per
family (the phase histogram reads the phases of every finished trial: scrape every 30-60 s).

The families are listed in the README ("Metrics"), ready for a dashboard.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from perfbisect.service.api.deps import SessionDep, get_viewer
from perfbisect.service.models import Alert, Job, Trial, TrialStatus, WebhookDelivery
from perfbisect.service.notifications.models import Delivery
from perfbisect.service.settings import get_settings
from perfbisect.service.trials.phases import PHASES

router = APIRouter(tags=["health"])
# Seconds: a phase takes from milliseconds (start, teardown) to many minutes (a cold build).
PHASE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
FAILED = [s for s in TrialStatus if s.finished and s not in (TrialStatus.ok, TrialStatus.cancelled)]
FINISHED = [s for s in TrialStatus if s.finished]
# kombu's Redis transport keeps a queue's messages in one list per priority step.
PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


def _jobs(session: Session) -> Metric:
    family = GaugeMetricFamily("perfbisect_jobs", "Jobs by kind and state", labels=["kind", "state"])
    for kind, state, count in session.execute(select(Job.kind, Job.status, func.count()).group_by(Job.kind, Job.status)):
        family.add_metric([kind.value, state.value], count)
    return family


def _trials(session: Session) -> Iterator[Metric]:
    pending = GaugeMetricFamily("perfbisect_trials_waiting", "Trials pending or running, per device class and state",
                                labels=["device_class", "state"])
    failures = CounterMetricFamily("perfbisect_trial_failures", "Finished trials that failed, by kind",
                                   labels=["kind"])
    failed = {s.value: 0 for s in FAILED}
    stmt = select(Trial.device_class, Trial.status, func.count()).group_by(Trial.device_class, Trial.status)
    for device_class, state, count in session.execute(stmt):
        if not state.finished:
            pending.add_metric([device_class, state.value], count)
        elif state.value in failed:
            failed[state.value] += count
    for kind, count in failed.items():
        failures.add_metric([kind], count)
    yield pending
    yield failures


def _phases(session: Session) -> Metric:
    """One pass over the finished trials: each phase's seconds read from the JSON once (a
    materialized CTE), then per phase how many took at most each bucket's bound."""
    family = HistogramMetricFamily("perfbisect_trial_phase_seconds", "Seconds per phase of a finished trial",
                                   labels=["phase"])
    values = (select(*[Trial.phases[phase].as_float().label(phase) for phase in PHASES])
              .where(Trial.status.in_(FINISHED), Trial.phases.is_not(None))
              .cte("phase_values").prefix_with("MATERIALIZED"))
    columns: list[Any] = []
    for phase in PHASES:
        value = values.c[phase]
        columns += [func.count(value), func.coalesce(func.sum(value), 0.0)]
        columns += [func.count().filter(value <= bound) for bound in PHASE_BUCKETS]
    row = session.execute(select(*columns).select_from(values)).one()
    width = 2 + len(PHASE_BUCKETS)
    for index, phase in enumerate(PHASES):
        count, total, *within = row[index * width:(index + 1) * width]
        buckets = [(str(bound), n) for bound, n in zip(PHASE_BUCKETS, within)] + [("+Inf", count)]
        family.add_metric([phase], buckets, sum_value=float(total))
    return family


def _heartbeats(session: Session) -> Metric:
    family = GaugeMetricFamily("perfbisect_worker_last_heartbeat_timestamp_seconds",
                               "Last heartbeat of each worker running a trial (Unix time)", labels=["worker"])
    stmt = (select(Trial.worker_host, func.max(Trial.heartbeat_at)).where(Trial.status == TrialStatus.running,
                                                                         Trial.heartbeat_at.is_not(None))
            .group_by(Trial.worker_host))
    for worker, beat in session.execute(stmt):
        family.add_metric([worker or "unknown"], beat.timestamp())
    return family


def _alerts(session: Session) -> Metric:
    family = GaugeMetricFamily("perfbisect_alerts", "Alerts by kind and triage status", labels=["kind", "status"])
    for kind, status, count in session.execute(select(Alert.kind, Alert.status, func.count())
                                               .group_by(Alert.kind, Alert.status)):
        family.add_metric([kind.value, status.value], count)
    return family


def _deliveries(session: Session) -> Iterator[Metric]:
    notified = GaugeMetricFamily("perfbisect_notification_deliveries",
                                 "Notification deliveries by channel, event and status (pending, delivered, failed)",
                                 labels=["channel", "event", "status"])
    stmt = select(Delivery.channel, Delivery.event, Delivery.status, func.count()).group_by(
        Delivery.channel, Delivery.event, Delivery.status)
    for channel, event, status, count in session.execute(stmt):
        notified.add_metric([channel.value, event.value, status.value], count)
    yield notified
    received = CounterMetricFamily("perfbisect_github_webhook_deliveries", "GitHub webhook deliveries handled",
                                   labels=["event"])
    for event, count in session.execute(select(WebhookDelivery.event, func.count()).group_by(WebhookDelivery.event)):
        received.add_metric([event], count)
    yield received


def _queues() -> Iterator[Metric]:
    """Messages waiting in the broker per queue (device classes and control); with no broker
    (embedded) there is no queue but the database's pending trials."""
    settings = get_settings()
    if settings.embedded:
        return
    from perfbisect.queue import CONTROL_QUEUE
    from perfbisect.service.api.health import broker_client

    up = GaugeMetricFamily("perfbisect_broker_up", "1 when the broker answered this scrape")
    depth = GaugeMetricFamily("perfbisect_queue_depth", "Messages waiting in the broker, per queue", labels=["queue"])
    try:
        client = broker_client(settings.redis_url)
        for queue in [*settings.served_device_classes, CONTROL_QUEUE]:
            depth.add_metric([queue], sum(client.llen(queue + suffix) for suffix in PRIORITY_SUFFIXES))
        up.add_metric([], 1)
    except Exception:  # a broker that is down is a metric, not a failed scrape
        up.add_metric([], 0)
        yield up
        return
    yield up
    yield depth


class DatabaseCollector(Collector):
    def __init__(self, session: Session) -> None:
        self.session = session

    def collect(self) -> Iterator[Metric]:
        yield _jobs(self.session)
        yield from _trials(self.session)
        yield _phases(self.session)
        yield _heartbeats(self.session)
        yield _alerts(self.session)
        yield from _deliveries(self.session)
        yield from _queues()


def registry(session: Session) -> CollectorRegistry:
    """A registry of its own per scrape: the process's default one would add Python's and the
    process's metrics of whichever `serve` process answered, which differ between scrapes."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(session))
    return registry


@router.get("/metrics", dependencies=[Depends(get_viewer)], response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text exposition"}})
def metrics(session: SessionDep) -> Response:
    """Prometheus metrics: jobs by state, trials waiting per device class, broker queue depth,
    trial phase durations, trial failures by kind, worker heartbeats, alerts, notification and
    GitHub webhook deliveries. Reading it needs what reading jobs needs (a read token when
    PERFBISECT_PUBLIC_READS is off)."""
    return Response(generate_latest(registry(session)), media_type=CONTENT_TYPE_LATEST)
