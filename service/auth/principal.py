"""Who is asking: the scopes of a bearer token, and the rules for what they allow.

`admin` may do everything; `submit` and `triage` each include `read` and not each other: a CI
token that submits jobs does not decide what an alert means, and a triager submits nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Scope(str, enum.Enum):
    read = "read"  # GET jobs, trials, reports, repositories, history (the logs of one's own jobs only)
    submit = "submit"  # submit jobs, cancel one's own and read their build and harness logs
    triage = "triage"  # change alerts: state, assignee, bug, note, one or many at once
    admin = "admin"  # register repositories (URLs, build commands, env, import roots), cancel any job, triage

    @property
    def includes(self) -> frozenset[Scope]:
        """The scopes this one grants."""
        if self is Scope.admin:
            return frozenset(Scope)
        return frozenset({self, Scope.read})


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. `token_id` is None only for SYSTEM (the service acting itself)."""

    token_id: int | None
    name: str
    scopes: frozenset[Scope]

    def allows(self, scope: Scope) -> bool:
        return any(scope in held.includes for held in self.scopes)

    @property
    def is_admin(self) -> bool:
        return self.allows(Scope.admin)

    def may_cancel(self, submitter_token_id: int | None) -> bool:
        """A job is cancelled by its submitter or by an admin."""
        return self.is_admin or (self.token_id is not None and self.token_id == submitter_token_id)

    # The output of a job's repository code (build log tail, a harness error, a case's traceback)
    # is its submitter's and the admins': the code can print any file or secret it could read.
    may_read_logs = may_cancel


# The service's own actions (the PR bot superseding its compare jobs): not reachable from a request.
SYSTEM = Principal(token_id=None, name="system", scopes=frozenset({Scope.admin}))
