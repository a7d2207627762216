"""The worker's containment policy, from the settings: who runs a slot's code (the sandbox user, a
uid per slot), with which environment (an allow-list, never the service's secrets), under which
limits (workers/hostshare.py: memory, files, processes; a cgroup: workers/cgroups.py) and whether
in bubblewrap's namespaces. kernels/harness/contain/ starts, waits for and kills the processes;
workers/sandbox.py holds the slots."""

from __future__ import annotations

import logging
import os
import pwd
import resource
import socket
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from perfbisect.kernels.harness.contain import bwrap
from perfbisect.kernels.harness.contain.process import Containment, run_captured
from perfbisect.kernels.harness.runner import HARNESS_ROOT
from perfbisect.service.settings import Settings, get_settings
from perfbisect.workers import hostshare
from perfbisect.workers.trialcache import cache_root

log = logging.getLogger(__name__)

ALLOWED_NAMES = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "CUDA_HOME", "ROCM_PATH")
ALLOWED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "HIP_", "ROCR_", "HSA_", "TRITON_", "OMP_", "MKL_", "AITER_", "FLYDSL_")
MemoryKind = Literal["as", "data"]


class SandboxError(Exception):
    """The sandbox cannot be set up (unknown user, an install the user cannot read)."""


@dataclass(frozen=True)
class SandboxUser:
    name: str
    uid: int
    gid: int


def _secret_like(name: str) -> bool:
    from perfbisect.workers.redact import SECRET_NAME

    return bool(SECRET_NAME.search(name))


def scrubbed_env(extra: dict[str, str], home: Path, tmp: Path) -> dict[str, str]:
    """The allow-listed part of this process's environment, a HOME and TMPDIR of the slot, then
    the repository's own env (admin-registered) on top."""
    env = {k: v for k, v in os.environ.items()
           if (k in ALLOWED_NAMES or k.startswith(ALLOWED_PREFIXES)) and not _secret_like(k)}
    env["PATH"] = interpreter_path(env.get("PATH", "/usr/local/bin:/usr/bin:/bin"))
    env.update(HOME=str(home), TMPDIR=str(tmp), USER="perfbisect-sandbox")
    env.update({str(k): str(v) for k, v in extra.items()})
    return env


def interpreter_path(path: str) -> str:
    """PATH with the worker interpreter's directory first, as an activated virtualenv has it:
    `python` and `pip` in a build command are the interpreter the trials run on (with torch),
    never one found through the worker's own PATH, whose entries the sandbox user may not be
    able to enter (pyenv's shims under /root, mode 0700: "python: Permission denied")."""
    bin_dir = os.path.dirname(sys.executable)
    return os.pathsep.join([bin_dir, *(p for p in path.split(os.pathsep) if p and p != bin_dir)])


@lru_cache
def sandbox_user() -> SandboxUser | None:
    """Who runs repository code: PERFBISECT_SANDBOX_USER when this worker is root, else nobody
    is switched to (a worker that is not root runs it as itself). Raises SandboxError when the
    user does not exist or cannot run this interpreter and the harness (in production; elsewhere
    that is logged and repository code runs as the worker's own user)."""
    settings = get_settings()
    if os.geteuid() != 0:
        return None
    if not settings.sandbox_user:
        log.warning("running repository code as root: PERFBISECT_SANDBOX_USER is empty")
        return None
    try:
        user = lookup_user(settings.sandbox_user)
    except KeyError as exc:
        raise SandboxError(f"PERFBISECT_SANDBOX_USER {settings.sandbox_user!r} does not exist") from exc
    problem = _probe(user)
    if problem is None:
        return user
    message = (f"the sandbox user {user.name} cannot run {sys.executable} with the harness in {slots_root()} "
               f"({problem}); install perfbisect where that user can read it and make the sandbox directory "
               "traversable by it (see the README)")
    if settings.environment == "production":
        raise SandboxError(message)
    log.warning("%s; running repository code as root", message)
    return None


def lookup_user(name: str) -> SandboxUser:
    entry = pwd.getpwnam(name)
    return SandboxUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


# Run as the sandbox user: import the harness and enter the directories trials work in. (A
# subprocess changes directory before it switches user, so `cwd=` alone proves nothing: a 0700
# parent such as /root passes as root, then fails every trial.)
_PROBE = """
import os, sys
import perfbisect.kernels.harness
for path in sys.argv[1:]:
    try:
        os.listdir(path)
    except OSError as exc:
        sys.exit(f"cannot enter {path}: {exc.strerror}")
"""


def _probe(user: SandboxUser) -> str | None:
    """Why `user` cannot run the harness from a slot or reach the revision caches, or None."""
    directories = (slots_root(), cache_root(get_settings()))
    for directory in directories:
        directory.mkdir(parents=True, exist_ok=True)
    try:
        code, stderr = run_captured([sys.executable, "-c", _PROBE, *map(str, directories)],
                                    Containment(uid=user.uid, gid=user.gid, die_with_parent=False), cwd="/",
                                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(HARNESS_ROOT)},
                                    timeout_s=120)
    except OSError as exc:
        return str(exc)
    if code is None:
        return "timed out after 120 s"
    return None if code == 0 else (stderr.strip().splitlines() or ["exit code"])[-1]


def slot_user(user: SandboxUser | None, index: int, settings: Settings) -> SandboxUser | None:
    """The uid slot `index` runs as: its own one (in the sandbox user's group) when uids are
    given out per slot, else the sandbox user."""
    if user is None or not settings.sandbox_uid_base:
        return user
    return SandboxUser(f"slot-{index}", settings.sandbox_uid_base + index, user.gid)


def containment_of(user: SandboxUser | None, memory_kind: MemoryKind | None,
                wrapper: tuple[str, ...] = (), cgroup: str = "") -> Containment:
    """How repository code of a slot starts: in its cgroup (workers/cgroups.py, where the host
    delegates one), as `user` (under `wrapper`, its namespaces), with the memory cap of
    `memory_kind`, the file size cap, the slot's process limit, no core dumps, and death with
    the worker. A subprocess applies it itself; a fork server runs under it and its trials
    inherit it."""
    settings = get_settings()
    limits = []
    memory_mb = hostshare.memory_cap_mb(settings)
    if memory_mb and memory_kind:
        limits.append((resource.RLIMIT_AS if memory_kind == "as" else resource.RLIMIT_DATA, memory_mb * 2**20))
    if settings.max_file_mb:
        limits.append((resource.RLIMIT_FSIZE, settings.max_file_mb * 2**20))
    # RLIMIT_NPROC counts every process and thread of the uid: a limit per slot only where the
    # slot has a uid of its own (the shared sandbox user may run other slots' processes)
    own_uid = user is not None and user.uid >= settings.sandbox_uid_base > 0
    if settings.sandbox_max_procs and own_uid:
        limits.append((resource.RLIMIT_NPROC, settings.sandbox_max_procs))
    limits.append((resource.RLIMIT_CORE, 0))
    # nothing a slot writes is writable by another uid (its caches are its own: Slot.cache_root)
    return Containment(uid=user.uid if user else None, gid=user.gid if user else None, limits=tuple(limits),
                       wrapper=wrapper, umask=0o022, cgroup=cgroup)


def use_namespaces(user: SandboxUser | None) -> bool:
    """Whether this slot's code runs in bwrap's namespaces: per PERFBISECT_SANDBOX_NAMESPACES,
    where the host can make them (bwrap.unusable). Where it cannot, "required" (and production's
    "auto") raises SandboxError and "auto" says so loudly at every slot."""
    settings = get_settings()
    if settings.sandbox_namespaces == "off":
        return False
    why = bwrap.unusable(user.uid if user else None, user.gid if user else None)
    if why is None:
        return True
    if settings.sandbox_namespaces == "required" or settings.environment == "production":
        raise SandboxError(f"repository code cannot be contained in namespaces: {why} (see the README, Deployment)")
    log.error("NOT CONTAINED IN NAMESPACES: %s; repository code can reach the network and the host's "
              "files and sockets (set PERFBISECT_SANDBOX_NAMESPACES=off to accept that)", why)
    return False


def slots_root() -> Path:
    settings = get_settings()
    return ((settings.sandbox_dir or settings.home / "sandbox") / socket.gethostname()).resolve()
