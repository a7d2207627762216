"""End to end on the CPU demo, through the REST API with real processes (`perfbisect serve`, a
trial worker and a control worker on PostgreSQL and Redis): the demo's #924 bumps its pinned
minicc across minicc's planted regression. A bisect of the attention case over #923..#925 names
#924; the child bisect it starts over minicc's range (the host kept at #924, minicc placed by the
worker at each of its commits) names minicc's own culprit, and the parent's read, report and the
child's read link both ways and give the chain (issue 44)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from perfbisect.cli.runs import DEMO_MIN_EFFECT
from perfbisect.kernels import demo
from perfbisect.kernels.demo.minicc import PIN_FILE, minicc_path
from tests.e2e_support import (
    admin_headers,
    api_server,
    fresh_redis,
    migrated_database,
    perfbisect,
    service_env,
    stop,
    wait_for_job,
)
from tests.test_e2e import history, truth_of

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ATTENTION = [c for c in demo.DEMO_CPU_CASES if c["suite"] == "attention" and c["params"]["S"] == 256]


def test_a_bump_is_descended_through_the_api(demo_repo: Path, tmp_path: Path) -> None:
    env = service_env(tmp_path / "home", migrated_database("perfbisect_e2e_descent"), fresh_redis(11),
                      PERFBISECT_LOCAL_REPO_ROOTS=str(demo_repo.parent))
    admin = admin_headers(env)
    log = tmp_path / "services.log"
    workers = [perfbisect("worker", "--device-class", "cpu", env=env, log=log),
               perfbisect("worker", "--no-trials", "--beat", env=env, log=log)]
    try:
        with api_server(env, log) as base:
            added = httpx.post(f"{base}/api/repositories", headers=admin,
                               json={"name": "minicc", "url": str(minicc_path(demo_repo))})
            assert added.status_code == 201, added.text
            dependency = {"name": "minicc", "repository": "minicc", "path": "minicc",
                          "pin": {"kind": "assign", "file": PIN_FILE, "key": "REV"}}
            registered = httpx.post(f"{base}/api/repositories", headers=admin, json={
                "name": "minikern", "url": str(demo_repo), "build_command": demo.DEMO_BUILD_COMMAND,
                "dependencies": [dependency]})
            assert registered.status_code == 201, registered.text
            truth, shas = truth_of(demo_repo), history(demo_repo)
            planted = truth["dependency"]
            bump = next(e["index"] for e in truth["events"] if e["event"] == planted["event"])
            submitted = httpx.post(f"{base}/api/jobs/bisect", headers=admin, json={
                "repository": "minikern", "good": shas[bump - 1], "bad": shas[bump + 1],
                "benchmarks": [{"suite": "attention", "target": demo.ATTENTION_TARGET,
                                "shapes": [c["params"] for c in ATTENTION]}],
                "device_class": "cpu", "min_effect": DEMO_MIN_EFFECT["cpu"], "policy": demo.DEMO_CPU_POLICY})
            assert submitted.status_code == 202, submitted.text
            parent = wait_for_job(base, submitted.json()["id"], timeout_s=480, log=log)
            assert [c["last_sha"] for c in parent["culprits"]] == [shas[bump]], parent["outcome"]
            (entry,) = parent["descents"]
            assert (entry["dependency"], entry["old"], entry["new"]) == ("minicc", planted["old"], planted["new"])
            assert entry["job_id"] and entry["url"] == f"/api/jobs/{entry['job_id']}"

            child = wait_for_job(base, entry["job_id"], timeout_s=480, log=log)
            assert child["repository"] == "minicc" and child["parent_job_id"] == parent["id"]
            assert child["spec"]["descent"]["host_sha"] == shas[bump]
            assert [c["last_sha"] for c in child["culprits"] if c["kind"] == "performance"] == [planted["sha"]], \
                child["outcome"]
            trials = httpx.get(f"{base}/api/jobs/{child['id']}/trials").json()
            assert {t["status"] for t in trials} == {"ok"}

            read = httpx.get(f"{base}/api/jobs/{parent['id']}").json()
            (line,) = read["descent_lines"]
            assert f"#924 bumps minicc {planted['old'][:7]}..{planted['new'][:7]}; inside it, minicc " \
                   f"{planted['sha'][:7]} {planted['subject']!r}: -" in line, line
            report = httpx.get(f"{base}/api/jobs/{parent['id']}/report").text
            assert "When the culprit is a bump" in report and line in report
            assert f"of job {parent['id']} (level 1" in httpx.get(f"{base}/api/jobs/{child['id']}/report").text
    finally:
        for worker in workers:
            stop(worker)
