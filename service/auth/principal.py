"""Who is asking: the scopes of a bearer token, and the rules for what they allow.

Scopes nest: `admin` may do everything `submit` may, and `submit` everything `read` may.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Scope(str, enum.Enum):
    read = "read"  # GET jobs, trials with their logs, reports, repositories, history
    submit = "submit"  # submit jobs, cancel one's own
    admin = "admin"  # register repositories (URLs, build commands, env, import roots), cancel any job

    @property
    def rank(self) -> int:
        return list(Scope).index(self)


@dataclass(frozen=True)
class Principal:
    """An authenticated caller. `token_id` is None only for SYSTEM (the service acting itself)."""

    token_id: int | None
    name: str
    scopes: frozenset[Scope]

    def allows(self, scope: Scope) -> bool:
        return any(held.rank >= scope.rank for held in self.scopes)

    @property
    def is_admin(self) -> bool:
        return self.allows(Scope.admin)

    def may_cancel(self, submitter_token_id: int | None) -> bool:
        """A job is cancelled by its submitter or by an admin."""
        return self.is_admin or (self.token_id is not None and self.token_id == submitter_token_id)


# The service's own actions (the PR bot superseding its compare jobs): not reachable from a request.
SYSTEM = Principal(token_id=None, name="system", scopes=frozenset({Scope.admin}))
