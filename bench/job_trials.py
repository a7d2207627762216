"""Where a bisect's trials went, and how noisy each case was: trials by kind (correctness sweep,
unpaired, short search blocks, full ABBA blocks), the closed pairs that got full blocks, and per
case the spread of one trial's median ratio (log) beside the target's, the control's and the
part the trial's own samples explain (the standard error of its median from the per-sample ratios).

    python bench/job_trials.py HOME/perfbisect.sqlite [JOB_ID]      # an embedded run's database

Reads the SQLite file directly (no service import), so it works on a copy of a finished demo's home.
"""
from __future__ import annotations

import collections
import json
import math
import sqlite3
import statistics
import sys


def kinds(db: sqlite3.Connection, job: int) -> None:
    shas = json.loads(db.execute("SELECT revision_shas FROM jobs WHERE id = ?", (job,)).fetchone()[0])
    pos = {sha: i for i, sha in enumerate(shas)}
    rows = db.execute("""SELECT r.sha, t.accuracy_only, t.block, t.profile FROM trials t
                         JOIN revisions r ON r.id = t.revision_id WHERE t.job_id = ?""", (job,)).fetchall()
    by_kind: collections.Counter = collections.Counter()
    blocks: dict[int, list[int]] = collections.defaultdict(list)
    for sha, accuracy_only, block, profile in rows:
        by_kind["sweep" if accuracy_only else "profile" if profile else "unpaired" if block is None else "block"] += 1
        if block is not None:
            blocks[block].append(pos.get(sha, -1))
    full = collections.Counter(tuple(sorted(set(r))) for r in blocks.values() if len(r) == 4)
    short = sum(len(r) == 2 for r in blocks.values())
    print(f"job {job}: {len(rows)} trials over {len(shas)} revisions: {dict(by_kind)}; "
          f"{len(full and list(full.elements()))} full blocks, {short} short blocks")
    for pair, count in sorted(full.items()):
        print(f"  full blocks at revisions {pair}: {count}")


def noise(db: sqlite3.Connection, job: int) -> None:
    rows = db.execute("""SELECT r.sha, c.name, m.ratio, m.value, m.control_value, s.samples FROM measurements m
                         JOIN trials t ON t.id = m.trial_id JOIN revisions r ON r.id = t.revision_id
                         JOIN cases c ON c.id = m.case_id LEFT JOIN measurement_samples s ON s.measurement_id = m.id
                         WHERE t.job_id = ? AND m.ratio > 0 AND m.value > 0 AND m.control_value > 0
                         AND NOT t.accuracy_only""", (job,)).fetchall()
    per: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    within: dict = collections.defaultdict(list)
    for sha, case, ratio, value, control, samples in rows:
        per[case][sha].append((math.log(ratio), math.log(value), math.log(control)))
        ratios = [math.log(x) for x in (json.loads(samples) if samples else {}).get("ratio", []) if x and x > 0]
        if len(ratios) >= 3:
            within[case].append(1.2533 * statistics.stdev(ratios) / math.sqrt(len(ratios)))
    print(f"{'case':44} {'trial sd':>8} {'target':>8} {'control':>8} {'within':>8}")
    for case, revisions in sorted(per.items()):
        sds = []
        for k in range(3):
            ss = df = 0.0
            for values in revisions.values():
                if len(values) > 1:
                    mean = sum(v[k] for v in values) / len(values)
                    ss += sum((v[k] - mean) ** 2 for v in values)
                    df += len(values) - 1
            sds.append(math.sqrt(ss / df) if df else float("nan"))
        se = statistics.median(within[case]) if within[case] else float("nan")
        print(f"{case[:44]:44} {sds[0]:8.3f} {sds[1]:8.3f} {sds[2]:8.3f} {se:8.3f}")


def main() -> None:
    db = sqlite3.connect(sys.argv[1])
    job = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    kinds(db, job)
    noise(db, job)


if __name__ == "__main__":
    main()
