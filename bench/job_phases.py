"""Print where the trials of a job spent their time (median phases; the job page's table).

    PERFBISECT_HOME=... python bench/job_phases.py JOB_ID
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfbisect.service.db import session_scope  # noqa: E402
from perfbisect.service.jobs.views import trial_reads  # noqa: E402
from perfbisect.service.trials.phases import phase_table  # noqa: E402


def main(job_id: int) -> None:
    with session_scope() as session:
        trials = trial_reads(session, job_id)
    print(f"job {job_id}: {len(trials)} trials; median seconds per trial (share of the phases' sum)")
    for row in phase_table([t.phases for t in trials]):
        share = f"{row.share:6.1%}" if row.share is not None else ""
        print(f"  {row.name:<17} {row.median_s:8.3f} {share}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
