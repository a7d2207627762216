"""msgspec's typed JSON decoding (`msgspec.json.Decoder(list[Person]).decode`) against the
standard library's `json.loads` of the same message, a suite file kept outside msgspec's history
(perfbisect --suite-file), for the compiled real-library bisect of bench/real_compiled.sh.

The message is a JSON array of `n` objects with string, float, bool and list fields, decoded into
a `msgspec.Struct` type: the path (`json_decode_struct_map_inner` in msgspec/_core.c) where
msgspec 0.13.0 leaked every decoded field value (msgspec#311, fixed by #312, "a misplaced
INCREF"). The Struct type is defined in the trial's process after the revision's msgspec is
imported (resolve_target), so the same file serves every revision.
"""
import json
import random
import sys
import zlib

METRIC = "kitems/s"  # objects decoded per second / 1e3
METRIC_SCALE = 1e3
TOLERANCE = 0.0


def validate(params):
    params = {"n": 2000, "repeat": 10, **params}
    for key in ("n", "repeat"):
        if not isinstance(params[key], int) or params[key] < 1:
            raise ValueError(f"msgspec_decode: {key} must be a positive integer")
    return params


def _records(n, seed):
    rng = random.Random(seed)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    return [{"name": f"{rng.choice(words)} {rng.choice(words)} {i}", "email": f"user{i}@example.{rng.choice(words)}",
             "score": rng.random() * 100.0, "active": rng.random() < 0.5,
             "tags": [rng.choice(words) for _ in range(3)]} for i in range(n)]


def make_inputs(params, device, generator):
    seed = int(generator.initial_seed()) if hasattr(generator, "initial_seed") else 0
    return (json.dumps(_records(params["n"], seed)).encode(),)


def work(params):
    return params["n"] * params["repeat"]


def resolve_target(target):
    # msgspec's package lies at the repository's root (a flat layout), and the trial runs there:
    # the source tree's msgspec/ (no compiled _core) would shadow the built one under the import
    # root, so the import root goes first.
    built = [p for p in sys.path if p.rstrip("/").endswith(".perfbisect-build")]
    sys.path[:0] = built
    import msgspec

    class Person(msgspec.Struct):
        name: str
        email: str
        score: float
        active: bool
        tags: list

    return msgspec.json.Decoder(list[Person]).decode


def _rows(decoded):
    return [(p.name, p.email, p.score, p.active, list(p.tags)) for p in decoded]


def call_target(fn, inputs, params):
    # One call decodes the message `repeat` times, each result dropped before the next, as a
    # timeit loop does (msgspec's own benchmark): what a leak costs (the heap grows instead of
    # reusing the freed objects) shows inside the timed call.
    for _ in range(params["repeat"] - 1):
        fn(inputs[0])
    return fn(inputs[0])


def reference(inputs, params):
    return [(r["name"], r["email"], r["score"], r["active"], r["tags"]) for r in json.loads(inputs[0])]


def compare(output, reference, params):
    return 0.0 if _rows(output) == reference else 1.0


def control(inputs, params):
    # The machine's pace on the same bytes without touching the heap: a leak in the target's
    # process slowed json.loads (about 25% at 0.13.0), which read as the target getting faster.
    crc = 0
    for _ in range(params["repeat"] * 20):
        crc = zlib.crc32(inputs[0], crc)
    return crc
