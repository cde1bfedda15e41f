"""An export as an Iceberg table too (issue 26, `iceberg.enabled`): the Iceberg table over the
exported `_delta_log` read back from the object store (absolute paths), written at the export's
location (`layout.iceberg_location`) once the export is complete (`complete_iceberg_metadata`): the
export's manifest records it `pending` until then, so the Delta export is never kept waiting for it.

A per-commit export's manifests, manifest lists and delete files go to a folder of its own among
the table's Iceberg files (`layout.iceberg_files_location`), its metadata.json to the export's
location. An export derived from another (incremental, a tag's copy) derives its table from that
export's (`exporter.iceberg.table.derive_table`): the other's files are named where they are, and
only the new versions' files are written: a commit's Iceberg step reads the other's metadata.json
and current manifest list and writes a manifest, a manifest list and a metadata.json. Prune's
collection (`exporter.upkeep.iceberg_files`) keeps a file while an export's table names it.
Written fresh (`write_table`) when the other export has no Iceberg table of this exporter
version, or the derivation fails.
A table Iceberg cannot represent leaves the Delta export as it is: the record says why, and the
files written before the refusal are removed (never a wrong Iceberg table).

A branch table's Iceberg table is appended to instead (`branch_iceberg_metadata`): its files are
never pruned, so each append adds the snapshots of the new versions to the table its state names.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from exporter.errors import CorruptLog, ExporterError, IcebergUnsupported, NotFound
from exporter.delta.log import select_segment
from exporter.export.manifest import ICEBERG, ExportManifest, IcebergState, iceberg_state
from exporter.export.readback import ExportedLog, read_exported_log
from exporter.iceberg import names
from exporter.iceberg.table import IcebergTable, ReadRange, append_table, derive_table, write_table
from exporter.storage.layout import iceberg_files_location, iceberg_location, iceberg_table_files
from exporter.storage.objectstore import ObjectStore
from exporter.storage.scope import ReadScope

# What the Iceberg writer raises on values it did not foresee (a bug to fix, not an outage): the
# Delta export is kept and the record says `failed`. Other errors (a time limit, the store) propagate.
# (Arrow's and fastavro's errors on values are ValueError, TypeError and NotImplementedError.)
_UNEXPECTED_DATA = (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError, NotImplementedError)
log = logging.getLogger("lakefs_delta.exporter")


@dataclass
class _ExportFiles:
    """`exporter.iceberg.table.IcebergFiles` at a folder of the storage namespace; the writer's lock
    is checked before the metadata.json, the Iceberg table's commit point."""

    store: ObjectStore
    root: str  # relative to the storage namespace, ending with `/`
    still_held: Callable[[], None] | None = None
    location: str = field(init=False)

    def __post_init__(self) -> None:
        self.location = self.store.uri(self.root)

    def put(self, key: str, body: bytes) -> None:
        if self.still_held is not None and names.is_metadata_file(key):
            self.still_held()
        self.store.put(self.root + key, body)

    def read(self, uri: str) -> bytes:
        return self.store.get_uri(uri)


LIGHT_COLD_PATHS = 1_000  # a cold export of at most this many paths: an Iceberg table of tens of milliseconds


@dataclass(frozen=True)
class WrittenExport:
    """An export its process just wrote and whose Iceberg table it writes next, the step being light
    (`light_iceberg_step`): what the step would otherwise read back (`complete_iceberg_metadata`)."""

    manifest: ExportManifest  # the export's, as written (`pending`)
    derived_from: tuple[str, ExportManifest] | None  # the export it was built on: its location and manifest


def light_iceberg_step(derived_from: tuple[str, ExportManifest] | None, paths_rewritten: int) -> bool:
    """Whether an export's Iceberg table costs a few requests: it continues the table of the export
    it was built on (a manifest, a manifest list and a metadata file for the new versions), or a
    cold export's table is small (at most LIGHT_COLD_PATHS paths)."""
    if derived_from is not None:
        return continuable(derived_from[1])
    return paths_rewritten <= LIGHT_COLD_PATHS


def continuable(manifest: ExportManifest) -> bool:
    """Whether an export's Iceberg table can be continued by one derived from it: written, by this
    exporter version."""
    return iceberg_state(manifest.iceberg) is IcebergState.WRITTEN and manifest.of_this_release


def complete_iceberg_metadata(store: ObjectStore, location: str, still_held: Callable[[], None] | None = None,
                              scope: ReadScope | None = None, written: WrittenExport | None = None,
                              held: Mapping[str, bytes] = {}) -> dict | None:
    """Write the Iceberg table of the complete export at `location` whose manifest records it
    `pending`, then the manifest with its record (`write_iceberg_metadata`); the record, also when
    it was written before; None without a complete export there (pruned meanwhile). The caller holds
    the export's lock (`still_held`), the one prune deletes it under; `scope`: what it may read.
    `written`: what the process that just wrote the export knows of it, not read again; `held`: log
    files of the export whose bytes its writer handed over (`ExportOutcome.held`), not read back."""
    if written is not None:
        manifest, derived_from = written.manifest, written.derived_from
    else:
        try:
            manifest = ExportManifest.read(store, location)
        except NotFound:
            return None
        if iceberg_state(manifest.iceberg) is not IcebergState.PENDING:
            return manifest.iceberg
        derived_from = _derived_from(store, manifest.derived_from)
    record = write_iceberg_metadata(store, location, manifest.source_timestamps, still_held, derived_from, scope,
                                    held, manifest.log_files)
    if still_held is not None:
        still_held()
    manifest.changed(**{ICEBERG: record}).write(store, location)
    return record


def _derived_from(store: ObjectStore, uri: str | None) -> tuple[str, ExportManifest] | None:
    """(location, manifest) of the complete export another was derived from (its manifest's
    `derived_from`), or None when it has none any more."""
    root = store.uri("")
    if not uri or not uri.startswith(root):
        return None
    try:
        return uri[len(root):], ExportManifest.read(store, uri[len(root):])
    except NotFound:
        return None


def write_iceberg_metadata(store: ObjectStore, location: str, source_timestamps: Mapping[int, int],
                           still_held: Callable[[], None] | None = None,
                           derived_from: tuple[str, ExportManifest] | None = None, scope: ReadScope | None = None,
                           held: Mapping[str, bytes] = {}, log_files: Mapping[str, int] | None = None) -> dict:
    """The complete export at `location` as an Iceberg table; its record: `state` `written` with
    `metadata_location` and `snapshot_ids` (Delta version -> snapshot id), or `refused` (Iceberg
    cannot represent the table) / `failed` (another permanent error) with the `reason`. Transient
    errors raise: the export is retried, as for any write of it. `derived_from`: (location, manifest)
    of the export this one was derived from, whose Iceberg table this one's starts from. `scope`:
    the objects the log may make it read (`confined_reads`). `held`: log files whose bytes the
    caller holds (it wrote them), not read back; `log_files`: the log's files and sizes as the
    export's manifest records them (`ExportManifest.log_files`), not listed."""
    log = read_exported_log(store, location, held, log_files)
    read_range = confined_reads(store, scope)

    def write(table: _ExportFiles) -> tuple[IcebergTable, str | None]:
        if log is None:
            raise CorruptLog(f"no _delta_log at {store.uri(location)}")
        files = _ExportFiles(store, iceberg_files_location(location))
        base = store.uri(iceberg_table_files(location))  # the folder of every file it names but its metadata file
        derived = _derived_table(store, location, log, files, table, base, derived_from, source_timestamps, read_range)
        return derived or write_table(log, files, read_range, source_timestamps, table=table, base=base), None

    return _recorded(store, location, write, still_held)


def branch_iceberg_metadata(store: ObjectStore, location: str, previous: dict | None,
                            source_timestamps: Mapping[int, int], still_held: Callable[[], None] | None = None,
                            oldest_version: int = 0, scope: ReadScope | None = None) -> dict:
    """The branch table at `location` (its log complete) as an Iceberg table: a snapshot for
    each version after the head of the table `previous` (its record in the state) names, appended;
    the record as `write_iceberg_metadata` gives it. Without a table to continue (none yet, refused,
    failed) it is written anew from the log's newest checkpoint; so too, `rewritten` saying why,
    when the log retention removed commits the table does not have.

    The snapshots of versions below `oldest_version` (the branch table's first version, after the
    log retention) are expired as it appends, and the files only they named deleted after its new
    metadata.json: the table's metadata grows with the versions the Delta log keeps, not all.
    `scope`: the objects the log may make it read (`confined_reads`)."""
    log = read_exported_log(store, location)
    read_range = confined_reads(store, scope)
    if iceberg_state(previous) is IcebergState.WRITTEN and \
            max(map(int, previous["snapshot_ids"])) == log.segment.head_version:
        return previous  # nothing appended since (the same commit's table again)

    def write(files: _ExportFiles) -> tuple[IcebergTable, str | None]:
        rewritten = None
        if iceberg_state(previous) is IcebergState.WRITTEN:
            head = max(map(int, previous["snapshot_ids"]))
            try:  # from a checkpoint the Iceberg table has: later checkpoints skip commits it lacks
                continued = dataclasses.replace(log, segment=select_segment(log.listing, checkpoint_at_most=head))
            except CorruptLog as error:
                rewritten = (f"the Iceberg table ends at version {head} and the log no longer holds the commits "
                             f"after it (log retention: {error}): written anew from the newest checkpoint")
            else:
                table = append_table(previous["metadata_location"].removeprefix(files.location), continued, files,
                                     read_range, source_timestamps, oldest_version=oldest_version)
                store.delete([files.root + key for key in table.unreferenced])
                return table, None
        discard_iceberg_metadata(store, location)  # a new table: none of an older one's files named twice
        return write_table(log, files, read_range, source_timestamps), rewritten

    return _recorded(store, location, write, still_held)


def confined_reads(store: ObjectStore, scope: ReadScope | None) -> ReadRange:
    """`store.get_range` of the deletion vectors and data-file footers the exported log names by
    absolute path, each only inside `scope` (None: the storage namespace but its `_lakefs/`): a log
    may name another repository's objects, whose bytes would become this table's delete files."""
    scope = scope or ReadScope(store.uri(""))
    return lambda uri, start, end: store.get_range(scope.check(uri), start, end)


def _recorded(store: ObjectStore, location: str, write: Callable[[_ExportFiles], tuple[IcebergTable, str | None]],
              still_held: Callable[[], None] | None) -> dict:
    """The record of the Iceberg table `write` writes at `location`; a permanent error leaves none."""
    try:
        table, rewritten = write(_ExportFiles(store, iceberg_location(location), still_held))
    except ExporterError as error:
        if not error.permanent:
            raise
        discard_iceberg_metadata(store, location)
        state = IcebergState.REFUSED if isinstance(error, IcebergUnsupported) else IcebergState.FAILED
        return {"state": state.value, "reason": str(error)}
    except _UNEXPECTED_DATA as error:  # a log this writer did not foresee: the Delta export stands without it
        reason = f"the Iceberg writer failed on this log: {type(error).__name__}: {error}"
        log.warning("Iceberg metadata at %s not written: %s", store.uri(location), reason)  # one line: the export is done
        log.debug("Iceberg metadata at %s not written", store.uri(location), exc_info=True)
        discard_iceberg_metadata(store, location)
        return {"state": IcebergState.FAILED.value, "reason": reason}
    return {"state": IcebergState.WRITTEN.value, "metadata_location": table.metadata_location,
            "snapshot_ids": {str(version): snapshot_id for version, snapshot_id in sorted(table.snapshot_ids.items())},
            **({"rewritten": rewritten} if rewritten else {})}


def _derived_table(store: ObjectStore, location: str, log: ExportedLog, files: _ExportFiles, table: _ExportFiles,
                   base: str, derived_from: tuple[str, ExportManifest] | None, source_timestamps: Mapping[int, int],
                   read_range: ReadRange) -> IcebergTable | None:
    """The table of the export `derived_from` names, continued at `table` (`derive_table`); None
    (and nothing left) when that export has no Iceberg table of this exporter version, or reading
    it fails for good (it was pruned meanwhile, ...): the table is then written fresh."""
    if derived_from is None:
        return None
    source_location, manifest = derived_from
    record = manifest.iceberg or {}
    source = store.uri(iceberg_location(source_location))
    metadata_location = record.get("metadata_location") or ""
    if not continuable(manifest) or not names.is_metadata_file(metadata_location, source):
        return None
    try:
        return derive_table(json.loads(store.get_uri(metadata_location)), log, files, table, read_range,
                            source_timestamps, base)
    except ExporterError as error:
        if not error.permanent:
            raise
        discard_iceberg_metadata(store, location)
        return None


def discard_iceberg_metadata(store: ObjectStore, location: str) -> int:
    """Remove the Iceberg table of the export at `location`, its metadata.json first (until then it
    reads whole), then the files it wrote; the number of objects removed."""
    root, own = iceberg_location(location), iceberg_files_location(location)
    keys = list(dict.fromkeys(key for folder in names.FOLDERS for at in (root, own) for key in store.list_keys(at + folder)))
    store.delete([key for key in keys if names.is_metadata_file(key, root)])
    store.delete([key for key in keys if not names.is_metadata_file(key, root)])
    return len(keys)
