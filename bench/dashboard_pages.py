"""How the dashboard's pages scale with a long history: a throw-away SQLite database with one
repository of N first-parent commits and C cases, each commit's per-revision point in
case_points (what storing trials keeps there), then the all-cases overview, one case's history
page, its JSON and the compare view, each fetched through the API a few times.

    .venv/bin/python bench/dashboard_pages.py [--commits 10000] [--cases 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--cases", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="perfbisect-dash-bench-"))
    os.environ.update({"PERFBISECT_HOME": str(home), "DATABASE_URL": f"sqlite:///{home / 'bench.db'}"})
    os.environ.pop("REDIS_URL", None)

    from fastapi.testclient import TestClient
    from sqlalchemy import insert

    from perfbisect.service.api import create_app
    from perfbisect.service.db import session_scope
    from perfbisect.service.migrate import upgrade
    from perfbisect.service.models import Case, CasePoint, Repository, Revision

    upgrade()
    rng = random.Random(1)
    with session_scope() as session:
        repo = Repository(name="big", url="https://github.com/acme/big", env={})
        session.add(repo)
        session.flush()
        session.execute(insert(Revision), [{"repository_id": repo.id, "sha": f"{i:040x}", "subject": f"change {i}",
                                            "pr_number": i, "position": i} for i in range(args.commits)])
        names = [f"gemm M={64 << (i % 5)},N=512,K=512,dtype={'bf16' if i % 2 else 'fp16'}#{i}" for i in range(args.cases)]
        session.execute(insert(Case), [{"repository_id": repo.id, "suite": "gemm", "target": "k.gemm:matmul",
                                        "name": n, "params": {}} for n in names])
        case_ids = [c.id for c in session.query(Case).order_by(Case.id)]
        rev_ids = [r.id for r in session.query(Revision).order_by(Revision.position)]
        rows = []
        for cid in case_ids:
            for pos, rid in enumerate(rev_ids):
                r = 0.9 * rng.gauss(1, 0.01)
                rows.append({"case_id": cid, "revision_id": rid, "fingerprint": "fp", "position": pos, "trials": 3,
                             "value": r * 400, "control_value": 400.0, "ratio": r, "unit": "TFLOP/s",
                             "higher_is_better": True, "value_min": r * 396, "value_max": r * 404,
                             "ratio_min": r * 0.99, "ratio_max": r * 1.01})
        session.execute(insert(CasePoint), rows)
    client = TestClient(create_app())
    case = names[0]
    pages = {"overview page": ("/dashboard/repositories/big", {}),
             "one case's history page": ("/dashboard/repositories/big", {"case": case}),
             "one case, last 500 commits": ("/dashboard/repositories/big", {"case": case, "last": 500}),
             "history JSON, one case": ("/api/history/big", {"case": case}),
             "compare view": ("/dashboard/repositories/big/compare", {"base": f"{10:040x}", "head": f"{20:040x}"})}
    print(f"{args.commits} commits x {args.cases} cases = {len(rows)} case points (SQLite, TestClient)")
    for label, (path, params) in pages.items():
        times, size = [], 0
        for _ in range(args.repeat):
            start = time.perf_counter()
            response = client.get(path, params=params)
            times.append(time.perf_counter() - start)
            assert response.status_code == 200, response.text[:300]
            size = len(response.content)
        print(f"  {label:30s} median {statistics.median(times) * 1000:7.0f} ms  {size / 1024:8.0f} KiB")


if __name__ == "__main__":
    main()
