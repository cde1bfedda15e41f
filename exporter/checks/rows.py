"""The merge-gate rules that read rows: declared keys non-null and unique after a change, and the
values of named columns among the rows it adds or updates.

Read as the row diff plans them (`exporter.diff.rows.compute.plan_row_diff`), never a full scan:
- the rows a change writes are those of the files only the source has, and the rows a changed
  deletion vector brings back; the rows it adds or updates are those left once they cancel against
  the rows it removes (a copy-on-write rewrite brings its unchanged rows back, and they cancel);
- a written key is checked against the rows already in the table only in the files whose
  statistics (`minValues`/`maxValues`, partition values) could hold it, and only their key columns.
The rows read are bounded as the row diff's are (`row_diff.max_rows`, `row_diff.max_memory_mib`):
past them the rule is a finding (it could not be checked), never a silent pass.
"""

from __future__ import annotations

import bisect
import datetime
import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from exporter.checks.rules import ColumnRule, TableChecks
from exporter.diff.rows.compare import as_text, unmatched
from exporter.diff.rows.compute import RowDiffQuery, RowPlan, plan_row_diff
from exporter.diff.rows.read import Exceeded, Limit, Reader, RowsOf, Side
from exporter.lakefs.lake import Lake

SHOWN = 5  # offending keys or values named in a finding
_SEPARATOR = "\x1f"


@dataclass(frozen=True)
class RowFinding:
    rule: str  # "keys" or "columns"
    found: str


def row_findings(lake: Lake, repository: str, destination_commit: str, source_commit: str, table_path: str,
                 checks: TableChecks) -> list[RowFinding]:
    """The key and column rules of a table whose files differ between the two commits."""
    store = lake.store(repository)
    plan, _ = plan_row_diff(lake, store, RowDiffQuery(repository, destination_commit, source_commit, table_path))
    right = plan.right
    if right.files is None:  # the change drops the table: nothing is written (the schema rule says what went)
        return []
    findings = [RowFinding(rule, f"column `{column}` is not in the table's schema")
                for rule, columns in (("keys", checks.keys), ("columns", checks.columns)) for column in columns
                if column not in right.columns]
    if findings:
        return findings
    reader = Reader(store, lake.lakefs, repository, table_path.strip("/") + "/", lake.read_scope(repository))
    limit = Limit(lake.config)
    try:
        written, changed = _written(reader, plan, limit)
        if checks.keys:
            findings += _key_findings(reader, plan, limit, list(checks.keys), written, changed)
        for column, rule in checks.columns.items():
            findings += _column_findings(column, rule, changed.column(column))
    except Exceeded as exceeded:
        findings.append(RowFinding("keys" if checks.keys else "columns", f"the changed rows could not be checked: {exceeded}"))
    return findings


def _written(reader: Reader, plan: RowPlan, limit: Limit) -> tuple[pa.Table, pa.Table]:
    """The rows the change writes (those of the source's own files, and those a deletion vector
    brings back), and of them the rows it adds or updates (the rest cancel against removed rows)."""
    left, right = plan.left, plan.right
    removed, written = RowsOf(left, limit), RowsOf(right, limit)
    for path, add in plan.left_paths.items():
        if path not in plan.vector_changed:
            removed.extend(reader, left.commit_id, add, reader.deleted(left.commit_id, add), invert=True)
    for path, add in plan.right_paths.items():
        if path not in plan.vector_changed:
            written.extend(reader, right.commit_id, add, reader.deleted(right.commit_id, add), invert=True)
    for path in plan.vector_changed:
        before = reader.deleted(left.commit_id, plan.left_paths[path])
        after = reader.deleted(right.commit_id, plan.right_paths[path])
        written.extend(reader, right.commit_id, plan.right_paths[path], before - after)
    removed_rows, written_rows = removed.table(), written.table()
    _, added = unmatched(removed_rows, written_rows, plan.common)
    return written_rows, written_rows.take(added)


def _key_findings(reader: Reader, plan: RowPlan, limit: Limit, keys: list[str], written: pa.Table,
                  changed: pa.Table) -> list[RowFinding]:
    findings = []
    null = _any_null(changed, keys)
    if null:
        findings.append(RowFinding("keys", f"{null:,} added or updated row(s) with a null key ({', '.join(keys)})"))
    written = written.filter(pc.invert(_null_mask(written, keys)))
    texts = key_text(written, keys)
    counted = pc.value_counts(texts)
    repeated = counted.filter(pc.greater(counted.field("counts"), 1))
    if len(repeated):
        shown = ", ".join(f"{_shown(keys, value)} ({count} rows)" for value, count in
                          zip(repeated.field("values").to_pylist()[:SHOWN], repeated.field("counts").to_pylist()))
        findings.append(RowFinding("keys", f"{len(repeated):,} key(s) written more than once by the change: {shown}"))
    existing = _existing_keys(reader, plan, limit, keys, written)
    clashes = pc.unique(existing.filter(pc.is_in(existing, value_set=texts))) if len(existing) else existing
    if len(clashes):
        shown = ", ".join(_shown(keys, value) for value in clashes.to_pylist()[:SHOWN])
        findings.append(RowFinding("keys", f"{len(clashes):,} key(s) the change writes are already in the table: {shown}"))
    return findings


def _existing_keys(reader: Reader, plan: RowPlan, limit: Limit, keys: list[str], written: pa.Table) -> pa.Array:
    """The keys of the rows the change keeps (files both sides have), read only from the files whose
    statistics could hold a written key, and only their key columns."""
    right = plan.right
    if not written.num_rows:
        return pa.array([], pa.string())
    bounds = {column: _Bounds.of(right, column, written.column(column)) for column in keys}
    kept = RowsOf(right, limit)
    for add in right.files.files(whole=True):
        path = add["path"]
        if path in plan.right_paths and path not in plan.vector_changed:
            continue  # written by the change: already among its rows
        if not all(bounds[column].could_hold(add) for column in keys):
            continue
        skipped = reader.deleted(right.commit_id, add)
        if path in plan.vector_changed:  # the rows its new deletion vector brings back are written ones
            skipped = skipped | reader.deleted(plan.left.commit_id, plan.left_paths[path])
        kept.extend(reader, right.commit_id, add, skipped, invert=True, columns=keys)
    rows = kept.table() if kept.tables else pa.table({column: pa.array([], pa.string()) for column in keys})
    return key_text(rows.filter(pc.invert(_null_mask(rows, keys))), keys)


class _Bounds:
    """The written values of one key column, to tell whether a file's statistics could hold one."""

    def __init__(self, side: Side, column: str, partition: bool, values: list | None):
        self.side, self.column, self.partition, self.values = side, column, partition, values

    @classmethod
    def of(cls, side: Side, column: str, values: pa.ChunkedArray) -> _Bounds:
        if column in side.partition_columns:  # partition values are text in the log and in the rows read
            return cls(side, column, True, sorted(set(values.to_pylist())))
        plain = [_comparable(value) for value in pc.unique(values).to_pylist()]
        if any(value is None for value in plain) or len({type(value) for value in plain}) > 1:
            return cls(side, column, False, None)  # a type statistics are not compared in: every file could hold it
        return cls(side, column, False, sorted(plain))

    def could_hold(self, add: dict) -> bool:
        physical = self.side.physical[self.column]
        if self.partition:
            value = (add.get("partitionValues") or {}).get(physical)
            index = bisect.bisect_left(self.values, value)
            return index < len(self.values) and self.values[index] == value
        if self.values is None:
            return True
        stats = json.loads(add.get("stats") or "{}")
        if stats.get("numRecords") is not None and (stats.get("nullCount") or {}).get(physical) == stats["numRecords"]:
            return False  # every value null: no key
        low, high = (stats.get("minValues") or {}).get(physical), (stats.get("maxValues") or {}).get(physical)
        if low is None or high is None or not isinstance(low, type(self.values[0])) and not _numbers(low, high,
                                                                                                   self.values[0]):
            return True
        index = bisect.bisect_left(self.values, low)
        if index == len(self.values):
            return False
        value = self.values[index]
        # a string statistic may be truncated: the maximum compares with a value's prefix of its length
        return (value[:len(high)] if isinstance(value, str) else value) <= high


def _comparable(value):
    """A key value as its statistic compares (numbers, text; a date as ISO text); None when not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, str)):
        return value
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value.isoformat()
    return None


def _numbers(*values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _column_findings(column: str, rule: ColumnRule, values: pa.ChunkedArray) -> list[RowFinding]:
    findings = []
    if rule.not_null and values.null_count:
        findings.append(RowFinding("columns", f"{values.null_count:,} added or updated row(s) with `{column}` null"))
    if rule.accepted is not None:
        present, accepted = _comparable_to(values.filter(values.is_valid()), rule.accepted)
        outside = present.filter(pc.invert(pc.is_in(present, value_set=accepted)))
        if len(outside):
            counted = pc.value_counts(outside)
            shown = ", ".join(f"{value!r} ({count})" for value, count in zip(
                counted.field("values").to_pylist()[:SHOWN], counted.field("counts").to_pylist()))
            findings.append(RowFinding("columns", f"{len(outside):,} added or updated row(s) with `{column}` not one of "
                                                  f"{', '.join(map(str, rule.accepted))}: {shown}"))
    return findings


def _comparable_to(values: pa.ChunkedArray, accepted: tuple) -> tuple[pa.ChunkedArray | pa.Array, pa.Array]:
    """The values and the accepted ones in one type: the column's (YAML's 1 for a string column is
    '1'), or both as text when the accepted values are not of it."""
    try:
        return values, pa.array(list(accepted)).cast(values.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return as_text(values), pa.array([str(value) for value in accepted], pa.string())


def key_text(rows: pa.Table, keys: list[str]) -> pa.Array:
    """Each row's key as one text value (its columns' text, joined), for counting and matching."""
    parts = [as_text(rows.column(column)) for column in keys]
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, _SEPARATOR)


def _null_mask(rows: pa.Table, keys: list[str]) -> pa.Array:
    mask = pa.array([False] * rows.num_rows, pa.bool_())
    for column in keys:
        mask = pc.or_(mask, pc.is_null(rows.column(column)))
    return mask


def _any_null(rows: pa.Table, keys: list[str]) -> int:
    return pc.sum(_null_mask(rows, keys).cast(pa.int64())).as_py() or 0


def _shown(keys: list[str], text: str) -> str:
    return ", ".join(f"{column}={value}" for column, value in zip(keys, text.split(_SEPARATOR)))
