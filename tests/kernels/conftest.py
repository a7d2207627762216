"""Fixtures for the harness tests: the demo repository written once per session, git
worktrees at any of its commits, and a small custom-suite repository."""
from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from perfbisect.kernels.demo import write_demo_repo
from perfbisect.kernels.demo.writer import load_ground_truth


class DemoRepo:
    def __init__(self, root: Path, trees: Path):
        self.root = root
        self.trees = trees
        self.truth = load_ground_truth(root)
        self.shas = subprocess.run(["git", "rev-list", "--reverse", "--first-parent", "HEAD"],
                                   cwd=root, check=True, capture_output=True, text=True).stdout.split()

    def event(self, key: str) -> dict:
        return next(e for e in self.truth["events"] if e["event"] == key)

    def worktree(self, sha: str) -> Path:
        """A detached git worktree at `sha` (created once, reused)."""
        path = self.trees / sha[:12]
        if not path.exists():
            subprocess.run(["git", "worktree", "add", "-q", "--detach", str(path), sha],
                           cwd=self.root, check=True)
        return path


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> DemoRepo:
    base = tmp_path_factory.mktemp("demo")
    trees = base / "trees"
    trees.mkdir()
    return DemoRepo(write_demo_repo(base / "minikern"), trees)


def write_files(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


# A custom suite with an untimed setup (a "forward" whose output feeds the timed op),
# used with several targets: a correct one, one with an old signature (needs an
# adapter), one that hangs forever, and one that reports its environment.
CUSTOM_SUITE = """
    import torch

    METRIC = "GB/s"
    TOLERANCE = 1e-5

    def validate(params):
        if params.get("N", 0) <= 0:
            raise ValueError("N must be a positive integer")
        return params

    def make_inputs(params, device, generator):
        return (torch.randn(params["N"], generator=generator, device=device),)

    def setup(inputs, params):
        (x,) = inputs
        return (x, torch.tanh(x))          # untimed forward pass

    def bytes_moved(params):
        return 3 * 4 * params["N"]

    def reference(inputs, params):
        x, y = inputs
        return (x.double() * (1 - y.double() ** 2))

    def control(inputs, params):
        x, y = inputs
        return x * (1 - y * y)
"""

CUSTOM_KERNELS = """
    import json
    import os
    import sys


    def tanh_backward(x, y):
        return x * (1 - y * y)


    def tanh_backward_old(grad_and_out):            # the signature before a refactor
        x, y = grad_and_out
        return x * (1 - y * y)


    def adapt_old(fn):
        return lambda x, y: fn((x, y))


    def spin_forever(x, y):
        while True:                                  # a kernel that never finishes
            pass


    def report_env(x, y):
        with open(os.environ["PERFBISECT_TEST_ENV_OUT"], "w") as out:
            json.dump({"triton_cache": os.environ.get("TRITON_CACHE_DIR"),
                       "cache_entries": os.listdir(os.environ["TRITON_CACHE_DIR"]),
                       "sys_path": sys.path[:4], "extra": os.environ.get("MY_REPO_FLAG"),
                       "cwd": os.getcwd()}, out)
        return x * (1 - y * y)
"""


@pytest.fixture(scope="session")
def custom_repo(tmp_path_factory) -> Path:
    """A repository with its code under src/ (import root 'src') and a suite file."""
    root = tmp_path_factory.mktemp("custom")
    return write_files(root, {"bench/tanh_bwd.py": CUSTOM_SUITE,
                              "src/mykern/__init__.py": "",
                              "src/mykern/ops.py": CUSTOM_KERNELS})
