"""`perfbisect demo` on a machine that a neighbour keeps disturbing (issue 23): N runs, each in a
fresh home (bench/demo_repeat.py's run), each beside a load generator that alternates random
bursts of CPU load (busy loops) and memory-bandwidth load (copies between two large arrays) on
every core, with idle spells between. Per run: the verdict, the planted events found, the false
(commit, case) culprits, the time the job waited for a steadier machine, and the load it had.

    python bench/demo_under_load.py --runs 10 [--cores 2] [--mib 256] [--seconds 1800] [--out DIR]
    python bench/demo_under_load.py --generate --seconds 60   # the load alone, its bursts on stdout

The generator runs in its own process group (session); it stops by itself after --seconds and is
killed, with its burst processes, when its run ends or the bench is interrupted.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.demo_repeat import one_run, run_line, summary  # noqa: E402

BURST_S = (2.0, 20.0)
IDLE_S = (2.0, 20.0)
BURST = re.compile(r"^(cpu|memory|idle) ([\d.]+) s", re.M)


def burn(kind: str, until: float, mib: int) -> None:
    """One core's share of a burst: spin, or copy `mib` MiB back and forth, until `until`."""
    if kind == "cpu":
        x = 0
        while time.monotonic() < until:
            for _ in range(100_000):
                x += 1
        return
    import numpy as np

    a = np.ones(mib << 17)  # float64: mib MiB
    b = np.empty_like(a)
    while time.monotonic() < until:
        np.copyto(b, a)
        np.copyto(a, b)


def generate(seconds: float, cores: int, mib: int, seed: int) -> None:
    """Bursts and idle spells until `seconds` have passed or the parent is gone; one line a spell.
    On SIGTERM its burst processes are ended and reaped before it exits."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(seed)
    parent = os.getppid()
    end = time.monotonic() + seconds
    ctx = multiprocessing.get_context("fork")
    workers: list = []
    try:
        while time.monotonic() < end and os.getppid() == parent:
            kind = rng.choice(["cpu", "memory"])
            length = min(rng.uniform(*BURST_S), end - time.monotonic())
            print(f"{kind} {length:.1f} s on {cores} cores at {time.strftime('%H:%M:%S')}", flush=True)
            workers = [ctx.Process(target=burn, args=(kind, time.monotonic() + length, mib)) for _ in range(cores)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            rest = min(rng.uniform(*IDLE_S), end - time.monotonic())
            if rest > 0:
                print(f"idle {rest:.1f} s", flush=True)
                time.sleep(rest)  # the gap between bursts, not a measurement
    finally:
        for w in workers:
            if w.is_alive():
                w.terminate()
            w.join()


@contextmanager
def load(seconds: float, cores: int, mib: int, seed: int, log: Path) -> Iterator[subprocess.Popen]:
    """The generator as its own process group, its bursts in `log`; killed (the group) on the way out."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, __file__, "--generate", "--seconds", str(seconds), "--cores",
                                 str(cores), "--mib", str(mib), "--seed", str(seed)],
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield proc
        finally:
            stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """End the generator's whole process group: TERM, then KILL after 5 s. Returns once no member
    is left, or 5 s after the KILL. The burst processes outlive their leader for a moment; then
    they are orphans, and a zombie still counts as a member of the group until its new parent
    reaps it: init (about once a second here), or this process when it is a child subreaper
    (a perfbisect worker is, and so is a test process that ran one), which reaps them here."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        if _group_gone(proc, timeout_s=5):
            break
    proc.wait()


def _group_gone(proc: subprocess.Popen, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:  # the leader first, so that Popen keeps its exit status
            _reap_our_members(proc.pid)
            if not group_alive(proc.pid):
                return True
        time.sleep(0.02)
    return False


def _reap_our_members(pgid: int) -> None:
    """Reap the members of the group that have ended and are this process's children."""
    while True:
        try:
            pid, _ = os.waitpid(-pgid, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def load_summary(log: Path) -> str:
    """The load a run had: bursts of each kind and their seconds, and the idle seconds."""
    spells: dict[str, list[float]] = {"cpu": [], "memory": [], "idle": []}
    for kind, length in BURST.findall(log.read_text() if log.exists() else ""):
        spells[kind].append(float(length))
    return (f"load: {len(spells['cpu'])} cpu bursts {sum(spells['cpu']):.0f} s, {len(spells['memory'])} memory "
            f"bursts {sum(spells['memory']):.0f} s, idle {sum(spells['idle']):.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="processes per burst")
    parser.add_argument("--mib", type=int, default=256, help="size of each of a memory burst's two arrays, per core")
    parser.add_argument("--seconds", type=float, default=1800, help="the generator's bound, per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=None, help="keep each run's home, output and load log here")
    parser.add_argument("--generate", action="store_true", help="be the load generator (bursts on stdout)")
    args = parser.parse_args()
    if args.generate:
        generate(args.seconds, args.cores, args.mib, args.seed)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the generator's group is ended too
    out = args.out or Path(tempfile.mkdtemp(prefix="perfbisect-demo-under-load-"))
    results = []
    for i in range(1, args.runs + 1):
        log = out / f"run{i}" / "load.log"
        with load(args.seconds, args.cores, args.mib, args.seed * 1000 + i, log):
            result = one_run(i, out, None, args.device)
        results.append(result)
        print(f"{run_line(result)}\n        {load_summary(log)}", flush=True)
    print("\n" + "\n".join(summary(results, out)))


if __name__ == "__main__":
    main()
