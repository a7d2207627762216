"""Who sees the output of a job's repository code, and what everyone else sees instead.

A build log's tail, a harness error or a case's traceback is whatever the repository's code
printed: a pull request's build can print any file or secret it could read, encoded so that
redaction by value (service/repos/redaction.py) cannot recognise it. So that text is shown only
to the job's submitter and to admins (Principal.may_read_logs); every other answer (anonymous,
another token, a report, a page, a PR comment, a notification) carries the failure's kind and,
where the worker named one, its exit code: "build failed: exit 7". Redaction by value stays as a
second line for those who do see the logs.
"""

from __future__ import annotations

import re
from typing import Any

from perfbisect.service.auth.principal import Principal
from perfbisect.service.bisect.outcomes import FAILURE_WORDS

# The worker's own first line of a failure ("build command exited 7", "harness exited 3 without a
# result:"); anything after that first line is the repository code's output.
_EXIT = re.compile(r"\bexited (-?\d{1,5})\b")
HIDDEN = "hidden: build and harness logs are shown to the job's submitter and to admins"


def may_read(viewer: Principal | None, submitter_token_id: int | None) -> bool:
    return viewer is not None and viewer.may_read_logs(submitter_token_id)


def exit_code(text: str | None) -> int | None:
    """The exit code the worker's first line of a failure names, else None."""
    first = (text or "").strip().partition("\n")[0]
    found = _EXIT.search(first)
    return int(found.group(1)) if found else None


def public_error(words: str, text: str | None) -> str | None:
    """What anyone may read of a failure whose log is `text`: "build failed: exit 7"."""
    if not text:
        return None
    code = exit_code(text)
    return words if code is None else f"{words}: exit {code}"


def public_outcome(outcome: dict[str, Any]) -> dict[str, Any]:
    """The stored outcome JSON with every log text replaced by its public_error."""
    failures = [{**f, "error": public_error(f.get("words") or FAILURE_WORDS.get(f["reason"], f["reason"]), f.get("error"))}
                for f in outcome.get("failures") or ()]
    # A case's failed end is one of the failures: its words name the kind ("build failed").
    words = {(f["sha"], f.get("case")): f["words"] for f in failures if f.get("words")}

    def case(c: dict[str, Any]) -> dict[str, Any]:
        kind = words.get((c.get("failed_at"), c["case"])) or words.get((c.get("failed_at"), None)) or "failed"
        return {**c, "error": public_error(kind, c.get("error"))}

    return {**outcome, "failures": failures, "cases": [case(c) for c in outcome.get("cases") or ()]}
