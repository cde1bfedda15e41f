"""Reading the rows that differ: data files and deletion vectors by physical address, each file's
rows in its side's logical columns with the partition it came from, and the bound on how many rows
and how much memory a diff in the worker may read (`row_diff.max_rows`, `row_diff.max_memory_mib`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from exporter.config import Config
from exporter.delta.deletion_vectors import deleted_rows
from exporter.delta.live_files import LiveFiles
from exporter.errors import NotFound
from exporter.lakefs.client import LakeFS
from exporter.parquet.splice import open_parquet, read_present_columns
from exporter.storage.objectstore import ObjectSource, ObjectStore
from exporter.storage.scope import ReadScope


@dataclass
class Side:
    """One ref's table: its logical columns (schema order), their physical names, partition columns."""

    commit_id: str
    files: LiveFiles | None
    columns: list[str] = field(default_factory=list)
    physical: dict[str, str] = field(default_factory=dict)  # logical -> physical (column mapping)
    partition_columns: list[str] = field(default_factory=list)
    fields: list[dict] = field(default_factory=list)  # the schema's columns, as metaData.schemaString has them
    configuration: dict[str, str] = field(default_factory=dict)  # metaData.configuration


class Exceeded(Exception):
    """The rows read passed a limit (files without `numRecords` stats are counted only as they are read)."""


@dataclass
class Limit:
    """Rows and Arrow memory read so far, against `row_diff.max_rows` and `row_diff.max_memory_mib`."""

    config: Config
    rows: int = 0
    bytes: int = 0

    def add(self, data: pa.Table) -> None:
        self.rows, self.bytes = self.rows + data.num_rows, self.bytes + data.nbytes
        limits = self.config.row_diff
        if self.rows > limits.max_rows:
            raise Exceeded(f"more than row_diff.max_rows ({limits.max_rows:,}) rows read, and more to read")
        if self.bytes > limits.max_memory_mib * 2**20:
            raise Exceeded(f"{self.bytes / 2**20:,.0f} MiB of rows read: more than row_diff.max_memory_mib "
                           f"({limits.max_memory_mib:,})")


def partition_label(side: Side, add: dict) -> str:
    """`column=value/...` of the partition a file is in; empty when unpartitioned."""
    return "/".join(f"{column}={value}" for column, value in partition_values(side, add).items())


def partition_values(side: Side, add: dict) -> dict[str, str | None]:
    """A file's partition values by logical column; the log keys them by physical name
    (PROTOCOL.md#writer-requirements-for-column-mapping)."""
    values = add.get("partitionValues") or {}
    return {column: values.get(side.physical[column]) for column in side.partition_columns}


class Reader:
    """Data files and deletion vectors of the table, read by physical address: a relative path's
    as lakeFS resolves it at the commit, an absolute one's only inside `scope` (the repository's own)."""

    def __init__(self, store: ObjectStore, lakefs: LakeFS, repository: str, prefix: str,
                 scope: ReadScope | None = None):
        self.store, self.lakefs, self.repository, self.prefix = store, lakefs, repository, prefix
        self.scope = scope or ReadScope(store.uri(""))
        self._deleted: dict[tuple[str, str], BitMap] = {}  # counted before the read, then read: fetched once

    def address(self, commit_id: str, path: str) -> str:
        """A log path's object: absolute URIs decoded once, PathOutsideRepository outside the scope;
        relative ones looked up in lakeFS."""
        decoded = unquote(path)
        if "://" in decoded:
            return self.scope.check(path)
        address = self.lakefs.physical_address(self.repository, commit_id, self.prefix + decoded)
        if address is None:
            raise NotFound(f"{self.prefix}{decoded} is in the log at {commit_id} but not in the commit")
        return address

    def deleted(self, commit_id: str, add: dict) -> BitMap:
        def read_range(file: str, start: int, end: int) -> bytes:
            return self.store.get_range(self.address(commit_id, file), start, end)

        key = (commit_id, add["path"])
        if key not in self._deleted:
            self._deleted[key] = deleted_rows(add.get("deletionVector"), read_range)
        return self._deleted[key]

    def rows(self, commit_id: str, add: dict, columns: list[str] | None = None) -> pa.Table:
        """The file's rows: every column, or those of the physical `columns` it has."""
        source = ObjectSource(self.store, self.address(commit_id, add["path"]), int(add["size"]))
        return read_present_columns(open_parquet(source, add["path"]), add["path"], columns)


class RowsOf:
    """Rows read from one side's files, in its logical columns, with the partition each came from."""

    def __init__(self, side: Side, limit: Limit):
        self.side, self.limit = side, limit
        self.tables: list[pa.Table] = []

    def extend(self, reader: Reader, commit_id: str, add: dict, rows: BitMap, invert: bool = False,
               columns: list[str] | None = None) -> int:
        """The file's rows at the indexes `rows` (or, `invert`, all the others), in all of the
        side's columns or the named ones; how many."""
        if not invert and not rows:
            return 0
        wanted = self.side.columns if columns is None else columns
        data = reader.rows(commit_id, add, None if columns is None else [self.side.physical[c] for c in columns])
        if invert:  # every row but those
            positions = pa.array(range(data.num_rows), pa.int64())
            data = data.filter(pc.invert(pc.is_in(positions, value_set=pa.array(list(rows), pa.int64())))) if rows else data
        else:
            data = data.take(pa.array(list(rows), pa.int64()))
        partition = partition_values(self.side, add)
        values = {}
        for column in wanted:
            if column in self.side.partition_columns:
                values[column] = pa.array([partition.get(column)] * data.num_rows, pa.string())
            elif self.side.physical[column] in data.column_names:
                values[column] = _plain_layout(data.column(self.side.physical[column]))
            else:  # added to the schema after this file was written
                values[column] = pa.nulls(data.num_rows)
        values["__partition"] = pa.array([partition_label(self.side, add)] * data.num_rows, pa.string())
        self.tables.append(pa.table(values))
        self.limit.add(self.tables[-1])
        return data.num_rows

    def table(self) -> pa.Table:
        if not self.tables:
            return pa.table({**{c: pa.nulls(0) for c in self.side.columns}, "__partition": pa.array([], pa.string())})
        return pa.concat_tables(self.tables, promote_options="permissive")


def _plain_layout(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Text and binary in Arrow's plain layout: a writer's files may read as views (delta-rs's
    rewrites do), and rows of files read both ways must concatenate."""
    if pa.types.is_string_view(column.type):
        return column.cast(pa.string())
    if pa.types.is_binary_view(column.type):
        return column.cast(pa.binary())
    return column


def file_entry(side: Side, add: dict, rows: int) -> dict:
    return {"path": add["path"], "size": int(add.get("size") or 0), "rows": rows, "partition": partition_values(side, add)}
