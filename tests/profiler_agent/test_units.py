"""Parsing of command-line sizes, ranges, shapes and lists; the batch ladder and search."""

from __future__ import annotations

import pytest

from profiler.agent.compute import search_max_batch
from profiler.agent.units import (
    ArgumentValueError,
    geometric_sizes,
    parse_int_list,
    parse_shape,
    parse_size,
    parse_size_range,
)
from workload.runs import ladder


def test_sizes_use_binary_units_and_a_bare_number_is_bytes():
    assert parse_size("1KB") == 1024
    assert parse_size("1kib") == 1024
    assert parse_size("256MB") == 256 * 1024**2
    assert parse_size("2GB") == 2 * 1024**3
    assert parse_size("1.5K") == 1536
    assert parse_size("4096") == 4096


def test_size_range_parses_min_and_max():
    assert parse_size_range("1KB..256MB") == (1024, 256 * 1024**2)
    assert parse_size_range("64KB") == (65536, 65536)


@pytest.mark.parametrize("text", ["256MB..1KB", "1XB..2MB", "..", "1KB..", "abc", "0..1KB", "1KB..2MB..4MB"])
def test_bad_size_range_is_rejected_with_a_clear_message(text):
    with pytest.raises(ArgumentValueError) as info:
        parse_size_range(text)
    assert text in str(info.value) or "positive" in str(info.value)


def test_geometric_sizes_step_by_the_factor_and_end_at_the_upper_bound():
    assert geometric_sizes(1024, 8192) == [1024, 2048, 4096, 8192]
    assert geometric_sizes(1024, 5000, factor=4) == [1024, 4096, 5000]
    assert geometric_sizes(10, 10) == [10]


def test_input_shape_is_a_comma_separated_list_of_positive_ints():
    assert parse_shape("3,224,224") == (3, 224, 224)
    assert parse_shape("32,64") == (32, 64)
    for bad in ("3,a,224", "3,0,224", "", "3,,4"):
        with pytest.raises(ArgumentValueError):
            parse_shape(bad)


def test_batch_size_list_is_sorted_and_deduplicated():
    assert parse_int_list("32,8,16,8") == [8, 16, 32]
    with pytest.raises(ArgumentValueError):
        parse_int_list("8,-1")


def test_ladder_holds_powers_of_two_and_the_max():
    assert ladder(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert ladder(64) == [1, 2, 4, 8, 16, 32, 64]
    assert ladder(1) == [1]
    assert ladder(20, min_batch=3) == [3, 4, 8, 16, 20]


def test_search_finds_the_largest_fitting_batch_by_doubling_then_bisection():
    probed: list[int] = []

    def fits(size: int) -> bool:
        probed.append(size)
        return size <= 771

    assert search_max_batch(fits, 1, 1024) == 771
    assert probed[:11] == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert 771 in probed and 772 in probed
    assert len(probed) <= 2 * 11


def test_search_stops_at_the_upper_bound_and_reports_nothing_fitting():
    assert search_max_batch(lambda size: True, 1, 1000) == 1000
    assert search_max_batch(lambda size: False, 1, 1000) is None
    assert search_max_batch(lambda size: size <= 1, 1, 1000) == 1
