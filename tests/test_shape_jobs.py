"""A job whose kernel takes a slow path on a tenth of its calls from one commit on, its median
unchanged (issue 46): the service keeps each trial's call times, the planner bisects the new
mode like a speed step and confirms it side by side, and the API's outcome names it. The same
job without the slow path names nothing, and a machine whose control got the same slow calls
names nothing either."""

from __future__ import annotations

import random

import pytest

from perfbisect.service.jobs import advance
from perfbisect.service.jobs import repository as jobs_repo
from perfbisect.service.trials.repository import samples_of
from tests.test_job_rounds import harness_result
from tests.test_side_by_side_jobs import CASE, STEP_AT, job_read, lib, run_job, submit  # noqa: F401 (lib: fixture)

CALLS = 40


def calls(rng: random.Random, slow: bool) -> list[float]:
    """One trial's call times (ms): 1% noise, and with `slow` a tenth of them twice as long."""
    times = [rng.lognormvariate(0, 0.01) for _ in range(CALLS)]
    for k in rng.sample(range(CALLS), CALLS // 10) if slow else ():
        times[k] *= 2.0
    return times


def slow_from(step: int | None, control_too: bool = False):
    """A truth whose target takes the slow path from revision `step` on (None: never)."""

    def truth(index: int, rng: random.Random, drift: float = 1.0) -> dict:
        result = harness_result({CASE: 1.0}, rng, noise=0.005)
        slow = step is not None and index >= step
        result["cases"][0]["target_ms"] = calls(rng, slow)
        result["cases"][0]["control_ms"] = calls(rng, slow and control_too)
        return result

    return truth


def test_a_slow_path_on_a_tenth_of_the_calls_is_found_at_its_commit(session, lib, monkeypatch) -> None:
    import tests.test_side_by_side_jobs as sbs
    monkeypatch.setattr(sbs, "truth", slow_from(STEP_AT))
    job = submit(session, lib)
    run_job(session, job)
    read = job_read(session, job.id)
    assert read.culprits == []  # the median did not move
    (shape,) = read.outcome.shapes
    assert (shape.kind, shape.case, shape.first_sha, shape.exact) == ("bimodal", CASE, job.revision_shas[STEP_AT], True)
    assert abs(shape.mode_share - 0.1) < 0.03 and abs(shape.mode_location - 1.0) < 0.1
    timed = jobs_repo.trials_of(session, job.id)
    raw = samples_of(session, [m.id for t in timed for m in t.measurements])
    observations = advance.observations_from(timed, job.revision_shas, "ratio", raw)
    after = observations[STEP_AT]
    assert [len(t) for t in after.samples[CASE]] == [CALLS] * len(after.values[CASE])


QUIET = slow_from(None)


@pytest.mark.parametrize("truth", [QUIET, slow_from(STEP_AT, control_too=True)], ids=["quiet", "machine"])
def test_nothing_is_named_without_a_slow_path_or_when_the_control_has_it_too(session, lib, monkeypatch, truth) -> None:
    import tests.test_side_by_side_jobs as sbs
    monkeypatch.setattr(sbs, "truth", truth)
    job = submit(session, lib)
    run_job(session, job)
    read = job_read(session, job.id)
    assert read.culprits == [] and read.outcome.shapes == []
    (noise,) = read.outcome.noise
    if truth is QUIET:  # the within-trial spread kept per case: the calls' 1%
        assert 0.007 < noise.call_spread < 0.013
