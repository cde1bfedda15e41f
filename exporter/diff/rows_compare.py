"""Comparing the rows of the files that differ between two versions, as Spark's `exceptAll` does:
rows unmatched on either side, then paired into updates by the key columns.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

REMOVED, ADDED = -1, 1  # the side a row comes from: the left ref's files, the right's


def unmatched(removed: pa.Table, added: pa.Table, common: list[str]) -> tuple[pa.Array, pa.Array]:
    """Indexes of the removed and added rows left once equal rows (over `common`) cancel as multisets."""
    if not common or not removed.num_rows or not added.num_rows:
        return pa.array(range(removed.num_rows), pa.int64()), pa.array(range(added.num_rows), pa.int64())
    both = pa.concat_tables([_matchable(removed, common, REMOVED), _matchable(added, common, ADDED)])
    groups = both.group_by(common, use_threads=False).aggregate([("__side", "sum"), ("__index", "list"),
                                                                ("__side", "list")])
    groups = groups.filter(pc.not_equal(groups.column("__side_sum"), 0))
    left, right = [], []
    for net, indexes, sides in zip(groups.column("__side_sum").to_pylist(), groups.column("__index_list").to_pylist(),
                                   groups.column("__side_list").to_pylist()):
        kept = [i for i, s in zip(indexes, sides) if s == (REMOVED if net < 0 else ADDED)][:abs(net)]
        (left if net < 0 else right).extend(kept)
    return pa.array(sorted(left), pa.int64()), pa.array(sorted(right), pa.int64())


def _matchable(rows: pa.Table, common: list[str], side: int) -> pa.Table:
    """The columns rows are matched on, as text (so a widened type or a nested value compares by value)."""
    columns = {column: _as_text(rows.column(column)) for column in common}
    columns["__side"] = pa.array([side] * rows.num_rows, pa.int8())
    columns["__index"] = pa.array(range(rows.num_rows), pa.int64())
    return pa.table(columns)


def _as_text(column: pa.ChunkedArray) -> pa.Array:
    if pa.types.is_null(column.type):
        return pa.nulls(len(column), pa.string())
    try:
        return pc.cast(column, pa.string())
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return pa.array([None if v is None else json.dumps(_jsonable(v), sort_keys=True) for v in column.to_pylist()],
                        pa.string())


def changes(removed: pa.Table, added: pa.Table, key: list[str]) -> tuple[list[dict], dict]:
    """The rows that changed, removed first, then added, then updates (with a key), and their counts."""
    removed_rows, added_rows = _records(removed), _records(added)
    updates = []
    if key:
        by_key: dict[tuple, list[int]] = {}
        for index, row in enumerate(removed_rows):
            by_key.setdefault(tuple(json.dumps(row["values"].get(k), sort_keys=True) for k in key), []).append(index)
        paired_removed, paired_added = set(), set()
        for index, row in enumerate(added_rows):
            candidates = by_key.get(tuple(json.dumps(row["values"].get(k), sort_keys=True) for k in key))
            if candidates:
                before = candidates.pop(0)
                paired_removed.add(before)
                paired_added.add(index)
                updates.append({"change": "updated", "partition": row["partition"], "values": row["values"],
                                "before": removed_rows[before]["values"]})
        removed_rows = [r for i, r in enumerate(removed_rows) if i not in paired_removed]
        added_rows = [r for i, r in enumerate(added_rows) if i not in paired_added]
    rows = [{"change": "removed", **r} for r in removed_rows] + [{"change": "added", **r} for r in added_rows] + updates
    partitions: dict[str, dict[str, int]] = {}
    total = {"added": 0, "removed": 0, "updated": 0}
    for number, row in enumerate(rows):
        row["id"] = number
        total[row["change"]] += 1
        counts = partitions.setdefault(row["partition"], {"added": 0, "removed": 0, "updated": 0})
        counts[row["change"]] += 1
    return rows, {"total": total, "partitions": partitions}


def _records(table: pa.Table) -> list[dict]:
    return [{"partition": row.pop("__partition"), "values": {k: _jsonable(v) for k, v in row.items()}}
            for row in table.to_pylist()]


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and value != value:
        return "NaN"
    return value
