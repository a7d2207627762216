"""A hostile repository: a git history whose commits each try one escape from the sandbox, in its
build (build.sh, run by the registered build command) or in its trial (the measured callable
`hostile.ops:probe`). What an attempt saw is printed as one `HOSTILE {json}` line, and the build
or trial then fails on purpose, so the line reaches the result's error text (a log tail).

    shas = write_hostile_repo(path, sleep_s="300.4711")   # {escape name: sha}
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

from tests.gitrepo import git
from tests.kernels.conftest import CUSTOM_SUITE

BUILD_COMMAND = "sh build.sh"
TARGET = "hostile.ops:probe"
SUITE = "file:bench/suite.py"
REPORT = re.compile(r"HOSTILE (\{[^\n]*\})")

_REPORT_PY = """
import json, os, socket, sys

def report(**found):
    print("HOSTILE " + json.dumps(found), flush=True)
    os._exit(7)

def snoop():
    seen = {path: sorted(os.listdir(path)) if os.path.isdir(path) else os.path.exists(path)
            for path in json.loads(os.environ["HOSTILE_PATHS"])}
    try:
        open("/usr/hostile-was-here", "w").close()
        system = "written"
    except OSError as exc:
        system = type(exc).__name__
    here = os.getcwd()
    options = [line.split()[5] for line in open("/proc/self/mountinfo")
               if here == line.split()[4] or here.startswith(line.split()[4].rstrip("/") + "/")]
    return {"seen": seen, "system": system, "cwd_mount": options[-1] if options else None}

def connect(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        return "connected"
    except OSError as exc:
        return type(exc).__name__
"""

# escape -> (build.sh, body of probe(x, y) before it returns normally)
ESCAPES: dict[str, tuple[str, str]] = {
    "benign": ("exit 0", ""),
    "network_build": (
        "python3 -c 'from hostile_report import *; report(db=connect(5432), redis=connect(6379))'", ""),
    "network_trial": ("exit 0", "report(db=connect(5432), redis=connect(6379))"),
    # the fork server (the trial's parent) and a process of another slot, named by the test
    "signal": ("exit 0", textwrap.dedent("""\
        import signal
        outcome = {}
        for name, pid in (("server", os.getppid()), ("other", int(os.environ["OTHER_PID"]))):
            try:
                os.kill(pid, signal.SIGSTOP)
                outcome[name] = "sent"
            except OSError as exc:
                outcome[name] = type(exc).__name__
        report(**outcome)""")),
    # compiled code planted in another slot's JIT cache (its path named by the test), which that
    # slot's next trial of the revision would load
    "plant_cache": ("exit 0", textwrap.dedent("""\
        outcome = {}
        for directory in json.loads(os.environ["OTHER_CACHES"]):
            try:
                with open(os.path.join(directory, "planted.py"), "w") as planted:
                    planted.write("import os; os.system('id')")
                outcome[directory] = "written"
            except OSError as exc:
                outcome[directory] = type(exc).__name__
        report(planted=outcome)""")),
    # a package under /tmp (HOSTILE_TMP) on the trial's PYTHONPATH (the repository's env): one the
    # host has there (placed by the test) and one the build writes there
    "tmp_import": ('mkdir -p "$HOSTILE_TMP/plantedpkg" && echo \'WHO = "build"\' > "$HOSTILE_TMP/plantedpkg/__init__.py"',
                   textwrap.dedent("""\
        try:
            import plantedpkg
            outcome = plantedpkg.WHO
        except ImportError as exc:
            outcome = type(exc).__name__
        report(imported=outcome, tmp=sorted(os.listdir("/tmp")))""")),
    # a setsid double-fork that drops the sandbox's marker, then a normal exit
    "double_fork": ("env -u PERFBISECT_SANDBOX setsid sh -c 'sleep {sleep_s} &' ; exit 0", textwrap.dedent("""\
        import subprocess
        env = {k: v for k, v in os.environ.items() if k != "PERFBISECT_SANDBOX"}
        subprocess.run(["setsid", "sh", "-c", "sleep {sleep_s} &"], env=env, check=True)""")),
    # what of the host it can see and write (paths named by the test in HOSTILE_PATHS)
    "snoop_build": ("python3 -c 'from hostile_report import *; report(**snoop())'", ""),
    "snoop_trial": ("exit 0", "report(**snoop())"),
    "memory": ("exit 0", "blob = bytearray(int(os.environ['HOSTILE_BYTES']))\nreport(allocated=len(blob))"),
    "fork_bomb": (textwrap.dedent("""\
        python3 - <<'PY'
        import os, time
        from hostile_report import report
        forked = 0
        for _ in range(int(os.environ["HOSTILE_FORKS"])):
            try:
                pid = os.fork()
            except OSError as exc:
                report(forked=forked, stopped_by=type(exc).__name__)
            if pid == 0:
                time.sleep(20)
                os._exit(0)
            forked += 1
        report(forked=forked, stopped_by=None)
        PY"""), ""),
    # a setuid shell: in the build directory, and where the build cache keeps its copy (as root,
    # HOME/build-cache, found from the revision caches' path the trial is given); run with -p
    "setuid": ('mkdir -p "$PERFBISECT_BUILD_DIR" && cp /bin/bash "$PERFBISECT_BUILD_DIR/bash" && '
               'chmod 4755 "$PERFBISECT_BUILD_DIR/bash"', textwrap.dedent("""\
        import glob, subprocess
        shells = [os.path.join(os.getcwd(), ".perfbisect-build", "bash")]
        cache = os.environ.get("TRITON_CACHE_DIR", "")
        while cache not in ("", "/") and os.path.basename(cache) != "trial-cache":
            cache = os.path.dirname(cache)
        shells += glob.glob(os.path.join(os.path.dirname(cache), "build-cache", "*", "build", "bash"))
        euids = {}
        for shell in shells:
            try:
                euids[shell] = subprocess.run([shell, "-p", "-c", "id -u"], capture_output=True, text=True).stdout.strip()
            except OSError as exc:
                euids[shell] = type(exc).__name__
        report(euids=euids, ruid=os.getuid())""")),
}


def _probe(body: str) -> str:
    return ("import os\nfrom hostile_report import *\n\n\ndef probe(x, y):\n"
            + textwrap.indent(body or "pass", "    ") + "\n    return x * (1 - y * y)\n")


def write_hostile_repo(path: Path, sleep_s: str, escapes: dict[str, tuple[str, str]] | None = None) -> dict[str, str]:
    """One commit per escape of `escapes` (ESCAPES by default: the benign one first); returns {escape: sha}."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    (path / "bench").mkdir()
    (path / "bench" / "suite.py").write_text(textwrap.dedent(CUSTOM_SUITE))
    (path / "hostile").mkdir()
    (path / "hostile" / "__init__.py").write_text("")
    (path / "hostile_report.py").write_text(_REPORT_PY)
    shas = {}
    for name, (build, body) in (ESCAPES if escapes is None else escapes).items():
        (path / "build.sh").write_text(build.replace("{sleep_s}", sleep_s) + "\n")
        (path / "hostile" / "ops.py").write_text(_probe(body.replace("{sleep_s}", sleep_s)))
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", f"escape: {name}")
        shas[name] = git(path, "rev-parse", "HEAD")
    return shas


def reported(result: dict) -> dict | None:
    """What the attempt printed (its HOSTILE line in the result's log tail), or None."""
    found = REPORT.search(str(result.get("error") or ""))
    return json.loads(found.group(1)) if found else None
