"""`_lakefs_export.json`, an export's manifest: written last (it marks the export complete), and
read here and nowhere else. Its Iceberg record's states are `IcebergState`'s."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum

import exporter

from exporter.errors import CorruptLog
from exporter.storage.layout import MANIFEST
from exporter.storage.objectstore import ObjectStore

ICEBERG = "iceberg"  # the key of the Iceberg record in the manifest and the status record
LOG_FILES = "log_files"  # the key of the exported log's files and sizes in the manifest


class IcebergState(str, Enum):
    """The state of an export's Iceberg table, in its record (`{"state": ..., ...}`)."""

    PENDING = "pending"    # the export is complete; its Iceberg table is written next
    WRITTEN = "written"    # `metadata_location` and `snapshot_ids` name it
    REFUSED = "refused"    # Iceberg v2 cannot hold the table: `reason` says why
    FAILED = "failed"      # the writer failed on this log: `reason` says how


PENDING = {"state": IcebergState.PENDING.value, "reason": "the export is complete; its Iceberg table is written next"}


def iceberg_state(record: dict | None) -> IcebergState | None:
    """The state an Iceberg record holds (None: no record)."""
    return None if not record else IcebergState(record.get("state"))


@dataclass(frozen=True)
class ExportManifest:
    """The manifest as written: `document` keeps every field, those this release reads typed below."""

    document: dict

    @property
    def ref(self) -> str:
        return self.document["ref"]

    @property
    def table(self) -> str:
        return self.document["table"]

    @property
    def table_path(self) -> str | None:
        return self.document.get("table_path")

    @property
    def head_version(self) -> int:
        return self.document["head_version"]

    @property
    def checkpoint_version(self) -> int | None:
        return self.document.get("checkpoint_version")

    @property
    def files_rewritten(self) -> int:
        return self.document.get("files_rewritten") or 0

    @property
    def log_files(self) -> dict[str, int] | None:
        """Every file of the exported `_delta_log/` (name under it) and its size, as the export wrote
        them; None when the export did not record them (its log is listed instead)."""
        return self.document.get(LOG_FILES)

    @property
    def derived_from(self) -> str | None:
        return self.document.get("derived_from")

    @property
    def exporter_version(self) -> str | None:
        return self.document.get("exporter_version")

    @property
    def iceberg(self) -> dict | None:
        return self.document.get(ICEBERG)

    @property
    def source_timestamps(self) -> dict[int, int]:
        """`source_timestamps_ms` ({version: commit time, epoch ms}: what the source's readers took as
        each version's time), by version number."""
        return {int(version): ms for version, ms in self.document.get("source_timestamps_ms", {}).items()}

    @property
    def of_this_release(self) -> bool:
        """Written by this exporter version: its bytes (log and Iceberg table) are today's."""
        return self.exporter_version == exporter.__version__

    def not_reusable_for(self, table_path: str) -> str | None:
        """Why this export cannot be copied or built on for the table at `table_path` (None: it can)."""
        if self.table_path != table_path:
            return f"it is of another table path ({self.table_path!r})"
        if not self.of_this_release:  # its bytes may differ from today's
            return f"it was exported by exporter {self.exporter_version}"
        return None

    def changed(self, **fields) -> ExportManifest:
        return ExportManifest({**self.document, **fields})

    @classmethod
    def read(cls, store: ObjectStore, location: str) -> ExportManifest:
        """The manifest of the export at `location`; NotFound while the export is not complete."""
        raw = store.get(location + MANIFEST)
        try:
            document = json.loads(raw)
        except ValueError as exc:
            raise CorruptLog(f"{store.uri(location + MANIFEST)} is not JSON: {exc}") from None
        if not isinstance(document, dict) or "table" not in document:
            raise CorruptLog(f"{store.uri(location + MANIFEST)} is not an export's manifest")
        return cls(document)

    def write(self, store: ObjectStore, location: str) -> None:
        """Put at `location`: the export's commit point (the caller checks its lock first)."""
        store.put(location + MANIFEST, json.dumps(self.document, indent=2).encode(), "application/json")
