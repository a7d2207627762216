"""The one reader of /proc for containment: processes, their parents, sessions and start times,
a variable of a process's initial environment, a process's status lines and the NVIDIA driver's
GPU list. Used by the containment package (kernels/harness/contain/: the fork server and its
client, the teardown, the trial view, the process-tree killer, the sandbox's device nodes) and by
the worker's build cache key (workers/build.py).
Standard library only: kernels/ imports no service code. Linux; elsewhere every process reads as
gone and the process list is empty."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = "/proc"


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    session: int
    zombie: bool


def stat_fields(pid: int | str) -> list[bytes] | None:
    """/proc/PID/stat's fields after the command name (the first is the state, field 3 of
    proc(5)); None when the process is gone. `pid` may be "self"."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as stat:
            raw = stat.read()
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces: split after its closing one
    return raw[raw.rindex(b")") + 2:].split()


def info(pid: int) -> ProcInfo | None:
    fields = stat_fields(pid)
    if fields is None:
        return None
    return ProcInfo(pid=pid, ppid=int(fields[1]), session=int(fields[3]), zombie=fields[0] == b"Z")


def pids() -> list[int]:
    """The processes /proc lists (those of the PID namespace it was mounted in)."""
    try:
        return [int(entry) for entry in os.listdir(PROC) if entry.isdigit()]
    except OSError:
        return []


def all_processes() -> list[ProcInfo]:
    found = (info(pid) for pid in pids())
    return [i for i in found if i is not None]


def process_gone(pid: int) -> bool:
    """True when `pid` has exited (reaped, or a zombie)."""
    fields = stat_fields(pid)
    return fields is None or fields[0] == b"Z"


def process_start(pid: int) -> str | None:
    """The start time of process `pid` (clock ticks since boot, /proc/PID/stat field 22), which
    with the pid names one process: a pid is reused, the pair is not. None when it is gone."""
    fields = stat_fields(pid)
    return fields[19].decode() if fields else None


def child_of(pid: int) -> int | None:
    """The (first) child of `pid`."""
    return next((p.pid for p in all_processes() if p.ppid == pid), None)


def environ_value(pid: int, name: str) -> str | None:
    """`name`'s value in the initial environment of `pid` (what /proc/PID/environ shows: the block
    it exec'd with, or a fork server's child's rewritten marker); None when absent or unreadable."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as environ:
            block = environ.read()
    except OSError:
        return None
    prefix = f"{name}=".encode()
    for entry in block.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


def status(pid: int | str = "self") -> dict[str, str]:
    """/proc/PID/status as {field: value}, values stripped ({} when unreadable)."""
    try:
        with open(f"{PROC}/{pid}/status") as lines:
            return {name: value.strip() for name, _, value in (line.partition(":") for line in lines)}
    except OSError:
        return {}


def nvidia_gpus() -> list[dict[str, str]]:
    """The fields of each NVIDIA GPU's /proc/driver/nvidia/gpus/*/information ("Model", "GPU UUID",
    "Device Minor"...), in PCI bus order (CUDA's order for identical GPUs); [] without the driver."""
    found = []
    for info in sorted(Path(f"{PROC}/driver/nvidia/gpus").glob("*/information")):
        try:
            lines = info.read_text().splitlines()
        except OSError:
            continue
        found.append({name.strip(): value.strip() for name, colon, value in (line.partition(":") for line in lines)
                      if colon})
    return found


def pid_namespace() -> str:
    """This process's PID namespace ("pid:[4026531836]"), in which an owner file's pid means
    something; "" where /proc does not say."""
    try:
        return os.readlink(f"{PROC}/self/ns/pid")
    except OSError:
        return ""
