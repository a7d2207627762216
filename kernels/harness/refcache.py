"""The accuracy reference of a case, computed once per revision and input seed.

    cache = ReferenceCache(directory, revision)     # directory None: no caching
    ref = cache.get_or_compute(suite, params, seed, inputs, lambda: suite.reference(...))

The key hashes the suite, the case's params, the seed, the revision, the device kind, the
harness version and torch's version. The stored file also holds a digest of the inputs it was
computed from (shapes, dtypes, exact float64 sums and a strided sample of elements): a
reference is reused only when the inputs of this trial have the same digest, so a wrong entry
(another seed's, or inputs that a new random generator draws differently) is recomputed, never
silently compared against.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable

import torch

from perfbisect.kernels.harness.result import HARNESS_VERSION

SAMPLE_ELEMENTS = 4096
# Storing pays only when reading the file back is faster than computing again: a GPU computes
# a 2 GB float64 GEMM reference in tens of milliseconds, faster than a disk reads it.
MAX_STORED_BYTES = 256 << 20
ALWAYS_STORED_BYTES = 1 << 20
READ_BYTES_PER_S = 1e9


PLAIN = (int, float, complex, bool, str, bytes, type(None))


def input_digest(inputs: tuple) -> str:
    """Cheap on any device: no copy of a whole tensor leaves the device. Tensors, plain values
    and tuples/lists/dicts of them are hashed; any other object only by its type: its own
    repr() may be costly, recursive or stateful (a symbolic library's printer), and the cache
    key already holds the case's params and seed, from which the suite made it."""
    h = hashlib.sha256()
    _digest_into(h, inputs, depth=0)
    return h.hexdigest()


def _digest_into(h, inputs, depth: int) -> None:
    for value in inputs:
        if isinstance(value, torch.Tensor):
            flat = value.detach().reshape(-1)
            stride = max(1, flat.numel() // SAMPLE_ELEMENTS)
            sample = flat[::stride][:SAMPLE_ELEMENTS].to(torch.float64).cpu()
            total = torch.sum(flat, dtype=torch.float64).item() if flat.is_floating_point() else None
            h.update(repr((tuple(value.shape), str(value.dtype), total)).encode())
            h.update(sample.numpy().tobytes())
        elif isinstance(value, PLAIN):
            h.update(repr(value).encode())
        elif isinstance(value, (tuple, list)) and depth < 8:
            h.update(f"<{type(value).__name__} {len(value)}>".encode())
            _digest_into(h, value, depth + 1)
        elif isinstance(value, dict) and depth < 8:
            h.update(f"<dict {len(value)}>".encode())
            _digest_into(h, [item for pair in value.items() for item in pair], depth + 1)
        else:
            h.update(f"<{type(value).__module__}.{type(value).__qualname__}>".encode())


class ReferenceCache:
    def __init__(self, directory: str | Path | None, revision: str | None):
        self.directory = Path(directory) if directory and revision else None
        self.revision = revision
        self.hits = self.misses = self.rejected = 0

    def key(self, suite: str, params: dict, seed: int, device: str) -> str:
        basis = {"suite": suite, "params": params, "seed": seed, "revision": self.revision,
                 "device": device, "harness": HARNESS_VERSION, "torch": torch.__version__}
        return hashlib.sha256(json.dumps(basis, sort_keys=True, default=str).encode()).hexdigest()

    def get_or_compute(self, suite: str, params: dict, seed: int, inputs: tuple,
                       compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        if self.directory is None:
            return compute()
        device = _device_of(inputs)
        path = self.directory / f"{self.key(suite, params, seed, device.type)}.pt"
        digest = input_digest(inputs)
        cached = self._load(path, digest, device)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        started = time.perf_counter()
        reference = compute()
        if isinstance(reference, torch.Tensor) and reference.is_cuda:
            torch.cuda.synchronize(reference.device)  # the time to compute, not to enqueue
        if isinstance(reference, torch.Tensor) and _worth_storing(reference, time.perf_counter() - started):
            self._store(path, digest, reference)
        return reference

    def _load(self, path: Path, digest: str, device: torch.device) -> torch.Tensor | None:
        if not path.is_file():
            return None
        try:
            entry = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # a torn or foreign file: recompute
            self.rejected += 1
            return None
        if entry.get("digest") != digest:
            self.rejected += 1
            return None
        return entry["reference"].to(device)

    def _store(self, path: Path, digest: str, reference: torch.Tensor) -> None:
        tmp = path.with_suffix(f".{os.getpid()}.partial")
        try:
            torch.save({"digest": digest, "reference": reference.detach().cpu()}, tmp)
            os.replace(tmp, path)  # atomic: a concurrent trial of the revision reads all or nothing
        except OSError:
            tmp.unlink(missing_ok=True)

    def stats(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "rejected": self.rejected}


def _worth_storing(reference: torch.Tensor, compute_s: float) -> bool:
    size = reference.numel() * reference.element_size()
    if size <= ALWAYS_STORED_BYTES:
        return True
    return size <= MAX_STORED_BYTES and compute_s >= size / READ_BYTES_PER_S


def _device_of(inputs: tuple) -> torch.device:
    for value in inputs:
        if isinstance(value, torch.Tensor):
            return value.device
    return torch.device("cpu")
