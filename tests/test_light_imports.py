"""The API server and the CLI load no torch: the app with every router, suite and shape
validation of the built-in suites (footprints included), and the CLI entry with its commands'
help, in a fresh interpreter (torch is only for the harness and the suites when they run)."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
from perfbisect.service.api import create_app
create_app()
from perfbisect.service.suites.schemas import Benchmark
from perfbisect.service.suites.service import resolve_cases
cases = resolve_cases([
    Benchmark(suite="gemm", target="m:f", shapes=["M=64,N=64,K=64,dtype=bf16"]),
    Benchmark(suite="attention", target="m:f", shapes=["B=1,H=2,S=128,D=64"]),
    Benchmark(suite="rmsnorm", target="m:f", shapes=["M=64,N=64,dtype=fp16"]),
    Benchmark(suite="x.py", suite_source="import torch\\n", target="m:f", shapes=["N=1"]),
])
assert len(cases) == 4, cases
from typer.testing import CliRunner
from perfbisect.cli.main import app
for args in (["--help"], ["bisect", "--help"], ["repo", "--help"], ["compare", "--help"]):
    assert CliRunner().invoke(app, args).exit_code == 0, args
print(",".join(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "triton"))))
"""


def test_the_api_suite_validation_and_the_cli_import_no_torch() -> None:
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == ""
