"""The environment of a toolchain bisect's trial (issue 44): the wheel of one version of a package,
installed from the job's wheelhouse (`pip install --no-index --find-links WHEELHOUSE --only-binary
:all: --no-deps PACKAGE==VERSION --target`, no network) into a directory cached per toolchain, and
put first on the trial's PYTHONPATH, ahead of the worker's own packages (a trial of
torch==2.5 imports that torch; everything else comes from the worker's environment).

Layout: PERFBISECT_HOME/toolchains/<key>/site, the key a digest of the package, the version, the
wheel's sha256 and the Python version (a wheel replaced under the same name is a new entry). An
entry is written under toolchains/.tmp-<key>-<random>/ and renamed into place, so concurrent
workers and an interrupted install never serve half an environment.

Containment: only the worker writes here, from the wheelhouse, never from anything repository
code wrote (a wheel runs no code when installed: --only-binary refuses an sdist, whose build
would). The sandbox sees the entry read-only (workers/sandbox.py Slot.readonly), so a trial can
run its code but never change it; its files are made world-readable (0644/0755, no setuid) for
the slot's uid.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import sys
import uuid
from pathlib import Path

from perfbisect.kernels.harness.contain.process import Containment, run_captured

from perfbisect.service.toolchains.rules import wheel_versions
from perfbisect.service.settings import get_settings
from perfbisect.service.trials.service import ToolchainWork

INSTALL_TIMEOUT_S = 600


class ToolchainUnavailable(Exception):
    """The version could not be installed from the wheelhouse: the message says why."""


def _wheel(work: ToolchainWork) -> Path:
    try:
        found = wheel_versions(work.package, os.listdir(work.wheelhouse)).get(work.version)
    except OSError as exc:
        raise ToolchainUnavailable(f"wheelhouse {work.wheelhouse}: {exc.strerror or exc}") from None
    if found is None:
        raise ToolchainUnavailable(f"the wheelhouse {work.wheelhouse} has no wheel of {work.package} {work.version}")
    return Path(work.wheelhouse) / found


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def _readable(top: Path) -> None:
    """Every file of the fresh install readable by the slot's uid, none writable but by the
    worker, no setuid bit (the install is the worker's own: nothing here is repository-written)."""
    for directory, dirs, files in os.walk(top):
        os.chmod(directory, 0o755)
        for name in files:
            path = os.path.join(directory, name)
            if not os.path.islink(path):
                mode = os.lstat(path).st_mode
                os.chmod(path, 0o755 if mode & stat.S_IXUSR else 0o644)


def environment(work: ToolchainWork) -> tuple[Path, dict[str, str]]:
    """The cached site directory of `work`'s version (installed now on a miss) and what the trial
    records of it. Raises ToolchainUnavailable."""
    wheel = _wheel(work)
    digest = _digest(wheel)
    basis = f"{work.package}\0{work.version}\0{digest}\0{sys.version_info.major}.{sys.version_info.minor}"
    key = hashlib.sha256(basis.encode()).hexdigest()[:24]
    root = get_settings().home / "toolchains"
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    final = root / key
    recorded = {"package": work.package, "version": work.version, "wheel": wheel.name, "sha256": digest}
    if (final / "site").is_dir():
        return final / "site", {**recorded, "environment": "cached"}
    temp = root / f".tmp-{key}-{uuid.uuid4().hex}"
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
               "--find-links", work.wheelhouse, "--only-binary", ":all:", "--no-deps", "--target", str(temp / "site"),
               f"{work.package}=={work.version}"]
    try:
        # the worker's own process (no repository code runs here): umask 022, killed at the deadline
        code, stderr = run_captured(command, Containment(umask=0o022), cwd=str(root), timeout_s=INSTALL_TIMEOUT_S,
                                    env={**os.environ, "PIP_NO_INPUT": "1", "PIP_CONFIG_FILE": os.devnull})
        if code is None:
            raise ToolchainUnavailable(f"installing {work.package}=={work.version} took over {INSTALL_TIMEOUT_S} s")
        if code != 0:
            raise ToolchainUnavailable(f"installing {work.package}=={work.version} from {work.wheelhouse} failed: "
                                       f"{stderr.strip()[-800:]}")
        _readable(temp)
        try:
            os.rename(temp, final)
        except OSError:  # another worker installed it meanwhile: use theirs
            pass
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return final / "site", {**recorded, "environment": "installed"}
