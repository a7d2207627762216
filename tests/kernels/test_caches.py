"""Revision caches: a JIT cache per revision and toolchain, never shared across either, pruned
to the most recently used; accuracy references keyed by suite, case, seed and revision, and
never reused for other inputs."""
from __future__ import annotations

import os
import shutil

import pytest
import torch

from perfbisect.kernels.harness.caches import prune, revision_caches
from perfbisect.kernels.harness.refcache import ReferenceCache

SHA_A, SHA_B = "a" * 40, "b" * 40
PARAMS = {"N": 8, "dtype": "fp32"}


def test_two_revisions_never_share_a_cache_dir(tmp_path):
    a, b = revision_caches(tmp_path, SHA_A), revision_caches(tmp_path, SHA_B)
    assert a.jit_dir != b.jit_dir and a.reference_dir != b.reference_dir
    assert a.jit_dir not in b.jit_dir.parents and b.jit_dir not in a.jit_dir.parents
    assert revision_caches(tmp_path, SHA_A) == a  # the trials of one revision share it
    assert a.env()["TRITON_CACHE_DIR"] == str(a.jit_dir) and a.jit_dir.is_dir()


def test_another_toolchain_environment_gets_its_own_cache(tmp_path):
    plain = revision_caches(tmp_path, SHA_A)
    tuned = revision_caches(tmp_path, SHA_A, {"TRITON_DEFAULT_FP_FUSION": "0"})
    assert plain.toolchain != tuned.toolchain and plain.jit_dir != tuned.jit_dir


@pytest.mark.parametrize("bad", ["", "HEAD", "../../etc", "a" * 6])
def test_only_a_commit_sha_names_a_cache(tmp_path, bad):
    with pytest.raises(ValueError):
        revision_caches(tmp_path, bad)


def test_prune_keeps_the_most_recently_used_revisions(tmp_path):
    shas = [f"{i:x}" * 40 for i in range(1, 5)]
    dirs = [revision_caches(tmp_path, sha).jit_dir.parent for sha in shas]
    for age, path in enumerate(dirs):  # shas[0] used most recently
        os.utime(path, (1_000_000 - age * 100, 1_000_000 - age * 100))
    removed = prune(tmp_path, keep=2, protect=dirs[3])
    assert set(removed) == {dirs[2]}
    assert all(d.exists() for d in (dirs[0], dirs[1], dirs[3])) and not dirs[2].exists()


def inputs_of(seed: int):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(8, generator=gen),)


def reference_of(inputs, calls):
    calls.append(1)
    return inputs[0].double() * 2


def test_reference_is_computed_once_per_revision_and_seed(tmp_path):
    cache, calls = ReferenceCache(tmp_path, SHA_A), []
    first = cache.get_or_compute("s", PARAMS, 1, inputs_of(1), lambda: reference_of(inputs_of(1), calls))
    again = cache.get_or_compute("s", PARAMS, 1, inputs_of(1), lambda: reference_of(inputs_of(1), calls))
    assert torch.equal(first, again) and len(calls) == 1 and cache.stats()["hits"] == 1
    other = ReferenceCache(tmp_path, SHA_B)  # another revision: its own entry
    other.get_or_compute("s", PARAMS, 1, inputs_of(1), lambda: reference_of(inputs_of(1), calls))
    assert len(calls) == 2
    keys = {cache.key("s", PARAMS, 1, "cpu"), cache.key("s", PARAMS, 2, "cpu"), other.key("s", PARAMS, 1, "cpu"),
            cache.key("s", {**PARAMS, "N": 9}, 1, "cpu"), cache.key("t", PARAMS, 1, "cpu"),
            cache.key("s", PARAMS, 1, "cuda")}
    assert len(keys) == 6


def test_a_wrong_cached_reference_is_recomputed_not_reused(tmp_path):
    cache, calls = ReferenceCache(tmp_path, SHA_A), []
    cache.get_or_compute("s", PARAMS, 1, inputs_of(1), lambda: reference_of(inputs_of(1), calls))
    # plant seed 1's entry under seed 2's key: the inputs' digest no longer matches
    seed1, seed2 = (tmp_path / f"{cache.key('s', PARAMS, seed, 'cpu')}.pt" for seed in (1, 2))
    shutil.copy(seed1, seed2)
    ref2 = cache.get_or_compute("s", PARAMS, 2, inputs_of(2), lambda: reference_of(inputs_of(2), calls))
    assert torch.equal(ref2, inputs_of(2)[0].double() * 2) and len(calls) == 2
    assert cache.stats()["rejected"] == 1
    seed1.write_bytes(b"torn")
    ref1 = cache.get_or_compute("s", PARAMS, 1, inputs_of(1), lambda: reference_of(inputs_of(1), calls))
    assert torch.equal(ref1, inputs_of(1)[0].double() * 2) and len(calls) == 3


def test_without_a_directory_nothing_is_cached(tmp_path):
    cache, calls = ReferenceCache(None, SHA_A), []
    for _ in range(2):
        cache.get_or_compute("s", PARAMS, 1, inputs_of(1), lambda: reference_of(inputs_of(1), calls))
    assert len(calls) == 2 and not any(tmp_path.iterdir())
