"""An exported Delta log (absolute paths) as an Iceberg table over the same data files: one snapshot
per Delta version, from the log's first version (its checkpoint, or 0) to its head.

The checkpoint's files are streamed into manifests of at most `manifest_entries` files, written
once; each later version adds a manifest for its adds and rewrites only the manifests holding a
file it removes (found by a hash of each manifest's paths, 8 bytes a file). Deletion vectors become
position delete files, the only data objects written. `metadata/v<head>.metadata.json` is written
last: until it exists there is no table to read.

Delta files are matched to Iceberg entries by path: a Delta logical file is (path, deletion
vector), and a path is live at most once, so a remove or a new add of a path retires the entry
(and the delete file) the path had, and the add brings the new one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.delta.actions import after, check_protocol, commit_timestamp, parse_actions
from exporter.delta.live_files import LiveFiles, SnapshotLog, add_actions
from exporter.delta.paths import absolute_column, is_absolute, log_path_to_key, physical_address
from exporter.errors import CorruptLog, VersionOutOfRange
from exporter.iceberg.columns import Entries, PartitionColumn, manifest_entries
from exporter.iceberg.deletes import FILE_PATH_ID, delete_file_key, position_deletes
from exporter.iceberg.files import IcebergFiles
from exporter.iceberg.manifests import (ADDED, DATA, DELETED, DELETES, EXISTING, FORMAT_VERSION, PATH_HASHES,
                                        PartitionField, bound_of, data_file, path_hashes_key, read_manifest,
                                        read_manifest_list, write_encoded_manifest, write_manifest,
                                        write_manifest_list)
from exporter.iceberg.relocate import CopyKeys, relocate_table
from exporter.iceberg.schema import NAME_MAPPING, TableSchema, field_ids_of, iceberg_primitive, iceberg_schema, \
    name_mapping_json
from exporter.iceberg.stats import file_metrics, stats_columns
from exporter.iceberg.values import partition_value
from exporter.parquet.splice import open_parquet
from exporter.threads import IO_THREADS, io_pool

DELTA_VERSION = "delta.version"  # in each snapshot's summary: the Delta version it is
# the Delta metaData action at the table's head, kept so an append needs not replay the log to find it
DELTA_METADATA = "lakefs-delta.delta-metadata"
_METADATA_HEAD = re.compile(r"/metadata/v(\d+)\.metadata\.json$")  # `finish`'s file: the head's Delta version
MANIFEST_ENTRIES = 50_000  # files per manifest written from a checkpoint (or a big commit)
_FIRST_PARTITION_ID = 1000  # spec.md#partition-specs: partition field ids start above 999

ReadRange = Callable[[str, int, int], bytes]  # (a log's absolute URI, start, end) -> those bytes


@dataclass(frozen=True)
class IcebergTable:
    metadata_key: str  # the metadata file written last, relative to the location
    metadata_location: str  # its absolute URI: what a reader is given
    snapshot_ids: dict[int, int]  # Delta version -> Iceberg snapshot id, every version the table has
    # files of the table no snapshot it keeps names any more (`append_table`'s `oldest_version`), relative
    # to the location: the caller deletes them once the metadata file is written
    unreferenced: tuple[str, ...] = ()


def write_table(log: SnapshotLog, files: IcebergFiles, read_range: ReadRange,
                source_timestamps: Mapping[int, int] | None = None,
                manifest_entries: int = MANIFEST_ENTRIES) -> IcebergTable:
    """The Iceberg table of an exported Delta log: a snapshot per version from its checkpoint (or
    0) to its head. `read_range` reads stored deletion vectors (and a data file's footer where the
    stats do not count its rows); `source_timestamps` (the export manifest's) are commit times where
    a commit has no in-commit timestamp.

    A version that names a file lakeFS has no object for (vacuumed: the export keeps its path
    relative) gets no snapshot: the table starts at the first version from which every live file
    exists (`first_whole_version`). Its files are written again from there; those written before
    are named by no metadata file."""
    try:
        return _write(log, None, files, read_range, source_timestamps, manifest_entries)
    except GoneFile:
        return _write(log, first_whole_version(log), files, read_range, source_timestamps, manifest_entries)


def _write(log: SnapshotLog, start: int | None, files: IcebergFiles, read_range: ReadRange,
           source_timestamps: Mapping[int, int] | None, manifest_entries: int) -> IcebergTable:
    builder = _Builder(files, read_range, manifest_entries, source_timestamps or {})
    segment = log.segment
    if start is None and segment.checkpoint is not None:
        start = segment.checkpoint.version
    if start is not None:
        builder.first_snapshot(log, start)
    for version, name in segment.commits:
        if start is None or version > start:
            builder.commit_snapshot(version, parse_actions(name, log.raw(name)))
    return builder.finish()


class GoneFile(CorruptLog):
    """A version names a file lakeFS has no object for: an Iceberg snapshot can name only objects."""

    def __init__(self, path: str):
        super().__init__(f"the log names {path!r}, which lakeFS holds no object for (vacuumed?): an Iceberg "
                         "snapshot can name only objects")


def first_whole_version(log: SnapshotLog) -> int:
    """The oldest version from which every live file has an object (an absolute path in the export):
    after the last remove of a file whose path stayed relative. The head must be whole."""
    checkpoint = log.segment.checkpoint
    start, gone = (checkpoint.version, _gone_at_checkpoint(log)) if checkpoint else (0, set())
    for version, name in log.segment.commits:
        actions = parse_actions(name, log.raw(name))
        for action in actions:
            if isinstance(action.get("remove"), dict) and log_path_to_key(action["remove"]["path"]) in gone:
                gone.discard(log_path_to_key(action["remove"]["path"]))
                start = version
        gone.update(log_path_to_key(a["add"]["path"]) for a in actions
                    if isinstance(a.get("add"), dict) and not is_absolute(a["add"]["path"]))
    if gone:
        raise GoneFile(sorted(gone)[0])
    return start


def _gone_at_checkpoint(log: SnapshotLog) -> set[str]:
    live = LiveFiles(_LogUpTo(log, log.segment.checkpoint.version))
    gone = {log_path_to_key(add["path"]) for add in live.later_files() if not is_absolute(add["path"])}
    for adds in live.checkpoint_batches():
        paths = pc.struct_field(adds, "path")
        gone.update(map(log_path_to_key, paths.filter(pc.invert(absolute_column(paths))).to_pylist()))
    return gone


def append_table(metadata_key: str, log: SnapshotLog, files: IcebergFiles, read_range: ReadRange,
                 source_timestamps: Mapping[int, int] | None = None,
                 manifest_entries: int = MANIFEST_ENTRIES, oldest_version: int | None = None) -> IcebergTable:
    """The Iceberg table at `metadata_key` (written by `write_table` or `append_table`) with a
    snapshot for each version of `log` after the last one it has; only the manifests holding a
    removed file are rewritten. The log must hold every commit after that version.

    `oldest_version`: the snapshots of Delta versions below it are expired (never the current one),
    as Delta's log retention removed those versions from the Delta log; the files only they named
    are in the table's `unreferenced`."""
    return _append(_Builder(files, read_range, manifest_entries, source_timestamps or {}),
                   json.loads(files.get(metadata_key)), metadata_key, log, oldest_version)


def copy_table(metadata_key: str, source: IcebergFiles, copy: CopyKeys, log: SnapshotLog, files: IcebergFiles,
               read_range: ReadRange, source_timestamps: Mapping[int, int] | None = None) -> IcebergTable:
    """The Iceberg table at `source`'s `metadata_key` made at `files.location` (`relocate_table`:
    what it names is copied there, not read) with a snapshot for each version of `log` after the
    last one it has, as `append_table` adds them; every snapshot it had stays readable."""
    previous = relocate_table(metadata_key, source, files, copy)
    return _append(_Builder(files, read_range, MANIFEST_ENTRIES, source_timestamps or {}), previous, None, log)


def _append(builder: _Builder, previous: dict, metadata_key: str | None, log: SnapshotLog,
            oldest_version: int | None = None) -> IcebergTable:
    """`append_table` of the table `previous` (at the builder's `files.location`; its metadata file
    `metadata_key` there, None when it has none there)."""
    head = builder.resume(previous, metadata_key)
    segment = log.segment
    commits = [(version, name) for version, name in segment.commits if version > head]
    first = segment.checkpoint.version + 1 if segment.checkpoint else 0
    if head < first - 1:
        raise VersionOutOfRange(f"the Iceberg table ends at Delta version {head} but the log's commits start at "
                                f"{first}: versions {head + 1}-{first - 1} are not in it; write the table anew")
    kept = builder.properties.get(DELTA_METADATA)
    builder.use_metadata(json.loads(kept) if kept else LiveFiles(_LogUpTo(log, head)).metadata, None)
    for version, name in commits:
        builder.commit_snapshot(version, parse_actions(name, log.raw(name)))
    unreferenced = builder.expire_before(oldest_version) if oldest_version is not None else []
    return dataclasses.replace(builder.finish(), unreferenced=tuple(unreferenced))


@dataclass
class _LogUpTo:
    """A log read only up to `version`: the checkpoint and the commits up to it."""

    log: SnapshotLog
    version: int
    segment: Any = None

    def __post_init__(self) -> None:
        self.segment = dataclasses.replace(self.log.segment, head_version=self.version, commits=[
            (version, name) for version, name in self.log.segment.commits if version <= self.version])

    def raw(self, name: str) -> bytes:
        return self.log.raw(name)

    def source(self, name: str):
        return self.log.source(name)

    def checkpoint_files(self) -> list[str]:
        return self.log.checkpoint_files()


@dataclass
class _Manifest:
    key: str
    record: dict  # its manifest list record
    hashes: pa.Array | None  # the data paths of its live entries, hashed (`_hashes`); None: not read yet

    @property
    def live(self) -> int:
        return self.record["added_files_count"] + self.record["existing_files_count"]


@dataclass
class _Totals:
    data_files: int = 0
    records: int = 0
    size: int = 0
    delete_files: int = 0
    position_deletes: int = 0

    def summary(self) -> dict[str, str]:
        return {"total-data-files": str(self.data_files), "total-records": str(self.records),
                "total-files-size": str(self.size), "total-delete-files": str(self.delete_files),
                "total-position-deletes": str(self.position_deletes), "total-equality-deletes": "0"}


@dataclass
class _Change:
    """What one snapshot added and removed, for its summary."""

    added: _Totals = field(default_factory=_Totals)
    removed: _Totals = field(default_factory=_Totals)

    def summary(self) -> dict[str, str]:
        return {"added-data-files": str(self.added.data_files), "deleted-data-files": str(self.removed.data_files),
                "added-records": str(self.added.records), "deleted-records": str(self.removed.records),
                "added-delete-files": str(self.added.delete_files),
                "removed-delete-files": str(self.removed.delete_files),
                "added-position-deletes": str(self.added.position_deletes),
                "removed-position-deletes": str(self.removed.position_deletes)}


class _Builder:
    def __init__(self, files: IcebergFiles, read_range: ReadRange, manifest_entries: int,
                 source_timestamps: Mapping[int, int]):
        self.files, self.read_range, self.manifest_entries = files, read_range, manifest_entries
        self.source_timestamps = source_timestamps
        self.location = files.location.rstrip("/")
        self.table_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, self.location))
        self.table_id = ""  # the Delta table's id (metaData.id): snapshot ids derive from it
        self.schemas: list[dict] = []
        self.schema: TableSchema | None = None
        self.schema_id = 0
        self.field_ids: dict | None = {}  # None: read from `previous_fields` once the column mapping mode is known
        self.previous_fields: list[dict] = []  # an appended table's current schema
        self.last_column_id = 0
        self.specs: list[dict] = []
        self.spec_fields: dict[int, list[PartitionField]] = {}
        self.spec_id = 0
        self.last_partition_id = _FIRST_PARTITION_ID - 1
        self.properties: dict[str, str] = {}
        self.snapshots: list[dict] = []
        self.snapshot_log: list[dict] = []
        self.metadata_log: list[dict] = []
        self.snapshot_ids: dict[int, int] = {}
        self.sequence_number = 0
        self.manifests: list[_Manifest] = []
        self.totals = _Totals()
        self.columns: list = []
        self.written: list[int] = []  # versions this builder added
        self.path_hashes = False  # whether the resumed table's manifests have their `path_hashes_key` objects

    # ------------------------------------------------------------ versions

    def first_snapshot(self, log: SnapshotLog, version: int) -> None:
        """The first version's snapshot: every file live at it, the checkpoint's streamed a slice at a time."""
        live = LiveFiles(_LogUpTo(log, version))
        if live.metadata is None or live.protocol is None:
            raise CorruptLog(f"the log up to version {version} has no metaData or no protocol action")
        checkpoint = log.segment.checkpoint
        # checkpoints drop commitInfo: the commit at the version has it
        commit = log.segment.checkpoint_commit if checkpoint and checkpoint.version == version else \
            dict(log.segment.commits).get(version)
        actions = parse_actions(commit, log.raw(commit)) if commit else []
        self.use_metadata(live.metadata, live.protocol)
        self._snapshot(version, actions, live.later_files(), set(), data_change=True,
                       batches=live.checkpoint_batches(whole=True))

    def commit_snapshot(self, version: int, actions: list[dict]) -> None:
        check_protocol(actions)
        metadata = next((a["metaData"] for a in reversed(actions) if isinstance(a.get("metaData"), dict)), None)
        protocol = next((a["protocol"] for a in reversed(actions) if isinstance(a.get("protocol"), dict)), None)
        if metadata is not None:
            self.use_metadata(metadata, protocol)
        elif self.schema is None:
            raise CorruptLog(f"version {version} is the first of the log and has no metaData action")
        adds = [a["add"] for a in actions if isinstance(a.get("add"), dict)]
        removes = [a["remove"] for a in actions if isinstance(a.get("remove"), dict)]
        retired = {physical_address(f["path"]) for f in [*adds, *removes]}
        data_change = any(f.get("dataChange", True) for f in [*adds, *removes]) or not (adds or removes)
        self._snapshot(version, actions, adds, retired, data_change)

    def use_metadata(self, metadata: dict, protocol: dict | None) -> None:
        """A Delta metaData action: the schema and partition spec from this version on."""
        check_protocol([{"metaData": metadata}, *([{"protocol": protocol}] if protocol else [])])
        self.table_id = metadata.get("id") or self.table_id
        mapped = (metadata.get("configuration") or {}).get("delta.columnMapping.mode") in ("name", "id")
        if self.field_ids is None:  # an appended table: its fields keep the ids they have
            self.field_ids = field_ids_of(self.previous_fields, mapped)
        schema = iceberg_schema(metadata, self.field_ids, self.last_column_id)
        self.field_ids = {**self.field_ids, **schema.field_ids}
        self.last_column_id = max(self.last_column_id, schema.last_column_id)
        self.schema = schema
        self.schema_id = self._schema_id(schema)
        partition_columns = list(metadata.get("partitionColumns") or [])
        self.spec_id = self._spec_id([schema.column(name) for name in partition_columns])
        self.columns = stats_columns(schema.columns, partition_columns)
        self.properties[NAME_MAPPING] = name_mapping_json(schema, self.properties.get(NAME_MAPPING))
        self.properties[PATH_HASHES] = "true"
        self.properties[DELTA_METADATA] = json.dumps(metadata, separators=(",", ":"))

    def _schema_id(self, schema: TableSchema) -> int:
        for document in self.schemas:
            if document["fields"] == schema.fields:
                return document["schema-id"]
        schema_id = max((d["schema-id"] for d in self.schemas), default=-1) + 1
        self.schemas.append(schema.document(schema_id))
        return schema_id

    def _spec_id(self, columns: list) -> int:
        sources = [column.field_id for column in columns]
        for spec in self.specs:
            if [f["source-id"] for f in spec["fields"]] == sources:
                return spec["spec-id"]
        known = {f["source-id"]: f["field-id"] for spec in self.specs for f in spec["fields"]}
        fields = []
        for column in columns:
            if column.field_id not in known:
                self.last_partition_id += 1
                known[column.field_id] = self.last_partition_id
            if not isinstance(column.delta_type, str):
                raise CorruptLog(f"partition column {column.name!r} is not of a primitive type")
            fields.append(PartitionField(column.name, known[column.field_id], column.field_id,
                                         iceberg_primitive(column.delta_type, column.name)))
        spec_id = max((s["spec-id"] for s in self.specs), default=-1) + 1
        self.specs.append({"spec-id": spec_id, "fields": [f.document() for f in fields]})
        self.spec_fields[spec_id] = fields
        return spec_id

    # ------------------------------------------------------------ one snapshot

    def _snapshot(self, version: int, actions: list[dict], adds: Iterable[dict], retired: set[str],
                  data_change: bool, batches: Iterable[pa.StructArray] = ()) -> None:
        """`batches`: more added files, as Arrow slices (a checkpoint's)."""
        snapshot_id = _snapshot_id(self.table_id, version)
        parent = self.snapshots[-1]["snapshot-id"] if self.snapshots else None
        self.sequence_number += 1
        change = _Change()
        numbers = iter(range(1 << 31))  # of the manifests this snapshot writes
        if retired and self.manifests:
            self._retire(retired, snapshot_id, change, numbers)
        self._add(itertools.chain(adds, self._add_columns(batches, snapshot_id, change, numbers)), snapshot_id, change,
                  numbers)
        self.manifests = [m for m in self.manifests if m.live or m.record["added_snapshot_id"] == snapshot_id]
        records = [m.record for m in sorted(self.manifests, key=lambda m: m.record["content"])]
        list_key = f"metadata/snap-{snapshot_id}.avro"
        self.files.put(list_key, write_manifest_list(records, snapshot_id, parent, self.sequence_number))
        self.manifests = [m for m in self.manifests if m.live]
        for kind in ("data_files", "records", "size", "delete_files", "position_deletes"):
            setattr(self.totals, kind, getattr(self.totals, kind) + getattr(change.added, kind)
                    - getattr(change.removed, kind))
        # increasing, as Delta's readers make them, and as Iceberg readers require (a snapshot log going
        # back more than a minute is refused by Iceberg's Java, Go and Rust readers)
        timestamp = after(self.snapshot_log[-1]["timestamp-ms"] if self.snapshot_log else None,
                          commit_timestamp(actions, self.source_timestamps.get(version, _writer_timestamp(actions))))
        snapshot = {"snapshot-id": snapshot_id, "sequence-number": self.sequence_number, "timestamp-ms": timestamp,
                    "manifest-list": self._uri(list_key), "schema-id": self.schema_id,
                    "summary": {"operation": _operation(change, data_change), DELTA_VERSION: str(version),
                                **change.summary(), **self.totals.summary()}}
        if parent is not None:
            snapshot["parent-snapshot-id"] = parent
        self.snapshots.append(snapshot)
        self.snapshot_log.append({"snapshot-id": snapshot_id, "timestamp-ms": timestamp})
        self.snapshot_ids[version] = snapshot_id
        self.written.append(version)

    def _add(self, adds: Iterable[dict], snapshot_id: int, change: _Change, names: Iterable[int]) -> None:
        """The version's added files in manifests of bounded size, their deletion vectors as delete files."""
        data: list[dict] = []
        deletes: list[dict] = []
        for add in adds:
            if not is_absolute(add["path"]):
                raise GoneFile(add["path"])
            path = physical_address(add["path"])
            partition = self._partition(add)
            metrics = file_metrics(add.get("stats"), self.columns)
            records = metrics.record_count
            if records is None:
                records = self._footer_rows(add["path"], int(add["size"]))
            data.append(self._entry(ADDED, snapshot_id, data_file(
                DATA, path, partition, records, int(add["size"]), metrics.null_value_counts, metrics.lower_bounds,
                metrics.upper_bounds)))
            change.added.data_files += 1
            change.added.records += records
            change.added.size += int(add["size"])
            if descriptor := add.get("deletionVector"):
                body, positions = position_deletes(path, descriptor, self.read_range)
                key = delete_file_key(path, descriptor)
                self.files.put(key, body)
                # bounds on file_path name the one data file it applies to (spec.md#position-delete-files)
                deletes.append(self._entry(ADDED, snapshot_id, data_file(
                    DELETES, self._uri(key), partition, positions, len(body),
                    lower_bounds={FILE_PATH_ID: path.encode()}, upper_bounds={FILE_PATH_ID: path.encode()})))
                change.added.delete_files += 1
                change.added.position_deletes += positions
            for entries, content in ((data, DATA), (deletes, DELETES)):
                if len(entries) >= self.manifest_entries:
                    self._write_manifest(entries, content, self.spec_id, snapshot_id, next(names))
                    entries.clear()
        for entries, content in ((data, DATA), (deletes, DELETES)):
            if entries:
                self._write_manifest(entries, content, self.spec_id, snapshot_id, next(names))

    def _add_columns(self, batches: Iterable[pa.StructArray], snapshot_id: int, change: _Change,
                     names: Iterator[int]) -> Iterator[dict]:
        """Slices of added files in manifests of at most `manifest_entries` files, written column by
        column (`columns.manifest_entries`); yields the files that go one by one (`_add`)."""
        partition = [PartitionColumn(f, self.schema.column(f.name).physical_name, self.schema.column(f.name).name)
                     for f in self.spec_fields[self.spec_id]]
        pending: list[tuple[Entries, int, int]] = []  # (entries, start, stop) not in a manifest yet
        for batch in batches:
            paths = pc.struct_field(batch, "path")
            if pc.any(pc.invert(absolute_column(paths))).as_py():
                raise GoneFile(next(p for p in paths.to_pylist() if not is_absolute(p)))
            entries = manifest_entries(batch, self.columns, partition, snapshot_id, self.sequence_number)
            if entries is None:
                yield from add_actions(batch)
                continue
            start = 0
            while start < len(entries.rows):
                room = self.manifest_entries - sum(stop - begin for _, begin, stop in pending)
                pending.append((entries, start, min(len(entries.rows), start + room)))
                start = pending[-1][2]
                if start - pending[-1][1] == room:
                    self._write_encoded(pending, snapshot_id, change, next(names))
                    pending = []
            yield from add_actions(batch.filter(entries.left))
        if pending:
            self._write_encoded(pending, snapshot_id, change, next(names))

    def _write_encoded(self, segments: list[tuple[Entries, int, int]], snapshot_id: int, change: _Change,
                       number: int) -> None:
        rows = pa.concat_arrays([entries.rows.slice(start, stop - start) for entries, start, stop in segments])
        paths = [path for entries, start, stop in segments for path in entries.paths[start:stop]]
        records = sum(int(entries.record_counts[start:stop].sum()) for entries, start, stop in segments)
        partitions = {field.name: [values[i] for entries, start, stop in segments
                                   for indices, values in [entries.partitions[field.name]]
                                   for i in np.unique(indices[start:stop])]
                      for field in self.spec_fields[self.spec_id]}
        key = f"metadata/{snapshot_id}-m{number}.avro"
        schema = next(s for s in self.schemas if s["schema-id"] == self.schema_id)
        body, record = write_encoded_manifest(rows, records, partitions, self.spec_id,
                                              self.spec_fields[self.spec_id], schema)
        self.files.put(key, body)
        record.update(manifest_path=self._uri(key), manifest_length=len(body), sequence_number=self.sequence_number,
                      min_sequence_number=self.sequence_number, added_snapshot_id=snapshot_id)
        manifest = _Manifest(key, record, _hashes(paths))
        self.files.put(path_hashes_key(key), manifest.hashes.to_numpy().astype("<i8").tobytes())
        self.manifests.append(manifest)
        change.added.data_files += len(rows)
        change.added.records += records
        change.added.size += sum(int(entries.sizes[start:stop].sum()) for entries, start, stop in segments)

    def _retire(self, paths: set[str], snapshot_id: int, change: _Change, names: Iterable[int]) -> None:
        """Mark the entries of `paths` (data files, and the delete files applying to them) deleted,
        rewriting only the manifests that hold one."""
        wanted = _hashes(paths)
        unread = [m for m in self.manifests if m.hashes is None] if self.path_hashes else []
        with io_pool(IO_THREADS) as pool:  # the path hashes not read yet, at once
            for manifest, raw in zip(unread, pool.map(lambda m: self.files.get(path_hashes_key(m.key)), unread)):
                manifest.hashes = pa.array(np.frombuffer(raw, "<i8"))
        for index, manifest in enumerate(self.manifests):
            if manifest.hashes is not None and not pc.any(pc.is_in(wanted, value_set=manifest.hashes)).as_py():
                continue
            content = manifest.record["content"]
            entries, live, hit = [], [], False
            for entry in read_manifest(self.files.get(manifest.key)):
                if entry["status"] == DELETED:
                    continue  # deleted by the snapshot that wrote this manifest
                target = _data_path(entry, content)
                if target in paths:
                    hit = True
                    entry.update(status=DELETED, snapshot_id=snapshot_id)
                    _count(change.removed, entry["data_file"], content)
                else:
                    entry["status"] = EXISTING
                    live.append(target)
                entries.append(entry)
            if hit:
                self.manifests[index] = self._write_manifest(entries, content, manifest.record["partition_spec_id"],
                                                             snapshot_id, next(names), add=False)
            self.manifests[index].hashes = _hashes(live)

    def _write_manifest(self, entries: list[dict], content: int, spec_id: int, snapshot_id: int, number: int,
                        add: bool = True) -> _Manifest:
        key = f"metadata/{snapshot_id}-m{number}.avro"
        schema = next(s for s in self.schemas if s["schema-id"] == self.schema_id)
        body, record = write_manifest(entries, content, spec_id, self.spec_fields[spec_id], schema)
        self.files.put(key, body)
        record.update(manifest_path=self._uri(key), manifest_length=len(body), sequence_number=self.sequence_number,
                      added_snapshot_id=snapshot_id)
        if record["min_sequence_number"] is None:
            record["min_sequence_number"] = self.sequence_number
        manifest = _Manifest(key, record, _hashes([_data_path(e, content) for e in entries if e["status"] != DELETED]))
        self.files.put(path_hashes_key(key), manifest.hashes.to_numpy().astype("<i8").tobytes())
        if add:
            self.manifests.append(manifest)
        return manifest

    def _entry(self, status: int, snapshot_id: int, file: dict) -> dict:
        return {"status": status, "snapshot_id": snapshot_id, "sequence_number": self.sequence_number,
                "file_sequence_number": self.sequence_number, "data_file": file}

    def _partition(self, add: dict) -> dict:
        values = add.get("partitionValues") or {}
        partition = {}
        for partition_field in self.spec_fields[self.spec_id]:
            column = self.schema.column(partition_field.name)
            partition[partition_field.name] = partition_value(values.get(column.physical_name),
                                                              partition_field.iceberg_type, column.name)
        return partition

    def _footer_rows(self, uri: str, size: int) -> int:
        """A data file's row count from its footer, for an add whose stats do not say."""
        return open_parquet(_RangeSource(self.read_range, uri, size), uri).metadata.num_rows

    def _uri(self, key: str) -> str:
        return f"{self.location}/{key}"

    # ------------------------------------------------------------ an existing table

    def resume(self, metadata: dict, metadata_key: str | None) -> int:
        """Continue the table `metadata` describes (its file `metadata_key`, None when it has none at
        this location: the metadata log starts with the next); the Delta version of its current snapshot."""
        if metadata.get("format-version") != FORMAT_VERSION:
            raise CorruptLog(f"{metadata_key}: format version {metadata.get('format-version')}, not {FORMAT_VERSION}")
        self.table_uuid = metadata["table-uuid"]
        self.schemas = metadata["schemas"]
        current = next(s for s in self.schemas if s["schema-id"] == metadata["current-schema-id"])
        self.previous_fields, self.field_ids = current["fields"], None
        self.last_column_id = metadata["last-column-id"]
        self.specs = metadata["partition-specs"]
        self.last_partition_id = metadata["last-partition-id"]
        types = {f["id"]: f["type"] for s in self.schemas for f in s["fields"]}
        self.spec_fields = {spec["spec-id"]: [PartitionField(f["name"], f["field-id"], f["source-id"],
                                                             types[f["source-id"]]) for f in spec["fields"]]
                            for spec in self.specs}
        self.properties = dict(metadata.get("properties") or {})
        self.path_hashes = self.properties.get(PATH_HASHES) == "true"  # else its manifests are read to find a path
        self.snapshots = metadata["snapshots"]
        self.snapshot_log = metadata["snapshot-log"]
        self.metadata_log = [*metadata.get("metadata-log", []), *([] if metadata_key is None else [
            {"metadata-file": self._uri(metadata_key), "timestamp-ms": metadata["last-updated-ms"]}])]
        self.sequence_number = metadata["last-sequence-number"]
        self.snapshot_ids = {int(s["summary"][DELTA_VERSION]): s["snapshot-id"] for s in self.snapshots}
        head = next(s for s in self.snapshots if s["snapshot-id"] == metadata["current-snapshot-id"])
        for kind, name in (("data_files", "total-data-files"), ("records", "total-records"),
                           ("size", "total-files-size"), ("delete_files", "total-delete-files"),
                           ("position_deletes", "total-position-deletes")):
            setattr(self.totals, kind, int(head["summary"][name]))
        prefix = self.location + "/"
        for record in read_manifest_list(self.files.get(head["manifest-list"][len(prefix):])):
            self.manifests.append(_Manifest(record["manifest_path"][len(prefix):], record, None))
        return int(head["summary"][DELTA_VERSION])

    def expire_before(self, version: int) -> list[str]:
        """Expire the snapshots of Delta versions below `version` but the current one, and the
        metadata log's files whose head is below it; the keys of the files no kept snapshot names:
        their manifest lists, the manifests (and path hashes) not carried into the oldest kept
        snapshot, those metadata files. (A manifest is only carried from snapshot to snapshot or
        dropped for good, so one a kept snapshot names is in the oldest kept one's list.) Position
        delete files stay: one may apply again to a file a later version re-adds."""
        expired = [s for s in self.snapshots[:-1] if int(s["summary"][DELTA_VERSION]) < version]
        if not expired:
            return []
        gone = {s["snapshot-id"] for s in expired}
        self.snapshots = [s for s in self.snapshots if s["snapshot-id"] not in gone]
        self.snapshot_log = [e for e in self.snapshot_log if e["snapshot-id"] not in gone]
        self.snapshot_ids = {v: i for v, i in self.snapshot_ids.items() if i not in gone}
        prefix = self.location + "/"

        def listed(snapshot: dict) -> set[str]:
            return {r["manifest_path"] for r in read_manifest_list(self.files.get(snapshot["manifest-list"][len(prefix):]))}

        kept = listed(self.snapshots[0])
        manifests = sorted(set().union(*map(listed, expired)) - kept)
        old_metadata = [e for e in self.metadata_log if e["metadata-file"].startswith(prefix) and
                        (head := _METADATA_HEAD.search(e["metadata-file"])) and int(head.group(1)) < version]
        self.metadata_log = [e for e in self.metadata_log if e not in old_metadata]

        def keys(uris: Iterable[str]) -> list[str]:  # this table's own files, relative to its location
            return [uri[len(prefix):] for uri in uris if uri.startswith(prefix)]

        manifest_keys = keys(manifests)  # with their path hashes (an older table's have none: deleting is a no-op)
        return [*keys(s["manifest-list"] for s in expired), *manifest_keys, *map(path_hashes_key, manifest_keys),
                *keys(e["metadata-file"] for e in old_metadata)]

    def finish(self) -> IcebergTable:
        """Write the metadata file, last: the table as of the head."""
        head = self.snapshots[-1]
        version = int(head["summary"][DELTA_VERSION])
        metadata = {
            "format-version": FORMAT_VERSION, "table-uuid": self.table_uuid, "location": self.location,
            "last-sequence-number": self.sequence_number,
            "last-updated-ms": max(s["timestamp-ms"] for s in self.snapshots),
            "last-column-id": self.last_column_id, "current-schema-id": self.schema_id, "schemas": self.schemas,
            "default-spec-id": self.spec_id, "partition-specs": self.specs,
            "last-partition-id": self.last_partition_id,
            "default-sort-order-id": 0, "sort-orders": [{"order-id": 0, "fields": []}],
            "properties": self.properties, "current-snapshot-id": head["snapshot-id"],
            "refs": {"main": {"snapshot-id": head["snapshot-id"], "type": "branch"}},
            "snapshots": self.snapshots, "snapshot-log": self.snapshot_log, "metadata-log": self.metadata_log,
            "statistics": [], "partition-statistics": [],
        }
        key = f"metadata/v{version}.metadata.json"
        self.files.put(key, json.dumps(metadata, indent=1).encode())
        return IcebergTable(key, self._uri(key), dict(self.snapshot_ids))


@dataclass
class _RangeSource:
    """A data file read by ranges (`exporter.parquet.splice.ParquetSource`)."""

    reader: ReadRange
    uri: str
    size: int

    def read_range(self, start: int, end: int) -> bytes:
        return self.reader(self.uri, start, end)


def _snapshot_id(table_id: str, version: int) -> int:
    """A snapshot id from the Delta table's id and the version: the same table written again has
    the same ids, and an appended table keeps them."""
    digest = hashlib.blake2b(f"{table_id}@{version}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & (2 ** 63 - 1) or 1


def _hashes(paths: Iterable[str]) -> pa.Array:
    """8 bytes of each path's hash: what a manifest's paths are looked up by (a collision only costs
    reading the manifest)."""
    return pa.array([int.from_bytes(hashlib.blake2b(p.encode(), digest_size=8).digest(), "little", signed=True)
                     for p in paths], pa.int64())


def _data_path(entry: dict, content: int) -> str:
    """The data file an entry is, or (a delete file) applies to."""
    if content == DATA:
        return entry["data_file"]["file_path"]
    return bound_of(entry, "lower_bounds", FILE_PATH_ID).decode()


def _count(totals: _Totals, file: dict, content: int) -> None:
    if content == DATA:
        totals.data_files += 1
        totals.records += file["record_count"]
        totals.size += file["file_size_in_bytes"]
    else:
        totals.delete_files += 1
        totals.position_deletes += file["record_count"]


def _operation(change: _Change, data_change: bool) -> str:
    """spec.md#snapshots `operation`: a Delta commit that changed no data (OPTIMIZE) is a replace."""
    added = change.added.data_files or change.added.delete_files
    removed = change.removed.data_files or change.removed.delete_files
    if not data_change:
        return "replace"
    if added and removed:
        return "overwrite"
    return "delete" if removed else "append"


def _writer_timestamp(actions: list[dict]) -> int:
    """`commitInfo.timestamp`: when the writer says it committed (0 without one)."""
    for action in actions:
        info = action.get("commitInfo")
        if isinstance(info, dict) and isinstance(info.get("timestamp"), int):
            return info["timestamp"]
    return 0
