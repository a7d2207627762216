"""What one GET /metrics costs on a large history: N finished trials with phases (PostgreSQL),
the full exposition computed as a scrape computes it. Prints the trials, the seconds per scrape
(median of 5) and the exposition's size.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/perfbisect_bench_notify \
        .venv/bin/python bench/metrics_scrape.py --trials 200000
"""

from __future__ import annotations

import argparse
import statistics
import time

from prometheus_client import generate_latest
from sqlalchemy import text


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=200_000)
    args = parser.parse_args()
    from perfbisect.service.api.metrics import registry
    from perfbisect.service.db import get_engine, session_scope
    from perfbisect.service.migrate import upgrade

    with get_engine().begin() as conn:
        conn.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    upgrade()
    from perfbisect.service.models import Job, JobKind, JobStatus, Repository, Revision

    with session_scope() as session:
        repo = Repository(name="r", url="/r", env={})
        session.add(repo)
        session.flush()
        revision = Revision(repository_id=repo.id, sha="a" * 40, subject="s")
        job = Job(kind=JobKind.bisect, status=JobStatus.succeeded, repository_id=repo.id, spec={}, revision_shas=[],
                  progress={})
        session.add_all([revision, job])
        session.flush()
        ids = {"job": job.id, "revision": revision.id, "n": args.trials}
    with get_engine().begin() as conn:
        conn.execute(text(
            "INSERT INTO trials (job_id, revision_id, status, device_class, accuracy_only, attempts, created_at, phases) "
            "SELECT :job, :revision, CASE WHEN i % 50 = 0 THEN 'build_error' ELSE 'ok' END, 'cpu', false, 1, now(), "
            "jsonb_build_object('checkout', random(), 'build', random() * 30, 'start', random() / 10, "
            "'import', random() * 2, 'compile', random() * 5, 'inputs_reference', random(), "
            "'timing', random() * 60, 'teardown', random() / 10) FROM generate_series(1, :n) AS i"), ids)
        conn.execute(text("ANALYZE trials"))
    times = []
    for _ in range(5):
        started = time.perf_counter()
        with session_scope(reads_only=True) as session:
            body = generate_latest(registry(session))
        times.append(time.perf_counter() - started)
    print(f"{args.trials} trials: {statistics.median(times):.3f} s per scrape (median of 5, "
          f"min {min(times):.3f}), {len(body)} bytes")


if __name__ == "__main__":
    main()
