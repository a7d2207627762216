"""`perfbisect suite check FILE --shape S [--target T] [--repo PATH --rev REV]`: one call of each
function of a custom suite file at one revision, each contract violation explained in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Optional

import typer

from perfbisect.cli.common import CLIError, user_errors

suite_app = typer.Typer(help="Custom suite files.", no_args_is_help=True, rich_markup_mode=None)

CHECK_TIMEOUT_S = 600


def _extract(repo: Path, rev: str, into: Path) -> None:
    """The revision's tree, as `git archive` writes it (the user's checkout is not touched)."""
    archive = into / "rev.tar"
    with archive.open("wb") as out:
        done = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", rev], stdout=out,
                              stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["git archive failed"])[-1]
        raise CLIError(f"cannot read revision {rev!r} of {repo}: {why}")
    (into / "tree").mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(into / "tree")], check=True)
    archive.unlink()


def _findings(file: Path, shape: str, target: str | None, import_dir: Path | None) -> list[dict]:
    import perfbisect

    env = dict(os.environ)
    # the revision first, then this install's perfbisect (as a trial's harness child has them)
    harness_root = str(Path(perfbisect.__file__).resolve().parent.parent)
    paths = [str(import_dir)] if import_dir is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, harness_root, *filter(None, [env.get("PYTHONPATH")])])
    command = [sys.executable, "-m", "perfbisect.kernels.suites.check", str(file), "--shape", shape]
    if target:
        command += ["--target", target]
    try:
        done = subprocess.run(command, cwd=import_dir or file.parent, env=env, capture_output=True, text=True,
                              timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise CLIError(f"the suite's functions ran past {CHECK_TIMEOUT_S} s") from exc
    findings = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not findings:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        findings.append({"check": "process", "ok": False, "detail": f"the check process failed: {last}"})
    return findings


@suite_app.command("check")
def check(
    file: Annotated[Path, typer.Argument(help="the suite file (inside the repository or kept outside it)")],
    shape: Annotated[str, typer.Option(help="one case's parameters, e.g. 'M=512,N=512,dtype=fp32'")],
    target: Annotated[Optional[str], typer.Option(help="the target callable, 'package.module:function'")] = None,
    repo: Annotated[Optional[Path], typer.Option(help="a local git repository whose revision the target comes from")] = None,
    rev: Annotated[str, typer.Option(help="the revision of --repo to check against")] = "HEAD",
    import_root: Annotated[str, typer.Option(help="the directory of the revision that goes on sys.path")] = ".",
) -> None:
    """Call each function of a suite once and explain every contract violation in one line.

    Example: perfbisect suite check bench/sum_suite.py --shape n=1000 --target mylib.sums:fast_sum
    --repo ~/src/mylib --rev v2.1

    Exit codes: 0 every check passed, 1 a check failed, 2 bad input.
    """
    with user_errors():
        if not file.is_file():
            raise CLIError(f"suite file {file} not found")
        with tempfile.TemporaryDirectory(prefix="perfbisect-suite-check-") as tmp:
            import_dir = None
            if repo is not None:
                _extract(repo, rev, Path(tmp))
                import_dir = (Path(tmp) / "tree" / import_root).resolve()
                if not import_dir.is_dir():
                    raise CLIError(f"import root {import_root!r} is not a directory at {rev}")
            findings = _findings(file.resolve(), shape, target, import_dir)
    width = max(len(f["check"]) for f in findings)
    for f in findings:
        typer.echo(f"{'ok  ' if f['ok'] else 'FAIL'}  {f['check']:<{width}}  {f['detail']}")
    failed = sum(not f["ok"] for f in findings)
    typer.echo(f"{failed} problem(s) found" if failed else "the suite keeps its contract for this case")
    raise typer.Exit(1 if failed else 0)
