"""Exporting a commit: which tables, and for each the cheapest complete export (a copy of a tag's,
the parent's plus the new commits, else cold); failures come back as outcomes, never half-marked done.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from exporter.errors import ExporterError, NotFound, TableNotFound
from exporter.export.cold import export_cold
from exporter.export.manifest import ICEBERG, PENDING, ExportManifest, IcebergState, iceberg_state
from exporter.export.iceberg_metadata import complete_iceberg_metadata
from exporter.export.incremental import ColdExportNeeded, copy_export, export_incrementally
from exporter.export.job import ExportAt, ExportJob
from exporter.export.log_writer import ExportOutcome, discard_export
from exporter.lakefs.client import LakeFS
from exporter.lakefs.descriptors import TableChanges, TableDescriptor, discover_tables, tables_to_export
from exporter.lakefs.lake import Lake
from exporter.progress import Progress, Step, counted, quiet
from exporter.storage.layout import MANIFEST, export_location, exports_root, location_segment
from exporter.storage.objectstore import ObjectStore


def export_commit(lake: Lake, at: ExportAt, tables: list[str] | None = None, export_all: bool = False,
                  progress: Progress = quiet) -> list[ExportOutcome]:
    """Export the tables a commit changed (or the named ones, or all), each with its Iceberg table
    when `iceberg.enabled` (in this process: workers write it in a task of its own after the export,
    or with `iceberg.same_task` a light one in the export's task).
    One bad table never stops the others."""
    lakefs = lake.lakefs
    repository, ref = at.repository, at.ref
    commit_id = lakefs.commit(repository, at.commit_id or ref).id
    selection = tables_to_export(lakefs, repository, commit_id, tables or (), every_table=export_all)
    outcomes = [ExportOutcome(table=name, table_path="", ok=False, error=reason)
                for name, reason in selection.refused.items()]
    done = counted(progress, "export", f"{repository}@{commit_id[:12]}", "tables exported", len(selection.tables),
                   "tables")
    for table in selection.tables:
        outcome = export_table(lake, ExportAt(repository, ref, commit_id), table, progress=progress)
        if outcome.ok and iceberg_state(outcome.iceberg) is IcebergState.PENDING:
            try:
                outcome.iceberg = export_iceberg(lake, repository, ref, commit_id, table.name)
            except ExporterError as exc:  # transient: the export stands, its Iceberg table is written when asked again
                outcome.iceberg = {**PENDING, "reason": f"not written yet: {exc}"}
            written = iceberg_state(outcome.iceberg) is not IcebergState.PENDING
            progress(Step("export", table.path, "Iceberg table", int(written), 1, "tables"))  # pending: no line
        outcomes.append(outcome)
        done(1)
    return outcomes


def export_iceberg(lake: Lake, repository: str, ref: str, commit_id: str, table_name: str,
                   still_held: Callable[[], None] | None = None, held: Mapping[str, bytes] = {}) -> dict | None:
    """The Iceberg table of a complete export whose manifest records it pending, written; its record
    (`complete_iceberg_metadata`), None when the export is gone. `still_held`: the export's lock;
    `held`: log files of the export its writer handed over (`ExportOutcome.held`)."""
    config = lake.config
    store = lake.store(repository)
    return complete_iceberg_metadata(store, export_location(config, ref, commit_id, table_name), still_held,
                                     lake.read_scope(repository), held=held)


@dataclass
class ExportGaps:
    """What a commit's exports under a ref still lack."""

    missing: list[str] = field(default_factory=list)  # tables with no complete export (no manifest)
    iceberg_pending: list[str] = field(default_factory=list)  # complete exports whose Iceberg table is still to write


def missing_exports(lake: Lake, repository: str, ref: str, commit_id: str, all_tables: bool = False) -> ExportGaps:
    """The tables this commit changed (or all its tables) without a complete export under `ref`,
    and those whose complete export records its Iceberg table pending: one manifest read a table."""
    config, lakefs = lake.config, lake.lakefs
    store = lake.store(repository)
    gaps = ExportGaps()
    for table in tables_to_export(lakefs, repository, commit_id, every_table=all_tables).tables:
        try:
            manifest = ExportManifest.read(store, export_location(config, ref, commit_id, table.name))
        except NotFound:
            gaps.missing.append(table.name)
            continue
        if iceberg_state(manifest.iceberg) is IcebergState.PENDING:
            gaps.iceberg_pending.append(table.name)
    return gaps


def exports_in_store(lake: Lake, repository: str, commit_id: str,
                     ref: str | None = None) -> dict[str, dict[str, dict]]:
    """{ref: {table: record}} of the complete exports of a commit, read from their manifests: what
    the status API answers when Redis has no record (it was flushed, or restarted without persistence)."""
    config = lake.config
    store = lake.store(repository)
    root = exports_root(config)
    segments = [location_segment(ref)] if ref is not None else store.list_folders(root)
    found: dict[str, dict[str, dict]] = {}
    for segment in segments:
        for table_segment in store.list_folders(f"{root}{segment}/{commit_id}/"):
            target = f"{root}{segment}/{commit_id}/{table_segment}/"  # export_location, from its segments
            try:
                manifest = ExportManifest.read(store, target)
            except NotFound:
                continue  # not complete
            found.setdefault(manifest.ref, {})[manifest.table] = {
                "state": "done", "ref": manifest.ref, "table": manifest.table, "table_path": manifest.table_path,
                "location": store.uri(target), "checkpoint_version": manifest.checkpoint_version,
                "head_version": manifest.head_version, "files_rewritten": manifest.files_rewritten,
                "source": "manifest", **({ICEBERG: manifest.iceberg} if manifest.iceberg is not None else {})}
    return found


def find_table(lakefs: LakeFS, repository: str, commit_id: str, name: str) -> TableDescriptor:
    for table in discover_tables(lakefs, repository, commit_id).tables:
        if table.name == name:
            return table
    raise TableNotFound(f"no valid descriptor for table {name!r} in _lakefs_tables/ at commit {commit_id}")


def export_table(lake: Lake, at: ExportAt, table: TableDescriptor, copy_from: tuple[str, ...] = (),
                 still_held: Callable[[], None] | None = None, progress: Progress = quiet,
                 known: TableChanges | None = None) -> ExportOutcome:
    """Export one table at `at.commit_id`; failures come back as an outcome with the reason, never
    half-marked as done.

    Cheapest first: a copy of this commit's export under one of the refs `copy_from` (a tag on an
    exported commit), else the parent's export plus the new commits, else a cold export.
    `still_held()` raises LockLost once the caller's lock on this export is no longer its own: it
    runs before each commit point (the file that makes the log a table, the manifest). `known`: the
    commit's parent and the table's changes since, when the caller holds them (`known_changes`)."""
    config, lakefs = lake.config, lake.lakefs
    started, calls_before = time.monotonic(), lakefs.calls
    outcome = ExportOutcome(table=table.name, table_path=table.path, ok=False)
    try:
        job = ExportJob(config, lakefs, lake.store(at.repository), at.repository, at.ref,
                        at.commit_id, table, still_held, progress, started, known)
        outcome = job.outcome
        try:  # already exported: its Iceberg record says whether that table is still to be written
            outcome.iceberg = ExportManifest.read(job.store, job.target).iceberg
        except NotFound:
            pass
        else:
            outcome.ok = outcome.skipped = True
            return outcome
        try:
            _export_cheapest(job, copy_from)
        except ExporterError as exc:
            if exc.permanent:  # a retry cannot complete it: leave nothing a reader could take for a table
                _discard_after(job.store, job.target, exc)
            raise
        outcome.ok = True
        if job.written is not None:  # its Iceberg table is a few requests: written now
            outcome.iceberg = _light_iceberg(lake, job)
    except ExporterError as exc:
        outcome.error, outcome.permanent, outcome.outage = str(exc), exc.permanent, exc.outage
    finally:
        outcome.seconds = time.monotonic() - started
        outcome.lakefs_calls = lakefs.calls - calls_before
    return outcome


def _light_iceberg(lake: Lake, job: ExportJob) -> dict:
    """The Iceberg record of an export whose Iceberg step is light (`light_iceberg_step`), written by
    the process that wrote the export; still `pending`, with why, when an error a retry may fix
    stops it (the export stands: its Iceberg table is written when asked again)."""
    try:
        return complete_iceberg_metadata(job.store, job.target, job.still_held, lake.read_scope(job.repository),
                                         job.written, job.outcome.held)
    except ExporterError as exc:
        return {**PENDING, "reason": f"not written yet: {exc}"}


def abandon_export(lake: Lake, repository: str, ref: str, commit_id: str, table_name: str) -> int:
    """Remove an export that will not be retried any more (its transient errors ran out); the
    number of objects removed. A complete export (its manifest exists) is kept."""
    config = lake.config
    store = lake.store(repository)
    target = export_location(config, ref, commit_id, table_name)
    if store.exists(target + MANIFEST):
        return 0
    return discard_export(store, target)


def _export_cheapest(job: ExportJob, copy_from: tuple[str, ...]) -> None:
    for other_ref in copy_from:
        try:
            copy_export(job, other_ref)
            job.outcome.incremental = True
            return
        except ColdExportNeeded:
            continue
    try:
        export_incrementally(job)
        job.outcome.incremental = True
    except ColdExportNeeded as reason:
        job.outcome.cold_reason = str(reason)
        export_cold(job)


def _discard_after(store: ObjectStore, target: str, error: ExporterError) -> None:
    try:
        discard_export(store, target)
    except ExporterError as cleanup:
        error.args = (f"{error}; and removing the partial export failed: {cleanup}",)
