"""Write the demo kernel repository as a real git repository with a fixed history.

Author and committer dates are fixed, so the same code writes the same shas.
"""
from __future__ import annotations

import json
from pathlib import Path

from perfbisect.kernels.demo.gitwrite import commit_all, git
from perfbisect.kernels.demo.history import COMMITS, INITIAL_STATE
from perfbisect.kernels.demo.minicc import COMMITS as MINICC_COMMITS
from perfbisect.kernels.demo.minicc import PIN_TOKEN as MINICC_HEAD
from perfbisect.kernels.demo.minicc import ROOT_TOKEN as MINICC_ROOT
from perfbisect.kernels.demo.minicc import REGRESSION, minicc_path, write_minicc
from perfbisect.kernels.demo.misc_source import render_package

AUTHORS = [("Ada Kernel", "ada@minikern.dev"), ("Bo Tiling", "bo@minikern.dev"),
           ("Cy Softmax", "cy@minikern.dev")]
EPOCH = 1767225600  # 2026-01-01T00:00:00Z; one commit every 7 hours after it


def _write_files(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def write_demo_repo(path: Path, cpu_cases: list[dict] | None = None,
                    gpu_cases: list[dict] | None = None) -> Path:
    """Create the demo repository at `path` (must not exist or be empty); return it.

    Each commit renders the package at its state, writes its extra files and commits
    everything; GROUND_TRUTH.json is added in the last commit's tree.
    """
    from perfbisect.kernels.demo import DEMO_CPU_CASES, DEMO_GPU_CASES
    from perfbisect.kernels.demo.ground_truth import ground_truth
    repo = Path(path)
    repo.mkdir(parents=True, exist_ok=True)
    if any(repo.iterdir()):
        raise FileExistsError(f"{repo} is not empty")
    git(repo, "init", "-q")
    minicc = write_minicc(minicc_path(repo), EPOCH)  # the dependency minikern pins (issue 44)
    state = dict(INITIAL_STATE)
    shas, subjects, events = [], [], {}
    for index, commit in enumerate(COMMITS):
        state.update(commit.state)
        _write_files(repo, render_package(state))
        _write_files(repo, {name: text.replace(MINICC_HEAD, minicc[-1]).replace(MINICC_ROOT, minicc[0])
                            for name, text in commit.files.items()})
        if index == len(COMMITS) - 1:
            truth = ground_truth(shas + ["HEAD"], subjects + [commit.subject],
                                 {**events, **({index: commit.event} if commit.event else {})},
                                 cpu_cases or DEMO_CPU_CASES, gpu_cases or DEMO_GPU_CASES)
            truth["dependency"] = minicc_truth(minicc)
            # the last sha is not known before committing; "HEAD" stands in (no event there)
            (repo / "GROUND_TRUTH.json").write_text(json.dumps(truth, indent=1) + "\n")
        name, email = AUTHORS[index % len(AUTHORS)]
        shas.append(commit_all(repo, commit.subject, name, email, EPOCH + 7 * 3600 * index))
        subjects.append(commit.subject)
        if commit.event:
            events[index] = commit.event
    return repo


def minicc_truth(shas: list[str]) -> dict:
    """What the descent into the bump must name: minicc's culprit inside old..new pin."""
    return {"name": "minicc", "event": "fastmath_dropped", "old": shas[0], "new": shas[-1],
            "sha": shas[REGRESSION], "subject": MINICC_COMMITS[REGRESSION][0],
            "harmless": [s for i, s in enumerate(shas[1:], start=1) if i != REGRESSION]}


def load_ground_truth(repo: Path) -> dict:
    return json.loads((Path(repo) / "GROUND_TRUTH.json").read_text())
