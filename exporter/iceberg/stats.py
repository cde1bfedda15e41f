"""A Delta file's stats (PROTOCOL.md#per-file-statistics) as an Iceberg data file's metrics.

Readers skip files with these, so a bound is written only when it holds for every row: Delta cuts
strings to a prefix (a lower bound still, never an upper one) and timestamps to milliseconds (the
upper bound is widened to the last microsecond the cut value stands for); a timestamp with a zone
but no offset, a NaN, a binary, a collated string or a nested column gets no bound. Wide bounds
(`tightBounds: false`, after deletion vectors) still bound the valid rows; their null counts say
something only when 0 or every row.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from exporter.iceberg.schema import Column, decimal_of, iceberg_primitive
from exporter.iceberg.values import date_days, scaled, single_value, timestamp_micros


@dataclass
class FileMetrics:
    record_count: int | None  # None: the stats do not say (the file's footer does)
    null_value_counts: dict[int, int] = field(default_factory=dict)
    lower_bounds: dict[int, bytes] = field(default_factory=dict)
    upper_bounds: dict[int, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class StatsColumn:
    physical_name: str
    field_id: int
    iceberg_type: str
    ordered_like_bytes: bool


def stats_columns(columns: list[Column], partition_columns: list[str]) -> list[StatsColumn]:
    """The top-level primitive columns data files hold (partition columns are in the path, not the file)."""
    return [StatsColumn(c.physical_name, c.field_id, iceberg_primitive(c.delta_type, c.name), c.ordered_like_bytes)
            for c in columns if isinstance(c.delta_type, str) and c.name not in partition_columns]


def file_metrics(stats: str | None, columns: list[StatsColumn]) -> FileMetrics:
    """The metrics of one `add.stats` JSON; none known when it is absent or unreadable."""
    try:
        parsed = json.loads(stats, parse_float=Decimal) if stats else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        return FileMetrics(None)
    records = parsed.get("numRecords")
    metrics = FileMetrics(records if isinstance(records, int) and not isinstance(records, bool) else None)
    tight = parsed.get("tightBounds", True) is not False
    minimums, maximums, nulls = (parsed.get(key) if isinstance(parsed.get(key), dict) else {}
                                 for key in ("minValues", "maxValues", "nullCount"))
    for column in columns:
        null_count = nulls.get(column.physical_name)
        if isinstance(null_count, int) and not isinstance(null_count, bool) and (
                tight or null_count in (0, metrics.record_count)):
            metrics.null_value_counts[column.field_id] = null_count
        if (lower := lower_bound(minimums.get(column.physical_name), column)) is not None:
            metrics.lower_bounds[column.field_id] = lower
        if (upper := upper_bound(maximums.get(column.physical_name), column)) is not None:
            metrics.upper_bounds[column.field_id] = upper
    return metrics


def lower_bound(value: Any, column: StatsColumn) -> bytes | None:
    """A Delta `minValues` entry as an Iceberg lower bound, or None when it could be wrong."""
    if column.iceberg_type == "string":
        # a cut string is a prefix of the minimum, so still at most every value (in byte order)
        return value.encode("utf-8") if isinstance(value, str) and column.ordered_like_bytes else None
    parsed = _value(value, column.iceberg_type)
    if parsed is None:
        return None
    if isinstance(parsed, float) and parsed == 0:
        parsed = -0.0  # spec.md: -0.0 sorts before 0.0, and Delta's min does not tell them apart
    return single_value(parsed, column.iceberg_type)


def upper_bound(value: Any, column: StatsColumn) -> bytes | None:
    """A Delta `maxValues` entry as an Iceberg upper bound, or None when it could be wrong."""
    if column.iceberg_type == "string":
        return None  # a cut string is below the values it was cut from
    if column.iceberg_type in ("timestamp", "timestamptz") and isinstance(value, str):
        cut = _timestamp(value, column.iceberg_type)
        if cut is None:
            return None
        micros, written_digits = cut
        # the cut dropped up to one unit of the last written digit (milliseconds: 999 µs)
        return single_value(micros + 10 ** max(0, 6 - written_digits) - 1, column.iceberg_type)
    parsed = _value(value, column.iceberg_type)
    if parsed is None:
        return None
    if isinstance(parsed, float) and parsed == 0:
        parsed = 0.0
    return single_value(parsed, column.iceberg_type)


def _value(value: Any, iceberg_type: str) -> Any:
    """A stats value as the column's type; None when absent, of another type, or not exact."""
    if value is None or isinstance(value, (dict, list)):
        return None
    try:
        if iceberg_type in ("int", "long"):
            return value if isinstance(value, int) and not isinstance(value, bool) else None
        if iceberg_type in ("float", "double"):
            number = float(value) if isinstance(value, (int, Decimal)) and not isinstance(value, bool) else None
            return number if number is not None and math.isfinite(number) else None
        if iceberg_type == "boolean":
            return value if isinstance(value, bool) else None
        if iceberg_type == "date":
            return date_days(value) if isinstance(value, str) else None
        if iceberg_type in ("timestamp", "timestamptz"):
            cut = _timestamp(value, iceberg_type) if isinstance(value, str) else None
            return None if cut is None else cut[0]
        if decimal := decimal_of(iceberg_type):
            return scaled(Decimal(value), decimal[1]) if isinstance(value, (int, Decimal)) else None
    except (ValueError, InvalidOperation, OverflowError):
        return None
    return None  # binary: Delta keeps no bounds for it


def _timestamp(value: str, iceberg_type: str) -> tuple[int, int] | None:
    """(microseconds, fraction digits written) of a stats timestamp; None when not exact enough."""
    try:
        micros, digits, zoned = timestamp_micros(value)
    except ValueError:
        return None
    # an instant without an offset could be in any zone: no bound rather than a wrong one
    return None if iceberg_type == "timestamptz" and not zoned else (micros, digits)
