"""A history as a download from its page: every point of its series as CSV (one row a point)
or as the /api/history JSON, under a filename that says what it holds. Pure."""

from __future__ import annotations

import csv
import io
import re

from perfbisect.dashboards.history import RevisionPoint

FORMATS = {"csv": "text/csv; charset=utf-8", "json": "application/json"}
COLUMNS = ("suite", "target", "case", "fingerprint", "unit", "subject", "pr_number", *RevisionPoint._fields)


def history_csv(body: dict) -> str:
    """The history JSON's points flattened: one row per (case, fingerprint, revision), with the
    revision's subject and PR so a spreadsheet needs no join."""
    commits = {c["sha"]: c for c in body["commits"]}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for case in body["cases"]:
        for series in case["series"]:
            for point in series["points"]:
                commit = commits.get(point["sha"], {})
                writer.writerow([case["suite"], case["target"], case["case"], series["fingerprint"], series["unit"],
                                 commit.get("subject"), commit.get("pr_number"),
                                 *(point[f] for f in RevisionPoint._fields)])
    return out.getvalue()


def download_name(repository: str, fmt: str, *parts: str | None) -> str:
    """e.g. "kern-history-gemm-M=64,N=64.csv": the repository and the filters, in characters
    every file system and the Content-Disposition header take as they are."""
    words = [repository, "history", *(p for p in parts if p)]
    return re.sub(r"[^A-Za-z0-9._=,-]+", "_", "-".join(words))[:150] + f".{fmt}"
