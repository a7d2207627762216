"""What one token may have in the queue at once: PERFBISECT_MAX_OPEN_JOBS_PER_TOKEN queued or
running jobs, and PERFBISECT_MAX_QUEUED_TRIALS_PER_TOKEN pending or running trials of them. A
submission past either is a 429 that says which (no Retry-After: it frees up as jobs finish).
The service's own jobs (tracking, the PR bot: SYSTEM) have no token and no quota."""

from __future__ import annotations

from sqlalchemy.orm import Session

from perfbisect.service.auth import repository as tokens
from perfbisect.service.auth.principal import Principal
from perfbisect.service.errors import TooManyRequests
from perfbisect.service.jobs import repository
from perfbisect.service.settings import get_settings


def check_quota(session: Session, submitter: Principal) -> None:
    """Raises TooManyRequests when `submitter` may not queue another job now."""
    if submitter.token_id is None:
        return
    settings = get_settings()
    if settings.max_open_jobs_per_token or settings.max_queued_trials_per_token:
        tokens.lock(session, submitter.token_id)  # concurrent submissions of one token count one by one
    jobs_cap, trials_cap = settings.max_open_jobs_per_token, settings.max_queued_trials_per_token
    if jobs_cap and (jobs := repository.open_jobs_of_token(session, submitter.token_id)) >= jobs_cap:
        raise TooManyRequests(f"the token {submitter.name!r} has {jobs} queued or running jobs, the most one token "
                              f"may have (PERFBISECT_MAX_OPEN_JOBS_PER_TOKEN={jobs_cap}): wait for one to finish "
                              "or cancel one")
    if trials_cap and (trials := repository.trials_in_flight_of_token(session, submitter.token_id)) >= trials_cap:
        raise TooManyRequests(f"the token {submitter.name!r} has {trials} trials pending or running, the most one "
                              f"token may have (PERFBISECT_MAX_QUEUED_TRIALS_PER_TOKEN={trials_cap}): wait for its "
                              "jobs to progress or cancel one")
