"""Delta stats as Iceberg bounds: readers skip files by them, so a bound may be wide, never wrong."""

from __future__ import annotations

import json
import struct
from decimal import Decimal

import pytest

from exporter.iceberg.stats import StatsColumn, file_metrics
from exporter.iceberg.values import partition_value, single_value, timestamp_micros

pytestmark = pytest.mark.unit
COLUMNS = [StatsColumn("at", 1, "timestamptz", True), StatsColumn("local", 2, "timestamp", True),
           StatsColumn("name", 3, "string", True), StatsColumn("amount", 4, "decimal(10, 2)", True),
           StatsColumn("ratio", 5, "double", True), StatsColumn("n", 6, "int", True),
           StatsColumn("day", 7, "date", True), StatsColumn("blob", 8, "binary", True),
           StatsColumn("collated", 9, "string", False)]


def metrics(minimums: dict, maximums: dict, nulls: dict | None = None, **top):
    stats = {"numRecords": 10, "minValues": minimums, "maxValues": maximums, "nullCount": nulls or {}, **top}
    return file_metrics(json.dumps(stats), COLUMNS)


def micros(text: str) -> bytes:
    return struct.pack("<q", timestamp_micros(text)[0])


def test_timestamps_cut_to_milliseconds_widen_the_upper_bound_to_the_last_microsecond():
    found = metrics({"at": "2024-03-01T10:00:00.123Z", "local": "2024-03-01 10:00:00.5"},
                    {"at": "2024-03-01T12:00:00.123+02:00", "local": "2024-03-01T10:00:01"})
    assert found.lower_bounds[1] == micros("2024-03-01T10:00:00.123000Z")
    assert found.upper_bounds[1] == micros("2024-03-01T10:00:00.123999Z")  # +02:00 moved to UTC
    assert found.lower_bounds[2] == micros("2024-03-01 10:00:00.500000")
    assert found.upper_bounds[2] == micros("2024-03-01 10:00:01.999999")  # whole seconds: a second wide
    exact = metrics({}, {"at": "2024-03-01T10:00:00.123456Z"})
    assert exact.upper_bounds[1] == micros("2024-03-01T10:00:00.123456Z")


def test_an_instant_without_an_offset_gets_no_bound():
    found = metrics({"at": "2024-03-01 10:00:00.123"}, {"at": "2024-03-01 10:00:00.123"})
    assert 1 not in found.lower_bounds and 1 not in found.upper_bounds


def test_strings_keep_a_lower_bound_only_and_collated_strings_none():
    found = metrics({"name": "abc", "collated": "a"}, {"name": "abd", "collated": "z"})
    assert found.lower_bounds[3] == b"abc"
    assert 3 not in found.upper_bounds  # Delta cuts strings to a prefix: below the values it was cut from
    assert 9 not in found.lower_bounds and 9 not in found.upper_bounds


def test_exact_types_are_bounded_exactly_and_the_rest_not_at_all():
    found = metrics({"amount": 1.5, "ratio": 0.0, "n": -3, "day": "2024-01-02", "blob": "x"},
                    {"amount": 1234.25, "ratio": -0.0, "n": 7, "day": "2024-02-01", "blob": "y"})
    assert found.lower_bounds[4] == single_value(Decimal("1.50"), "decimal(10, 2)") == (150).to_bytes(2, "big")
    assert found.upper_bounds[4] == (123425).to_bytes(3, "big")
    assert found.lower_bounds[5] == struct.pack("<d", -0.0) and found.upper_bounds[5] == struct.pack("<d", 0.0)
    assert found.lower_bounds[6] == struct.pack("<i", -3) and found.upper_bounds[6] == struct.pack("<i", 7)
    assert found.lower_bounds[7] == struct.pack("<i", 19724) and found.upper_bounds[7] == struct.pack("<i", 19754)
    assert 8 not in found.lower_bounds and 8 not in found.upper_bounds
    assert metrics({"ratio": "NaN", "amount": 1.005}, {"ratio": 1e400}).lower_bounds == {}  # not exact: none


def test_wide_bounds_keep_only_null_counts_that_say_something():
    found = metrics({}, {}, {"n": 0, "name": 10, "ratio": 4}, tightBounds=False)
    assert found.null_value_counts == {6: 0, 3: 10}
    assert metrics({}, {}, {"ratio": 4}).null_value_counts == {5: 4}
    assert found.record_count == 10
    assert file_metrics(None, COLUMNS).record_count is None


def test_partition_values_per_the_protocol():
    assert partition_value("2024-01-02", "date", "d") == 19724
    assert partition_value("1970-01-01 00:00:01.5", "timestamp", "t") == 1_500_000
    assert partition_value("1970-01-01T00:00:01.000001Z", "timestamptz", "t") == 1_000_001
    assert partition_value("12.30", "decimal(5, 2)", "a") == Decimal("12.30")
    assert partition_value("true", "boolean", "b") is True
    assert partition_value("", "int", "i") is None and partition_value(None, "string", "s") is None
    assert partition_value("\u0001\u00ff", "binary", "b") == b"\x01\xff"
