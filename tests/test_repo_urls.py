"""Which repository URLs may be registered (pure: no database, no git)."""

from __future__ import annotations

from pathlib import Path

import pytest

from perfbisect.service.errors import BadRequest
from perfbisect.service.repos.urls import checked_url, public_url


@pytest.mark.parametrize("url", ["https://github.com/acme/lib.git", "ssh://git@host/acme/lib.git",
                                 "git@github.com:acme/lib.git", "git://host/lib.git"])
def test_remote_urls_are_kept_as_given(url: str) -> None:
    assert checked_url(url, []) == url


@pytest.mark.parametrize(("url", "message"), [
    ("ext::sh -c id", "remote-helper"), ("fd::3,4", "remote-helper"), ("file::/tmp/x", "remote-helper"),
    ("-u/tmp/x", "start with '-'"), (" /tmp/x", "white space"), ("ftp://h/x", "scheme 'ftp'"),
    ("lib", "must be absolute"), ("host:path", "must be absolute"),
])
def test_refused_urls_name_the_rule(url: str, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        checked_url(url, [Path("/tmp")])


def test_local_paths_resolve_inside_the_roots_only(tmp_path: Path) -> None:
    root, outside = tmp_path / "repos", tmp_path / "secret"
    (root / "lib").mkdir(parents=True)
    outside.mkdir()
    (root / "link").symlink_to(outside)
    assert checked_url(str(root / "lib"), [root]) == str(root / "lib")
    assert checked_url(f"file://{root}/lib", [root]) == str(root / "lib")
    for escape in (str(root / "link"), f"{root}/lib/../../secret", str(outside)):
        with pytest.raises(BadRequest, match="outside the allowed roots"):
            checked_url(escape, [root])
    with pytest.raises(BadRequest, match="PERFBISECT_LOCAL_REPO_ROOTS is empty"):
        checked_url(str(root / "lib"), [])


def test_public_url_hides_credentials_only() -> None:
    assert public_url("https://bot:ghp_secret@github.com/acme/lib.git") == "https://bot:***@github.com/acme/lib.git"
    assert public_url("https://github.com/acme/lib.git") == "https://github.com/acme/lib.git"
    assert public_url("git@github.com:acme/lib.git") == "git@github.com:acme/lib.git"


def test_the_policy_schema_knows_every_harness_policy_key() -> None:
    """A key the harness reads but the API refuses (or the reverse) would be a silent mismatch."""
    from perfbisect.kernels.harness.trial import DEFAULT_POLICY
    from perfbisect.service.jobs.schemas import HarnessPolicy

    assert set(HarnessPolicy.model_fields) == set(DEFAULT_POLICY) | {"threads"}


def test_footprints_of_the_built_in_suites() -> None:
    from perfbisect.kernels.suites import get_suite

    assert get_suite("gemm").footprint_bytes({"M": 2, "N": 3, "K": 4, "dtype": "fp32"}) == (8 + 12 + 6) * 4
    assert get_suite("attention").footprint_bytes({"B": 1, "H": 2, "S": 8, "D": 4, "dtype": "bf16"}) == 4 * 64 * 2
    assert get_suite("rmsnorm").footprint_bytes({"M": 4, "N": 8, "dtype": "fp16"}) == (64 + 8) * 2
