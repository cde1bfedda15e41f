"""Export one table's `_delta_log` at a commit: newest checkpoint + later commits, absolute paths.

Order of writes is what makes an export trustworthy (`write_log`): commits in version order, then
the file that starts the log segment, so no reader sees a table before all of it is written; then
`_last_checkpoint`, and last the manifest `_lakefs_export.json` that marks the export complete.
"""

from __future__ import annotations

import functools
import json
import posixpath
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow.compute as pc
import pyarrow.parquet as pq

import exporter
from exporter.config import Config
from exporter.delta.actions import check_protocol, commit_timestamp, parse_actions
from exporter.delta.log import LAST_CHECKPOINT, LOG_DIR, LogSegment, commit_name
from exporter.errors import ExporterError, MissingDataFiles, NotFound, TableNotFound
from exporter.delta.replay import UNTRACKED, checkpoint_row_groups, deletion_vector_id, reconcile
from exporter.lakefs.client import LakeFS
from exporter.lakefs.gateway_paths import LakeFSPaths
from exporter.lakefs.table_log import IO_THREADS, LogLayout, checkpoint_files, list_log, read_log_files
from exporter.storage.objectstore import ObjectSource, ObjectStore, Upload
from exporter.parquet.splice import BytesSource, ParquetSource, open_parquet, read_present_columns
from exporter.delta.paths import PathResolver
from exporter.export.rewrite import deletion_vector_file, rewrite_checkpoint_to, rewrite_commit
from exporter.delta.spark_schema import spark_schema
from exporter.lakefs.descriptors import TableDescriptor, changed_tables, discover_tables
from exporter.storage.layout import MANIFEST, export_location, exports_root, location_segment



@dataclass
class ExportOutcome:
    table: str
    table_path: str
    ok: bool
    location: str = ""
    skipped: bool = False  # already exported: the manifest exists
    checkpoint_version: int | None = None
    head_version: int | None = None
    versions: int = 0
    files_rewritten: int = 0
    lakefs_calls: int = 0
    seconds: float = 0.0
    error: str = ""
    permanent: bool = True  # for failures: False means a retry may succeed
    incremental: bool = False  # copied the parent's export and added the new commits
    cold_reason: str = ""  # why the parent's export could not be reused

    def summary(self) -> str:
        if not self.ok:
            return f"FAILED  {self.table} ({self.table_path}): {self.error}"
        if self.skipped:
            return f"EXISTS  {self.table} -> {self.location} (already exported)"
        how = "incremental" if self.incremental else "cold"
        return (f"OK      {self.table} -> {self.location}  versions {self.checkpoint_version if self.checkpoint_version is not None else 0}"
                f"..{self.head_version}, {self.files_rewritten} paths rewritten, {self.lakefs_calls} lakeFS calls, "
                f"{self.seconds:.2f}s ({how})")


def export_commit(config: Config, repository: str, ref: str, commit_id: str | None = None,
                  tables: list[str] | None = None, export_all: bool = False, lakefs: LakeFS | None = None) -> list[ExportOutcome]:
    """Export the tables a commit changed (or the named ones, or all). One bad table never stops the others."""
    lakefs = lakefs or LakeFS(config.lakefs)
    commit_id = lakefs.commit(repository, commit_id or ref).id
    discovery = discover_tables(lakefs, repository, commit_id)
    outcomes = [ExportOutcome(table=err.args[0].split(":")[0], table_path="", ok=False, error=str(err))
                for err in discovery.errors]
    selected = discovery.tables
    if tables:
        unknown = set(tables) - {t.name for t in selected}
        outcomes += [ExportOutcome(table=name, table_path="", ok=False, error="no such table in _lakefs_tables/")
                     for name in sorted(unknown)]
        selected = [t for t in selected if t.name in tables]
    elif not export_all:
        selected = changed_tables(lakefs, repository, commit_id, selected)
    for table in selected:
        outcomes.append(export_table(config, repository, ref, commit_id, table, lakefs=lakefs))
    return outcomes


def missing_exports(config: Config, repository: str, ref: str, commit_id: str, lakefs: LakeFS | None = None,
                    all_tables: bool = False) -> list[str]:
    """Names of the tables this commit changed (or of all its tables) that have no complete export
    (no manifest) under `ref` yet."""
    lakefs = lakefs or LakeFS(config.lakefs)
    namespace = lakefs.storage_namespace(repository)
    store = ObjectStore(config, namespace)
    tables = discover_tables(lakefs, repository, commit_id).tables
    tables = tables if all_tables else changed_tables(lakefs, repository, commit_id, tables)
    return [t.name for t in tables
            if not store.exists(export_location(config, ref, commit_id, t.name) + MANIFEST)]


def exports_in_store(config: Config, repository: str, commit_id: str, ref: str | None = None,
                     lakefs: LakeFS | None = None) -> dict[str, dict[str, dict]]:
    """{ref: {table: record}} of the complete exports of a commit, read from their manifests: what
    the status API answers when Redis has no record (it was flushed, or restarted without persistence)."""
    lakefs = lakefs or LakeFS(config.lakefs)
    store = ObjectStore(config, lakefs.storage_namespace(repository))
    root = exports_root(config)
    segments = [location_segment(ref)] if ref is not None else store.list_folders(root)
    found: dict[str, dict[str, dict]] = {}
    for segment in segments:
        for table_segment in store.list_folders(f"{root}{segment}/{commit_id}/"):
            target = f"{root}{segment}/{commit_id}/{table_segment}/"
            try:
                manifest = json.loads(store.get(target + MANIFEST))
            except NotFound:
                continue  # not complete
            found.setdefault(manifest["ref"], {})[manifest["table"]] = {
                "state": "done", "ref": manifest["ref"], "table": manifest["table"], "location": store.uri(target),
                "checkpoint_version": manifest.get("checkpoint_version"), "head_version": manifest.get("head_version"),
                "files_rewritten": manifest.get("files_rewritten"), "source": "manifest"}
    return found


def find_table(lakefs: LakeFS, repository: str, commit_id: str, name: str) -> TableDescriptor:
    for table in discover_tables(lakefs, repository, commit_id).tables:
        if table.name == name:
            return table
    raise TableNotFound(f"no valid descriptor for table {name!r} in _lakefs_tables/ at commit {commit_id}")


def export_table(config: Config, repository: str, ref: str, commit_id: str, table: TableDescriptor,
                 lakefs: LakeFS | None = None, copy_from: tuple[str, ...] = ()) -> ExportOutcome:
    """Export one table; failures come back as an outcome with the reason, never half-marked as done.

    Cheapest first: a copy of this commit's export under one of the refs `copy_from` (a tag on an
    exported commit), else the parent's export plus the new commits, else a cold export."""
    lakefs = lakefs or LakeFS(config.lakefs)
    started, calls_before = time.monotonic(), lakefs.calls
    outcome = ExportOutcome(table=table.name, table_path=table.path, ok=False)
    try:
        namespace = lakefs.storage_namespace(repository)
        store = ObjectStore(config, namespace)
        target = export_location(config, ref, commit_id, table.name)
        outcome.location = store.uri(target)
        if store.exists(target + MANIFEST):
            outcome.ok = outcome.skipped = True
            return outcome
        try:
            _export_incrementally_or_cold(config, lakefs, store, repository, ref, commit_id, table, target, outcome,
                                          started, copy_from)
        except ExporterError as exc:
            if exc.permanent:  # a retry cannot complete it: leave nothing a reader could take for a table
                _discard_after(store, target, exc)
            raise
        outcome.ok = True
    except ExporterError as exc:
        outcome.error, outcome.permanent = str(exc), exc.permanent
    finally:
        outcome.seconds = time.monotonic() - started
        outcome.lakefs_calls = lakefs.calls - calls_before
    return outcome


def abandon_export(config: Config, repository: str, ref: str, commit_id: str, table_name: str,
                   lakefs: LakeFS | None = None) -> int:
    """Remove an export that will not be retried any more (its transient errors ran out); the
    number of objects removed. A complete export (its manifest exists) is kept."""
    lakefs = lakefs or LakeFS(config.lakefs)
    store = ObjectStore(config, lakefs.storage_namespace(repository))
    target = export_location(config, ref, commit_id, table_name)
    if store.exists(target + MANIFEST):
        return 0
    return discard_export(store, target)


def _export_incrementally_or_cold(config: Config, lakefs: LakeFS, store: ObjectStore, repository: str, ref: str,
                                  commit_id: str, table: TableDescriptor, target: str, outcome: ExportOutcome,
                                  started: float, copy_from: tuple[str, ...]) -> None:
    from exporter.export.incremental import ColdExportNeeded, copy_export, export_incrementally  # they build on this module

    for other_ref in copy_from:
        try:
            copy_export(config, store, repository, ref, commit_id, table, target, outcome, other_ref)
            outcome.incremental = True
            return
        except ColdExportNeeded:
            continue
    try:
        export_incrementally(config, lakefs, store, repository, ref, commit_id, table, target, outcome, started)
        outcome.incremental = True
    except ColdExportNeeded as reason:
        outcome.cold_reason = str(reason)
        _export(lakefs, store, repository, ref, commit_id, table, target, outcome, started)


def _discard_after(store: ObjectStore, target: str, error: ExporterError) -> None:
    try:
        discard_export(store, target)
    except ExporterError as cleanup:
        error.args = (f"{error}; and removing the partial export failed: {cleanup}",)


def _export(lakefs: LakeFS, store: ObjectStore, repository: str, ref: str, commit_id: str, table: TableDescriptor,
            target: str, outcome: ExportOutcome, started: float) -> None:
    """A cold export. JSON files are rewritten in memory; parquet checkpoints, parts and sidecars
    are streamed row group by row group from their physical addresses into uploads that appear
    only when `write_log` completes them, so memory does not grow with the table."""
    layout = list_log(lakefs, store, repository, commit_id, table.path)
    segment, sizes = layout.segment, layout.listing.sizes

    @functools.cache
    def source_of(name: str) -> ObjectSource:  # one per file: it keeps the footer it read
        return ObjectSource(store, layout.addresses[LOG_DIR + name], sizes[name])

    commits = ([(segment.checkpoint.version, segment.checkpoint_commit)] if segment.checkpoint_commit else []) \
        + segment.commits
    json_names = [n for n in (segment.checkpoint.files if segment.checkpoint else []) if n.endswith(".json")]
    log_files = read_log_files(store, layout.addresses, json_names + [name for _, name in commits])
    ordered = checkpoint_files(layout.addresses, segment,
                               lambda n: BytesSource(log_files[n]) if n in log_files else source_of(n)) \
        if segment.checkpoint else []
    log_files.update(read_log_files(store, layout.addresses,
                                    [n for n in ordered if n.endswith(".json") and n not in log_files]))
    read = time.monotonic()

    resolver = PathResolver(layout.addresses, LakeFSPaths(lakefs, store.bucket))
    outputs: dict[str, bytes] = {}  # name relative to _delta_log/ -> rewritten bytes (JSON files)
    uploads: dict[str, Upload] = {}  # name relative to _delta_log/ -> streamed parquet file, not yet visible
    missing: list[str] = []
    rewritten = 0
    checkpoint_rows = 0
    protocol_actions: list[dict] = []
    snapshot = Snapshot()
    try:
        for name in ordered:  # sidecars first: the checkpoint records their new sizes
            sidecar_sizes = None if name.startswith("_sidecars/") else \
                {posixpath.basename(n): _written_size(n, outputs, uploads) for n in ordered if n.startswith("_sidecars/")}
            if name.endswith(".json"):
                raw = log_files[name]
                actions = parse_actions(name, raw)
                protocol_actions += [a for a in actions if "protocol" in a or "metaData" in a]
                snapshot.apply(actions)
                result = rewrite_commit(name, raw, resolver, sidecar_sizes)
                checkpoint_rows += len(actions)
                outputs[name] = result.content
            else:
                source = source_of(name)
                rows, protocol_rows = _checkpoint_summary(name, source)
                protocol_actions += protocol_rows
                checkpoint_rows += rows
                snapshot.apply_checkpoint(name, source)
                upload = uploads[name] = store.upload(target + LOG_DIR + name)
                result = rewrite_checkpoint_to(name, source, resolver, upload, sidecar_sizes)
                if result.changed:
                    upload.finish_writing()
                else:
                    upload.copy_of(source.uri, source.size)
            rewritten += result.files_rewritten
            missing += result.missing
        timestamps: dict[int, int] = {}  # version -> the source's commit timestamp (epoch ms)
        for version, name in commits:
            raw = log_files[name]
            actions = parse_actions(name, raw)
            protocol_actions += [a for a in actions if "protocol" in a or "metaData" in a]
            timestamps[version] = commit_timestamp(actions, layout.modification_times.get(name, 0) * 1000)
            result = rewrite_commit(name, raw, resolver)
            outputs[name] = result.content
            rewritten += result.files_rewritten
            if name != segment.checkpoint_commit:  # c.json's adds are already in the checkpoint
                snapshot.apply(actions)
                missing += result.missing
        check_protocol(protocol_actions)
        # Only files the head snapshot reads must exist: an add removed later may be vacuumed (its
        # versions do not time-travel in the source either); it keeps its original path.
        required = snapshot.required(missing)
        if required:
            raise MissingDataFiles(table.name, required)
        rewritten_at = time.monotonic()

        outcome.checkpoint_version = segment.checkpoint.version if segment.checkpoint else None
        outcome.head_version = segment.head_version
        outcome.versions = len(segment.commits) + (1 if segment.checkpoint else 0)
        outcome.files_rewritten = rewritten
        if segment.checkpoint:
            written = {n: _written_size(n, outputs, uploads) for n in ordered}
            outputs[LAST_CHECKPOINT] = _last_checkpoint(layout, checkpoint_rows, written,
                                                        lambda: open_parquet(source_of(segment.checkpoint.files[0]),
                                                                             segment.checkpoint.files[0]))

        def write(name: str) -> None:
            if name in uploads:
                uploads[name].complete()
            else:
                store.put(target + LOG_DIR + name, outputs[name])

        write_log(segment, [n for n in ordered if n.startswith("_sidecars/")], write)
    finally:
        for upload in uploads.values():
            upload.abort()  # nothing when it completed
    manifest = manifest_document(repository, ref, commit_id, table, outcome, segment, timestamps,
                                 log_files_written=len(outputs) + len(uploads), lakefs_calls=lakefs.calls,
                                 timings={"list_and_read": round(read - started, 3),
                                          "rewrite": round(rewritten_at - read, 3),
                                          "write": round(time.monotonic() - rewritten_at, 3)})
    store.put(target + MANIFEST, json.dumps(manifest, indent=2).encode(), "application/json")  # last: marks done


def _written_size(name: str, outputs: dict[str, bytes], uploads: dict[str, Upload]) -> int:
    return uploads[name].size if name in uploads else len(outputs[name])


def manifest_document(repository: str, ref: str, commit_id: str, table: TableDescriptor, outcome: ExportOutcome,
                      segment: LogSegment, timestamps: dict[int, int], log_files_written: int, lakefs_calls: int,
                      timings: dict[str, float], derived_from: str | None = None) -> dict:
    """`_lakefs_export.json`: what was exported, from where, and each version's source timestamp."""
    return {
        "repository": repository, "ref": ref, "commit_id": commit_id, "table": table.name, "table_path": table.path,
        "location": outcome.location,
        "checkpoint_version": outcome.checkpoint_version, "head_version": segment.head_version,
        "versions": [v for v, _ in segment.commits], "files_rewritten": outcome.files_rewritten,
        # what the source's readers took as each version's time: in-commit timestamp, else file mtime
        "source_timestamps_ms": {str(v): t for v, t in sorted(timestamps.items())},
        # an incremental export copies the parent's export and adds the new commits
        "derived_from": derived_from,
        "log_files_written": log_files_written, "lakefs_calls": lakefs_calls, "timings_seconds": timings,
        "exporter_version": exporter.__version__,
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }




def write_log(segment: LogSegment, sidecars: list[str], write: Callable[[str], None]) -> None:
    """Write an exported `_delta_log` so that no reader sees a table until all of it is there.

    Readers (Delta Spark, delta-rs) build a snapshot from a checkpoint or from version 0 and refuse a
    log that has neither below the commits they need. So the file that starts the segment (the
    checkpoint's last part, or `0.json` without a checkpoint) is written last: before it exists every
    read fails (latest, time travel, CDF); once it exists every version is there. Commits go in
    version order, so their modification times (the commit timestamps of readers without in-commit
    timestamps) increase; without a checkpoint, `0.json` is written last and so the later commits
    are written once more after it, with identical bytes, to keep the times in order.
    `write(name)` writes one file (name under `_delta_log/`): a put of new bytes, or a copy.
    """
    commits = [n for _, n in segment.commits]
    if segment.checkpoint is None:
        start, later = commits[0], commits[1:]
        for name in later:
            write(name)
        write(start)  # the table exists from here on
        for name in later:
            write(name)
        return
    for name in ([segment.checkpoint_commit] if segment.checkpoint_commit else []) + commits:
        write(name)
    parts = segment.checkpoint.files
    with ThreadPoolExecutor(IO_THREADS) as pool:
        list(pool.map(write, sidecars))
        list(pool.map(write, parts[:-1]))  # an incomplete part set is no checkpoint
    write(parts[-1])  # the table exists from here on
    write(LAST_CHECKPOINT)


def discard_export(store: ObjectStore, target: str) -> int:
    """Remove what an export wrote, first the files that make it a table, so it never reads as one."""
    keys = store.list_keys(target)
    log = target + LOG_DIR
    starts = [k for k in keys if k == target + MANIFEST or k == log + LAST_CHECKPOINT
              or (k.startswith(log) and (".checkpoint." in k or k.endswith(commit_name(0))))]
    store.delete(starts)
    store.delete([k for k in keys if k not in set(starts)])
    return len(keys)


class Snapshot:
    """Which of the missing add paths (and deletion-vector files) the head reads. Replayed only
    when something is missing, tracking only the logical files that name a missing object."""

    def __init__(self) -> None:
        self.checkpoints: list[tuple[str, ParquetSource]] = []  # parquet checkpoint files, in order
        self.commits: list[list[dict]] = []  # actions of JSON checkpoints and commits, in log order

    def apply(self, actions: list[dict]) -> None:
        self.commits.append(actions)

    def apply_checkpoint(self, name: str, source: ParquetSource) -> None:
        self.checkpoints.append((name, source))

    def required(self, missing: list[str]) -> list[str]:
        if not missing:
            return []
        lost = set(missing)

        def names_lost(path: str | None, dv: dict | None) -> bool:
            return path in lost or _stored_file(dv) in lost

        # logical file = (path, deletion vector id), as readers reconcile (PROTOCOL.md#action-reconciliation)
        live: dict[tuple, dict | None] = {}
        for name, source in self.checkpoints:
            for paths, dvs in _checkpoint_adds(name, source):
                live.update(((p, deletion_vector_id(dv)), dv) for p, dv in zip(paths, dvs) if names_lost(p, dv))
        for actions in self.commits:
            for action in actions:
                reconcile(live, action, lambda add: add.get("deletionVector")
                          if names_lost(add.get("path"), add.get("deletionVector")) else UNTRACKED)
        live_paths = {path for path, _ in live}
        live_dvs = {_stored_file(dv) for dv in live.values()}
        return sorted({m for m in missing if m in live_paths or m in live_dvs})


def _stored_file(deletion_vector: dict | None) -> str | None:
    """The file a deletion vector stored in one (`u`, `p`) lives in; None for inline or none."""
    if deletion_vector and deletion_vector.get("storageType") in ("u", "p"):
        return deletion_vector_file(deletion_vector["storageType"], deletion_vector["pathOrInlineDv"])
    return None


def _checkpoint_adds(name: str, source: ParquetSource):
    """(paths, deletion vectors) of each row group's `add` column: one row group in memory at a time."""
    for row_group in checkpoint_row_groups(name, source, ["add"]):
        adds = row_group.column("add")
        paths = pc.struct_field(adds, "path").to_pylist()
        has_dv = "deletionVector" in {f.name for f in adds.type}
        yield paths, (pc.struct_field(adds, "deletionVector").to_pylist() if has_dv else [None] * len(paths))


def _checkpoint_summary(name: str, source: ParquetSource) -> tuple[int, list[dict]]:
    """The checkpoint file's row count, and its protocol and metaData rows for the feature check."""
    parquet_file = open_parquet(source, name)
    checkpoint = read_present_columns(parquet_file, name, ["protocol", "metaData"])
    rows: list[dict] = []
    for column in checkpoint.column_names:
        rows += [{column: value} for value in checkpoint.column(column).to_pylist() if value is not None]
    for row in rows:
        configuration = row.get("metaData", {}).get("configuration")
        if isinstance(configuration, list):  # parquet maps come back as key/value pairs
            row["metaData"]["configuration"] = dict(configuration)
    return parquet_file.metadata.num_rows, rows


def _last_checkpoint(layout: LogLayout, rows: int, written: dict[str, int],
                     first_part: Callable[[], pq.ParquetFile]) -> bytes:
    """True for the export (PROTOCOL.md#last-checkpoint-file): every field of the source's that still
    holds (`checkpointSchema`, `numOfAddFiles`, unknown fields), sizes of the rewritten files
    (`written`: name -> size), no `checksum`, no `v2Checkpoint` (its sizes and times are the source's files')."""
    checkpoint = layout.segment.checkpoint
    source = layout.last_checkpoint if layout.last_checkpoint and layout.last_checkpoint.get("version") == checkpoint.version \
        else {}
    document = {k: v for k, v in source.items() if k not in ("checksum", "v2Checkpoint")}
    sidecars = [n for n in written if n.startswith("_sidecars/")]
    # Writers differ on whether a V2 checkpoint's size counts its sidecars: do as the source did.
    source_sizes = layout.listing.sizes
    counted = list(checkpoint.files)
    if sidecars and source.get("sizeInBytes") == sum(source_sizes.get(n, 0) for n in counted + sidecars):
        counted += sidecars
    document.update(version=checkpoint.version, size=rows, sizeInBytes=sum(written[n] for n in counted))
    if checkpoint.kind == "multipart":
        document["parts"] = len(checkpoint.files)
        if "checkpointSchema" not in document:  # without it, readers take the first part's schema
            document["checkpointSchema"] = spark_schema(first_part())  # the export's: the same schema
    return json.dumps(document).encode()
