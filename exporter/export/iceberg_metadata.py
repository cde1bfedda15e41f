"""An export as an Iceberg table too (issue 26, `iceberg.enabled`): the Iceberg table over the
exported `_delta_log` read back from the object store (absolute paths), written at the export's
location (`layout.iceberg_location`) once the Delta log is complete.

An export derived from another (incremental, a tag's copy) derives its table from that export's
(`exporter.iceberg.table.copy_table`): the other's manifests and delete files are copied
server-side and re-pointed, never named where they are (prune removes the older export first), and
only the new versions are added. Written fresh (`write_table`) when the other export has no Iceberg
table of this exporter version, or the derivation fails.
A table Iceberg cannot represent leaves the Delta export as it is: the record says why, and the
files written before the refusal are removed (never a wrong Iceberg table).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import exporter

from exporter.errors import CorruptLog, ExporterError, IcebergUnsupported
from exporter.export.readback import ExportedLog, read_exported_log
from exporter.iceberg.table import IcebergTable, copy_table, write_table
from exporter.lakefs.table_log import IO_THREADS
from exporter.storage.layout import ICEBERG_FOLDERS, iceberg_location, is_iceberg_metadata_file
from exporter.storage.objectstore import ObjectStore
from exporter.threads import io_pool

ICEBERG = "iceberg"  # the key of the Iceberg record in the manifest and the status record


@dataclass
class _ExportFiles:
    """`exporter.iceberg.table.IcebergFiles` at an export's location; the writer's lock is checked
    before the metadata.json, the Iceberg table's commit point."""

    store: ObjectStore
    root: str  # relative to the storage namespace, ending with `/`
    still_held: Callable[[], None] | None = None
    location: str = field(init=False)

    def __post_init__(self) -> None:
        self.location = self.store.uri(self.root)

    def put(self, key: str, body: bytes) -> None:
        if self.still_held is not None and is_iceberg_metadata_file(self.root, self.root + key):
            self.still_held()
        self.store.put(self.root + key, body)

    def get(self, key: str) -> bytes:
        return self.store.get(self.root + key)


def write_iceberg_metadata(store: ObjectStore, location: str, source_timestamps: Mapping[int, int],
                           still_held: Callable[[], None] | None = None,
                           derived_from: tuple[str, dict] | None = None) -> dict:
    """The complete export at `location` as an Iceberg table; its record: `state` `written` with
    `metadata_location` and `snapshot_ids` (Delta version -> snapshot id), or `refused` (Iceberg
    cannot represent the table) / `failed` (another permanent error) with the `reason`. Transient
    errors raise: the export is retried, as for any write of it. `derived_from`: (location, manifest)
    of the export this one was derived from, whose Iceberg table this one's starts from."""
    log = read_exported_log(store, location)
    try:
        if log is None:
            raise CorruptLog(f"no _delta_log at {store.uri(location)}")
        files = _ExportFiles(store, iceberg_location(location), still_held)
        table = _derived_table(store, location, log, files, derived_from, source_timestamps)
        if table is None:
            table = write_table(log, files, store.get_range, source_timestamps)
    except ExporterError as error:
        if not error.permanent:
            raise
        discard_iceberg_metadata(store, location)
        return {"state": "refused" if isinstance(error, IcebergUnsupported) else "failed", "reason": str(error)}
    return {"state": "written", "metadata_location": table.metadata_location,
            "snapshot_ids": {str(version): snapshot_id for version, snapshot_id in sorted(table.snapshot_ids.items())}}


def _derived_table(store: ObjectStore, location: str, log: ExportedLog, files: _ExportFiles, derived_from: tuple[str, dict] | None,
                   source_timestamps: Mapping[int, int]) -> IcebergTable | None:
    """The table of the export `derived_from` names, copied to `files` and appended to; None (and
    nothing left) when that export has no Iceberg table of this exporter version, or the copy fails
    for good (it was pruned meanwhile, ...): the table is then written fresh."""
    if derived_from is None:
        return None
    source_location, manifest = derived_from
    record = manifest.get(ICEBERG) or {}
    source = _ExportFiles(store, iceberg_location(source_location))
    metadata_key = (record.get("metadata_location") or "").removeprefix(source.location)
    if record.get("state") != "written" or manifest.get("exporter_version") != exporter.__version__ or \
            not is_iceberg_metadata_file(source.root, source.root + metadata_key):
        return None

    def copy(keys: list[str]) -> None:
        with io_pool(IO_THREADS) as pool:
            list(pool.map(lambda key: store.copy(source.root + key, files.root + key), keys))

    try:
        return copy_table(metadata_key, source, copy, log, files, store.get_range, source_timestamps)
    except ExporterError as error:
        if not error.permanent:
            raise
        discard_iceberg_metadata(store, location)
        return None


def discard_iceberg_metadata(store: ObjectStore, location: str) -> int:
    """Remove the Iceberg table of the export at `location`, its metadata.json first (until then it
    reads whole); the number of objects removed."""
    root = iceberg_location(location)
    keys = [key for folder in ICEBERG_FOLDERS for key in store.list_keys(root + folder)]
    store.delete([key for key in keys if is_iceberg_metadata_file(location, key)])
    store.delete([key for key in keys if not is_iceberg_metadata_file(location, key)])
    return len(keys)
