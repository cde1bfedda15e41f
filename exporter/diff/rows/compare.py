"""Comparing the rows of the files that differ between two versions, as Spark's `exceptAll` does:
rows unmatched on either side, then paired into updates by the key columns.

Column-wise in Arrow: rows are matched by their values as text (so a widened type or a nested
value compares by value), sorted, and each row's rank within its group of equal rows decides
whether it cancels. Python objects are made only for the rows written out, a row group at a time.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.diff.rows.file import ROWS_PER_GROUP

REMOVED, ADDED = -1, 1  # the side a row comes from: the left ref's files, the right's
CHANGES = ("removed", "added", "updated")


def unmatched(removed: pa.Table, added: pa.Table, common: list[str]) -> tuple[pa.Array, pa.Array]:
    """Indexes of the removed and added rows left once equal rows (over `common`) cancel as
    multisets: of each group of equal rows, the first |added - removed| of the larger side stay."""
    if not common or not removed.num_rows or not added.num_rows:
        return pa.array(range(removed.num_rows), pa.int64()), pa.array(range(added.num_rows), pa.int64())
    matched = [f"__m{i}" for i in range(len(common))]
    both = pa.concat_tables([_matchable(removed, common, REMOVED), _matchable(added, common, ADDED)])
    both = both.sort_by([(c, "ascending") for c in matched + ["__side", "__index"]])
    group = np.cumsum(_run_starts(both, matched)) - 1
    side = both.column("__side").to_numpy()
    net = np.bincount(group, weights=side).astype(np.int64)[group]  # added minus removed, per row's group
    keep = (np.sign(net) == side) & (_ranks(both, matched + ["__side"]) < np.abs(net))
    index = both.column("__index").to_numpy()
    return (pa.array(np.sort(index[keep & (side == REMOVED)]), pa.int64()),
            pa.array(np.sort(index[keep & (side == ADDED)]), pa.int64()))


@dataclass
class Changes:
    """The rows that changed: removed, added, and (with a key) updates as (before, after) pairs."""

    removed: pa.Table
    added: pa.Table
    before: pa.Table
    after: pa.Table

    @property
    def counts(self) -> dict:
        """{"total": {change: n}, "partitions": {label: {change: n}}}."""
        total = dict(zip(CHANGES, (self.removed.num_rows, self.added.num_rows, self.after.num_rows)))
        partitions: dict[str, dict[str, int]] = {}
        for change, rows in zip(CHANGES, (self.removed, self.added, self.after)):
            counted = rows.group_by("__partition", use_threads=False).aggregate([([], "count_all")])
            for label, count in zip(counted.column("__partition").to_pylist(), counted.column("count_all").to_pylist()):
                partitions.setdefault(label, dict.fromkeys(CHANGES, 0))[change] = count
        return {"total": total, "partitions": partitions}

    def batches(self, size: int = ROWS_PER_GROUP) -> Iterator[list[dict]]:
        """The rows as `exporter.diff.rows.file` stores them, in id order: removed, added, updated."""
        number = 0
        for change, rows, before in (("removed", self.removed, None), ("added", self.added, None),
                                     ("updated", self.after, self.before)):
            for start in range(0, rows.num_rows, size):
                values = rows.slice(start, size).to_pylist()
                befores = before.slice(start, size).to_pylist() if before is not None else [None] * len(values)
                batch = []
                for row, prior in zip(values, befores):
                    partition = row.pop("__partition")
                    if prior is not None:
                        prior.pop("__partition")
                    batch.append({"id": number, "change": change, "partition": partition, "values": row_json(row),
                                  "before": None if prior is None else row_json(prior)})
                    number += 1
                yield batch


def changes(removed: pa.Table, added: pa.Table, key: list[str]) -> Changes:
    """The rows that changed; with a key, a removed and an added row of the same key are one update
    (the n-th removed row of a key pairs with its n-th added row)."""
    if not key or not removed.num_rows or not added.num_rows:
        return Changes(removed, added, removed.slice(0, 0), added.slice(0, 0))
    keys = [f"__m{i}" for i in range(len(key))]
    ranked = []
    for rows, side in ((removed, REMOVED), (added, ADDED)):
        table = _matchable(rows, key, side).sort_by([(c, "ascending") for c in keys + ["__index"]])
        ranked.append(table.select(keys + ["__index"]).append_column("__rank", pa.array(_ranks(table, keys))))
    pairs = ranked[0].join(ranked[1], keys + ["__rank"], join_type="inner", left_suffix="_before",
                           right_suffix="_after", use_threads=False)
    pairs = pairs.sort_by([("__index_after", "ascending")])
    before, after = pairs.column("__index_before"), pairs.column("__index_after")
    return Changes(_without(removed, before), _without(added, after), removed.take(before), added.take(after))


def _matchable(rows: pa.Table, columns: list[str], side: int) -> pa.Table:
    """The columns rows are matched on, each as text that is never null (`__m<i>`), their side and index."""
    matched = {f"__m{i}": _never_null(as_text(rows.column(column))) for i, column in enumerate(columns)}
    matched["__side"] = pa.array(np.full(rows.num_rows, side, np.int8))
    matched["__index"] = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    return pa.table(matched)


def _never_null(text: pa.Array) -> pa.Array:
    """`N` for null, `V<text>` otherwise: equal exactly when both are null or both the same text."""
    return pc.if_else(pc.is_null(text), pa.scalar("N"), pc.binary_join_element_wise("V", text, ""))


def _run_starts(table: pa.Table, columns: list[str]) -> np.ndarray:
    """For rows sorted by `columns`: True where a row differs from the one before in any of them."""
    starts = np.zeros(table.num_rows, dtype=bool)
    if table.num_rows:
        starts[0] = True
        for column in columns:
            values = table.column(column).combine_chunks()
            starts[1:] |= pc.not_equal(values.slice(1), values.slice(0, len(values) - 1)).to_numpy(zero_copy_only=False)
    return starts


def _ranks(table: pa.Table, columns: list[str]) -> np.ndarray:
    """For rows sorted by `columns`: each row's position within its run of equal values."""
    position = np.arange(table.num_rows)
    return position - np.maximum.accumulate(np.where(_run_starts(table, columns), position, 0))


def _without(rows: pa.Table, indexes: pa.ChunkedArray) -> pa.Table:
    if not len(indexes):
        return rows
    return rows.filter(pc.invert(pc.is_in(pa.array(np.arange(rows.num_rows, dtype=np.int64)), value_set=indexes)))


def as_text(column: pa.ChunkedArray) -> pa.Array:
    if pa.types.is_null(column.type):
        return pa.nulls(len(column), pa.string())
    try:
        return pc.cast(column, pa.string()).combine_chunks()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        return pa.array([None if v is None else json.dumps(_jsonable(v), sort_keys=True) for v in column.to_pylist()],
                        pa.string())


def row_json(row: dict) -> str:
    """A row as the rows file and the merge gate's findings hold it: JSON of its columns' values."""
    return json.dumps({name: _jsonable(value) for name, value in row.items()})


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
