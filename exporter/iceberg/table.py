"""An exported Delta log (absolute paths) as an Iceberg table over the same data files: one snapshot
per Delta version, from the log's first version (its checkpoint, or 0) to its head.

Two places: `table` (where its metadata files go) and `files` (where its new manifests, manifest
lists and delete files go; the same place, or one of its own), and the table's `location` (`base`:
the folder its files other than metadata files are in, which readers such as DuckDB scope the
catalog's storage settings to; by default `table`'s). A table derived from another
(`derive_table`) names the other's files where they are and writes only its new ones.

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
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from exporter.delta.actions import after, check_protocol, commit_timestamp, parse_actions
from exporter.delta.live_files import LiveFiles, SnapshotLog
from exporter.delta.paths import physical_address
from exporter.errors import CorruptLog, VersionOutOfRange
from exporter.iceberg import names
from exporter.iceberg.evolution import Evolution
from exporter.iceberg.files import IcebergFiles, WrittenBehind
from exporter.iceberg.manifest_set import ManifestSet, NextSnapshot, ReadRange, Totals
from exporter.iceberg.manifests import FORMAT_VERSION, PATH_HASHES, read_manifest_list, write_manifest_list
from exporter.iceberg.versions import GoneFile, LogUpTo, first_whole_version

__all__ = ["DELTA_VERSION", "IcebergTable", "ReadRange", "append_table", "derive_table", "write_table"]

DELTA_VERSION = "delta.version"  # in each snapshot's summary: the Delta version it is
# files per manifest written from a big commit (a checkpoint's: a slice's, `manifest_set.ENCODE_SLICE`)
MANIFEST_ENTRIES = 50_000
# puts of the table's files at once, behind its writing: 8, not the 16 an export writes with; each put's
# thread takes the GIL from the one writing the snapshots (a cold 100,000-file step on the stack,
# medians of 8 exports: 266-271 ms with 16, 245-249 ms with 8). Fewer made no difference alone (15
# exports alternating: 207 ms with 3, 209 ms with 8) and left a storm's puts waiting on a busy store
# (commit to its Iceberg tables p99 8.8 / 11.2 s with 3)
WRITE_BEHIND = 8


@dataclass(frozen=True)
class IcebergTable:
    metadata_key: str  # the metadata file written last, relative to the table's location
    metadata_location: str  # its absolute URI: what a reader is given
    snapshot_ids: dict[int, int]  # Delta version -> Iceberg snapshot id, every version the table has
    # files of the table no snapshot it keeps names any more (`append_table`'s `oldest_version`), relative
    # to `files.location`: the caller deletes them once the metadata file is written
    unreferenced: tuple[str, ...] = ()


def write_table(log: SnapshotLog, files: IcebergFiles, read_range: ReadRange,
                source_timestamps: Mapping[int, int] | None = None,
                manifest_entries: int = MANIFEST_ENTRIES, table: IcebergFiles | None = None,
                base: str | None = None) -> IcebergTable:
    """The Iceberg table of an exported Delta log: a snapshot per version from its checkpoint (or
    0) to its head. `read_range` reads stored deletion vectors (and a data file's footer where the
    stats do not count its rows); `source_timestamps` (the export manifest's) are commit times where
    a commit has no in-commit timestamp.

    A version that names a file lakeFS has no object for (vacuumed: the export keeps its path
    relative) gets no snapshot: the table starts at the first version from which every live file
    exists (`first_whole_version`). Its files are written again from there; those written before
    are named by no metadata file. `table`: where its metadata files go (None: `files`); `base`: its
    `location` (None: `table`'s)."""
    try:
        return _write(log, None, files, read_range, source_timestamps, manifest_entries, table, base)
    except GoneFile:
        return _write(log, first_whole_version(log), files, read_range, source_timestamps, manifest_entries, table,
                      base)


def _write(log: SnapshotLog, start: int | None, files: IcebergFiles, read_range: ReadRange,
           source_timestamps: Mapping[int, int] | None, manifest_entries: int,
           table: IcebergFiles | None, base: str | None) -> IcebergTable:
    with _Builder(files, read_range, manifest_entries, source_timestamps or {}, table, base) as builder:
        segment = log.segment
        if start is None and segment.checkpoint is not None:
            start = segment.checkpoint.version
        if start is not None:
            builder.first_snapshot(log, start)
        _commit_snapshots(builder, log, [(v, name) for v, name in segment.commits if start is None or v > start])
        return builder.finish()


def _commit_snapshots(builder: _Builder, log: SnapshotLog, commits: list[tuple[int, str]]) -> None:
    """A snapshot for each commit, in order; the commits read ahead, several at once."""
    raws = log.raws([name for _, name in commits])
    for (version, name), raw in zip(commits, raws):
        builder.commit_snapshot(version, parse_actions(name, raw))


def append_table(metadata_key: str, log: SnapshotLog, files: IcebergFiles, read_range: ReadRange,
                 source_timestamps: Mapping[int, int] | None = None,
                 manifest_entries: int = MANIFEST_ENTRIES, oldest_version: int | None = None) -> IcebergTable:
    """The Iceberg table at `metadata_key` (written by `write_table` or `append_table`) with a
    snapshot for each version of `log` after the last one it has; only the manifests holding a
    removed file are rewritten. The log must hold every commit after that version.

    `oldest_version`: the snapshots of Delta versions below it are expired (never the current one),
    as Delta's log retention removed those versions from the Delta log; the files only they named
    are in the table's `unreferenced`."""
    with _Builder(files, read_range, manifest_entries, source_timestamps or {}) as builder:
        return _append(builder, json.loads(files.read(names.uri(builder.location, metadata_key))), metadata_key, log,
                       oldest_version)


def derive_table(source: dict, log: SnapshotLog, files: IcebergFiles, table: IcebergFiles, read_range: ReadRange,
                 source_timestamps: Mapping[int, int] | None = None, base: str | None = None) -> IcebergTable:
    """Another table (`source`: its metadata, read) continued as a table of its own at
    `table.location`: a snapshot for each version of `log` after the last one it has, as
    `append_table` adds them, its new files in `files`; the files `source` names are named where
    they are, never read but for its current manifest list (and the manifests a removed file is in).
    Its snapshots before `log`'s first version are expired: the table has the versions its Delta
    log has. Its metadata log starts anew (`source`'s metadata files are not its own). `base`: its
    `location`, as `write_table`'s."""
    if source.get("format-version") != FORMAT_VERSION:
        raise CorruptLog(f"the table to derive from has format version {source.get('format-version')}, "
                         f"not {FORMAT_VERSION}")
    segment = log.segment
    oldest = segment.checkpoint.version if segment.checkpoint else min((v for v, _ in segment.commits), default=0)
    with _Builder(files, read_range, MANIFEST_ENTRIES, source_timestamps or {}, table, base) as builder:
        own = {**source, "location": builder.base, "table-uuid": builder.table_uuid, "metadata-log": []}
        return _append(builder, own, None, log, oldest)


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
    builder.evolution.use(builder.evolution.kept_metadata() or LiveFiles(LogUpTo(log, head)).metadata, None)
    _commit_snapshots(builder, log, commits)
    unreferenced = builder.expire_before(oldest_version) if oldest_version is not None else []
    return dataclasses.replace(builder.finish(), unreferenced=tuple(unreferenced))



class _Builder:
    """The table's snapshots, written one Delta version at a time; its metadata file by `finish`, once
    every file it names is written (the others are written behind, several at once)."""

    def __init__(self, files: IcebergFiles, read_range: ReadRange, manifest_entries: int,
                 source_timestamps: Mapping[int, int], table: IcebergFiles | None = None, base: str | None = None):
        self.table, self.source_timestamps = table or files, source_timestamps
        self.files = WrittenBehind(files, WRITE_BEHIND)
        self.location = self.table.location.rstrip("/")  # where its metadata files are
        self.base = (base or self.location).rstrip("/")  # its `location`
        self.files_location = files.location.rstrip("/")  # its new files
        self.table_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, self.location))
        self.evolution = Evolution()
        self.manifests = ManifestSet(self.files, read_range, manifest_entries)
        self.snapshots: list[dict] = []
        self.snapshot_log: list[dict] = []
        self.metadata_log: list[dict] = []
        self.snapshot_ids: dict[int, int] = {}
        self.sequence_number = 0
        self.totals = Totals()

    def __enter__(self) -> "_Builder":
        return self

    def __exit__(self, kind, error, trace) -> None:
        self.files.__exit__(kind, error, trace)

    def first_snapshot(self, log: SnapshotLog, version: int) -> None:
        """The first version's snapshot: every file live at it, the checkpoint's streamed a slice at a time."""
        live = LiveFiles(LogUpTo(log, version))
        if live.metadata is None or live.protocol is None:
            raise CorruptLog(f"the log up to version {version} has no metaData or no protocol action")
        checkpoint = log.segment.checkpoint
        # checkpoints drop commitInfo: the commit at the version has it
        commit = log.segment.checkpoint_commit if checkpoint and checkpoint.version == version else \
            dict(log.segment.commits).get(version)
        actions = parse_actions(commit, log.raw(commit)) if commit else []
        self.evolution.use(live.metadata, live.protocol)
        self._snapshot(version, actions, live.later_files(), set(), data_change=True,
                       batches=live.checkpoint_batches(whole=True, stats_parsed=True, most=self.manifests.slice_rows))

    def commit_snapshot(self, version: int, actions: list[dict]) -> None:
        check_protocol(actions)
        metadata = next((a["metaData"] for a in reversed(actions) if isinstance(a.get("metaData"), dict)), None)
        protocol = next((a["protocol"] for a in reversed(actions) if isinstance(a.get("protocol"), dict)), None)
        if metadata is not None:
            self.evolution.use(metadata, protocol)
        elif self.evolution.schema is None:
            raise CorruptLog(f"version {version} is the first of the log and has no metaData action")
        adds = [a["add"] for a in actions if isinstance(a.get("add"), dict)]
        removes = [a["remove"] for a in actions if isinstance(a.get("remove"), dict)]
        retired = {physical_address(f["path"]) for f in [*adds, *removes]}
        data_change = any(f.get("dataChange", True) for f in [*adds, *removes]) or not (adds or removes)
        self._snapshot(version, actions, adds, retired, data_change)

    def _snapshot(self, version: int, actions: list[dict], adds: Iterable[dict], retired: set[str],
                  data_change: bool, batches: Iterable[pa.StructArray] = ()) -> None:
        """`batches`: more added files, as Arrow slices (a checkpoint's)."""
        snapshot_id = _snapshot_id(self.evolution.table_id, version)
        parent = self.snapshots[-1]["snapshot-id"] if self.snapshots else None
        self.sequence_number += 1
        next_snapshot = NextSnapshot(snapshot_id, self.sequence_number, self.evolution)
        records = self.manifests.write(next_snapshot, adds, retired, batches)
        list_key = names.manifest_list(snapshot_id)
        self.files.put(list_key, write_manifest_list(records, snapshot_id, parent, self.sequence_number,
                                                     self.manifests.listed_hashes()))
        list_uri = names.uri(self.files_location, list_key)
        change = next_snapshot.change
        self.totals.apply(change)
        # increasing, as Delta's readers make them, and as Iceberg readers require (a snapshot log going
        # back more than a minute is refused by Iceberg's Java, Go and Rust readers)
        timestamp = after(self.snapshot_log[-1]["timestamp-ms"] if self.snapshot_log else None,
                          commit_timestamp(actions, self.source_timestamps.get(version, _writer_timestamp(actions))))
        snapshot = {"snapshot-id": snapshot_id, "sequence-number": self.sequence_number, "timestamp-ms": timestamp,
                    "manifest-list": list_uri, "schema-id": self.evolution.schema_id,
                    "summary": {"operation": change.operation(data_change), DELTA_VERSION: str(version),
                                **change.summary(), **self.totals.summary()}}
        if parent is not None:
            snapshot["parent-snapshot-id"] = parent
        self.snapshots.append(snapshot)
        self.snapshot_log.append({"snapshot-id": snapshot_id, "timestamp-ms": timestamp})
        self.snapshot_ids[version] = snapshot_id

    def _uri(self, key: str) -> str:
        return names.uri(self.location, key)

    # ------------------------------------------------------------ an existing table

    def resume(self, metadata: dict, metadata_key: str | None) -> int:
        """Continue the table `metadata` describes (its file `metadata_key`, None when it has none at
        this location: the metadata log starts with the next); the Delta version of its current snapshot."""
        if metadata.get("format-version") != FORMAT_VERSION:
            raise CorruptLog(f"{metadata_key}: format version {metadata.get('format-version')}, not {FORMAT_VERSION}")
        self.table_uuid = metadata["table-uuid"]
        self.evolution.resume(metadata)
        self.snapshots = metadata["snapshots"]
        self.snapshot_log = metadata["snapshot-log"]
        self.metadata_log = [*metadata.get("metadata-log", []), *([] if metadata_key is None else [
            {"metadata-file": self._uri(metadata_key), "timestamp-ms": metadata["last-updated-ms"]}])]
        self.sequence_number = metadata["last-sequence-number"]
        self.snapshot_ids = {int(s["summary"][DELTA_VERSION]): s["snapshot-id"] for s in self.snapshots}
        head = next(s for s in self.snapshots if s["snapshot-id"] == metadata["current-snapshot-id"])
        self.totals.resume(head["summary"])
        self.manifests.resume(head["manifest-list"], PATH_HASHES in self.evolution.properties)
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
        if not any(self._own(s["manifest-list"]) for s in expired):
            return []  # none of its own: a manifest it wrote is listed by a snapshot it wrote

        def listed(snapshot: dict) -> set[str]:
            return {r["manifest_path"] for r in read_manifest_list(self.files.read(snapshot["manifest-list"]))}

        kept = listed(self.snapshots[0])
        manifests = sorted(set().union(*map(listed, expired)) - kept)
        old_metadata = [e for e in self.metadata_log if self._own(e["metadata-file"], self.location) and
                        (head := names.metadata_file_version(e["metadata-file"])) is not None and head < version]
        self.metadata_log = [e for e in self.metadata_log if e not in old_metadata]

        def keys(uris: Iterable[str]) -> list[str]:  # this table's own files, relative to `files.location`
            return [uri[len(self.files_location) + 1:] for uri in uris if self._own(uri)]

        manifest_keys = keys(manifests)  # with their path hashes (an older table's have none: deleting is a no-op)
        return [*keys(s["manifest-list"] for s in expired), *manifest_keys, *map(names.path_hashes_key, manifest_keys),
                *keys(e["metadata-file"] for e in old_metadata)]

    def _own(self, uri: str, location: str | None = None) -> bool:
        """Whether `uri` is one of the files this table wrote (under `files.location`, or `location`)."""
        return uri.startswith((location or self.files_location) + "/")

    def finish(self) -> IcebergTable:
        """Write the metadata file, last: the table as of the head."""
        head = self.snapshots[-1]
        version = int(head["summary"][DELTA_VERSION])
        metadata = {
            "format-version": FORMAT_VERSION, "table-uuid": self.table_uuid, "location": self.base,
            "last-sequence-number": self.sequence_number,
            "last-updated-ms": max(s["timestamp-ms"] for s in self.snapshots),
            **self.evolution.document(),
            "default-sort-order-id": 0, "sort-orders": [{"order-id": 0, "fields": []}],
            "current-snapshot-id": head["snapshot-id"],
            "refs": {"main": {"snapshot-id": head["snapshot-id"], "type": "branch"}},
            "snapshots": self.snapshots, "snapshot-log": self.snapshot_log, "metadata-log": self.metadata_log,
            "statistics": [], "partition-statistics": [],
        }
        key = names.metadata_file(version)
        self.files.flush()
        # compact: with an indent Python's json encodes in Python, not C (8-12 ms of a small table's
        # 30 ms step once it has 50 snapshots)
        self.table.put(key, json.dumps(metadata, separators=(",", ":")).encode())
        return IcebergTable(key, self._uri(key), dict(self.snapshot_ids))


def _snapshot_id(table_id: str, version: int) -> int:
    """A snapshot id from the Delta table's id and the version: the same table written again has
    the same ids, and an appended table keeps them."""
    digest = hashlib.blake2b(f"{table_id}@{version}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & (2 ** 63 - 1) or 1


def _writer_timestamp(actions: list[dict]) -> int:
    """`commitInfo.timestamp`: when the writer says it committed (0 without one)."""
    for action in actions:
        info = action.get("commitInfo")
        if isinstance(info, dict) and isinstance(info.get("timestamp"), int):
            return info["timestamp"]
    return 0
