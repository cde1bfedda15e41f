"""Which rows changed between two refs of one Delta table, read only from the files that differ.

The two snapshots are compared by logical file (path, deletion-vector id; `exporter.delta.live_files`):
files only on one side are read whole (minus their deletion vector); a file on both sides whose
deletion vector changed contributes exactly the rows whose bits differ; shared files cost nothing.
Removed and added rows are then matched as multisets over the columns both sides have (a
copy-on-write rewrite, OPTIMIZE or an identical overwrite cancels out), and, with a key, the rows
left on both sides with the same key are updates. A column is the same column on both sides by
its identity (`exporter.delta.columns`), so a renamed one is compared, and shown, under its new name.

Memory follows the differing rows, and is bounded: the rows to read are counted before reading
(the files' `numRecords` less their deleted rows; the deletion-vector bits that differ) and again
while reading, and above `row_diff.max_rows` rows, `row_diff.max_bytes` of files or
`row_diff.max_memory_mib` of rows read the diff runs as the Spark job, or is refused
(`RowDiffTooLarge`) naming the count, rather than run out of memory. The rows of every answer are
a Parquet file beside the exports (`exporter.diff.rows.file`); the answer holds counts and its location.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from exporter.config import Config
from exporter.delta.columns import matched_by_id, paired_fields, physical_name
from exporter.delta.live_files import LiveFiles
from exporter.delta.replay import num_records
from exporter.diff.rows.compare import CHANGES, changes, unmatched
from exporter.diff.rows.file import store_rows
from exporter.diff.rows.read import (Exceeded, Limit, Reader, RowsOf, Side, file_entry, partition_label,
                                      partition_values)
from exporter.diff.table import diff_commits, load_table
from exporter.errors import BadRequest, ExporterError, NotFound
from exporter.lakefs.client import LakeFS
from exporter.lakefs.descriptors import changes_under
from exporter.lakefs.lake import Lake
from exporter.lakefs.table_log import LoadedLog, checkpoint_files_hint
from exporter.state.results import ResultCache
from exporter.storage.layout import row_diff_location
from exporter.storage.objectstore import ObjectStore

T = TypeVar("T")


class RowDiffTooLarge(ExporterError):
    """More differing rows or data than the `row_diff` limits: too much to diff in one process."""


@dataclass
class SourceLog:
    """A table's log at a lakeFS commit, read as `LiveFiles` reads an exported one."""

    loaded: LoadedLog
    store: ObjectStore

    @property
    def segment(self):
        return self.loaded.segment

    def raw(self, name: str) -> bytes:
        if name not in self.loaded.files:
            self.loaded.read_more(self.store, [name])
        return self.loaded.files[name]

    def raws(self, names: list[str]) -> Iterator[bytes]:
        self.loaded.read_more(self.store, names)  # those not read yet
        return map(self.loaded.files.__getitem__, names)

    def source(self, name: str):
        return self.loaded.source(self.store, name)

    def checkpoint_files(self) -> list[str]:
        return self.loaded.checkpoint_files


@dataclass(frozen=True)
class RowDiffQuery:
    """Which row diff: `table_path` in `repository` from `left` (None: an empty table) to `right`,
    rows matched on the `key` columns (none: on all of them). Commit ids, or refs for `cached_row_diff`."""

    repository: str
    left: str | None
    right: str
    table_path: str
    key: tuple[str, ...] = ()


def compute_row_diff(lake: Lake, query: RowDiffQuery, max_bytes: int | None = None,
                     progress: Callable[[dict], None] | None = None) -> dict:
    """The row diff `query` names, between two commits. Above `row_diff.max_rows` rows to read
    (counted before and while reading), `max_bytes` of files (default `row_diff.max_bytes`) or
    `row_diff.max_memory_mib` of rows read: the Spark job when `row_diff.spark.master` is set (and
    no `max_bytes` was given), else RowDiffTooLarge."""
    config = lake.config
    left_commit, right_commit, table_path, key = query.left, query.right, query.table_path, tuple(query.key)
    use_spark = max_bytes is None and bool(config.row_diff.spark.master)
    max_bytes = config.row_diff.max_bytes if max_bytes is None else max_bytes
    started = time.monotonic()
    store = lake.store(query.repository)
    plan, renamed = plan_row_diff(lake, store, query)
    left, right, prefix = plan.left, plan.right, table_path.strip("/") + "/"
    size = sum(int(add.get("size") or 0) for add in plan.to_read())
    reader = Reader(store, lake.lakefs, query.repository, prefix, lake.read_scope(query.repository))
    answer = _in_process_or_spark(config, reader, plan, max_bytes, use_spark,
                                  lambda: _in_process(config, store, reader, plan, prefix),
                                  lambda rows: _with_spark(config, store, reader, plan, progress, rows))
    return {"table_path": table_path, "left_commit": left_commit, "right_commit": right_commit, "key": list(key),
            "columns": {"left": left.columns, "right": right.columns, "matched_on": plan.common, "renamed": renamed},
            **answer, "bytes_read": size, "computed_seconds": round(time.monotonic() - started, 4)}


def _in_process_or_spark(config: Config, reader: Reader, plan: RowPlan, max_bytes: int, use_spark: bool,
                         in_process: Callable[[], T], with_spark: Callable[[int | None], T]) -> T:
    """The one rule for where a plan's rows are read: `in_process()` unless the rows counted before
    reading (`rows_to_read`) or the bytes to read are past the limits (`_too_large`) or reading
    passes them (`Exceeded`); then `with_spark(rows)` when `use_spark`, else RowDiffTooLarge."""
    to_read = plan.to_read()
    rows = rows_to_read(reader, plan)
    reason = _too_large(config, max_bytes, len(to_read), sum(int(add.get("size") or 0) for add in to_read), rows)
    if reason is None:
        try:
            return in_process()
        except Exceeded as exceeded:
            reason = str(exceeded)
    if not use_spark:
        raise RowDiffTooLarge(reason)
    return with_spark(rows)


def plan_row_diff(lake: Lake, store: ObjectStore, query: RowDiffQuery) -> tuple[RowPlan, list[dict]]:
    """Which files differ between the query's two sides (NotFound when neither has the table,
    BadRequest for a key column in neither schema), and the columns renamed between them."""
    lakefs, repository, table_path, key = lake.lakefs, query.repository, query.table_path, tuple(query.key)
    right = _side(store, lakefs, repository, query.right, table_path)
    left, renamed = _named_as_right(_side(store, lakefs, repository, query.left, table_path), right)
    if left.files is None and right.files is None:
        raise NotFound(f"no Delta table at {table_path!r} on either side")
    unknown = [k for k in key if k not in left.columns + right.columns]
    if unknown:
        raise BadRequest(f"key column(s) {', '.join(unknown)} are in neither side's schema")
    left_keys, right_keys = _keys(left), _keys(right)
    only_left = left_keys.filter(pc.invert(pc.is_in(left_keys, value_set=right_keys)))
    only_right = right_keys.filter(pc.invert(pc.is_in(right_keys, value_set=left_keys)))
    left_paths = {add["path"]: add for add in (left.files.adds(only_left) if left.files else [])}
    right_paths = {add["path"]: add for add in (right.files.adds(only_right) if right.files else [])}
    common = [c for c in left.columns if c in right.columns] if left.files and right.files else []
    return RowPlan(left, right, left_paths, right_paths, sorted(set(left_paths) & set(right_paths)), common, key), renamed


@dataclass
class RowPlan:
    """What differs: the add actions of the files only one side has, by path (a path on both sides
    is a file whose deletion vector changed), the columns rows match on, the key."""

    left: Side
    right: Side
    left_paths: dict[str, dict]
    right_paths: dict[str, dict]
    vector_changed: list[str]
    common: list[str]
    key: tuple[str, ...]

    def whole(self) -> list[dict]:
        """The files read whole (less their deleted rows): on one side only."""
        changed = set(self.vector_changed)
        return [add for path, add in [*self.left_paths.items(), *self.right_paths.items()] if path not in changed]

    def to_read(self) -> list[dict]:
        return self.whole() + [self.right_paths[path] for path in self.vector_changed]


def count_changes(lake: Lake, query: RowDiffQuery) -> dict[str, int]:
    """The row diff's counts alone (removed, added, updated: a removed and an added row of the same
    `key` are one update), its rows neither kept nor stored: read in this process within the row
    diff's limits, past them as the Spark job when `row_diff.spark.master` is set, else
    RowDiffTooLarge."""
    config = lake.config
    store = lake.store(query.repository)
    plan, _ = plan_row_diff(lake, store, query)
    reader = Reader(store, lake.lakefs, query.repository, query.table_path.strip("/") + "/",
                    lake.read_scope(query.repository))

    def with_spark(rows: int | None) -> dict[str, int]:
        from exporter.diff.rows.spark import run_job  # PySpark stays out of processes that never need it

        job = _job_plan(reader, plan, rows)
        return run_job(config, store, job, None)["counts"] if job["files"] else dict.fromkeys(CHANGES, 0)

    return _in_process_or_spark(config, reader, plan, config.row_diff.max_bytes, bool(config.row_diff.spark.master),
                                lambda: _changes(reader, plan, Limit(config))[0].counts["total"], with_spark)


def _changes(reader: Reader, plan: RowPlan, limit: Limit):
    """The changed rows (`compare.changes`, updates paired by the plan's key) and how many each file
    gave, read in this process; `Exceeded` past `limit`."""
    removed_rows, added_rows, files = read_differing_rows(reader, plan, limit)
    removed_left, added_left = unmatched(removed_rows, added_rows, plan.common)
    return changes(removed_rows.take(removed_left), added_rows.take(added_left),
                   [k for k in plan.key if k in plan.common]), files


def _in_process(config: Config, store: ObjectStore, reader: Reader, plan: RowPlan, prefix: str) -> dict:
    """The diff in this process; its rows stored as the rows file. `Exceeded` past the limits."""
    left, right = plan.left, plan.right
    changed, files = _changes(reader, plan, Limit(config))
    counts = changed.counts
    location = None
    if any(counts["total"].values()):
        location = row_diff_location(config, left.commit_id, right.commit_id, prefix, key_part(plan.key))
        store_rows(store, location, changed.batches())
    return {"counts": counts["total"], "partitions": counts["partitions"], "files": files, "engine": "in-process",
            "rows_location": location}


def read_differing_rows(reader: Reader, plan: RowPlan, limit: Limit) -> tuple[pa.Table, pa.Table, dict[str, list]]:
    """The rows the plan's files differ by, read in this process within `limit` (`Exceeded` past it):
    removed (the left's own files less their deleted rows; rows a deletion vector newly deletes) and
    added (the right's; rows one brings back), and how many each file gave."""
    left, right, vector_changed = plan.left, plan.right, plan.vector_changed
    removed, added = RowsOf(left, limit), RowsOf(right, limit)
    files: dict[str, list] = {"removed": [], "added": [], "deletion_vector_changed": []}
    for path, add in plan.left_paths.items():
        if path not in vector_changed:
            count = removed.extend(reader, left.commit_id, add, reader.deleted(left.commit_id, add), invert=True)
            files["removed"].append(file_entry(left, add, count))
    for path, add in plan.right_paths.items():
        if path not in vector_changed:
            count = added.extend(reader, right.commit_id, add, reader.deleted(right.commit_id, add), invert=True)
            files["added"].append(file_entry(right, add, count))
    for path in vector_changed:  # rows deleted on the right only are removed; rows deleted on the left only, added
        before, after = reader.deleted(left.commit_id, plan.left_paths[path]), reader.deleted(right.commit_id,
                                                                                              plan.right_paths[path])
        gone = removed.extend(reader, left.commit_id, plan.left_paths[path], after - before)
        back = added.extend(reader, right.commit_id, plan.right_paths[path], before - after)
        files["deletion_vector_changed"].append({"path": path, "rows_deleted": gone, "rows_restored": back})
    return removed.table(), added.table(), files


def rows_to_read(reader: Reader, plan: RowPlan) -> int | None:
    """Rows the diff reads, counted before reading: each file read whole by its `numRecords` less
    its deletion vector's cardinality, each file whose deletion vector changed by the bits that
    differ. None when a file has no `numRecords` (then counted while reading)."""
    total = 0
    for add in plan.whole():
        records = num_records(add.get("stats"))
        if records is None:
            return None
        total += records - int((add.get("deletionVector") or {}).get("cardinality") or 0)
    for path in plan.vector_changed:
        before = reader.deleted(plan.left.commit_id, plan.left_paths[path])
        after = reader.deleted(plan.right.commit_id, plan.right_paths[path])
        total += len(after - before) + len(before - after)
    return total


def _too_large(config: Config, max_bytes: int, files: int, size: int, rows: int | None) -> str | None:
    """Why a diff of `files` files, `size` bytes and `rows` rows is too large to run in the worker."""
    if rows is not None and rows > config.row_diff.max_rows:
        return (f"the two sides differ in {files:,} file(s) holding {rows:,} rows to read: more than "
                f"row_diff.max_rows ({config.row_diff.max_rows:,})")
    if size > max_bytes:
        return (f"the two sides differ in {files:,} file(s), {size:,} bytes to read: more than {max_bytes:,} "
                f"(row_diff.max_bytes: {config.row_diff.max_bytes:,})")
    return None


def _with_spark(config: Config, store: ObjectStore, reader: Reader, plan: RowPlan,
                progress: Callable[[dict], None] | None, rows: int | None) -> dict:
    """The plan (which rows of which files, by physical address) run as the Spark job; `rows`: how
    many it reads, when counted (the job sizes its partitions by it)."""
    from exporter.diff.rows.spark import run_job  # PySpark stays out of processes that never need it

    left, right, left_paths, right_paths = plan.left, plan.right, plan.left_paths, plan.right_paths
    vector_changed, key = plan.vector_changed, plan.key

    job = _job_plan(reader, plan, rows)
    files = job["files"]
    location = row_diff_location(config, left.commit_id, right.commit_id, reader.prefix, key_part(key))
    summary = run_job(config, store, job, location, progress) if files else \
        {"counts": {"added": 0, "removed": 0, "updated": 0}, "partitions": {}, "file_rows": {}}
    counted = summary["file_rows"]

    def rows_of(item: dict) -> int:
        return counted.get(f"{item['address']}|{item['side']}", 0)

    changed = {"removed": [], "added": [], "deletion_vector_changed": []}
    for item in files:
        side, add = (left, left_paths) if item["side"] == "removed" else (right, right_paths)
        if item["path"] not in vector_changed:
            changed[item["side"]].append(file_entry(side, add[item["path"]], rows_of(item)))
    for path in vector_changed:
        found = {item["side"]: rows_of(item) for item in files if item["path"] == path}
        changed["deletion_vector_changed"].append({"path": path, "rows_deleted": found.get("removed", 0),
                                                   "rows_restored": found.get("added", 0)})
    return {"counts": summary["counts"], "partitions": summary["partitions"], "files": changed, "engine": "spark",
            "rows_location": location if files else None}


def _job_plan(reader: Reader, plan: RowPlan, rows: int | None) -> dict:
    """The row diff's plan as the Spark job reads it; `rows`: how many it reads, when counted."""
    return {"sides": {"removed": job_side(plan.left), "added": job_side(plan.right)}, "files": job_files(reader, plan),
            "common": plan.common, "key": [k for k in plan.key if k in plan.common], "rows": rows}


def job_files(reader: Reader, plan: RowPlan) -> list[dict]:
    """The plan's files as the Spark job reads them: removed (the left's own files, less their
    deleted rows; rows a deletion vector newly deletes) and added (the right's; rows one brings back)."""
    left, right, left_paths, right_paths = plan.left, plan.right, plan.left_paths, plan.right_paths
    files = [job_entry(reader, left, "removed", a, "except", reader.deleted(left.commit_id, a))
             for path, a in left_paths.items() if path not in plan.vector_changed]
    files += [job_entry(reader, right, "added", a, "except", reader.deleted(right.commit_id, a))
              for path, a in right_paths.items() if path not in plan.vector_changed]
    for path in plan.vector_changed:
        before, after = reader.deleted(left.commit_id, left_paths[path]), reader.deleted(right.commit_id, right_paths[path])
        files += [job_entry(reader, left, "removed", left_paths[path], "only", after - before)] if after - before else []
        files += [job_entry(reader, right, "added", right_paths[path], "only", before - after)] if before - after else []
    return files


def job_entry(reader: Reader, side: Side, name: str, add: dict, mode: str, rows: BitMap) -> dict:
    """A file as a Spark job's plan names it: by physical address, with the rows it reads (`only`
    those, or all `except` them), its partition and the part of the plan it is (`name`)."""
    return {"side": name, "address": reader.address(side.commit_id, add["path"]), "mode": mode, "rows": list(rows),
            "partition": partition_values(side, add), "label": partition_label(side, add), "path": add["path"],
            "size": int(add["size"])}


def job_side(side: Side, columns: list[str] | None = None) -> dict:
    """A side's columns as a Spark job's plan describes them (all, or the named ones)."""
    return {"columns": side.columns if columns is None else columns, "physical": side.physical,
            "partition_columns": side.partition_columns}


def _side(store: ObjectStore, lakefs: LakeFS, repository: str, commit_id: str | None, table_path: str) -> Side:
    loaded = load_table(lakefs, store, repository, commit_id, table_path) if commit_id else None
    if loaded is None:
        return Side(commit_id or "", None)
    files = LiveFiles(SourceLog(loaded, store))
    return _described(commit_id, files, files.metadata or {})


def _described(commit_id: str, files: LiveFiles | None, metadata: dict) -> Side:
    """A side as its metaData action describes it."""
    schema = json.loads(metadata.get("schemaString") or '{"fields": []}')
    side = Side(commit_id, files, partition_columns=list(metadata.get("partitionColumns") or []),
                 fields=schema.get("fields", []), configuration=metadata.get("configuration") or {})
    for column in side.fields:
        side.columns.append(column["name"])
        side.physical[column["name"]] = physical_name(column)
    return side


def _named_as_right(left: Side, right: Side) -> tuple[Side, list[dict]]:
    """Left with each column that is also a right column under the right's name (a rename: its new
    name), so the rows of both sides compare by name; and the renames. A column only on the left keeps
    its name, or is `name (dropped)` when a different right column has that name."""
    names, renamed = {}, []
    for left_field, right_field in paired_fields(left.fields, right.fields,
                                                 matched_by_id(left.configuration, right.configuration)):
        if left_field is None:
            continue
        if right_field is not None:
            names[left_field["name"]] = right_field["name"]
            if right_field["name"] != left_field["name"]:
                renamed.append({"from": left_field["name"], "to": right_field["name"]})
            continue
        name = left_field["name"]
        while name in right.columns:  # a different column has that name on the right
            name += " (dropped)"
        names[left_field["name"]] = name
    return replace(left, columns=[names[c] for c in left.columns],
                   physical={names[c]: physical for c, physical in left.physical.items()},
                   partition_columns=[names[c] for c in left.partition_columns]), renamed


def _keys(side: Side) -> pa.Array:
    return side.files.keys() if side.files else pa.array([], pa.string())


def worth_precomputing(lake: Lake, repository: str, parent: str | None, commit_id: str, table_path: str) -> bool:
    """Whether a commit's row diff against its parent is cheap enough to compute after every export:
    not a large table (its snapshot comparison alone would cost seconds), and at most
    `row_diff.precompute_bytes` of data objects changed (lakeFS's diff: one call per 1000)."""
    config, lakefs = lake.config, lake.lakefs
    if parent is None or checkpoint_files_hint(lakefs, repository, commit_id, table_path) >= config.workers.large_table_files:
        return False
    changed = 0
    for change in changes_under(lakefs, repository, parent, commit_id, table_path.strip("/") + "/"):
        if "/_delta_log/" not in "/" + change["path"]:
            changed += int(change.get("size_bytes") or 0)
            if changed > config.row_diff.precompute_bytes:
                return False
    return True


class RowDiffCache(ResultCache):
    """Row diffs keyed by (repository, left commit, right commit, table path, key columns)."""

    TABLE_PATH_PART = 3

    def __init__(self, redis_url: str, ttl_seconds: int):
        super().__init__(redis_url, ttl_seconds, "rowdiff")


def key_part(key: Iterable[str]) -> str:
    """The key columns as one cache-key part ("-" for none)."""
    return ",".join(key) or "-"


def key_columns(part: str) -> tuple[str, ...]:
    return () if part == "-" else tuple(part.split(","))


def cached_row_diff(lake: Lake, cache: RowDiffCache, query: RowDiffQuery,
                    max_bytes: int | None = None) -> tuple[dict, bool]:
    """The row diff between two refs, from the cache when present. Returns (diff, came from cache)."""
    lakefs = lake.lakefs
    left_commit, right_commit = diff_commits(lakefs, query.repository, query.left, query.right)
    at_commits = replace(query, left=left_commit, right=right_commit)
    parts = (query.repository, left_commit, right_commit, query.table_path, key_part(query.key))
    found = cache.get(*parts)
    if found is not None:
        return found, True
    diff = compute_row_diff(lake, at_commits, max_bytes)
    cache.put(diff, *parts)
    return diff, False
