"""A trial's own view of its slot: entered by the forked trial (or a revision's fork server)
before any repository code runs, so that nothing one trial writes reaches a later trial of
another revision or repository in the same slot.

    view = TrialView(hidden="/…/trial-cache/<host>/slot-3", writable=("/…/<sha>/jit", "/…/<sha>/reference"))
    enter(view)   # own mount namespace; then no capability is left

Why: a slot's fork server serves the trials of every revision and repository the slot runs, so its
mount view holds the slot's whole revision-cache tree, and its root and /dev are bubblewrap's
tmpfs, writable by the slot's uid and kept for the server's lifetime. A trial that could write
there would plant a compiled kernel or an accuracy reference in another revision's cache, or a
file in / or /dev, for the next trial to load.

How (`enter`): the fork server runs with CAP_SYS_ADMIN and CAP_SETPCAP in the slot's user
namespace (bwrap --cap-add; nothing of the host: the namespace maps only the slot's uid, and
--disable-userns forbids nesting one). The trial's process
- unshares a mount namespace of its own (its mounts are private: nothing propagates back to
  the server's view, and they die with the trial's processes);
- makes / and /dev read-only (their own mounts only: /tmp, /dev/shm, the slot and the device
  nodes are mounts of their own and keep their flags);
- covers `hidden` (the slot's cache tree) with an empty tmpfs, binds back only `writable` (its
  revision's directories, opened beneath `hidden` before they were covered, never through a
  symlink) and makes the tmpfs read-only: other revisions' caches are not there to read or write;
- drops every capability: the ambient and bounding sets cleared, then the effective, permitted
  and inheritable ones, and no_new_privs set (no setuid or file capability can bring one back),
  so the trial can neither unmount nor remount what covers the rest.
`drop_capabilities` checks /proc/self/status afterwards and raises when a capability is left.

Only the standard library (ctypes): kernels/ imports no service code.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from functools import lru_cache

from perfbisect.kernels.harness import procfs, safefs

CAPABILITIES = ("CAP_SYS_ADMIN", "CAP_SETPCAP")  # what a fork server needs for its trials' views
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 0x20, 0x1000, 0x4000, 0x40000, 0x200000
# statvfs's ST_NOSUID, ST_NODEV, ST_NOEXEC, ST_NOATIME, ST_NODIRATIME have MS_'s values; ST_RELATIME not
_KEPT_FLAGS, _ST_RELATIME = 0x2 | 0x4 | 0x8 | 0x400 | 0x800, 0x1000
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522
READ_ONLY = ("/", "/dev")  # bubblewrap's own tmpfs, kept for the fork server's lifetime
_COVER = "mode=0755,size=64k,nr_inodes=256"  # room for the directories the binds need


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


@dataclass(frozen=True)
class TrialView:
    hidden: str                 # a directory covered for the trial (the slot's revision-cache tree)
    writable: tuple[str, ...]   # directories beneath it bound back writable (the revision's own)

    def to_json(self) -> dict:
        return {"hidden": self.hidden, "writable": list(self.writable)}

    @classmethod
    def from_json(cls, data: dict | None) -> TrialView | None:
        return None if data is None else cls(str(data["hidden"]), tuple(str(p) for p in data["writable"]))


@lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = (lambda s: None if s is None else s.encode())
    _check(_libc().mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
           f"mount {target}")


def _prctl(option: int, arg: int, what: str) -> None:
    _check(_libc().prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)), what)


def enter(view: TrialView) -> None:
    """Give this process the view described above, then drop every capability. Raises OSError
    when any step fails: the trial must not run with the slot's whole view."""
    _check(_libc().unshare(CLONE_NEWNS), "unshare a mount namespace")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    for path in READ_ONLY:
        _read_only(path)
    _cover(view)
    drop_capabilities()


def _read_only(path: str) -> None:
    """Remount the mount at `path` read-only, keeping its other flags (nodev on bwrap's /dev
    tmpfs, never on a /dev that holds its device nodes; atime flags a user namespace may not change)."""
    current = os.statvfs(path).f_flag
    kept = current & _KEPT_FLAGS | (MS_RELATIME if current & _ST_RELATIME else 0)
    _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | kept)


def _cover(view: TrialView) -> None:
    """An empty tmpfs over `view.hidden`, with only `view.writable` bound back, then read-only."""
    relatives = []
    for path in view.writable:
        relative = os.path.relpath(path, view.hidden)
        if relative == "." or relative.startswith("..") or os.path.isabs(relative):
            raise OSError(f"{path} is not beneath {view.hidden}")
        relatives.append(relative)
    anchor = safefs.open_anchor(view.hidden)
    try:
        # opened before the cover: afterwards only these descriptors still reach them
        fds = [safefs.open_beneath(anchor, relative) for relative in relatives]
    finally:
        os.close(anchor)
    try:
        _mount("perfbisect-trial", view.hidden, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, _COVER)
        for relative, fd in zip(relatives, fds, strict=True):
            target = os.path.join(view.hidden, relative)
            os.makedirs(target, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
        _read_only(view.hidden)
    finally:
        for fd in fds:
            os.close(fd)


def last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as last:
            return int(last.read())
    except (OSError, ValueError):
        return 63


def keep_permitted_only() -> None:
    """The fork server's own start: its capabilities stay effective for the views it gives its
    trials, but nothing it executes inherits one (ambient and inheritable sets cleared)."""
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "clear the ambient capabilities")
    header, data = CapHeader(_CAPABILITY_VERSION_3, 0), (CapData * 2)()
    _check(_libc().capget(ctypes.byref(header), data), "capget")
    for half in data:
        half.inheritable = 0
    _check(_libc().capset(ctypes.byref(header), data), "capset")


def drop_capabilities() -> None:
    """Leave this process no capability and no way to gain one; raises OSError otherwise."""
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "clear the ambient capabilities")
    bounding = capability_sets().get("CapBnd", 0)
    for cap in range(last_capability() + 1):
        if bounding >> cap & 1:  # (dropping needs CAP_SETPCAP, even what is not there)
            _prctl(PR_CAPBSET_DROP, cap, f"drop capability {cap} from the bounding set")
    _check(_libc().capset(ctypes.byref(CapHeader(_CAPABILITY_VERSION_3, 0)), (CapData * 2)()), "capset")
    _prctl(PR_SET_NO_NEW_PRIVS, 1, "set no_new_privs")
    left = {name: value for name, value in capability_sets().items() if value}
    if left:
        raise OSError(f"capabilities left after dropping them: {left}")


def capability_sets() -> dict[str, int]:
    """CapInh, CapPrm, CapEff, CapBnd and CapAmb of this process (/proc/self/status); raises
    OSError when it cannot be read (the drop cannot then be checked)."""
    fields = procfs.status("self")
    if not fields:
        raise OSError("/proc/self/status is unreadable")
    return {name: int(value, 16) for name, value in fields.items() if name.startswith("Cap")}
