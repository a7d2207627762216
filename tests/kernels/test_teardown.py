"""Emptying a trial's /tmp (kernels/harness/contain/teardown.py) on a real directory: everything under
it goes, through links to nowhere (the link goes, not its target), unreadable directories, FIFOs;
a tree deeper than the bound, or a top it cannot open, says False (the fork server then quits)."""
from __future__ import annotations

import os
import time
from pathlib import Path

from perfbisect.kernels.harness.contain import teardown


def _soon() -> float:
    return time.monotonic() + 10


def test_everything_under_it_goes_and_a_links_target_stays(tmp_path: Path):
    top, outside = tmp_path / "tmp", tmp_path / "outside"
    (top / "a" / "b").mkdir(parents=True)
    outside.mkdir()
    (outside / "kept").write_text("x")
    (top / "a" / "b" / "f").write_text("x")
    os.mkfifo(top / "fifo")
    (top / "link").symlink_to(outside)
    (top / "a" / "b").chmod(0)
    (top / "a").chmod(0)
    assert teardown.empty(str(top), _soon())
    assert list(top.iterdir()) == [] and (outside / "kept").read_text() == "x"


def test_a_tree_deeper_than_the_bound_is_refused(tmp_path: Path):
    deep = tmp_path.joinpath(*["d"] * (teardown.MAX_DEPTH + 2))
    deep.mkdir(parents=True)
    assert not teardown.empty(str(tmp_path), _soon())
    assert teardown.empty(str(tmp_path / "absent"), _soon())  # nothing to empty
