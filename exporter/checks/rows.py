"""The merge-gate rules that read the files a change touches: declared keys non-null and unique
after it, the values of named columns among the rows it adds or updates, and the partitions it
leaves without a file (from the file lists alone).

Read as the row diff plans them (`exporter.diff.rows.compute.plan_row_diff`), never a full scan:
- the rows a change writes are those of the files only the source has, and the rows a changed
  deletion vector brings back; the rows it adds or updates are those left once they cancel against
  the rows it removes (a copy-on-write rewrite brings its unchanged rows back, and they cancel);
- a written key is checked against the rows already in the table only in the files whose
  statistics (`minValues`/`maxValues`, partition values) could hold it, and only their key columns.
The rows read are bounded as the row diff's are (`row_diff.max_rows`, `row_diff.max_memory_mib`):
past them the rule is a finding (it could not be checked), never a silent pass.

A finding carries some of the rows it is about (at most ROWS_SHOWN, whole rows, ordered by their
JSON), for the diff page: the written rows of the keys it names, the added or updated rows with a
null or a value not accepted. With more such rows than that, which are shown is the engine's pick.
"""

from __future__ import annotations

import bisect
import datetime
import itertools
import json
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from exporter.checks.rules import ColumnRule, TableChecks
from exporter.diff.rows.compare import as_text, row_json, unmatched
from exporter.config import Config
from exporter.diff.rows.compute import (RowDiffQuery, RowPlan, job_entry, job_files, job_side, plan_row_diff,
                                        read_differing_rows, rows_to_read)
from exporter.diff.rows.read import Exceeded, Limit, Reader, RowsOf, Side, partition_label
from exporter.lakefs.lake import Lake
from exporter.storage.objectstore import ObjectStore

SHOWN = 5  # offending keys or values named in a finding
ROWS_SHOWN = 10  # offending rows a finding carries
_SEPARATOR = "\x1f"
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class RowFinding:
    rule: str  # "keys" or "columns"
    found: str
    rows: tuple[dict, ...] = ()  # some of the rows it is about (column -> value, as JSON has it)


def row_findings(lake: Lake, repository: str, destination_commit: str, source_commit: str, table_path: str,
                 checks: TableChecks) -> list[RowFinding]:
    """The rules of a table whose files differ between the two commits that read those files: the
    partitions it empties (from the file lists), then the key and column rules: in this process
    within the row diff's limits, past them as a Spark job when `row_diff.spark.master` is
    set, else a finding saying the rows could not be checked."""
    config = lake.config
    store = lake.store(repository)
    plan, _ = plan_row_diff(lake, store, RowDiffQuery(repository, destination_commit, source_commit, table_path))
    right = plan.right
    if right.files is None:  # the change drops the table: nothing is written (the schema rule says what went)
        return []
    missing = [RowFinding(rule, f"column `{column}` is not in the table's schema")
               for rule, columns in (("keys", checks.keys), ("columns", checks.columns)) for column in columns
               if column not in right.columns]
    if missing:
        return missing
    emptied = [] if checks.emptied_partitions_at_most is None else _emptied_partitions(plan)
    findings = [RowFinding("rows", f"{len(emptied):,} partition(s) left without a file: "
                                   f"{', '.join(emptied[:SHOWN])}{' ...' if len(emptied) > SHOWN else ''}: "
                                   f"more than {checks.emptied_partitions_at_most}")] \
        if len(emptied) > (checks.emptied_partitions_at_most or 0) else []
    if not (checks.keys or checks.columns):
        return findings
    reader = Reader(store, lake.lakefs, repository, table_path.strip("/") + "/", lake.read_scope(repository))
    use_spark = bool(config.row_diff.spark.master)
    counted = rows_to_read(reader, plan)
    too_many = counted is not None and counted > config.row_diff.max_rows
    try:
        if too_many:
            raise Exceeded(f"{counted:,} changed rows to read: more than row_diff.max_rows ({config.row_diff.max_rows:,})")
        found = _in_process(reader, plan, Limit(config), checks)
    except Exceeded as exceeded:
        if not use_spark:
            return findings + [RowFinding("keys" if checks.keys else "columns",
                                          f"the changed rows could not be checked: {exceeded}")]
        found = _with_spark(config, store, reader, plan, checks, counted)
    return findings + findings_of(found, checks)


def _emptied_partitions(plan: RowPlan) -> list[str]:
    """The partitions (`column=value/...`) some file the change removes was in, and no file of the
    source is: read from the source's file list, no data file."""
    left, right = plan.left, plan.right
    if not left.partition_columns:
        return []
    touched = {partition_label(left, add) for path, add in plan.left_paths.items() if path not in plan.right_paths}
    remaining: set[str] = set()
    for add in right.files.files(whole=True) if touched else ():
        remaining.add(partition_label(right, add))
        if touched <= remaining:
            break
    return sorted(touched - remaining)


def findings_of(found: dict, checks: TableChecks) -> list[RowFinding]:
    """What either engine found (`_in_process`'s shape) as findings: keys as `column=value`, at most
    SHOWN of each kind named, with the rows of each kind (`found["rows"]`, JSON texts)."""
    keys = list(checks.keys)
    shown_rows = found.get("rows", {})

    def finding(rule: str, words: str, kind: str) -> RowFinding:
        return RowFinding(rule, words, offending_rows(shown_rows.get(kind, ())))

    findings = []
    if found.get("null_keys"):
        findings.append(finding("keys", f"{found['null_keys']:,} added or updated row(s) with a null key "
                                        f"({', '.join(keys)})", "null_keys"))
    total, shown = found.get("repeated", (0, []))
    if total:
        named = ", ".join(f"{_shown(keys, key)} ({count} rows)" for key, count in shown[:SHOWN])
        findings.append(finding("keys", f"{total:,} key(s) written more than once by the change: {named}", "repeated"))
    total, shown = found.get("clashes", (0, []))
    if total:
        findings.append(finding("keys", f"{total:,} key(s) the change writes are already in the table: "
                                        + ", ".join(_shown(keys, key) for key in shown[:SHOWN]), "clashes"))
    for column, rule in checks.columns.items():
        seen = found.get("columns", {}).get(column, {})
        if rule.not_null and seen.get("nulls"):
            findings.append(finding("columns", f"{seen['nulls']:,} added or updated row(s) with `{column}` null",
                                    f"nulls:{column}"))
        total, shown = seen.get("outside", (0, []))
        if total:
            named = ", ".join(f"{value!r} ({count})" for value, count in shown[:SHOWN])
            findings.append(finding("columns", f"{total:,} added or updated row(s) with `{column}` not one of "
                                               f"{', '.join(map(str, rule.accepted or ()))}: {named}",
                                    f"outside:{column}"))
    return findings


def offending_rows(texts) -> tuple[dict, ...]:
    """A finding's rows from either engine's JSON texts: at most ROWS_SHOWN, ordered by their JSON
    (keys sorted), so that both engines' picks of the same rows read the same."""
    rows = sorted((json.loads(text) for text in texts), key=lambda row: json.dumps(row, sort_keys=True))
    return tuple(rows[:ROWS_SHOWN])


def _in_process(reader: Reader, plan: RowPlan, limit: Limit, checks: TableChecks) -> dict:
    written, changed = _written(reader, plan, limit)
    found: dict = {"columns": {}, "rows": {}}
    if checks.keys:
        keys_found, rows = _keys_found(reader, plan, limit, list(checks.keys), written, changed)
        found.update(keys_found)
        found["rows"].update(rows)
    for column, rule in checks.columns.items():
        found["columns"][column], rows = _column_found(rule, changed, column)
        found["rows"].update(rows)
    return found


def _with_spark(config: Config, store: ObjectStore, reader: Reader, plan: RowPlan, checks: TableChecks,
                rows: int | None) -> dict:
    """The rules as the row diff's Spark job (`exporter.diff.rows.spark`): the files the row diff
    reads, and the kept files whose statistics' range meets a written file's on the first key column
    (numbers and dates; text and other keys read every kept file's key columns). `rows`: the changed
    rows it reads, when counted (the job sizes its partitions by them, as the row diff's)."""
    from exporter.diff.rows.spark import run_job  # PySpark stays out of processes that never need it

    right, keys = plan.right, list(checks.keys)
    files = job_files(reader, plan)
    if keys:
        could_hold = _written_ranges(plan, keys[0])
        files += [job_entry(reader, right, "kept", add, "except", _not_kept(reader, plan, add))
                  for add in _kept_files(plan, could_hold)]
    types = {field["name"]: field["type"] for field in right.fields}
    columns = {column: {"not_null": rule.not_null,
                        "accepted": None if rule.accepted is None else _as_json(rule.accepted, types.get(column))}
               for column, rule in checks.columns.items()}
    job = {"sides": {"removed": job_side(plan.left), "added": job_side(right), "kept": job_side(right, keys)},
           "files": files, "common": plan.common, "key": [], "rows": rows,
           "checks": {"keys": keys, "columns": columns, "checked": list(dict.fromkeys([*keys, *columns])),
                      "shown": SHOWN, "rows_shown": ROWS_SHOWN}}
    return run_job(config, store, job, None) if files else {}


def _written_ranges(plan: RowPlan, column: str):
    """Whether a kept file's statistics could hold a key the change writes, told from the written
    files' statistics (their rows are not read here): their ranges of `column`, merged."""
    right = plan.right
    physical = right.physical[column]
    written = list(plan.right_paths.values())
    if column in right.partition_columns:
        values = {(add.get("partitionValues") or {}).get(physical) for add in written}
        return lambda add: (add.get("partitionValues") or {}).get(physical) in values
    ranges = [_range(add, physical) for add in written]
    if not ranges or any(found is None for found in ranges):
        return lambda add: True
    ranges.sort()
    lows, highs = [low for low, _ in ranges], list(itertools.accumulate((high for _, high in ranges), max))  # running maximum

    def could_hold(add: dict) -> bool:
        found = _range(add, physical)
        if found is None:
            return True
        low, high = found
        before = bisect.bisect_right(lows, high)  # written ranges starting at or below this file's maximum
        return before > 0 and highs[before - 1] >= low

    return could_hold


def _range(add: dict, physical: str) -> tuple | None:
    """A file's (minimum, maximum) of a number or date column from its statistics; None when not known."""
    stats = json.loads(add.get("stats") or "{}")
    low, high = (stats.get("minValues") or {}).get(physical), (stats.get("maxValues") or {}).get(physical)
    if _numbers(low, high) or (isinstance(low, str) and isinstance(high, str) and _DATE.fullmatch(low)
                               and _DATE.fullmatch(high)):
        return low, high
    return None


def _as_json(accepted: tuple, kind) -> list[str]:
    """The accepted values as the Spark job sees a column's values: each as a one-value JSON array,
    in the column's type (an accepted value that cannot be of it can never match, and is left out)."""
    convert = {"byte": int, "short": int, "integer": int, "long": int, "float": float, "double": float,
               "boolean": bool}.get(kind if isinstance(kind, str) else "", str)
    values = []
    for value in accepted:
        try:
            values.append(json.dumps([convert(value)]))
        except (TypeError, ValueError):
            continue
    return values


def _written(reader: Reader, plan: RowPlan, limit: Limit) -> tuple[pa.Table, pa.Table]:
    """The rows the change writes (those of the source's own files, and those a deletion vector
    brings back), and of them the rows it adds or updates (the rest cancel against removed rows,
    as in the row diff)."""
    removed_rows, written_rows, _ = read_differing_rows(reader, plan, limit)
    _, added = unmatched(removed_rows, written_rows, plan.common)
    return written_rows, written_rows.take(added)


def _keys_found(reader: Reader, plan: RowPlan, limit: Limit, keys: list[str], written: pa.Table,
                changed: pa.Table) -> tuple[dict, dict]:
    """What the key rule finds, and the rows of each kind (`findings_of`): the added or updated rows
    with a null key, the written rows of the keys named as written twice or already in the table."""
    written = written.filter(pc.invert(_null_mask(written, keys)))
    texts = key_text(written, keys)
    counted = pc.value_counts(texts)
    repeated = counted.filter(pc.greater(counted.field("counts"), 1))
    existing = _existing_keys(reader, plan, limit, keys, written)
    clashes = pc.unique(existing.filter(pc.is_in(existing, value_set=texts))) if len(existing) else existing
    found = {"null_keys": _any_null(changed, keys),
             "repeated": (len(repeated), [(value.split(_SEPARATOR), count) for value, count in zip(
                 repeated.field("values").to_pylist()[:SHOWN], repeated.field("counts").to_pylist())]),
             "clashes": (len(clashes), [value.split(_SEPARATOR) for value in clashes.to_pylist()[:SHOWN]])}
    rows = {"null_keys": _rows_where(changed, _null_mask(changed, keys)),
            "repeated": _rows_where(written, pc.is_in(texts, value_set=repeated.field("values").slice(0, SHOWN))),
            "clashes": _rows_where(written, pc.is_in(texts, value_set=clashes.slice(0, SHOWN)))}
    return found, rows


def _rows_where(rows: pa.Table, mask: pa.Array) -> list[str]:
    """At most ROWS_SHOWN of the rows where `mask` holds, each as JSON (`row_json`), without the
    partition label the rows were read with."""
    picked = rows.filter(mask).slice(0, ROWS_SHOWN)
    return [row_json(row) for row in picked.drop_columns([c for c in ("__partition",) if c in picked.column_names])
            .to_pylist()]


def _existing_keys(reader: Reader, plan: RowPlan, limit: Limit, keys: list[str], written: pa.Table) -> pa.Array:
    """The keys of the rows the change keeps (files both sides have), read only from the files whose
    statistics could hold a written key, and only their key columns."""
    right = plan.right
    if not written.num_rows:
        return pa.array([], pa.string())
    bounds = {column: _Bounds.of(right, column, written.column(column)) for column in keys}
    kept = RowsOf(right, limit)
    for add in _kept_files(plan, lambda add: all(bounds[column].could_hold(add) for column in keys)):
        kept.extend(reader, right.commit_id, add, _not_kept(reader, plan, add), invert=True, columns=keys)
    rows = kept.table() if kept.tables else pa.table({column: pa.array([], pa.string()) for column in keys})
    return key_text(rows.filter(pc.invert(_null_mask(rows, keys))), keys)


def _kept_files(plan: RowPlan, could_hold) -> list[dict]:
    """The right side's files the change keeps (a file whose deletion vector changed too: its rows
    still there) that `could_hold` a written key."""
    return [add for add in plan.right.files.files(whole=True)
            if (add["path"] not in plan.right_paths or add["path"] in plan.vector_changed) and could_hold(add)]


def _not_kept(reader: Reader, plan: RowPlan, add: dict):
    """A kept file's rows that are not kept rows: deleted, or brought back by its new deletion vector
    (those are written ones)."""
    skipped = reader.deleted(plan.right.commit_id, add)
    if add["path"] in plan.vector_changed:
        skipped = skipped | reader.deleted(plan.left.commit_id, plan.left_paths[add["path"]])
    return skipped


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


def _column_found(rule: ColumnRule, changed: pa.Table, column: str) -> tuple[dict, dict]:
    """What a column rule finds among the added or updated rows, and those rows (`findings_of`)."""
    values = changed.column(column)
    found: dict = {"nulls": values.null_count}
    rows = {f"nulls:{column}": _rows_where(changed, pc.is_null(values))} if rule.not_null and values.null_count else {}
    if rule.accepted is not None:
        comparable, accepted = _comparable_to(values, rule.accepted)
        not_accepted = pc.and_(pc.is_valid(comparable), pc.invert(pc.is_in(comparable, value_set=accepted)))
        outside = comparable.filter(not_accepted)
        counted = pc.value_counts(outside) if len(outside) else None
        found["outside"] = (len(outside), [] if counted is None else list(zip(
            counted.field("values").to_pylist()[:SHOWN], counted.field("counts").to_pylist())))
        if len(outside):
            rows[f"outside:{column}"] = _rows_where(changed, not_accepted)
    return found, rows


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


def _shown(keys: list[str], values: list) -> str:
    return ", ".join(f"{column}={value}" for column, value in zip(keys, values))
