"""The toolchain axis's pure rules (service/toolchains/rules.py) on literal specs and file names."""

from __future__ import annotations

import pytest

from perfbisect.service.toolchains.rules import (Ask, ToolchainError, label, ordered, parse, select, version_of,
                                                 wheel_versions)

WHEELS = ["tinyop-1.0-py3-none-any.whl", "tinyop-1.10-py3-none-any.whl", "tinyop-1.9-py3-none-any.whl",
          "tinyop-2.0rc1-py3-none-any.whl", "tinyop-2.0-py3-none-any.whl", "other-1.0-py3-none-any.whl",
          "tinyop-3.0.tar.gz", "README", "tinyop-bad-version-py3-none-any.whl"]


def test_the_three_forms_parse() -> None:
    assert parse("tinyop==1.0,2.0,1.5") == Ask("tinyop", ("1.0", "2.0", "1.5"))
    assert parse(" tinyop >=1.0,<=2.0 ") == Ask("tinyop", specifier=">=1.0,<=2.0")
    assert parse("tinyop") == Ask("tinyop")
    assert str(parse("tinyop==1.0, 2.0")) == "tinyop==1.0,2.0"


@pytest.mark.parametrize(("text", "message"), [
    ("tinyop==1.0", "needs two versions or more"),
    ("tinyop==1.0,1.0.0", "a version is listed twice"),
    ("tinyop==1.0,,2.0", "an empty version"),
    ("tinyop==1.0,not a version", "'not a version' is not a version"),
    ("tinyop~~1.0", "is neither ==V1,V2,... nor a version range"),
    ("==1.0,2.0", "write PACKAGE==V1,V2"),
    ("", "write PACKAGE==V1,V2"),
])
def test_an_unparsable_spec_says_why(text: str, message: str) -> None:
    with pytest.raises(ToolchainError, match=message):
        parse(text)


def test_versions_are_in_pep440_order() -> None:
    assert ordered(["2.0", "1.10", "1.9", "2.0rc1", "1.9.0"]) == ["1.9", "1.10", "2.0rc1", "2.0"]


def test_the_wheels_of_the_package_by_version() -> None:
    found = wheel_versions("TinyOp", WHEELS)
    assert found == {"1.0": "tinyop-1.0-py3-none-any.whl", "1.10": "tinyop-1.10-py3-none-any.whl",
                     "1.9": "tinyop-1.9-py3-none-any.whl", "2.0rc1": "tinyop-2.0rc1-py3-none-any.whl",
                     "2.0": "tinyop-2.0-py3-none-any.whl"}


def test_select_lists_as_given_and_ranges_in_version_order() -> None:
    available = list(wheel_versions("tinyop", WHEELS))
    assert select(parse("tinyop==1.9,1.0.0,2.0"), available) == ["1.9", "1.0", "2.0"]  # 1.0.0 names 1.0's wheel
    assert select(parse("tinyop>=1.5,<2.0"), available) == ["1.9", "1.10"]  # PEP 440: <2.0 leaves out 2.0rc1
    assert select(parse("tinyop>=1.5,<=2.0"), available) == ["1.9", "1.10", "2.0rc1", "2.0"]
    assert select(parse("tinyop"), available) == ["1.0", "1.9", "1.10", "2.0rc1", "2.0"]


def test_select_refuses_a_missing_version_and_fewer_than_two() -> None:
    available = ["1.0", "2.0"]
    with pytest.raises(ToolchainError, match=r"the wheelhouse has no wheel of tinyop 1\.5 \(it has: 1\.0, 2\.0\)"):
        select(parse("tinyop==1.0,1.5"), available)
    with pytest.raises(ToolchainError, match=r"has 1 version\(s\) of tinyop>=2\.0 \(2\.0\): .* needs two"):
        select(parse("tinyop>=2.0"), available)
    with pytest.raises(ToolchainError, match=r"has 0 version\(s\) of tinyop \(none\)"):
        select(parse("tinyop"), [])


def test_a_version_is_a_revision_label() -> None:
    assert label("tinyop", "2.0") == "tinyop==2.0" and version_of("tinyop==2.0") == "2.0"
