"""The demo's hunk evidence (issue 43): find the localization job that follows a bisect asked
to `localize` (cli/runs.py follows it), print the "why" lines of each culprit's hunks, and score
the named hunks against the planted ground truth (only the CLI and the tests read it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from perfbisect.service.bisect.hunks import split_diff
from perfbisect.service.db import session_scope
from perfbisect.service.hunks import service as hunks
from perfbisect.service.hunks.report import why_lines
from perfbisect.service.hunks.schemas import HunkEvidence
from perfbisect.service.jobs.schemas import JobRead
from perfbisect.service.reports.culprits import pr_label, where


def localization_id(job_id: int) -> int | None:
    with session_scope() as session:
        found = hunks.localizations_of(session, job_id)
        return found[0].id if found else None


def evidence_of(job: JobRead) -> dict[str, HunkEvidence]:
    """last sha -> the hunk evidence of each performance culprit."""
    with session_scope() as session:
        return {c.last_sha: hunks.hunk_evidence(session, job.id, c.last_sha)
                for c in job.culprits if c.kind == "performance"}


def print_why(job: JobRead, evidence: dict[str, HunkEvidence]) -> None:
    """A 'why' block per performance culprit: its hunk lines."""
    if not evidence:
        return
    print("\nwhy (the hunk):")
    for culprit in job.culprits:
        if culprit.last_sha in evidence:
            print(f"  {pr_label(culprit) or where(culprit)}")
            for line in why_lines(evidence[culprit.last_sha]):
                print(f"    {line}")


def responsible(repo: Path, event: dict, device: str) -> set[str]:
    """The line ranges ('path:a-b') of the event's responsible hunks on `device`."""
    text = subprocess.run(["git", "diff", "-M", event["parent"], event["sha"]], cwd=repo, check=True,
                          capture_output=True, text=True).stdout
    fragments = event.get("hunks", {}).get(device, [])
    return {h.line_range() for h in split_diff(text).hunks
            if any(line.startswith("+") and f in line for f in fragments for line in h.lines)}


def hunk_check(job: JobRead, truth: dict, evidence: dict[str, HunkEvidence], repo: Path) -> dict[str, list[str]]:
    """Per planted performance event with a responsible hunk, alone in a culprit's range: 'exact'
    (the named hunks are the responsible ones, on every case the culprit was localized on),
    'harmless' (a named hunk is not responsible), or 'missed' (none named, or not all of them).
    An event whose list is empty (a dependency bump's step, in the pin) is exact when no hunk is
    named and the localization ran on its cases."""
    device = job.spec.device_class
    pos = {sha: i for i, sha in enumerate(job.revision_shas)}
    out: dict[str, list[str]] = {"exact": [], "harmless": [], "missed": []}
    for event in (e for e in truth["events"] if e["kind"] == "perf" and "hunks" in e):
        culprit = next((c for c in job.culprits if c.kind == "performance"
                        and pos.get(c.first_sha, -1) <= event["index"] <= pos.get(c.last_sha, -1)), None)
        found = evidence.get(culprit.last_sha) if culprit is not None else None
        if found is None or found.culprit is None or not found.culprit.cases:
            out["missed"].append(event["event"])
            continue
        truth_ranges = responsible(repo, event, device)
        named = [{h.lines for h in case.hunks} for case in found.culprit.cases if case.case in event["cases"][device]]
        if any(n - truth_ranges for n in named):
            out["harmless"].append(event["event"])
        elif named and all(n == truth_ranges for n in named):
            out["exact"].append(event["event"])
        else:
            out["missed"].append(event["event"])
    return out


def print_hunk_check(job: JobRead, truth: dict, evidence: dict[str, HunkEvidence], repo: Path) -> None:
    check = hunk_check(job, truth, evidence, repo)
    total = sum(len(v) for v in check.values())
    print(f"planted responsible hunks named exactly: {len(check['exact'])}/{total}"
          + (f"; missed: {', '.join(check['missed'])}" if check["missed"] else "")
          + f"; harmless hunks blamed: {len(check['harmless'])}"
          + (f" ({', '.join(check['harmless'])})" if check["harmless"] else ""))
