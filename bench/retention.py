"""How fast the raw samples' retention deletes, on the database `bench/scale.py` generated (a year
of tracking: 30,000 trials, 1.5 M measurements with their samples). Migrates it to head, then, in
one transaction that is rolled back at the end (so the scale database stays whole), times the dry
run (`retention.due`) and BATCHES prune batches of `retention.BATCH_TRIALS` trials, and prints
trials and sample rows per second and the time a first prune of the whole year would take.

    .venv/bin/python bench/scale.py            # once, to generate perfbisect_scale
    .venv/bin/python bench/retention.py [--batches 10]
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--database", default="perfbisect_scale")
    ap.add_argument("--batches", type=int, default=10)
    args = ap.parse_args()
    os.environ["DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:5432/{args.database}"

    from sqlalchemy import func, select, update
    from sqlalchemy.orm import Session

    from perfbisect.service.db import get_engine
    from perfbisect.service.migrate import upgrade
    from perfbisect.service.models import Trial, utcnow
    from perfbisect.service.trials import retention

    upgrade()
    before = utcnow() + timedelta(days=1)  # every finished trial is due
    with get_engine().connect() as connection:
        outer = connection.begin()
        session = Session(bind=connection)
        total = session.scalar(select(func.count()).select_from(Trial))
        # scale.py's trials carry no finish time: give them one, inside this transaction
        session.execute(update(Trial).where(Trial.finished_at.is_(None)).values(finished_at=Trial.created_at))
        started = time.perf_counter()
        due = retention.due(session, before)
        dry_s = time.perf_counter() - started
        print(f"{total:,} trials; due: {due.trials:,} trials, {due.samples:,} sample rows (dry run {dry_s * 1000:.0f} ms)")
        trials = rows = 0
        started = time.perf_counter()
        for _ in range(args.batches):
            batch = retention.prune_batch(session, before)
            trials, rows = trials + batch.trials, rows + batch.samples
            if not batch.trials:
                break
        spent = time.perf_counter() - started
        print(f"pruned {trials:,} trials ({rows:,} rows) in {spent:.1f} s: {trials / spent:,.0f} trials/s, "
              f"{rows / spent:,.0f} rows/s, {spent / max(1, args.batches) * 1000:.0f} ms per batch of "
              f"{retention.BATCH_TRIALS}; the whole year at that rate: {due.trials / max(1, trials) * spent:.0f} s")
        session.close()
        outer.rollback()  # the scale database keeps its samples


if __name__ == "__main__":
    main()
