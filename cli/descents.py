"""The CLI's side of descents into dependency bumps (issue 44): following a bisect's child
bisects (and theirs) to the end, registering the demo's dependency, and the demo's truth check
of the descent (the ground truth is read by the CLI and the tests only, never the service)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from perfbisect.service.jobs.schemas import JobRead

Read = Callable[[int], JobRead]


def follow_descents(job: JobRead, read: Read, follow: Callable[[int], JobRead], console: Console,
                    depth: int = 2) -> JobRead:
    """Follow each child bisect of `job` (and their children, `depth` levels), then read `job`
    again: its read carries the chain once they are done."""
    children = [d for d in job.descents if d.job_id is not None]
    if not children or depth <= 0:
        return job
    for entry in children:
        if entry.toolchain:
            console.print(f"{entry.dependency} {entry.old} -> {entry.new}: bisecting between their commits, "
                          f"job {entry.job_id}")
        else:
            console.print(f"{entry.label or entry.culprit_sha[:10]} bumps {entry.dependency} "
                          f"{entry.old[:10]}..{entry.new[:10]}: bisecting inside it, job {entry.job_id}")
        follow_descents(follow(entry.job_id), read, follow, console, depth - 1)
    return read(job.id)


def demo_dependencies(path: Path, device: str, register: Callable[..., str]) -> list[dict[str, Any]]:
    """Register the demo's dependency repository (minicc, written beside the demo repository)
    and return the demo repository's declaration of it; none for a demo repository written
    before it had one."""
    from perfbisect.kernels.demo.minicc import PIN_FILE, minicc_path

    where = minicc_path(path)
    if not (where / ".git").exists():
        return []
    name = register(where, None, name=f"minicc-demo-{device}")
    return [{"name": "minicc", "repository": name, "path": "minicc",
             "pin": {"kind": "assign", "file": PIN_FILE, "key": "REV"}}]


def descent_truth(job: JobRead, truth: dict, read: Read) -> dict[str, Any] | None:
    """Whether the descent named the planted dependency culprit, and the dependency commits it
    named that are not it; None when the demo has no planted dependency."""
    planted = truth.get("dependency")
    if not planted:
        return None
    named: list[str] = []
    for entry in job.descents:
        if entry.dependency == planted["name"] and entry.job_id is not None:
            child = read(entry.job_id)
            named += [c.last_sha if c.first_sha == c.last_sha else f"{c.first_sha}..{c.last_sha}"
                      for c in child.culprits if c.kind == "performance"]
    return {"found": planted["sha"] in named, "false": [n for n in named if n != planted["sha"]],
            "planted": planted}


def print_descent_truth(check: dict[str, Any] | None) -> None:
    if check is None:
        return
    planted = check["planted"]
    print(f"planted dependency culprit found: {int(check['found'])}/1 ({planted['name']} {planted['sha'][:10]} "
          f"{planted['subject']!r}); false culprits inside the bump: {len(check['false'])}")
