"""`perfbisect changepoints`: the documented file formats, output, and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from perfbisect.cli.main import app

runner = CliRunner()
NOISE = [0.17, 1.17, -1.69, 1.32, -0.18, -0.84, -0.84, -1.08, -0.34, 0.58, 0.36, 0.41]
DROP = [100 + n for n in NOISE] + [92 + n for n in reversed(NOISE)]  # -8% at index 12


def write(tmp_path: Path, content: str) -> str:
    path = tmp_path / "series.json"
    path.write_text(content)
    return str(path)


@pytest.mark.parametrize("wrap", [lambda v: v, lambda v: {"values": v}])
def test_json_names_the_first_point_of_the_new_level(tmp_path: Path, wrap) -> None:
    result = runner.invoke(app, ["changepoints", write(tmp_path, json.dumps(wrap(DROP))), "--json"])
    assert result.exit_code == 0, result.output
    points = json.loads(result.output)["change_points"]
    assert [p["index"] for p in points] == [12]
    assert set(points[0]) == {"index", "before", "after", "rel", "pvalue"}
    assert points[0]["before"] == pytest.approx(100.0, abs=0.1)
    assert points[0]["after"] == pytest.approx(92.0, abs=0.1)
    assert points[0]["rel"] == pytest.approx(-0.08, abs=0.002)
    assert 0 <= points[0]["pvalue"] < 0.001


def test_table_and_a_quiet_series(tmp_path: Path) -> None:
    result = runner.invoke(app, ["changepoints", write(tmp_path, json.dumps(DROP))])
    assert result.exit_code == 0, result.output
    assert "1 change point in 24 values" in result.output
    assert "-8.0%" in result.output
    quiet = runner.invoke(app, ["changepoints", write(tmp_path, json.dumps([100 + n for n in NOISE * 3])), "--json"])
    assert json.loads(quiet.output) == {"change_points": []}
    empty = runner.invoke(app, ["changepoints", write(tmp_path, "[]"), "--json"])
    assert json.loads(empty.output) == {"change_points": []}


def test_min_magnitude_option(tmp_path: Path) -> None:
    result = runner.invoke(app, ["changepoints", write(tmp_path, json.dumps(DROP)), "--json", "--min-magnitude", "0.1"])
    assert json.loads(result.output) == {"change_points": []}


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "is not JSON"),
    ('{"value": [1, 2]}', "must hold a JSON list"),
    ('"a string"', "must hold a JSON list"),
    ('[1, 2, "3"]', 'value 2 is "3"'),
    ("[1, NaN, 3]", "value 1 is NaN"),
    ("[1, true]", "value 1 is true"),
    ("[[1, 2], [3, 4]]", "value 0 is [1, 2]"),
])
def test_bad_files_are_a_message_and_exit_2(tmp_path: Path, content: str, message: str) -> None:
    result = runner.invoke(app, ["changepoints", write(tmp_path, content)])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_missing_file_and_bad_option(tmp_path: Path) -> None:
    result = runner.invoke(app, ["changepoints", str(tmp_path / "absent.json")])
    assert result.exit_code == 2 and "does not exist" in result.output
    result = runner.invoke(app, ["changepoints", write(tmp_path, "[1, 2]"), "--min-size", "1"])
    assert result.exit_code == 2 and "min_size" in result.output


def test_the_cli_starts_without_torch() -> None:
    code = "import sys, perfbisect.cli.main; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
