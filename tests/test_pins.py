"""Pin extraction on literal files (service/repos/pins.py): JSON keys, requirements lines,
`REV = "..."` lines, submodule gitlinks and .gitmodules; a pattern that matches nothing is a
PinError naming the file and what was looked for."""

from __future__ import annotations

import pytest

from perfbisect.service.repos.pins import (PinError, assign_pin, changed_gitlinks, extract, gitlink, gitmodules,
                                           json_pin, requirement_pin)

LLVM_INFO = """{
  "llvm": {"repo": "https://github.com/llvm/llvm-project", "commit": "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"},
  "build": 17
}"""

REQUIREMENTS = """# pinned toolchain
numpy>=1.26
Triton == 3.1.0  # the compiler
minicc[fast]==0.4.2 ; python_version >= "3.10"
torch===2.5.1
"""

BUILD_SCRIPT = """# fetched by the build
URL = "https://example.com/minicc.git"
MINICC_REV = 'c3d4e5f60718293a4b5c6d7e8f90123456789abc'  # bumped in #945
REV := "nope"
"""


def test_json_key_dotted_and_top_level():
    assert json_pin(LLVM_INFO, "llvm.commit") == "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"
    assert json_pin(LLVM_INFO, "build") == "17"
    assert extract("json", "llvm.commit", LLVM_INFO) == "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"


@pytest.mark.parametrize("key, words", [("llvm.sha", "has no key 'llvm.sha'"), ("llvm", "is not a commit"),
                                        ("llvm.commit.x", "has no key")])
def test_json_key_that_matches_nothing(key, words):
    with pytest.raises(PinError, match=words):
        json_pin(LLVM_INFO, key, "thirdparty/llvm-build-info.json")


def test_json_file_that_is_not_json():
    with pytest.raises(PinError, match="info.json is not JSON"):
        json_pin("llvm: a1b2", "llvm", "info.json")


@pytest.mark.parametrize("name, version", [("triton", "3.1.0"), ("TRITON", "3.1.0"), ("minicc", "0.4.2"),
                                           ("torch", "2.5.1")])
def test_requirements_line(name, version):
    assert requirement_pin(REQUIREMENTS, name) == version


@pytest.mark.parametrize("name", ["numpy", "jax", "mini"])
def test_requirements_without_an_exact_pin(name):
    with pytest.raises(PinError, match=f"requirements.txt has no line {name}==<version>"):
        requirement_pin(REQUIREMENTS, name, "requirements.txt")


def test_requirement_names_normalise():
    assert requirement_pin("my_pkg.core==1.0\n", "My-Pkg-Core") == "1.0"


def test_assign_line_either_quote_with_comment():
    assert assign_pin(BUILD_SCRIPT, "MINICC_REV") == "c3d4e5f60718293a4b5c6d7e8f90123456789abc"
    assert assign_pin('REV = "v1.2"\n', "REV") == "v1.2"


@pytest.mark.parametrize("name", ["REV2", "URLX", "MINICC"])
def test_assign_line_that_matches_nothing(name):
    with pytest.raises(PinError, match=f'build.py has no line {name} = "<commit>"'):
        assign_pin(BUILD_SCRIPT, name, "build.py")


def test_assign_does_not_match_a_longer_name():
    assert assign_pin('XREV = "a"\nREV = "b"\n', "REV") == "b"


def test_extract_needs_a_key_and_a_file_kind():
    with pytest.raises(PinError, match="needs a key"):
        extract("json", None, LLVM_INFO)
    with pytest.raises(PinError, match="not read from a file"):
        extract("submodule", "x", "")


LS_TREE = ("160000 commit 0123456789abcdef0123456789abcdef01234567\tthird_party/minicc\n"
           "040000 tree 89abcdef0123456789abcdef0123456789abcdef\tthird_party/other\n")


def test_gitlink_of_a_submodule():
    assert gitlink(LS_TREE, "third_party/minicc/") == "0123456789abcdef0123456789abcdef01234567"


def test_gitlink_of_a_directory_or_nothing():
    with pytest.raises(PinError, match="third_party/other is a tree, not a submodule"):
        gitlink(LS_TREE, "third_party/other")
    with pytest.raises(PinError, match="no submodule at dlpack"):
        gitlink(LS_TREE, "dlpack")


def test_gitmodules_paths_and_urls():
    text = """[submodule "tvm-ffi"]
\tpath = 3rdparty/tvm-ffi
\turl = https://github.com/apache/tvm-ffi
[submodule "dlpack"]
    url = https://github.com/dmlc/dlpack.git
    path = 3rdparty/dlpack/
    branch = main
[submodule "broken"]
    path = nowhere
"""
    assert gitmodules(text) == {"3rdparty/tvm-ffi": "https://github.com/apache/tvm-ffi",
                                "3rdparty/dlpack": "https://github.com/dmlc/dlpack.git"}


def test_changed_gitlinks_from_a_raw_diff():
    old, new = "1" * 40, "2" * 40
    raw = (f":160000 160000 {old} {new} M\tthird_party/minicc\n"
           f":100644 100644 {'3' * 40} {'4' * 40} M\tsetup.py\n"
           f":000000 160000 {'0' * 40} {new} A\tthird_party/added\n")
    assert changed_gitlinks(raw) == {"third_party/minicc": (old, new)}
