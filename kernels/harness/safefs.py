"""File operations for a root process on trees that repository code could have written (a build
directory, a slot's caches, a trial's result): fd-relative, never following a symlink, never
leaving the directory they start from, never crossing a mount, bounded in size and depth.

    fd = open_beneath(anchor, "a/b", os.O_RDONLY)      # openat2(RESOLVE_BENEATH|NO_SYMLINKS|NO_XDEV)
    data = read_beneath(anchor, "tmp/result.json", limit=2**20, owner=uid)
    copied = copy_tree(src_fd, dst_fd, limits, owner=uid, give=(uid, gid))
    remove_tree(parent_fd, "name")                      # never crosses a symlink or a mount
    chown_tree(fd, uid, gid)

An *anchor* is a directory whose path only root can change (the slot's own directory, a cache's
root): it is opened by name once, with O_NOFOLLOW; everything under it is reached from its fd,
one component at a time (openat2 resolves the whole path in the kernel where Linux >= 5.6 has
it; elsewhere each component is opened with O_NOFOLLOW relative to its parent's fd). A symlink
anywhere on the way, `..`, an absolute path or another filesystem raises `Unsafe`.

The rule for what is found under it, the same for every caller (docs/containment.md):
- a directory is entered (from its parent's fd, O_NOFOLLOW), unless it is a mount point;
- a regular file is read or copied only when `owner` owns it: a hardlink to another user's file
  is that user's file, so it is skipped (copy) or refused (read); a file of the owner with
  several links is the owner's own content and is copied as such;
- a symlink is never followed: a copy recreates it as a symlink (its text, as data), a removal
  removes the link itself;
- FIFOs, sockets and device nodes are never opened: skipped by a copy, refused by a read,
  unlinked by a removal;
- sizes count apparent bytes (a sparse file counts its full size), and a copy stops with
  `LimitExceeded` past its byte, file or depth limit; a removal has no depth limit (it moves a
  deep subtree up before going on, so it never holds more than MAX_OPEN_DEPTH fds).
Torch-free and stdlib-only: the harness's parent side (runner.py) uses it too.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

_SYS_OPENAT2 = 437  # the same number on every architecture (the generic syscall table)
_RESOLVE_NO_XDEV, _RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x01, 0x02, 0x04, 0x08
_RESOLVE = _RESOLVE_NO_XDEV | _RESOLVE_NO_MAGICLINKS | _RESOLVE_NO_SYMLINKS | _RESOLVE_BENEATH
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# a FIFO opened for reading would block, a terminal would become ours: never wait, never adopt
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
MAX_OPEN_DEPTH = 64  # directories a removal or chown holds open at once
KEPT_MODE = 0o755  # what a copy keeps of a mode: rwx for the owner, r-x for the others


class Unsafe(OSError):
    """The path leaves its anchor, crosses a symlink or a mount, or is not what was asked for."""


class LimitExceeded(OSError):
    """A copy went past its byte, file or depth limit."""


@dataclass(frozen=True)
class Limits:
    max_bytes: int
    max_files: int
    max_depth: int


@dataclass
class Copied:
    files: int = 0
    bytes: int = 0
    skipped: list[str] = field(default_factory=list)  # "path (why)" of what was left out


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


@lru_cache(maxsize=1)
def _syscall() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):  # no libc (or no syscall()) to call it through
        return None


def _raw_openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    """openat2 with the stay-beneath, no-symlink resolution: an fd, or -errno."""
    syscall = _syscall()
    if syscall is None:
        return -errno.ENOSYS
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)  # else EINVAL
    fd = syscall(_SYS_OPENAT2, dir_fd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
    return fd if fd >= 0 else -ctypes.get_errno()


def _openat2(dir_fd: int, path: str, flags: int, mode: int) -> int:
    fd = _raw_openat2(dir_fd, path, flags, mode)
    if fd >= 0:
        return fd
    if -fd == errno.EXDEV:
        raise Unsafe(-fd, f"{path}: '..' or another filesystem on the way")
    raise OSError(-fd, os.strerror(-fd), path)


@lru_cache(maxsize=1)
def openat2_available() -> bool:
    """Whether this kernel has openat2 (Linux >= 5.6) and no filter refuses it (probed as it is
    used: beneath a directory fd, where an absolute path would be EXDEV by design)."""
    root = os.open("/", _DIR)
    try:
        fd = _raw_openat2(root, ".", _DIR, 0)
    finally:
        os.close(root)
    if fd >= 0:
        os.close(fd)
    return fd >= 0


def _parts(relative: str) -> list[str]:
    parts = [p for p in str(relative).split("/") if p not in ("", ".")]
    if str(relative).startswith("/") or ".." in parts:
        raise Unsafe(errno.EXDEV, f"{relative}: not a path beneath its anchor")
    return parts


def open_anchor(path: Path | str) -> int:
    """A directory fd of `path`, whose own components only root can change."""
    return os.open(path, _DIR)


def open_beneath(anchor: int, relative: str, flags: int = _DIR, mode: int = 0o600) -> int:
    """An fd of `relative` under the directory fd `anchor`, reached without following a symlink,
    leaving `anchor` or crossing a mount (`relative` "" or "." is the anchor itself). Raises
    Unsafe, or OSError (missing, ...)."""
    parts = _parts(relative)
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC
    if not parts:
        return os.dup(anchor)
    try:
        if openat2_available():
            return _openat2(anchor, "/".join(parts), flags, mode)
        return _open_by_components(anchor, parts, flags, mode)
    except OSError as exc:
        if isinstance(exc, Unsafe) or exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        if exc.errno == errno.ELOOP or _symlink_on_the_way(anchor, parts):
            raise Unsafe(exc.errno, f"{relative}: a symlink on the way") from exc
        raise


def _symlink_on_the_way(anchor: int, parts: list[str]) -> bool:
    """Whether a component of `parts` under `anchor` is a symlink (O_DIRECTORY|O_NOFOLLOW on
    one says ENOTDIR, as on a file)."""
    for depth in range(len(parts)):
        try:
            parent = open_beneath(anchor, "/".join(parts[:depth]))
        except OSError:
            return True
        try:
            mode = os.stat(parts[depth], dir_fd=parent, follow_symlinks=False).st_mode
            if not stat.S_ISDIR(mode):
                return stat.S_ISLNK(mode)
        except OSError:
            return False
        finally:
            os.close(parent)
    return False


def _open_by_components(anchor: int, parts: list[str], flags: int, mode: int) -> int:
    device = os.fstat(anchor).st_dev
    fd = os.dup(anchor)
    for part in parts[:-1]:
        fd = _step(fd, part, _DIR, 0, device)
    return _step(fd, parts[-1], flags, mode, device)


def _step(parent: int, name: str, flags: int, mode: int, device: int) -> int:
    """Open `name` under `parent` (closing `parent`), on `device` only."""
    try:
        fd = os.open(name, flags, mode, dir_fd=parent)
    finally:
        os.close(parent)
    if os.fstat(fd).st_dev != device:
        os.close(fd)
        raise Unsafe(errno.EXDEV, f"{name}: another filesystem")
    return fd


def read_beneath(anchor: int, relative: str, *, limit: int, owner: int | None = None) -> bytes:
    """The content of the regular file `relative` under `anchor` (owned by `owner` when given),
    at most `limit` bytes. Raises Unsafe for a symlink on the way, a file that is not regular or
    not the owner's (a hardlink to another user's file), or one larger than `limit`."""
    parts = _parts(relative)
    parent = open_beneath(anchor, "/".join(parts[:-1]))
    try:
        fd = _open_file(parent, parts[-1], owner)
    finally:
        os.close(parent)
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(fd).st_size > limit:
            raise Unsafe(errno.EFBIG, f"{relative}: larger than {limit} bytes")
        return handle.read(limit + 1)[:limit]


def _open_file(parent: int, name: str, owner: int | None) -> int:
    """An fd of the regular file `name` under `parent` (the owner's), never opening anything
    else (a FIFO, a device)."""
    before = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if not stat.S_ISREG(before.st_mode):
        raise Unsafe(errno.EINVAL, f"{name}: {kind(before.st_mode)}, not a regular file")
    if owner is not None and before.st_uid != owner:
        raise Unsafe(errno.EPERM, f"{name}: owned by uid {before.st_uid}, not {owner}")
    fd = os.open(name, _FILE, dir_fd=parent)
    after = os.fstat(fd)
    if (after.st_ino, after.st_dev) != (before.st_ino, before.st_dev):  # replaced meanwhile
        os.close(fd)
        raise Unsafe(errno.EAGAIN, f"{name}: replaced while opened")
    return fd


def kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISDIR, "directory"), (stat.S_ISREG, "file"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "unknown"


def plain_mode(mode: int) -> int:
    """The permission bits a copy keeps: no setuid, setgid or sticky bit, no group or other write."""
    return stat.S_IMODE(mode) & KEPT_MODE


def copy_tree(src: int, dst: int, limits: Limits, *, owner: int | None,
              give: tuple[int, int] | None = None) -> Copied:
    """Copy the contents of directory fd `src` into the empty directory fd `dst`, by the module's
    rule: directories and the owner's regular files (content, mtime, `plain_mode` bits), symlinks
    as symlinks; the rest skipped and listed. Copies belong to the caller, or to `give` (uid,
    gid) when given; no copy has a special bit at any moment. Raises LimitExceeded or OSError
    (the partial copy is the caller's to remove)."""
    copied = Copied()
    _copy_dir(src, dst, "", 1, limits, owner, give, copied, os.fstat(src).st_dev)
    return copied


def _copy_dir(src: int, dst: int, where: str, depth: int, limits: Limits, owner: int | None,
              give: tuple[int, int] | None, copied: Copied, device: int) -> None:
    if depth > limits.max_depth:
        raise LimitExceeded(errno.E2BIG, f"{where}: deeper than {limits.max_depth} directories")
    for name in sorted(os.listdir(src)):
        info = os.stat(name, dir_fd=src, follow_symlinks=False)
        path = f"{where}{name}"
        if stat.S_ISDIR(info.st_mode) and info.st_dev == device:
            _count(copied, limits, 0, path)
            os.mkdir(name, 0o700, dir_fd=dst)
            inner_src, inner_dst = os.open(name, _DIR, dir_fd=src), os.open(name, _DIR, dir_fd=dst)
            try:
                if os.fstat(inner_src).st_ino != info.st_ino:
                    raise Unsafe(errno.EAGAIN, f"{path}: replaced while copied")
                _copy_dir(inner_src, inner_dst, f"{path}/", depth + 1, limits, owner, give, copied, device)
                _finish(inner_dst, info, give)
            finally:
                os.close(inner_src)
                os.close(inner_dst)
        elif stat.S_ISLNK(info.st_mode):
            _count(copied, limits, 0, path)
            os.symlink(os.readlink(name, dir_fd=src), name, dir_fd=dst)
            if give:
                os.chown(name, *give, dir_fd=dst, follow_symlinks=False)
        elif stat.S_ISREG(info.st_mode) and (owner is None or info.st_uid == owner):
            _count(copied, limits, info.st_size, path)
            _copy_file(src, dst, name, info, owner, give)
        else:
            copied.skipped.append(f"{path} ({_why_skipped(info)})")


def _why_skipped(info: os.stat_result) -> str:
    if stat.S_ISDIR(info.st_mode):
        return "a mount point"
    if stat.S_ISREG(info.st_mode):
        return f"a file of uid {info.st_uid}: a hardlink to another user's file"
    return kind(info.st_mode)


def _count(copied: Copied, limits: Limits, size: int, path: str) -> None:
    copied.files += 1
    copied.bytes += size
    if copied.files > limits.max_files:
        raise LimitExceeded(errno.E2BIG, f"{path}: more than {limits.max_files} files")
    if copied.bytes > limits.max_bytes:
        raise LimitExceeded(errno.EFBIG, f"{path}: more than {limits.max_bytes} bytes in all")


def _copy_file(src: int, dst: int, name: str, info: os.stat_result, owner: int | None,
               give: tuple[int, int] | None) -> None:
    """Copy at most the `info.st_size` bytes it had when counted (a file that grows meanwhile
    does not get past the limit)."""
    source = _open_file(src, name, owner)
    try:
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dst)
        try:
            left = info.st_size
            while left > 0:
                sent = os.sendfile(target, source, None, min(left, 1 << 30))
                if sent == 0:
                    break
                left -= sent
            _finish(target, info, give)
        finally:
            os.close(target)
    finally:
        os.close(source)


def _finish(fd: int, info: os.stat_result, give: tuple[int, int] | None) -> None:
    """Owner, then mode (chown clears special bits; none is set anyway), then the mtime (a .pyc
    checks its source's); a directory keeps rwx for its owner, so that it can be removed."""
    if give:
        os.fchown(fd, *give)
    mode = plain_mode(info.st_mode) | (stat.S_IRWXU if stat.S_ISDIR(info.st_mode) else 0)
    os.fchmod(fd, mode)
    os.utime(fd, ns=(info.st_atime_ns, info.st_mtime_ns))


def remove_tree(parent: int, name: str) -> None:
    """Remove `name` under the directory fd `parent`: a file, symlink, FIFO, socket or device is
    unlinked; a directory is emptied from its fd and removed, never entering a symlink or a mount
    point (Unsafe). No depth limit: a subtree deeper than MAX_OPEN_DEPTH is first renamed up to
    the top. Missing is fine."""
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent)
        return
    top = _enter(parent, name, os.fstat(parent).st_dev)
    try:
        while _empty(top, top, 0):
            pass
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=parent)


def _enter(parent: int, name: str, device: int) -> int:
    fd = os.open(name, _DIR, dir_fd=parent)
    if os.fstat(fd).st_dev != device:
        os.close(fd)
        raise Unsafe(errno.EXDEV, f"{name}: a mount point")
    return fd


def _empty(fd: int, top: int, depth: int) -> bool:
    """Remove what is in directory `fd`; True when a subtree was moved up to `top` (go again)."""
    moved = False
    device = os.fstat(fd).st_dev
    for name in os.listdir(fd):
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            os.unlink(name, dir_fd=fd)
        elif depth >= MAX_OPEN_DEPTH:
            os.rename(name, f".deep-{uuid.uuid4().hex}", src_dir_fd=fd, dst_dir_fd=top)
            moved = True
        else:
            inner = _enter(fd, name, device)
            try:
                moved = _empty(inner, top, depth + 1) or moved
            finally:
                os.close(inner)
            os.rmdir(name, dir_fd=fd)
    return moved


def chown_tree(fd: int, uid: int, gid: int, depth: int = 0) -> None:
    """Give the directory fd `fd` and what is under it to uid:gid (symlinks themselves, never
    their targets), MAX_OPEN_DEPTH directories deep: deeper entries can only have been made by
    whoever owns the tree already."""
    os.fchown(fd, uid, gid)
    if depth >= MAX_OPEN_DEPTH:
        return
    device = os.fstat(fd).st_dev
    for name in os.listdir(fd):
        info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(info.st_mode) and info.st_dev == device:
            inner = os.open(name, _DIR, dir_fd=fd)
            try:
                chown_tree(inner, uid, gid, depth + 1)
            finally:
                os.close(inner)
        elif not stat.S_ISDIR(info.st_mode):
            os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)


def read_tail(path: Path | str, limit: int) -> bytes:
    """The last `limit` bytes of the regular file `path`, opened without following a symlink
    (a root-owned log in a root-owned directory that repository code writes through an fd).
    Raises Unsafe for anything but a regular file."""
    fd = os.open(path, _FILE)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unsafe(errno.EINVAL, f"{path}: {kind(info.st_mode)}, not a regular file")
        handle.seek(max(0, info.st_size - limit))
        return handle.read(limit)
