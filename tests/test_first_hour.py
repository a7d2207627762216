"""A new user's first hour (issue 27): help texts that fit 100 columns with their examples whole,
`track alerts` and `jobs` lines that fit and line up, `serve` saying where it is, and a README
settings table that names every setting."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from perfbisect.cli.main import app, job_line, served_urls
from perfbisect.cli.track import alert_lines

ROOT = Path(__file__).resolve().parent.parent


def help_of(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def every_command(group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = []
    for name, command in group.commands.items():
        found.append((*path, name))
        if hasattr(command, "commands"):  # a group (typer vendors its own click)
            found += every_command(command, (*path, name))
    return found


def test_every_help_text_fits_100_columns() -> None:
    commands = every_command(get_command(app))
    assert ("track", "alerts") in commands and ("bisect",) in commands
    for args in [(), *commands]:
        too_wide = [line for line in help_of(*args).splitlines() if len(line) > 100]
        assert too_wide == [], (args, too_wide)


def test_bisect_help_explains_every_option_with_examples_whole() -> None:
    text = help_of("bisect")
    assert "repeatable, e.g. M=8192,N=8192,K=8192,dtype=bf16" in text  # the example shape is not cut
    # descriptions use the width: none is squeezed into a narrow column
    assert "  --repo <str>                    registered repository name, or a local path to register" in text
    for option, says in (("--device-class", "the queue whose workers measure it"),
                         ("--min-effect", "the smallest relative step worth naming"),
                         ("--metric", "ratio: each revision's time over a control kernel's")):
        assert re.search(rf"^  {option} <\w+>\s+{re.escape(says)}", text, re.M), option
    examples = text[text.index("Examples:"):]
    assert "perfbisect bisect --repo ./minikern --good v1.0 --bad main \\" in examples
    assert "--shape M=8192,N=8192,K=8192,dtype=bf16 --shape M=4096,N=4096,K=4096,dtype=fp16" in examples
    assert "Examples:" in help_of("compare") and "Examples:" in help_of()


def alert(**kw) -> SimpleNamespace:
    base = dict(id=7, kind="regression", status="acknowledged", before_sha="a" * 40, last_sha="b" * 40,
                culprit_first_sha="c" * 40, culprit_last_sha="d" * 40, culprit_exact=False, culprit_pr=12345,
                culprit_subject="Rewrite the tiling of the persistent GEMM kernel so that split-K reductions "
                                "reuse the same workspace across launches (#12345)", bisect_job_id=3, cases=[])
    return SimpleNamespace(**{**base, **kw})


def test_track_alerts_lines_fit_100_columns() -> None:
    case = SimpleNamespace(case="attention B=8,H=32,S=8192,D=128,dtype=bf16,causal=True,window=4096,sink=4",
                           before=123.456, after=98.7654, rel=-0.2)
    wrong = SimpleNamespace(case="gemm M=64,N=64,K=64,dtype=fp32", before=None, after=None, rel=None)
    lines = alert_lines([alert(cases=[case, wrong]), alert(id=8, culprit_exact=True, culprit_last_sha="e" * 40)])
    assert max(len(line) for line in lines) <= 100, [len(line) for line in lines]
    assert lines[0].startswith("alert 7   regression    acknowledged aaaaaaaaaa..bbbbbbbbbb  culprit cccccccccc..")
    assert lines[0].endswith("culprit cccccccccc..dddddddddd")
    assert lines[1].startswith("      #12345 Rewrite the tiling of the persistent GEMM") and lines[1].endswith("…")
    assert lines[2].startswith("      attention B=8,H=32") and lines[2].endswith("123.5 -> 98.77 (-20.0%)")
    assert lines[3] == f"      {'gemm M=64,N=64,K=64,dtype=fp32':<52} wrong results"


def job(status: str, name: str = "minikern") -> SimpleNamespace:
    return SimpleNamespace(id=12, kind=SimpleNamespace(value="bisect"), status=SimpleNamespace(value=status),
                           repository=SimpleNamespace(name=name), culprits=[1],
                           progress={"measured": 9, "revisions": 41, "trials": 37})


def test_jobs_columns_do_not_shift() -> None:
    rows = [job_line(job(s)) for s in ("succeeded", "inconclusive", "cancelled", "running")]
    rows.append(job_line(job("failed", name="a-repository-name-longer-than-its-column")))
    starts = {row.index("revisions") for row in rows}
    assert len(starts) == 1, rows
    assert len({row.index("culprit") for row in rows}) == 1
    assert "a-repository-name-longe… " in rows[-1]


def test_serve_says_where_the_dashboard_is() -> None:
    text = served_urls("0.0.0.0", 8123)
    assert "  dashboard  http://127.0.0.1:8123/dashboard" in text and "http://127.0.0.1:8123/metrics" in text
    assert "http://[::1]:80/docs" in served_urls("::1", 80)


@pytest.mark.slow
def test_serve_prints_its_urls_and_the_root_redirects(tmp_path: Path) -> None:
    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env["PERFBISECT_HOME"] = str(tmp_path)
    server = subprocess.Popen([str(Path(sys.executable).parent / "perfbisect"), "serve", "--port", str(port)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
                              start_new_session=True)
    try:
        first = [server.stdout.readline() for _ in range(2)]
        assert first[0].strip() == f"perfbisect is serving on http://127.0.0.1:{port}"
        assert first[1].split() == ["dashboard", f"http://127.0.0.1:{port}/dashboard"]
        deadline = time.monotonic() + 60
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/", follow_redirects=False)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.2)
        assert answer.status_code == 307 and answer.headers["location"] == "/dashboard"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_the_readme_settings_table_names_every_setting() -> None:
    from perfbisect.service.settings import Settings

    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("## Configuration"):]
    table = table[:table.index("\n## ")]
    named = set(re.findall(r"`([A-Z_]+)`", table))
    missing = []
    for field, info in Settings.model_fields.items():
        alias = info.validation_alias
        names = set(alias.choices) if alias is not None else {f"PERFBISECT_{field.upper()}"}
        if not names & named:
            missing.append(field)
    assert missing == []
    assert {"PERFBISECT_API_URL", "PERFBISECT_GITHUB_API_URL", "PERFBISECT_TOKEN"} <= named
