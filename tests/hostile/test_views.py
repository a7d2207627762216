"""Nothing one trial writes reaches a later trial of another revision or repository in the same
slot: a hostile repository's trial plants a file in the JIT cache and the accuracy references of
another repository's revision (their path is no secret: the slot's cache tree, its toolchain's
directory and that revision's sha), and in / and /dev of the slot's fork server; the other
repository's next trial in the same slot, forked by the same server, must find none of it, and
must run without a capability (kernels/harness/contain/trialview.py).

Run as root with the sandbox user, through the real build and trial path (`execute`), like
tests/test_hostile.py; skipped where bubblewrap cannot make namespaces, naming why."""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path

import pytest

from perfbisect.service.settings import get_settings
from perfbisect.service.trials.service import TrialWork
from perfbisect.workers.runner import execute
from tests.hostile import BUILD_COMMAND, SUITE, TARGET, reported, write_hostile_repo
from tests.test_hostile import POLICY, namespaced, shared_sandbox  # noqa: F401 - fixtures

TOKEN = f"planted-{random.randrange(10**9):09d}"

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox user needs a root worker")]

# in the trial of the attacker: every other revision of the slot's cache tree it can list, and the
# victim's revision next to its own (<tree>/<toolchain>/<sha>/jit: the sha is no secret)
_PLANT = """\
mine = os.path.dirname(os.environ["TRITON_CACHE_DIR"])
tree = os.path.dirname(os.path.dirname(mine))
targets = {os.path.join(os.path.dirname(mine), "{victim}")}
try:
    targets |= {os.path.join(tree, t, r) for t in os.listdir(tree) for r in os.listdir(os.path.join(tree, t))}
except OSError:
    pass
outcome = {}
for target in sorted(targets - {mine}):
    for kind in ("jit", "reference"):
        try:
            os.makedirs(os.path.join(target, kind), exist_ok=True)
            with open(os.path.join(target, kind, "{token}.py"), "w") as planted:
                planted.write("import os; os.system('id')")
            outcome[os.path.join(target, kind)] = "written"
        except OSError as exc:
            outcome[os.path.join(target, kind)] = type(exc).__name__
for path in ("/{token}", "/dev/{token}"):
    try:
        open(path, "w").close()
        outcome[path] = "written"
    except OSError as exc:
        outcome[path] = type(exc).__name__
report(planted=outcome)"""

# in the trial of the victim: what its own caches, / and /dev hold, and what it may do
_LOOK = """\
import ctypes
jit = os.environ["TRITON_CACHE_DIR"]
found = sorted(os.path.join(root, name) for top in (jit, os.path.join(os.path.dirname(jit), "reference"))
               for root, dirs, files in os.walk(top) for name in dirs + files if "{token}" in name)
found += [path for path in ("/{token}", "/dev/{token}") if os.path.exists(path)]
with open("/proc/self/status") as status:
    caps = {line.split(":")[0]: line.split()[1] for line in status if line.startswith("Cap")}
libc = ctypes.CDLL(None, use_errno=True)
slot_caches = os.path.dirname(os.path.dirname(os.path.dirname(jit)))
umounted = libc.umount2(slot_caches.encode(), 2) == 0 or os.strerror(ctypes.get_errno())
try:
    open(os.path.join(jit, "mine"), "w").close()
    own = "written"
except OSError as exc:
    own = type(exc).__name__
report(found=found, caps=caps, umount=umounted, own=own)"""


@pytest.fixture(scope="module")
def repos(tmp_path_factory) -> dict[str, tuple[Path, dict[str, str]]]:
    """The victim's repository, and the attacker's, whose commit names the victim's revision."""
    root = tmp_path_factory.mktemp("views")
    victim = write_hostile_repo(root / "victim", TOKEN, {"look": ("exit 0", _LOOK.replace("{token}", TOKEN))})
    plant = _PLANT.replace("{victim}", victim["look"]).replace("{token}", TOKEN)
    attacker = write_hostile_repo(root / "attacker", TOKEN, {"plant": ("exit 0", plant)})
    return {"victim": (root / "victim", victim), "attacker": (root / "attacker", attacker)}


def run(repos, repo: str, escape: str, **work) -> dict:
    path, shas = repos[repo]
    trial = TrialWork(trial_id=1, job_id=1, repo_name=repo, repo_url=str(path), build_command=BUILD_COMMAND,
                      import_root=".", env={}, sha=shas[escape], device_class="cpu",
                      policy=POLICY, cases=[{"suite": SUITE, "target": TARGET, "params": {"N": 1024}}])
    seen = reported(execute(replace(trial, **work))[0])
    assert seen is not None
    return seen


@pytest.mark.parametrize("launcher,preload", [("fork-server", "off"), ("fork-server", "on"), ("subprocess", "off")])
def test_a_trial_cannot_plant_in_another_revisions_cache_or_its_servers_root(repos, launcher, preload, namespaced,
                                                                             monkeypatch):
    """preload "on": the trials go to a fork server of their revision (which enters the view
    itself, before importing the revision's package); "subprocess": a bwrap per trial."""
    monkeypatch.setattr(get_settings(), "trial_launcher", launcher)
    monkeypatch.setattr(get_settings(), "trial_preload", preload)
    before = run(repos, "victim", "look")  # the victim's revision has run in this slot: its caches exist
    assert before["found"] == [] and before["own"] == "written", before
    planted = run(repos, "attacker", "plant")["planted"]
    after = run(repos, "victim", "look")
    assert after["found"] == [], (after, planted)
    assert "written" not in planted.values(), planted
    assert not list((get_settings().home / "trial-cache").rglob(f"{TOKEN}*")), planted
    # no capability: nothing the trial could unmount or remount to get the slot's whole view back
    assert set(after["caps"].values()) == {"0000000000000000"}, after
    assert after["umount"] == "Operation not permitted" and after["own"] == "written", after
