"""The manifests of an Iceberg table's current snapshot, and how the next snapshot changes them.

Added files go into new manifests of at most `manifest_entries` files (a checkpoint's streamed a
slice at a time, column by column, a manifest each); a retired path marks its entry deleted in the
one manifest that holds it, found by 8-byte hashes of each manifest's live paths (kept beside a large
manifest, carried by the manifest list for the small ones), so no other manifest is read or
rewritten. Small manifests (one commit's adds) are merged once there are `MERGE_AT` of them, so the
manifests a table has stay bounded however many commits it has. Deletion vectors become position
delete files, the only data objects written.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.delta.live_files import add_actions
from exporter.delta.paths import absolute_column, is_absolute, physical_address
from exporter.iceberg import names
from exporter.iceberg.columns import Entries, manifest_entries
from exporter.iceberg.deletes import FILE_PATH_ID, position_deletes
from exporter.iceberg.evolution import Evolution
from exporter.iceberg.files import IcebergFiles
from exporter.iceberg.manifests import ADDED, DATA, DELETED, DELETES, EXISTING, bound_of, data_file, \
    keeps_path_hashes, read_manifest, read_manifest_list_hashes, write_encoded_manifest, write_manifest
from exporter.iceberg.path_hashes import hashes_bytes, hashes_of, path_hashes
from exporter.iceberg.stats import file_metrics
from exporter.iceberg.versions import GoneFile
from exporter.parquet.splice import even_size, open_parquet
from exporter.threads import IO_THREADS, io_pool, prefetched

ReadRange = Callable[[str, int, int], bytes]  # (a log's absolute URI, start, end) -> those bytes
# A checkpoint's adds are encoded (`columns.manifest_entries`) a slice of ENCODE_SLICE at a time, a
# manifest each, up to ENCODE_AHEAD slices on threads while this one puts the manifests of those
# before: Arrow's JSON reader, kernels, deflate and sort leave the GIL, so the encoding of 100,000
# files used the second core (0.28 s -> 0.21 s of a cold step over a local folder, 0.22 s -> 0.17 s
# with `stats_parsed`). Three ahead made no difference (15 exports alternating on the stack: median
# 219 ms with two, 222 ms with three).
ENCODE_AHEAD = 2
ENCODE_SLICE = 32_768
MERGE_AT = 8  # small manifests of one content and spec merged into one (`ManifestSet._merge_small`)


@dataclass
class Manifest:
    uri: str  # where it is: this table's new files' location, or an older table's
    record: dict  # its manifest list record
    hashes: np.ndarray | None  # the data paths of its live entries, hashed (`path_hashes`); None: not read yet
    body: bytes | None = None  # its bytes, kept while it is small and written or read here (`_merge_small` reads them)

    @property
    def live(self) -> int:
        return self.record["added_files_count"] + self.record["existing_files_count"]


@dataclass
class Totals:
    data_files: int = 0
    records: int = 0
    size: int = 0
    delete_files: int = 0
    position_deletes: int = 0

    def summary(self) -> dict[str, str]:
        return {"total-data-files": str(self.data_files), "total-records": str(self.records),
                "total-files-size": str(self.size), "total-delete-files": str(self.delete_files),
                "total-position-deletes": str(self.position_deletes), "total-equality-deletes": "0"}

    def resume(self, summary: dict[str, str]) -> None:
        """The totals a snapshot's summary gives."""
        for kind, name in (("data_files", "total-data-files"), ("records", "total-records"),
                           ("size", "total-files-size"), ("delete_files", "total-delete-files"),
                           ("position_deletes", "total-position-deletes")):
            setattr(self, kind, int(summary[name]))

    def apply(self, change: Change) -> None:
        for kind in ("data_files", "records", "size", "delete_files", "position_deletes"):
            setattr(self, kind, getattr(self, kind) + getattr(change.added, kind) - getattr(change.removed, kind))


@dataclass
class Change:
    """What one snapshot added and removed, for its summary."""

    added: Totals = field(default_factory=Totals)
    removed: Totals = field(default_factory=Totals)

    def summary(self) -> dict[str, str]:
        return {"added-data-files": str(self.added.data_files), "deleted-data-files": str(self.removed.data_files),
                "added-records": str(self.added.records), "deleted-records": str(self.removed.records),
                "added-delete-files": str(self.added.delete_files),
                "removed-delete-files": str(self.removed.delete_files),
                "added-position-deletes": str(self.added.position_deletes),
                "removed-position-deletes": str(self.removed.position_deletes)}

    def operation(self, data_change: bool) -> str:
        """spec.md#snapshots `operation`: a Delta commit that changed no data (OPTIMIZE) is a replace."""
        added = self.added.data_files or self.added.delete_files
        removed = self.removed.data_files or self.removed.delete_files
        if not data_change:
            return "replace"
        if added and removed:
            return "overwrite"
        return "delete" if removed else "append"


@dataclass
class NextSnapshot:
    """The snapshot being written: its id and sequence number, the table's schema and spec at it,
    what it changes."""

    snapshot_id: int
    sequence_number: int
    evolution: Evolution
    change: Change = field(default_factory=Change)
    _numbers: Iterator[int] = field(default_factory=itertools.count)  # of the manifests it writes

    def manifest_key(self) -> str:
        return names.manifest(self.snapshot_id, next(self._numbers))

    def entry(self, status: int, file: dict) -> dict:
        return {"status": status, "snapshot_id": self.snapshot_id, "sequence_number": self.sequence_number,
                "file_sequence_number": self.sequence_number, "data_file": file}


class ManifestSet:
    def __init__(self, files: IcebergFiles, read_range: ReadRange, manifest_entries: int):
        self.files, self.read_range, self.manifest_entries = files, read_range, manifest_entries
        self.location = files.location.rstrip("/")
        self.manifests: list[Manifest] = []
        self.kept_hashes = False  # whether a resumed table's manifests have their `path_hashes_key` objects

    def resume(self, manifest_list: str, kept_hashes: bool) -> None:
        """The manifests of a table's current snapshot (its manifest list's URI `manifest_list`), with
        the path hashes the list carries (`LISTED_PATH_HASHES`)."""
        self.kept_hashes = kept_hashes  # else its manifests are read to find a path
        records, listed = read_manifest_list_hashes(self.files.read(manifest_list))
        for record in records:
            path = record["manifest_path"]
            self.manifests.append(Manifest(path, record, hashes_of(listed[path]) if path in listed else None))

    @property
    def slice_rows(self) -> int:
        """The most files a slice of a checkpoint's holds (`_slices`): what to read it in."""
        return min(self.manifest_entries, ENCODE_SLICE)

    def listed_hashes(self) -> dict[str, bytes]:
        """The path hashes of the table's manifests that keep none beside them (`keeps_path_hashes`), by
        path, for its manifest list to carry (`LISTED_PATH_HASHES`): the next append reads none of them
        to find a path (a 10-file commit read the 1 to 7 small manifests a table has between merges)."""
        return {m.uri: hashes_bytes(m.hashes) for m in self.manifests
                if m.hashes is not None and not keeps_path_hashes(m.record)}

    def write(self, snapshot: NextSnapshot, adds: Iterable[dict], retired: set[str],
              batches: Iterable[pa.StructArray] = ()) -> list[dict]:
        """Write the manifests of `snapshot`: `retired` paths deleted, `adds` (and the files of
        `batches`, Arrow slices of a checkpoint's) added; the records of its manifest list."""
        if retired and self.manifests:
            self._retire(retired, snapshot)
        self._add(itertools.chain(adds, self._add_columns(batches, snapshot)), snapshot)
        self._merge_small(snapshot)
        self.manifests = [m for m in self.manifests if m.live or m.record["added_snapshot_id"] == snapshot.snapshot_id]
        records = [m.record for m in sorted(self.manifests, key=lambda m: m.record["content"])]
        self.manifests = [m for m in self.manifests if m.live]
        return records

    def _add(self, adds: Iterable[dict], snapshot: NextSnapshot) -> None:
        """The version's added files in manifests of bounded size, their deletion vectors as delete files."""
        evolution, change = snapshot.evolution, snapshot.change
        data: list[dict] = []
        deletes: list[dict] = []
        for add in adds:
            if not is_absolute(add["path"]):
                raise GoneFile(add["path"])
            path = physical_address(add["path"])
            partition = evolution.partition(add)
            metrics = file_metrics(add.get("stats"), evolution.columns)
            records = metrics.record_count
            if records is None:
                records = self._footer_rows(add["path"], int(add["size"]))
            data.append(snapshot.entry(ADDED, data_file(DATA, path, partition, records, int(add["size"]), metrics)))
            change.added.data_files += 1
            change.added.records += records
            change.added.size += int(add["size"])
            if descriptor := add.get("deletionVector"):
                body, positions = position_deletes(path, descriptor, self.read_range)
                key = names.delete_file_key(path, descriptor)
                self.files.put(key, body)
                # bounds on file_path name the one data file it applies to (spec.md#position-delete-files)
                deletes.append(snapshot.entry(ADDED, data_file(DELETES, self._uri(key), partition, positions, len(body),
                                                                 bounds={FILE_PATH_ID: path.encode()})))
                change.added.delete_files += 1
                change.added.position_deletes += positions
            for entries, content in ((data, DATA), (deletes, DELETES)):
                if len(entries) >= self.manifest_entries:
                    self._write_manifest(entries, content, evolution.spec_id, snapshot)
                    entries.clear()
        for entries, content in ((data, DATA), (deletes, DELETES)):
            if entries:
                self._write_manifest(entries, content, evolution.spec_id, snapshot)

    def _add_columns(self, batches: Iterable[pa.StructArray], snapshot: NextSnapshot) -> Iterator[dict]:
        """Each slice of added files (at most `manifest_entries`) in a manifest of its own, encoded
        column by column and written whole on the slice's thread (`_encoded`); yields the files that go
        one by one (`_add`)."""
        change = snapshot.change
        # ENCODE_AHEAD slices at once on threads, the first as soon as it is read
        for batch, encoded in prefetched(lambda batch: (batch, self._encoded(batch, snapshot)),
                                         _slices(batches, self.manifest_entries), ENCODE_AHEAD):
            if encoded is None:
                yield from add_actions(batch)
                continue
            entries, written = encoded
            if written is not None:
                body, record, hashes = written
                self._keep(snapshot, body, record, hashes)
                change.added.data_files += len(entries.rows)
                change.added.records += record["added_rows_count"]
                change.added.size += int(entries.sizes.sum())
            yield from add_actions(batch.filter(entries.left))

    def _encoded(self, batch: pa.StructArray, snapshot: NextSnapshot
                 ) -> tuple[Entries, tuple[bytes, dict, np.ndarray] | None] | None:
        """A slice's entries (`columns.manifest_entries`; None: it goes file by file), and the manifest
        of those taken: its bytes, its manifest list record and its path hashes (None when none is
        taken). On the slice's thread: its deflate and sort leave the GIL, and the manifests of a
        checkpoint are written while others are encoded, not one after another at its end."""
        evolution = snapshot.evolution
        paths = pc.struct_field(batch, "path")
        if pc.any(pc.invert(absolute_column(paths))).as_py():
            raise GoneFile(next(p for p in paths.to_pylist() if not is_absolute(p)))
        entries = manifest_entries(batch, evolution.columns, evolution.partition_columns(), snapshot.snapshot_id,
                                   snapshot.sequence_number)
        if entries is None or not len(entries.rows):
            return None if entries is None else (entries, None)
        partitions = {field.name: [values[i] for i in np.unique(indices)]
                      for field in evolution.spec_fields[evolution.spec_id]
                      for indices, values in [entries.partitions[field.name]]}
        body, record = write_encoded_manifest(entries.rows, int(entries.record_counts.sum()), partitions,
                                              evolution.spec_id, evolution.spec_fields[evolution.spec_id],
                                              evolution.schema_document())
        record.update(min_sequence_number=snapshot.sequence_number)
        return entries, (body, record, np.sort(entries.path_hashes))

    def _retire(self, paths: set[str], snapshot: NextSnapshot) -> None:
        """Mark the entries of `paths` (data files, and the delete files applying to them) deleted,
        rewriting only the manifests that hold one."""
        wanted = path_hashes(paths)
        unread = [m for m in self.manifests if m.hashes is None and keeps_path_hashes(m.record)] \
            if self.kept_hashes else []  # the others are read whole below
        if unread:
            with io_pool(IO_THREADS) as pool:  # the path hashes not read yet, at once
                for manifest, raw in zip(unread, pool.map(lambda m: self.files.read(names.path_hashes_key(m.uri)),
                                                          unread)):
                    manifest.hashes = hashes_of(raw)
        for index, manifest in enumerate(self.manifests):
            if manifest.hashes is not None and not _any_shared(wanted, manifest.hashes):
                continue
            content = manifest.record["content"]
            entries, live, hit = [], [], False
            body = manifest.body if manifest.body is not None else self.files.read(manifest.uri)
            for entry in read_manifest(body):
                if entry["status"] == DELETED:
                    continue  # deleted by the snapshot that wrote this manifest
                target = _data_path(entry, content)
                if target in paths:
                    hit = True
                    entry.update(status=DELETED, snapshot_id=snapshot.snapshot_id)
                    _count(snapshot.change.removed, entry["data_file"], content)
                else:
                    entry["status"] = EXISTING
                    live.append(target)
                entries.append(entry)
            if hit:
                self.manifests[index] = self._write_manifest(entries, content, manifest.record["partition_spec_id"],
                                                             snapshot, add=False)
            elif self._small(manifest):
                manifest.body = body  # read whole: a merge of it reads it from here
            self.manifests[index].hashes = path_hashes(live)

    def _merge_small(self, snapshot: NextSnapshot) -> None:
        """Once `MERGE_AT` small manifests (each under a tenth of `manifest_entries` live files) of one
        content and spec, of sizes a merge takes together (`_tier`), are the table's, their live
        entries go into one manifest (as `existing`, with the snapshot and sequence numbers that added
        them), as Iceberg's own merging appends do: a commit adds a manifest, so without this a table
        of N commits has N manifests that every reader opens and every later commit looks a removed
        path up in. Manifests this snapshot wrote are left as they are (their entries are its own
        adds and deletes)."""
        groups: dict[tuple[int, int], list[Manifest]] = {}
        for manifest in self.manifests:
            record = manifest.record
            if record["added_snapshot_id"] != snapshot.snapshot_id and self._small(manifest):
                groups.setdefault((record["content"], record["partition_spec_id"]), []).append(manifest)
        for (content, spec_id), group in groups.items():
            small = _tier(group)
            if len(small) < MERGE_AT:
                continue
            unread = [m for m in small if m.body is None]  # the others are in memory: no call on a thread for them
            if unread:
                with io_pool(IO_THREADS) as pool:
                    for manifest, body in zip(unread, pool.map(lambda m: self.files.read(m.uri), unread)):
                        manifest.body = body  # merged below, then dropped
            entries = [{**entry, "status": EXISTING} for manifest in small for entry in read_manifest(manifest.body)
                       if entry["status"] != DELETED]
            merged = set(map(id, small))
            self.manifests = [m for m in self.manifests if id(m) not in merged]
            self._write_manifest(entries, content, spec_id, snapshot)

    def _small(self, manifest: Manifest) -> bool:
        """Whether `_merge_small` merges it: under a tenth of `manifest_entries` live files."""
        return manifest.live * 10 < self.manifest_entries

    def _write_manifest(self, entries: list[dict], content: int, spec_id: int, snapshot: NextSnapshot,
                        add: bool = True) -> Manifest:
        evolution = snapshot.evolution
        body, record = write_manifest(entries, content, spec_id, evolution.spec_fields[spec_id],
                                      evolution.schema_document())
        if record["min_sequence_number"] is None:
            record["min_sequence_number"] = snapshot.sequence_number
        live = path_hashes([_data_path(e, content) for e in entries if e["status"] != DELETED])
        return self._keep(snapshot, body, record, live, add)

    def _keep(self, snapshot: NextSnapshot, body: bytes, record: dict, hashes: np.ndarray, add: bool = True) -> Manifest:
        """Write a manifest of `snapshot` and its path hashes (`keeps_path_hashes`); it is one of the
        table's (unless not `add`)."""
        key = snapshot.manifest_key()
        self.files.put(key, body)
        record.update(manifest_path=self._uri(key), manifest_length=len(body), sequence_number=snapshot.sequence_number,
                      added_snapshot_id=snapshot.snapshot_id)
        manifest = Manifest(self._uri(key), record, hashes)
        manifest.body = body if self._small(manifest) else None  # a merge would read it back
        if keeps_path_hashes(record):
            self.files.put(names.path_hashes_key(key), hashes_bytes(hashes))
        if add:
            self.manifests.append(manifest)
        return manifest

    def _footer_rows(self, uri: str, size: int) -> int:
        """A data file's row count from its footer, for an add whose stats do not say."""
        return open_parquet(_RangeSource(self.read_range, uri, size), uri).metadata.num_rows

    def _uri(self, key: str) -> str:
        return names.uri(self.location, key)


@dataclass
class _RangeSource:
    """A data file read by ranges (`exporter.parquet.splice.ParquetSource`)."""

    reader: ReadRange
    uri: str
    size: int

    def read_range(self, start: int, end: int) -> bytes:
        return self.reader(self.uri, start, end)


def _slices(batches: Iterable[pa.StructArray], most: int) -> Iterator[pa.StructArray]:
    """Each batch in the fewest slices of at most ENCODE_SLICE (and `most`), of equal sizes
    (`even_size`): encoded two at once, they end together."""
    most = min(most, ENCODE_SLICE)
    for batch in batches:
        size = even_size(len(batch), most)
        for start in range(0, len(batch), size):
            yield batch.slice(start, size)


def _any_shared(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two sorted arrays of hashes share a value: each of the smaller looked up in the larger
    by bisection (a 10-file commit against a 50,000-file manifest: 10 lookups, no set built); two
    small ones (a commit's manifest) as Python sets, without numpy's calls (0.5 µs, not 3.3 µs). A
    few lookups bisect in Python: numpy's `searchsorted` leaves the GIL, and the thread writing the
    snapshots then waited behind the puts' threads to take it back (50 µs a call in a cold step's
    commits, for 2 µs of work)."""
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    if not len(small):
        return False
    if len(large) <= 64:
        return not set(large.tolist()).isdisjoint(small.tolist())
    if len(small) <= 64:
        view = memoryview(np.require(large, np.int64, "CA")).cast("B").cast("q")
        return any((at := bisect.bisect_left(view, value)) < len(view) and view[at] == value
                   for value in small.tolist())
    at = np.minimum(np.searchsorted(large, small), len(large) - 1)
    return bool((large[at] == small).any())


def _tier(manifests: list[Manifest]) -> list[Manifest]:
    """The manifests a merge takes: the smallest, up to the first larger than all before it together.
    A merge rewrites manifests of about the size it makes, never a large one to take in a few small
    ones: merged manifests double, and a file is rewritten about log2(its table's commits) times (a
    1,000-file checkpoint's manifest was rewritten every 8 commits, 0.3 s of a 0.5 s Iceberg step)."""
    chosen, total = [], 0
    for manifest in sorted(manifests, key=lambda m: m.live):
        if chosen and manifest.live > total:
            break
        chosen.append(manifest)
        total += manifest.live
    return chosen


def _data_path(entry: dict, content: int) -> str:
    """The data file an entry is, or (a delete file) applies to."""
    if content == DATA:
        return entry["data_file"]["file_path"]
    return bound_of(entry, "lower_bounds", FILE_PATH_ID).decode()


def _count(totals: Totals, file: dict, content: int) -> None:
    if content == DATA:
        totals.data_files += 1
        totals.records += file["record_count"]
        totals.size += file["file_size_in_bytes"]
    else:
        totals.delete_files += 1
        totals.position_deletes += file["record_count"]
