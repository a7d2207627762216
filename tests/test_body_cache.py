"""The per-process cache of built dashboard bodies stays bounded in count and in bytes; the JSON
of every answer is valid JSON even with non-finite floats in it."""
import json
import math

from perfbisect.service.api.responses import BodyCache, FastJSONResponse


def test_non_finite_floats_are_written_as_null():
    """pydantic-core's to_json writes NaN and Infinity by default, which no JSON parser takes."""
    body = FastJSONResponse({"value": math.nan, "band": [math.inf, -math.inf, 1.5]}).body
    assert json.loads(body) == {"value": None, "band": [None, None, 1.5]}


class Builds:
    def __init__(self) -> None:
        self.tags: list[str] = []

    def __call__(self, tag: str, size: int):
        return lambda: self.tags.append(tag) or tag.encode() * size


def test_bodies_are_built_once_and_the_least_recent_goes_past_the_count():
    built, cache = Builds(), BodyCache(size=3, max_bytes=1000)
    for tag in "abc":
        cache.get(tag, built(tag, 10))
    cache.get("a", built("a", 10))  # kept: not built again, and now the most recent
    cache.get("d", built("d", 10))  # a fourth body: "b", the least recent, goes
    cache.get("b", built("b", 10))
    cache.get("a", built("a", 10))
    assert built.tags == ["a", "b", "c", "d", "b"]


def test_the_least_recent_goes_past_the_bytes():
    built, cache = Builds(), BodyCache(size=10, max_bytes=400)
    for tag in "abcd":
        cache.get(tag, built(tag, 100))  # 400 bytes: all kept
    cache.get("e", built("e", 100))  # 500: "a" goes
    for tag in "bcdea":
        cache.get(tag, built(tag, 100))
    assert built.tags == ["a", "b", "c", "d", "e", "a"]


def test_a_body_over_a_quarter_of_the_bytes_is_served_but_never_kept():
    built, cache = Builds(), BodyCache(size=8, max_bytes=400)
    for _ in range(2):
        assert cache.get("f", built("f", 101)) == b"f" * 101
    assert built.tags == ["f", "f"]
