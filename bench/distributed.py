"""Distributed demo bisect: the same job with 1 and with W `perfbisect worker` processes on the
real Redis and PostgreSQL, printing rounds, wall-clock time, trials, culprits and each worker's
utilisation (busy time over the job's wall time).

    .venv/bin/python bench/distributed.py --workers 1 2            # CPU workers on this machine
    .venv/bin/python bench/distributed.py --workers 1 --device cuda  # one worker per visible GPU

GPU workers are pinned with --gpu i (CUDA_VISIBLE_DEVICES). Needs PostgreSQL on 127.0.0.1:5432
and Redis on 127.0.0.1:6379 (scripts/services.sh starts them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlalchemy import create_engine, text  # noqa: E402

from tests.e2e_support import BIN, fresh_database, fresh_redis, perfbisect, service_env, stop  # noqa: E402


def utilisation(database_url: str, job_id: int) -> tuple[float, dict[str, float]]:
    engine = create_engine(database_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        wall = conn.execute(text("SELECT extract(epoch FROM finished_at - created_at) FROM jobs WHERE id=:j"),
                            {"j": job_id}).scalar_one()
        rows = conn.execute(text("SELECT worker_host, extract(epoch FROM finished_at - started_at) FROM trials "
                                 "WHERE job_id=:j AND finished_at IS NOT NULL"), {"j": job_id}).all()
    busy: dict[str, float] = defaultdict(float)
    for host, seconds in rows:
        busy[host or "?"] += float(seconds or 0)
    return float(wall), {host: b / float(wall) for host, b in busy.items()}


def run(workers: int, device: str, demo_path: Path, home: Path) -> dict:
    database_url = fresh_database(f"perfbisect_bench_{workers}")
    env = service_env(home, database_url, fresh_redis(13))
    subprocess.run([str(BIN / "perfbisect"), "db", "upgrade"], env=env, check=True, capture_output=True)
    log = home / f"workers-{workers}.log"
    procs = [perfbisect("worker", "--device-class", device, *(["--gpu", str(i)] if device != "cpu" else []),
                        env=env, log=log) for i in range(workers)]
    try:
        time.sleep(3)
        started = time.perf_counter()
        done = subprocess.run([str(BIN / "perfbisect"), "demo", "--path", str(demo_path), "--device", device,
                               "--workers", str(workers), "--json"], env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    finally:
        for proc in procs:
            stop(proc)
    if done.returncode != 0:
        raise SystemExit(f"demo failed: {done.stderr[-3000:]}")
    job = json.loads(done.stdout)
    wall, busy = utilisation(database_url, job["id"])
    # Worker processes are told apart by their pid; report each one's share.
    return {"workers": workers, "wall_s": round(seconds, 1), "job_wall_s": round(wall, 1),
            "rounds": job["progress"]["rounds"], "trials": job["progress"]["trials"],
            "revisions_measured": job["progress"]["measured"],
            "culprits": sorted(f"{c['first_sha'][:10]}..{c['last_sha'][:10]}" if not c["exact"] else c["last_sha"][:10]
                               for c in job["culprits"] if c["kind"] == "performance"),
            "utilisation": {k: round(v, 2) for k, v in busy.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="perfbisect-bench-") as tmp:
        demo_path = Path(tmp) / "minikern"
        results = [run(w, args.device, demo_path, Path(tmp) / f"home{w}") for w in args.workers]
    print(f"{'workers':>7} {'wall s':>7} {'rounds':>6} {'trials':>6} {'revs':>5}  utilisation per worker      culprits")
    for r in results:
        util = " ".join(f"{v:.2f}" for v in r["utilisation"].values())
        print(f"{r['workers']:>7} {r['wall_s']:>7} {r['rounds']:>6} {r['trials']:>6} {r['revisions_measured']:>5}"
              f"  {util:<27} {' '.join(r['culprits'])}")
    same = len({tuple(r["culprits"]) for r in results}) == 1
    print(f"same culprits in every run: {same}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
