"""Containment of repository code: every build and trial runs in a *slot* of this host.

A slot is a directory under PERFBISECT_HOME/sandbox/<host>/ held with an exclusive flock for as
long as one trial runs in it; it holds the trial's worktree, HOME, TMPDIR, scratch files and
output log. The number of slots is the number of trials running at once, so disk use is bounded
by it; a slot is wiped (and every process still carrying its marker killed) when it is taken and
when it is released, so nothing of a finished, cancelled or dead worker's trial stays behind.

How a process starts contained, is waited for and killed is kernels/harness/contain/'s (the one
interface of containment); who runs it, with which environment and limits, workers/slotpolicy.py
says. This module holds the slots. Inside a slot a command gets:
- Linux namespaces made by bubblewrap (contain/bwrap.py): its own PID namespace that dies
  with it, no network (builds of repositories in PERFBISECT_BUILD_NETWORK_REPOS excepted), a
  mount view of the system read-only and its slot (and its own revision caches) writable, the
  slot's GPU device nodes only, and a toolchain bisect's environment read-only (Slot.readonly);
  where the host cannot make them, the containment below alone, said loudly at every slot;
- an environment built from an allow-list plus the repository's own env: never DATABASE_URL,
  REDIS_URL, tokens or other PERFBISECT_* settings;
- when the worker runs as root, an unprivileged uid of its own per slot
  (PERFBISECT_SANDBOX_UID_BASE + the slot's index, in the group of PERFBISECT_SANDBOX_USER), so
  that no slot can signal another;
- resource limits: a process limit per slot (RLIMIT_NPROC of the slot's uid), RLIMIT_AS (CPU
  trials) or RLIMIT_DATA (builds and GPU trials: the CUDA driver reserves far more address space
  than it uses, so RLIMIT_AS would break it), a file size cap, no core dumps; and where the host
  delegates a cgroup v2 directory, the slot's own cgroup (memory.max, pids.max, cpuset.cpus:
  workers/cgroups.py);
- its output in a file, never a pipe, and a deadline enforced on its whole process tree,
  including processes that called setsid (contain/tree.py), with a stop check (a cancel)
  polled while it runs.

A trial's harness is forked from a fork server (launch.py, contain/forkserver.py) that has
imported torch and runs as the slot's user under the same limits, inside the slot's namespaces
as their init (one server per slot and environment), so that the forked trial inherits them; it
carries the slot's marker and is waited for, cancelled and killed like a subprocess. A
repository that shadows torch or triton, or a host without fork, gets the subprocess;
PERFBISECT_TRIAL_LAUNCHER=subprocess always does.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from perfbisect.kernels.harness import safefs
from perfbisect.kernels.harness.caches import RevisionCaches
from perfbisect.kernels.harness.contain import bwrap, trialview, tree
from perfbisect.kernels.harness.contain.process import Subprocess, supervise
from perfbisect.kernels.harness.launch import ForkServerUnavailable, LaunchRequest, forkable, start_contained
from perfbisect.kernels.harness.runner import Launched, Launcher, read_tail
from perfbisect.service.settings import get_settings
from perfbisect.workers import cgroups, hostshare
from perfbisect.workers.slotpolicy import (MemoryKind, SandboxError, SandboxUser, containment_of, sandbox_user,
                                           scrubbed_env, slot_user, slots_root, use_namespaces)
from perfbisect.workers.trialcache import slot_cache_root

log = logging.getLogger(__name__)

MAX_SLOTS = 256


@dataclass
class Slot:
    """A locked directory for one trial; see the module docstring."""

    path: Path
    user: SandboxUser | None
    marker: str
    contained: bool = False  # in bwrap's namespaces (use_namespaces)
    cgroup: str = ""  # its cgroup v2 directory (workers/cgroups.py); "": rlimits only
    readonly: tuple[str, ...] = ()  # the worker's own directories its trial may read (a toolchain's environment)

    @property
    def worktree(self) -> Path:
        return self.path / "worktree"

    @property
    def home(self) -> Path:
        return self.path / "home"

    @property
    def tmp(self) -> Path:
        return self.path / "tmp"

    @property
    def scratch(self) -> Path:
        return self.path / "scratch"

    @property
    def log_path(self) -> Path:
        return self.path / "output.log"

    @property
    def cache_root(self) -> Path:
        """The slot's own revision caches (workers/trialcache.py), kept across its trials."""
        return slot_cache_root(get_settings(), self.path)

    def give(self, *paths: Path) -> None:
        """Hand the directories `paths` (recursively) to the slot's user, so its code can write
        there: each reached from the slot's directory or its cache tree, whose own paths only
        root can change, without following a symlink (safefs.chown_tree)."""
        if self.user is None:
            return
        for top in paths:
            anchor_path = self.cache_root if top.is_relative_to(self.cache_root) else self.path
            anchor = safefs.open_anchor(anchor_path)
            try:
                fd = safefs.open_beneath(anchor, str(top.relative_to(anchor_path)))
            finally:
                os.close(anchor)
            try:
                safefs.chown_tree(fd, self.user.uid, self.user.gid)
            finally:
                os.close(fd)

    def own_caches(self) -> None:
        """Create the slot's cache tree, mode 0700 and the slot's uid's: no other slot's uid
        may enter it (a planted kernel or reference would be read by this slot's trials). Where
        the slot has no uid of its own, this process's: the tree may be one an earlier slot uid
        owned, which a trial's view (opened in the sandbox, without CAP_DAC_OVERRIDE) must enter."""
        self.cache_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.cache_root.chmod(0o700)
        owner = (self.user.uid, self.user.gid) if self.user is not None else (os.geteuid(), os.getegid())
        os.chown(self.cache_root, *owner)

    def env(self, extra: dict[str, str]) -> dict[str, str]:
        return scrubbed_env({**(bwrap.gpu_env() if self.contained else {}), **extra}, self.home, self.tmp)

    def wrapper(self, cwd: Path, *, network: bool = False, trial: trialview.TrialView | None = None,
                fork_server: bool = False) -> tuple[str, ...]:
        """The bwrap command line of this slot's sandbox (empty where it is not contained): the
        slot writable, nothing of another slot. A trial's has the `trial` view (trial_view): its
        own revision caches, no other. A `fork_server` is the namespace's init and has the
        slot's whole cache tree, with the capabilities to give each trial it forks that view
        (trialview.py: the trial drops them before any repository code runs)."""
        if not self.contained:
            return ()
        extra = {"capabilities": trialview.CAPABILITIES} if fork_server else {"trial": trial}
        writable = (self.path, self.cache_root) if fork_server else (self.path,)
        settings = get_settings()
        view = bwrap.View(writable=tuple(map(str, writable)), readonly=self.readonly, network=network,
                          devices=bwrap.gpu_nodes(),
                          tmpfs_bytes=hostshare.tmpfs_mb(settings) << 20, private=str(settings.home), **extra)
        return (*bwrap.argv(view, chdir=str(cwd), as_pid_1=fork_server),)

    def trial_view(self, caches: RevisionCaches | None) -> trialview.TrialView | None:
        """What a trial may write of the slot's cache tree: its revision's `caches` (None: none)."""
        if not self.contained:
            return None
        own = (caches.jit_dir, caches.reference_dir) if caches is not None else ()
        return trialview.TrialView(str(self.cache_root), tuple(map(str, own)))

    def run(self, cmd: list[str] | str, *, cwd: Path, env: dict[str, str], timeout_s: float,
            memory: MemoryKind | None, should_stop: Callable[[], bool] | None = None,
            network: bool = False, trial: trialview.TrialView | None = None) -> Launched:
        """Run `cmd` (a shell string or argv) contained (with the network only when `network`;
        a trial's in its `trial` view); returns how it ended. `should_stop` is polled about every half
        second: when it says so, the whole tree is killed."""
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        containment = containment_of(self.user, memory, self.wrapper(cwd, network=network, trial=trial), self.cgroup)
        with open(self.log_path, "wb") as out:
            process = Subprocess(argv, containment, cwd=cwd, env={**env, tree.MARKER: self.marker},
                                 out=out.fileno(), marker=self.marker)
            stopped = supervise(process, self.marker, timeout_s, should_stop)
        return Launched(None if stopped else process.returncode, read_tail(self.log_path), stopped)

    def run_forked(self, request: LaunchRequest, *, timeout_s: float, memory: MemoryKind | None,
                   should_stop: Callable[[], bool] | None = None) -> Launched:
        """Run the harness of `request` forked from a fork server that runs as this slot's user
        under its limits (started on first use, shared by the slots of the same containment);
        contained like `run`: output in the slot's log, the deadline and `should_stop` enforced
        on the trial's whole tree. Raises ForkServerUnavailable (then use `run`)."""
        request = replace(request, env={**request.env, tree.MARKER: self.marker})
        # the server's own directory is the slot's HOME: the same for every trial of the slot
        wrapper = self.wrapper(self.home, fork_server=True)
        with open(self.log_path, "wb") as out:
            trial = start_contained(request, containment_of(self.user, memory, wrapper, self.cgroup), out.fileno())
        # also after a clean exit: the whole tree is killed; the server serves this slot only, so
        # all else in its namespace is the trial's, and so is what its /tmp and /dev/shm hold: it
        # kills and empties them (contain/teardown.py)
        stopped = supervise(trial, self.marker, timeout_s, should_stop)
        return Launched(None if stopped else trial.returncode, read_tail(self.log_path), stopped,
                        how="sandbox-fork-server", preloaded=trial.preloaded)

    def launcher(self, memory: MemoryKind | None, should_stop: Callable[[], bool] | None = None,
                 fork: Literal["auto", "fork-server", "subprocess"] = "auto",
                 caches: RevisionCaches | None = None) -> Launcher:
        """A `kernels.harness.runner.Launcher` that runs the harness in this slot: forked from
        a contained fork server unless `fork` is "subprocess" or (with "auto") the fork server
        cannot run this trial, else in a contained subprocess. Either way the trial may write
        `caches` (its revision's) and no other revision's cache of the slot."""
        def launch(request: LaunchRequest, timeout_s: float, scratch: Path) -> Launched:
            self.give(scratch)
            request = replace(request, view=self.trial_view(caches))
            if fork == "fork-server" or (fork == "auto" and forkable(request)):
                try:
                    return self.run_forked(request, timeout_s=timeout_s, memory=memory, should_stop=should_stop)
                except ForkServerUnavailable as exc:
                    if fork == "fork-server":
                        return Launched(1, f"fork server unavailable: {exc}", None, how="sandbox-fork-server")
                    log.warning("trial in a subprocess: %s", exc)
            cmd = [sys.executable, "-m", "perfbisect.kernels.harness", *request.args]
            return self.run(cmd, cwd=request.cwd, env=request.env, timeout_s=timeout_s, memory=memory,
                            should_stop=should_stop, trial=request.view)

        return launch


def _marker_prefix(path: Path) -> str:
    return f"{path}/#"


def _wipe(path: Path) -> None:
    """Kill whatever still carries the slot's marker and remove its files. The slot's directory
    stays (emptied): the slot's fork servers have it mounted."""
    tree.kill_marked(_marker_prefix(path))
    try:
        anchor = safefs.open_anchor(path)
    except OSError:  # none yet
        return
    try:
        for name in os.listdir(anchor):
            try:
                safefs.remove_tree(anchor, name)  # never through a symlink or a mount, at any depth
            except OSError as exc:
                log.warning("slot %s: %s left: %s", path, name, exc)
    finally:
        os.close(anchor)


@contextmanager
def slot(user: SandboxUser | None | Literal["configured"] = "configured") -> Iterator[Slot]:
    """Take the first free slot of this host (a lock held by a dead process is free again),
    wiped and ready; wipe and release it afterwards. `user` defaults to the configured sandbox
    user. Raises SandboxError."""
    tree.harden_worker_process()
    if user == "configured":
        user = sandbox_user()
    root = slots_root()
    root.mkdir(parents=True, exist_ok=True)
    for index in range(MAX_SLOTS):
        path = root / f"slot-{index}"
        handle = open(root / f"slot-{index}.lock", "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        try:
            _wipe(path)
            owner = slot_user(user, index, get_settings())
            taken = Slot(path, owner, f"{_marker_prefix(path)}{uuid.uuid4().hex}", use_namespaces(owner),
                         cgroups.slot_cgroup(get_settings(), index))
            for directory in (path, taken.home, taken.tmp, taken.scratch):
                directory.mkdir(mode=0o755, exist_ok=True)
            taken.give(taken.home, taken.tmp, taken.scratch)
            taken.own_caches()
            yield taken
            return
        finally:
            _wipe(path)
            tree.reap_adopted()
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
    raise SandboxError(f"all {MAX_SLOTS} sandbox slots of this host are in use")


def sweep_idle_slots() -> int:
    """At worker start: wipe every slot no live process holds (those of a worker that died)."""
    root = slots_root()
    swept = 0
    for lock in root.glob("slot-*.lock") if root.is_dir() else []:
        with open(lock, "w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            path = lock.with_suffix("")
            if path.exists():
                _wipe(path)
                swept += 1
            fcntl.flock(handle, fcntl.LOCK_UN)
    return swept
