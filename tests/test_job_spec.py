"""The typed job spec (service/job_spec.py): every spec shape ever stored still loads, a new
job's defaults come from Settings, the API shows the spec as before, and no product code reads a
spec by string key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import select, text

from perfbisect.service import job_spec
from perfbisect.service.jobs.schemas import BisectCreate, CompareCreate, JobRead
from perfbisect.service.job_spec import MODELS, CompareSpec, SpecType
from perfbisect.service.models import Job, JobKind
from perfbisect.service.settings import Settings, get_settings
from tests.gitrepo import make_repo

ROOT = Path(__file__).resolve().parents[1]
SHA_A, SHA_B = "a" * 40, "b" * 40
CASE = {"suite": "gemm", "target": "minikern.gemm:matmul", "params": {"M": 64, "N": 64, "K": 64, "dtype": "fp32"},
        "name": "gemm M=64,N=64,K=64,dtype=fp32"}

# Every shape a jobs.spec row has had, from the code that wrote it (git history of
# service/jobs/service.py, tracking/service.py, attribution/service.py, alerts/service.py,
# webhooks/service.py) and the rows tests write by hand. No migration ever rewrote a spec.
HISTORICAL = [
    # the first bisect (4892c8a): resolved at once, policy the request's model with its Nones
    ("bisect", {"good": "v1", "bad": "main", "good_sha": SHA_A, "bad_sha": SHA_B, "cases": [CASE],
                "device_class": "cpu", "min_effect": 0.02, "metric": "ratio", "workers": 1, "max_trials": 12,
                "policy": {"min_samples": None, "max_samples": 5}}),
    # the first compare
    ("compare", {"good": SHA_A, "bad": SHA_B, "good_sha": SHA_A, "bad_sha": SHA_B, "cases": [CASE],
                 "device_class": "cuda", "min_effect": 0.03, "metric": "raw", "workers": 2, "max_trials": 12,
                 "pr_number": 7, "policy": None}),
    # a bisect after issue 23, still resolving, with --attribute, sent suite files, bisecting an alert
    ("bisect", {"good": "v1", "bad": "main", "cases": [CASE], "device_class": "cpu", "min_effect": 0.05,
                "metric": "ratio", "workers": 4, "max_trials": 20, "policy": {"max_time_s": 0.5},
                "check_accuracy": True, "scan": 3, "side_by_side": True, "attribute": True,
                "suite_sources": [{"suite": "mine.py", "sha256": "c" * 64, "bytes": 120}], "alert_id": 9}),
    # a PR webhook's compare whose touched cases wait for its range
    ("compare", {"good": SHA_A, "bad": SHA_B, "cases": [CASE], "device_class": "cpu", "min_effect": 0.02,
                 "metric": "ratio", "workers": 2, "max_trials": 12, "pr_number": None, "policy": None,
                 "side_by_side": True, "kernel_paths_pending": True}),
    # a tracked branch's run (7c857b3), and a side-by-side re-measure of a suspected step
    ("track", {"tracked_branch_id": 3, "branch": "main", "cases": [CASE], "device_class": "cpu",
               "metric": "ratio", "policy": None, "trials_per_head": 2, "min_effect": 0.1,
               "good": SHA_A, "bad": SHA_B, "good_sha": SHA_A, "bad_sha": SHA_B}),
    ("track", {"tracked_branch_id": 3, "branch": "main", "cases": [CASE], "device_class": "cpu",
               "metric": "ratio", "policy": None, "trials_per_head": 3, "min_effect": 0.1,
               "good": SHA_A, "bad": SHA_B, "good_sha": SHA_A, "bad_sha": SHA_B,
               "remeasure": {"before": SHA_A, "after": SHA_B}}),
    # the first attribution (no side_by_side), and one after issue 23
    ("attribute", {"parent_job_id": 5, "good_sha": SHA_B, "bad_sha": SHA_B, "good": "main", "bad": "main",
                   "cases": [CASE], "device_class": "cpu", "min_effect": 0.02, "metric": "ratio", "policy": None,
                   "max_trials": 12, "culprits": [{"first_sha": SHA_A, "last_sha": SHA_A, "label": "#105",
                                                   "subject": "tune tiles (#105)"}],
                   "case_culprits": {CASE["name"]: [0]}, "variants": ["0"]}),
    ("attribute", {"parent_job_id": 5, "good_sha": SHA_B, "bad_sha": SHA_B, "good": None, "bad": None,
                   "cases": [CASE], "device_class": "cpu", "min_effect": 0.02, "metric": "ratio", "policy": None,
                   "max_trials": 12, "culprits": [{"first_sha": SHA_A, "last_sha": SHA_A, "label": "#1", "subject": ""},
                                                  {"first_sha": SHA_B, "last_sha": SHA_B, "label": "#2", "subject": ""}],
                   "case_culprits": {CASE["name"]: [0, 1]}, "variants": ["0", "1", "0+1"], "side_by_side": True}),
    # a toolchain bisect (issue 44): its revisions are versions, at one commit
    ("bisect", {"good": "main", "bad": "main", "good_sha": "tinyop==1.0", "bad_sha": "tinyop==2.0", "cases": [CASE],
                "device_class": "cpu", "min_effect": 0.3, "metric": "ratio", "workers": 1, "max_trials": 12,
                "side_by_side": True, "attribute": False, "descend": False,
                "toolchain": {"package": "tinyop", "versions": ["1.0", "1.1", "2.0"], "wheelhouse": "/srv/wheels",
                              "commit": SHA_A}}),
    # rows the tests write by hand (test_metrics, test_alert_bot, test_reports, test_notifications,
    # test_webhooks, test_github_client, test_dashboard, seed_dashboard)
    ("bisect", {}),
    ("bisect", {"min_effect": 0.05, "cases": []}),
    ("bisect", {"good": "v1", "bad": "main", "min_effect": 0.02, "metric": "ratio"}),
    ("bisect", {"good": "v1", "bad": "main", "min_effect": 0.02, "metric": "ratio", "pr_number": 4}),
    ("compare", {"good": "v1", "bad": "main", "min_effect": 0.02, "metric": "ratio", "pr_number": 4}),
    ("bisect", {"good": SHA_A, "bad": SHA_B, "cases": [CASE], "device_class": "cpu"}),
    ("compare", {"good": SHA_A, "bad": SHA_B, "cases": [], "min_effect": 0.02, "pr_number": 7}),
    ("bisect", {"min_effect": 0.02, "cases": [{"name": CASE["name"]}]}),
]


@pytest.mark.parametrize(("kind", "stored"), HISTORICAL)
def test_every_historical_spec_loads_and_is_stored_back_unchanged(kind: str, stored: dict) -> None:
    column = SpecType()
    spec = job_spec.load(stored, kind)
    assert type(spec) is MODELS[kind]
    assert spec.stored() == {k: v for k, v in stored.items()}  # nothing dropped, nothing added
    assert column.process_result_value(column.process_bind_param(spec, None), None) == spec
    for name, value in stored.items():  # each stored key reads back as the attribute of that name
        read = getattr(spec, name)
        assert (read.model_dump() if hasattr(read, "model_dump") else
                [getattr(v, "model_dump", lambda v=v: v)() for v in read] if isinstance(read, list) else read) == value


@pytest.mark.parametrize(("kind", "stored"), [(k, s) for k, s in HISTORICAL if "pr_number" not in s or k == "compare"])
def test_a_row_written_before_specs_carried_their_kind_is_read_as_its_kind(kind: str, stored: dict) -> None:
    """Rows stored before this column type carry no kind: the keys only one kind wrote say it."""
    assert type(SpecType().process_result_value(stored, None)) is MODELS[kind]


def test_a_stored_row_without_a_field_reads_the_default_the_old_readers_used() -> None:
    old = job_spec.load({"good": "v1", "bad": "main", "cases": [CASE], "min_effect": 0.02}, "bisect")
    assert (old.metric, old.workers, old.max_trials, old.scan, old.check_accuracy, old.side_by_side, old.attribute) == \
        ("ratio", 1, 12, None, False, False, None)  # side by side: off for jobs from before issue 23
    assert job_spec.load({}, "track").trials_per_head == 3
    assert job_spec.load({}, "bisect").device_class == "cpu" and not job_spec.load({}, "bisect").resolved


def test_the_row_holds_the_kind_and_the_fields_that_were_set() -> None:
    spec = job_spec.load({"good": "v1", "bad": "main", "min_effect": 0.02}, "bisect")
    assert job_spec.dump(spec) == {"kind": "bisect", "good": "v1", "bad": "main", "min_effect": 0.02}
    resolved = spec.updated(good_sha=SHA_A, bad_sha=SHA_B)
    assert resolved.resolved and resolved.stored() == {**spec.stored(), "good_sha": SHA_A, "bad_sha": SHA_B}
    pending = job_spec.load({"good": "a", "bad": "b", "pr_number": 1, "kernel_paths_pending": True}, "compare")
    assert "kernel_paths_pending" not in pending.updated(unset=["kernel_paths_pending"]).stored()


def test_a_spec_is_frozen_so_no_change_goes_unseen_by_the_session() -> None:
    spec = job_spec.load({"min_effect": 0.02}, "bisect")
    with pytest.raises(Exception, match="frozen"):
        spec.min_effect = 0.5


def test_a_bad_value_in_a_spec_is_refused_with_its_field() -> None:
    with pytest.raises(ValueError, match="min_effect"):
        job_spec.load({"min_effect": "much"}, "bisect")
    with pytest.raises(ValueError, match="remeasure"):
        job_spec.load({"remeasure": ["only one"]}, "track")


def test_every_job_kind_has_a_spec_model_and_sql_paths_name_real_fields() -> None:
    assert {k.value for k in JobKind} == set(MODELS)
    with pytest.raises(KeyError, match="tracked_branch"):
        job_spec.field(Job.spec, "tracked_branch")


def test_the_job_model_types_a_dict_as_its_kind_and_the_database_round_trips_it(session, tmp_path) -> None:
    from tests.factories import create_repository

    make_repo(tmp_path / "lib", ["one", "two"])
    repo = create_repository(session, tmp_path / "lib", name="spec-roundtrip")
    job = Job(kind=JobKind.compare, repository_id=repo.id, revision_shas=[], progress={},
              spec={"good": SHA_A, "bad": SHA_B, "cases": [CASE], "min_effect": 0.04})
    assert isinstance(job.spec, CompareSpec)
    session.add(job)
    session.flush()
    raw = session.execute(text("SELECT spec FROM jobs WHERE id = :id"), {"id": job.id}).scalar_one()
    assert raw == {"kind": "compare", "good": SHA_A, "bad": SHA_B, "cases": [CASE], "min_effect": 0.04}
    session.expire_all()
    assert session.get(Job, job.id).spec == job.spec
    # a JSON path filter on the typed column, as the repositories use
    found = session.scalars(select(Job.id).where(job_spec.field(Job.spec, "bad").as_string() == SHA_B)).all()
    assert job.id in found


def test_the_api_shows_the_spec_as_before() -> None:
    read = JobRead.model_validate({"id": 1, "kind": "compare", "status": "queued", "repository": "lib",
                                   "spec": {"good": "a", "bad": "b", "pr_number": 3}, "progress": {},
                                   "revision_shas": [], "error": None, "created_at": "2026-01-01T00:00:00Z",
                                   "started_at": None, "finished_at": None, "culprits": []})
    assert isinstance(read.spec, CompareSpec) and read.spec.pr_number == 3
    assert read.model_dump(mode="json")["spec"] == {"good": "a", "bad": "b", "pr_number": 3}
    assert JobRead.model_json_schema()["properties"]["spec"] == {"type": "object", "additionalProperties": True,
                                                                 "title": "Spec"}


def test_the_default_min_effect_comes_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("PERFBISECT_DEFAULT_MIN_EFFECT", "0.07")
    assert Settings().default_min_effect == 0.07  # the variable reaches the setting ...
    monkeypatch.setattr(get_settings(), "default_min_effect", 0.07)
    body = {"repository": "lib", "good": "v1", "bad": "main", "benchmarks": [
        {"suite": "gemm", "target": "minikern.gemm:matmul", "shapes": ["M=64,N=64,K=64,dtype=fp32"]}]}
    assert BisectCreate(**body).min_effect == 0.07  # ... and the setting every request that gives none
    assert CompareCreate(**{**body, "base": "v1", "head": "main"}).min_effect == 0.07
    assert BisectCreate(**body, min_effect=0.2).min_effect == 0.2
    assert BisectCreate.model_json_schema()["properties"]["min_effect"]["default"] == 0.07


def test_a_new_bisect_takes_the_default_min_effect_of_the_settings(client, session, tmp_path, monkeypatch) -> None:
    path = tmp_path / "lib"
    make_repo(path, ["initial import (#1)", "add gemm (#2)", "tune tiles (#3)"])
    assert client.post("/api/repositories", json={"name": "lib", "url": str(path)}).status_code == 201
    monkeypatch.setattr(get_settings(), "default_min_effect", 0.07)
    monkeypatch.setattr(get_settings(), "max_trials_per_revision", 9)
    response = client.post("/api/jobs/bisect", json={
        "repository": "lib", "good": "HEAD~2", "bad": "main", "suite": "gemm", "target": "minikern.gemm:matmul",
        "shapes": ["M=64,N=64,K=64,dtype=fp32"]})
    assert response.status_code == 202, response.text
    job = session.get(Job, response.json()["id"])
    assert (job.spec.min_effect, job.spec.max_trials, job.spec.workers) == (0.07, 9, 1)
    shown = client.get(f"/api/jobs/{job.id}").json()["spec"]
    assert set(shown) == {"good", "bad", "good_sha", "bad_sha", "cases", "device_class", "min_effect", "metric",
                          "workers", "max_trials", "policy", "check_accuracy", "scan", "side_by_side"}
    assert shown["min_effect"] == 0.07


# `spec[...]` or `spec.get(` on anything named spec: a job spec read by string key. The harness's
# trial spec (workers/runner.py) is named trial_spec, so it does not match.
STRING_KEY_READ = re.compile(r"\bspec(\[|\.get\()")
PRODUCT = ("service", "workers", "dashboards", "perfbisect", "cli")


def test_no_product_code_reads_a_spec_by_string_key() -> None:
    allowed = ROOT / "service" / "job_spec.py"
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for folder in PRODUCT if (ROOT / folder).is_dir()
             for path in sorted((ROOT / folder).rglob("*")) if path.suffix in (".py", ".html") and path != allowed
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if STRING_KEY_READ.search(line)]
    assert found == []


def test_the_string_key_check_sees_what_it_is_meant_to() -> None:
    for line in ('min = job.spec["min_effect"]', "job.spec.get('pr_number')", "{{ job.spec.get('good') }}",
                 'spec["cases"]'):
        assert STRING_KEY_READ.search(line), line
    for line in ("job.spec.min_effect", 'trial_spec["device"]', "job_spec.load(value)"):
        assert not STRING_KEY_READ.search(line), line
