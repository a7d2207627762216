"""minicc: the demo's dependency, the code generator minikern's attention takes its exp path from
(issue 44). Its own short history: the fast path, a harmless change, the regression (fast math
dropped, like the seed's), another harmless change. minikern pins it in `minicc.pin`
(`REV = "..."`) from its first commit and bumps it across that range in one commit, so a bisect of minikern names the
bump and the descent into minicc names minicc's own culprit.

The repository's root is the package (`__init__.py`), placed at `minicc/` in minikern's worktree.
"""
from __future__ import annotations

from pathlib import Path

from perfbisect.kernels.demo.gitwrite import commit_all, git

PIN_FILE = "minicc.pin"
PIN_TOKEN = "@@MINICC_HEAD@@"  # in minikern's history: replaced by minicc's last sha
ROOT_TOKEN = "@@MINICC_ROOT@@"  # and by its first (the pin from minikern's first commit until the bump)
REGRESSION = 2  # the index of minicc's culprit

SOURCE = '''"""minicc: how minikern's attention computes its softmax exponentials.
{doc}"""

# True: exp2 with log2(e) folded into the softmax scale (the fast ex2 unit on GPUs, the scale
# folded into Q once on the CPU). False: the score tile scaled separately and a precise exp.
FASTMATH = {fastmath}
'''

COMMITS = [
    ("minicc: exp2 with log2(e) folded into the softmax scale", {"fastmath": True, "doc": ""}, {}),
    ("minicc: document the fast path", {"doc": "\\nThe fast path is exact to the rounding of exp2.\\n"}, {}),
    ("minicc: drop fastmath, precise exp for parity with the reference", {"fastmath": False}, {}),
    ("minicc: add a changelog", {}, {"CHANGELOG.md": "# minicc\\n\\n- precise exp by default\\n"}),
]


def write_minicc(path: Path, epoch: int) -> list[str]:
    """Write minicc's history at `path` with fixed dates from `epoch`; returns its shas, oldest first. An existing repository there is kept
    (the same code writes the same shas)."""
    if (path / ".git").exists():
        return git(path, "rev-list", "--reverse", "HEAD").split()
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    state: dict = {}
    shas = []
    for index, (subject, change, files) in enumerate(COMMITS):
        state.update(change)
        (path / "__init__.py").write_text(SOURCE.format(**state))
        for name, text in files.items():
            (path / name).write_text(text)
        shas.append(commit_all(path, subject, "Dee Codegen", "dee@minicc.dev", epoch + 5 * 3600 * index))
    return shas


def minicc_path(demo_repo: Path) -> Path:
    """Where the demo writer puts minicc: beside the demo repository."""
    return demo_repo.parent / f"{demo_repo.name}.minicc"
