"""One table's export at one commit under one ref: what each way of writing it (a copy of another
ref's export, the parent's export plus the new commits, a cold export) reads, reports and records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

import exporter
from exporter.config import Config
from exporter.delta.log import LogSegment
from exporter.export.iceberg_metadata import WrittenExport, light_iceberg_step
from exporter.export.log_writer import ExportOutcome, write_manifest
from exporter.export.manifest import LOG_FILES, ExportManifest
from exporter.lakefs.client import LakeFS
from exporter.lakefs.descriptors import TableChanges, TableDescriptor
from exporter.progress import Progress, Step, counted, quiet
from exporter.storage.layout import export_location
from exporter.storage.objectstore import ObjectStore


@dataclass(frozen=True)
class ExportAt:
    """Where exports go: a commit of a repository under the ref it was reached through (the ref names
    the exports' folder). `commit_id` None: the ref's head, for `export_commit` to resolve."""

    repository: str
    ref: str
    commit_id: str | None = None


@dataclass
class ExportJob:
    config: Config
    lakefs: LakeFS
    store: ObjectStore  # the repository's storage namespace
    repository: str
    ref: str
    commit_id: str
    table: TableDescriptor
    still_held: Callable[[], None] | None = None  # raises LockLost once the export's lock is not its own
    progress: Progress = quiet
    started: float = field(default_factory=time.monotonic)
    known: TableChanges | None = None  # the commit's parent and the table's changes, when the caller holds them
    outcome: ExportOutcome = field(init=False)
    written: WrittenExport | None = field(init=False, default=None)  # set by `complete` when its Iceberg step is light

    def __post_init__(self) -> None:
        self.outcome = ExportOutcome(table=self.table.name, table_path=self.table.path, ok=False,
                                     location=self.store.uri(self.target))

    @property
    def target(self) -> str:
        """The export's folder in the storage namespace."""
        return export_location(self.config, self.ref, self.commit_id, self.table.name)

    def location(self, ref: str, commit_id: str) -> str:
        """Where this table's export of another commit, or under another ref, is."""
        return export_location(self.config, ref, commit_id, self.table.name)

    def report(self, stage: str, done: int, total: int, unit: str) -> None:
        self.progress(Step("export", self.table.path, stage, done, total, unit))

    def counter(self, stage: str, total: int, unit: str) -> Callable[[int], None]:
        return counted(self.progress, "export", self.table.path, stage, total, unit, every=max(1, total // 100))

    def manifest(self, segment: LogSegment, timestamps: dict[int, int], log_files_written: int,
                 read_at: float, rewritten_at: float, derived_from: str | None = None,
                 log_files: Mapping[str, int] | None = None) -> ExportManifest:
        """`_lakefs_export.json`: what was exported, from where, and each version's source timestamp;
        `log_files`, every file of the exported `_delta_log/` and its size when the export knows them
        all (its Iceberg step then reads them from here instead of listing the log)."""
        outcome = self.outcome
        return ExportManifest({
            "repository": self.repository, "ref": self.ref, "commit_id": self.commit_id, "table": self.table.name,
            "table_path": self.table.path, "location": outcome.location,
            "checkpoint_version": outcome.checkpoint_version, "head_version": segment.head_version,
            "versions": [v for v, _ in segment.commits], "files_rewritten": outcome.files_rewritten,
            # what the source's readers took as each version's time: in-commit timestamp, else file mtime
            "source_timestamps_ms": {str(v): t for v, t in sorted(timestamps.items())},
            # an incremental export copies the parent's export and adds the new commits
            "derived_from": derived_from,
            "log_files_written": log_files_written,
            **({LOG_FILES: dict(sorted(log_files.items()))} if log_files is not None else {}),
            "lakefs_calls": self.lakefs.calls,
            "timings_seconds": {"list_and_read": round(read_at - self.started, 3),
                                "rewrite": round(rewritten_at - read_at, 3),
                                "write": round(time.monotonic() - rewritten_at, 3)},
            "exporter_version": exporter.__version__,
            "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        })

    def complete(self, manifest: ExportManifest, derived_from: tuple[str, ExportManifest] | None = None,
                 held: Mapping[str, bytes] = {}) -> None:
        """Write the manifest, the export's last file (`write_manifest`). `derived_from`: the export
        this one was built on (its location and manifest). With `iceberg.same_task`, when its Iceberg
        step is light, `written` keeps what the step needs besides the log files `held` (written from
        memory; on the outcome, for whichever step writes the Iceberg table): the manifest and that export."""
        iceberg = self.config.iceberg
        self.outcome.held = dict(held)
        manifest = write_manifest(self.store, self.target, manifest, self.outcome, iceberg.enabled, self.still_held)
        if iceberg.enabled and iceberg.same_task and light_iceberg_step(derived_from, self.outcome.files_rewritten):
            self.written = WrittenExport(manifest, derived_from)
