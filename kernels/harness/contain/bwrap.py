"""Linux namespaces around repository code, made by bubblewrap (`bwrap`, docs/containment.md says
why bwrap): every build and trial of a slot runs inside one, started by the worker as the slot's
own unprivileged uid (an unprivileged user namespace maps only that uid: nothing in it is root).

What a sandbox sees and may do:
- its own PID namespace, killed as a whole when its first process ends or the worker dies
  (--die-with-parent), so a setsid double-fork cannot outlive it; it sees no other process;
- no network (a new, empty network namespace): never for trials, for builds unless the
  repository is listed in PERFBISECT_BUILD_NETWORK_REPOS;
- the system, the interpreter and the harness read-only; the slot's directory (worktree, build
  directory, HOME, TMPDIR, scratch) writable, and a trial's own revision caches (no other
  revision's, no other slot's: a fork server has its slot's cache tree and gives each trial
  its view of it, trialview.py);
  a toolchain bisect's environment (the worker's own install of one wheel, issue 44) read-only;
  every mount nosuid and nodev (bwrap's defaults); nothing else: not the service's home (other
  slots, mirrors, the build cache), not /run or /var (PostgreSQL's and Redis's sockets);
  /tmp and /dev/shm are small private tmpfs;
- GPU device nodes of the slot's GPUs only: /dev/nvidia<minor> of each visible GPU plus
  nvidiactl and nvidia-uvm, or /dev/kfd plus the visible GPUs' /dev/dri/renderD*.

Whether a slot uses them (PERFBISECT_SANDBOX_NAMESPACES) is the worker's policy
(workers/sandbox.py use_namespaces); this module builds the command line and probes the host.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import perfbisect
import perfbisect.kernels
from perfbisect.kernels.harness import procfs
from perfbisect.kernels.harness.contain.process import Containment, run_captured
from perfbisect.kernels.harness.contain.trialview import READ_ONLY, TrialView

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/sys")
TMPFS_BYTES = 1 << 30
NVIDIA_SHARED = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


@dataclass(frozen=True)
class View:
    """What one sandbox may write and reach."""

    writable: tuple[str, ...]   # directories bound read-write at the same path
    network: bool = False
    devices: tuple[str, ...] = ()
    tmpfs_bytes: int = TMPFS_BYTES  # the size of each of /tmp and /dev/shm (in the slot's budget)
    capabilities: tuple[str, ...] = ()  # kept in the user namespace (a fork server's, for its trials' views)
    trial: TrialView | None = None  # a trial's view of its slot, made as trialview.enter makes it
    private: str = ""  # the service's home: never shown, even read-only (readonly_paths)
    readonly: tuple[str, ...] = ()  # directories of the worker's own shown read-only (a toolchain's environment)


def bwrap() -> str | None:
    return shutil.which("bwrap")


def readonly_paths(private: str = "") -> list[str]:
    """The interpreter (its prefixes: a virtualenv and the Python it was made from) and the
    perfbisect packages a trial imports (the harness), besides the system directories."""
    paths = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                           os.path.dirname(sys.executable))}
    packages = [os.path.dirname(perfbisect.__file__), *perfbisect.kernels.__path__]
    # and every directory this worker imports from (a GPU node's image keeps torch under /opt,
    # a carried service stack may sit in a PYTHONPATH directory under /tmp)
    packages += [p for p in sys.path if p and os.path.isdir(p) and not _holds(p, private)]
    paths |= {os.path.realpath(p) for p in packages}
    covered = (*SYSTEM_DIRS, *paths)  # a path inside another comes with it
    return sorted(p for p in paths if not any(p == d and d in SYSTEM_DIRS or p.startswith(d + "/") for d in covered))


def _holds(path: str, home: str) -> bool:
    """True for "/", and for the service's `home` or a directory above it (a worker started with
    `python -m` from there has it on sys.path): never shown to repository code, even read-only."""
    path = os.path.realpath(path)
    if path == "/":
        return True
    home = os.path.realpath(home) if home else ""
    return bool(home) and (home == path or home.startswith(path.rstrip("/") + "/"))


def _system_args() -> list[str]:
    args: list[str] = []
    for directory in SYSTEM_DIRS:
        if os.path.islink(directory):  # merged /usr: /bin -> usr/bin
            args += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            args += ["--ro-bind", directory, directory]
    return args


def argv(view: View, *, chdir: str = "/", as_pid_1: bool = False) -> list[str]:
    """The bwrap command line (up to the command) of a sandbox of `view`, starting in `chdir`.
    `as_pid_1`: the command is the namespace's init (a fork server: no process of the sandbox
    may signal it)."""
    args = [bwrap() or "bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--disable-userns", *_system_args()]
    # a private /tmp and /dev/shm in memory, small (TMPDIR is the slot's tmp, on disk); mounted
    # before the binds, so that a bound path under /tmp (an interpreter's or a slot's) shows on it
    args += ["--dev", "/dev", "--proc", "/proc", "--size", str(view.tmpfs_bytes), "--tmpfs", "/dev/shm",
             "--size", str(view.tmpfs_bytes), "--tmpfs", "/tmp"]
    for path in (*readonly_paths(view.private), *view.readonly):
        args += ["--ro-bind", path, path]
    for path in view.writable:
        args += ["--bind", path, path]
    for node in view.devices:
        args += ["--dev-bind", node, node]
    if view.trial is not None:
        args += _trial_view_args(view.trial)
    if not view.network:
        args.append("--unshare-net")
    for capability in view.capabilities:
        args += ["--cap-add", capability]
    if as_pid_1:
        args.append("--as-pid-1")
    return [*args, "--chdir", chdir, "--"]


def _trial_view_args(trial: TrialView) -> list[str]:
    """What trialview.enter does in a forked trial, made by bwrap for a trial of its own: its
    revision's caches bound on an empty, read-only tmpfs over the slot's cache tree, and / and
    /dev read-only (last: the binds made their mount points in them)."""
    args = ["--tmpfs", trial.hidden]
    for path in trial.writable:
        args += ["--bind", path, path]
    return [*args, "--remount-ro", trial.hidden, *(arg for path in READ_ONLY for arg in ("--remount-ro", path))]


def _visible(variable: str) -> list[int] | None:
    """The device indices a *_VISIBLE_DEVICES variable of this worker names (None: all)."""
    value = os.environ.get(variable)
    if value is None:
        return None
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        return None  # UUIDs: the driver resolves them; every node stays reachable


def nvidia_gpus() -> list[tuple[int, str]]:
    """(device minor, UUID) of the NVIDIA GPUs in PCI bus order (CUDA's order for identical GPUs)."""
    gpus = []
    for fields in procfs.nvidia_gpus():
        try:
            gpus.append((int(fields["Device Minor"]), fields.get("GPU UUID", "")))
        except (ValueError, KeyError):
            pass
    return gpus


def nvidia_minors() -> list[int]:
    return [minor for minor, _ in nvidia_gpus()]


def gpu_env() -> dict[str, str]:
    """The *_VISIBLE_DEVICES of a pinned worker as they must read inside its sandbox, where only
    its GPUs' nodes exist: NVIDIA GPUs by UUID, which names them whether the driver enumerates
    every GPU or only those it can open."""
    env = {}
    chosen, gpus = _visible("CUDA_VISIBLE_DEVICES"), nvidia_gpus()
    uuids = [gpus[i][1] for i in chosen or [] if 0 <= i < len(gpus) and gpus[i][1]]
    if uuids and len(uuids) == len(chosen or []):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(uuids)
    # ROCm enumerates only the GPUs whose render node it can open (as in a container given
    # --device renderD*): the slot's GPUs are 0..k-1 in there
    for name in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        picked = _visible(name)
        if picked and os.path.exists("/dev/kfd"):
            env[name] = ",".join(str(i) for i in range(len(picked)))
    return env


def render_nodes() -> list[str]:
    """/dev/dri/renderD* in index order (an AMD GPU's render node)."""
    return [str(p) for p in sorted(Path("/dev/dri").glob("renderD*"), key=lambda p: int(p.name[7:]))]


def gpu_nodes(present=os.path.exists) -> tuple[str, ...]:
    """The device nodes of this worker's GPUs (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES pick
    them; a worker started with --gpu N sees GPU N only) that exist (`present`)."""
    nodes: list[str] = []
    minors = nvidia_minors()
    if minors:
        chosen = _visible("CUDA_VISIBLE_DEVICES")
        picked = minors if chosen is None else [minors[i] for i in chosen if 0 <= i < len(minors)]
        nodes += [*(f"/dev/nvidia{m}" for m in picked), *NVIDIA_SHARED]
    if present("/dev/kfd"):
        renders = render_nodes()
        chosen = _visible("HIP_VISIBLE_DEVICES") or _visible("ROCR_VISIBLE_DEVICES")
        picked = renders if chosen is None else [renders[i] for i in chosen if 0 <= i < len(renders)]
        nodes += ["/dev/kfd", *picked]
    return tuple(n for n in nodes if present(n))


@lru_cache
def unusable(uid: int | None, gid: int | None) -> str | None:
    """Why bwrap cannot make a sandbox for `uid` on this host (None: it can). Checked once."""
    if not sys.platform.startswith("linux"):
        return "not Linux"
    if bwrap() is None:
        return "bwrap is not installed (apt-get install bubblewrap; scripts/system_packages.sh)"
    containment = Containment(uid=uid, gid=gid, die_with_parent=False)
    try:
        code, stderr = run_captured([*argv(View(writable=())), "true"], containment, cwd="/", env=None, timeout_s=60)
    except OSError as exc:
        return f"bwrap failed: {exc}"
    if code != 0:
        return f"bwrap cannot make namespaces here: {stderr.strip()[-300:]} (user namespaces disabled?)"
    return None
