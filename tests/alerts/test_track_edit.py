"""Editing a tracked branch (issue 42): `PATCH /api/tracked-branches/{id}` changes its trigger,
interval, benchmarks (or set) and confirm trials, leaves the rest, refuses bad input with 422 and
needs the admin scope, as adding one does."""

from __future__ import annotations

from tests.alerts.test_loop_service import CASE, OTHER, OTHER_NAME, lib, track  # noqa: F401  (fixture)


def test_patch_changes_what_it_names_and_keeps_the_rest(client, session, lib) -> None:  # noqa: F811
    tracked = track(session, lib, min_magnitude=0.2)
    url = f"/api/tracked-branches/{tracked.id}"
    patched = client.patch(url, json={"trigger": "poll", "interval_s": 600, "confirm_trials": 5,
                                      "benchmarks": [OTHER]})
    assert patched.status_code == 200, patched.text
    read = client.get(url).json()  # stored, not echoed
    assert (read["trigger"], read["interval_s"], read["confirm_trials"]) == ("poll", 600, 5)
    assert [c["name"] for c in read["cases"]] == [OTHER_NAME]
    assert read["min_magnitude"] == 0.2 and read["next_run_at"] is not None  # kept; poll is scheduled now
    assert client.patch(url, json={"trigger": "push"}).json()["next_run_at"] is None


def test_patch_refuses_bad_input_with_422(client, session, lib) -> None:  # noqa: F811
    tracked = track(session, lib)
    url = f"/api/tracked-branches/{tracked.id}"
    for body in ({}, {"trigger": "hourly"}, {"interval_s": 5}, {"confirm_trials": -1}, {"branch": "dev"},
                 {"benchmarks": [CASE], "benchmark_set": "nightly"}, {"benchmarks": [{**CASE, "suite": "nosuch"}]},
                 {"benchmark_set": "nosuch"}):
        refused = client.patch(url, json=body)
        assert refused.status_code == 422, (body, refused.text)
    assert "no benchmark set 'nosuch'" in refused.json()["detail"]
    assert client.get(url).json()["trigger"] == "push"  # nothing changed
    assert client.patch("/api/tracked-branches/999999", json={"interval_s": 600}).status_code == 404


def test_patch_needs_the_scope_adding_needs(make_client, session, lib) -> None:  # noqa: F811
    tracked = track(session, lib)
    url = f"/api/tracked-branches/{tracked.id}"
    assert make_client().patch(url, json={"interval_s": 600}).status_code == 401
    assert make_client("submit").patch(url, json={"interval_s": 600}).status_code == 403
    assert make_client("admin").patch(url, json={"interval_s": 600}).status_code == 200
