"""E-Divisive change points on short literal series."""

import pytest

from service.bisect.changepoints import compute_change_points

NOISE = [0.3, -0.2, 0.1, -0.4, 0.2, 0.0, -0.1, 0.4, -0.3, 0.1]


def level(value, count, offset=0):
    return [value + NOISE[(i + offset) % len(NOISE)] for i in range(count)]


def test_one_drop_is_found_where_it_happens():
    series = level(100, 12) + level(90, 12, 3)
    points = compute_change_points(series, min_magnitude=0.02)
    assert [p.index for p in points] == [12]
    assert points[0].rel == pytest.approx(-0.1, abs=0.01)


def test_drop_then_partial_recovery_gives_two_points():
    series = level(100, 10) + level(88, 10, 2) + level(95, 10, 5)
    assert [p.index for p in compute_change_points(series, min_magnitude=0.02)] == [10, 20]


def test_flat_noisy_series_has_none():
    assert compute_change_points(level(100, 40)) == []


def test_minimum_magnitude_drops_small_steps():
    series = level(100, 15) + level(101.5, 15, 4)
    assert [p.index for p in compute_change_points(series, min_magnitude=0.0)] == [15]
    assert compute_change_points(series, min_magnitude=0.02) == []


def test_short_series_and_bad_arguments():
    assert compute_change_points([1.0, 2.0, 3.0]) == []
    with pytest.raises(ValueError):
        compute_change_points(level(100, 10), min_size=1)
