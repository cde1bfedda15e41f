"""A cold export of one table's `_delta_log` at a commit: the newest checkpoint and every later
commit, paths rewritten to absolute physical addresses, checkpoints streamed row group by row group.
"""

from __future__ import annotations

import json
import posixpath
import time
from collections.abc import Callable

import pyarrow.parquet as pq

from exporter.delta.actions import check_protocol, commit_timestamp, commit_times, parse_actions
from exporter.delta.checkpoint import checkpoint_files
from exporter.delta.head_files import HeadFiles
from exporter.delta.log import LAST_CHECKPOINT, LOG_DIR
from exporter.delta.spark_schema import spark_schema
from exporter.errors import MissingDataFiles
from exporter.export.job import ExportJob
from exporter.export.log_writer import write_log
from exporter.export.resolve import PathResolver
from exporter.export.rewrite import rewrite_checkpoint_to, rewrite_commit
from exporter.lakefs.gateway_paths import LakeFSPaths
from exporter.lakefs.table_log import LogLayout, list_log, read_log_files
from exporter.parquet.splice import BytesSource, ParquetSource, open_parquet, read_present_columns
from exporter.storage.objectstore import ObjectSource, ObjectStore, Upload


def export_cold(job: ExportJob) -> None:
    """A cold export. JSON files are rewritten in memory; parquet checkpoints, parts and sidecars
    are streamed row group by row group from their physical addresses into uploads that appear
    only when `write_log` completes them, so memory does not grow with the table. With
    `iceberg.enabled`, the manifest records the Iceberg table as pending (`write_manifest`)."""
    store, outcome = job.store, job.outcome
    layout = list_log(job.lakefs, store, job.repository, job.commit_id, job.table.path)
    source = _SourceLog(store, layout)
    read = time.monotonic()
    job.report("log listed", len(layout.listing.sizes), len(layout.listing.sizes), "log files")
    rewrite = _Rewrite(store, job.target, PathResolver(layout.addresses, LakeFSPaths(job.lakefs, store.bucket)))
    segment = layout.segment
    try:
        checkpoint_done = job.counter("checkpoint files rewritten", len(source.ordered), "files")
        for name in source.ordered:  # sidecars first: the checkpoint records their new sizes
            rewrite.checkpoint_file(source, name)
            checkpoint_done(1)
        timestamps = commit_times(rewrite.commits(source, job.counter("commits rewritten", len(source.commits),
                                                                      "versions")),
                                  layout.commit_file_times())
        check_protocol(rewrite.protocol_actions)
        # Only files the head snapshot reads must exist: an add removed later may be vacuumed (its
        # versions do not time-travel in the source either); it keeps its original path.
        required = rewrite.head_files.required(rewrite.missing)
        if required:
            raise MissingDataFiles(job.table.name, required)
        rewritten_at = time.monotonic()
        outcome.checkpoint_version = segment.checkpoint.version if segment.checkpoint else None
        outcome.head_version = segment.head_version
        outcome.versions = len(segment.commits) + (1 if segment.checkpoint else 0)
        outcome.files_rewritten = rewrite.files_rewritten
        if segment.checkpoint:
            first = segment.checkpoint.files[0]
            written = {n: rewrite.written_size(n) for n in source.ordered}
            rewrite.outputs[LAST_CHECKPOINT] = _last_checkpoint(layout, rewrite.checkpoint_rows, written,
                                                                lambda: open_parquet(source.source_of(first), first))
        write_log(segment, [n for n in source.ordered if n.startswith("_sidecars/")], rewrite.write, job.still_held)
        files_written = len(rewrite.outputs) + len(rewrite.uploads)
        job.report("log written", files_written, files_written, "files")
    finally:
        rewrite.abort()
    job.complete(job.manifest(segment, timestamps, log_files_written=files_written, read_at=read,
                              rewritten_at=rewritten_at,
                              log_files={name: rewrite.written_size(name) for name in [*rewrite.outputs, *rewrite.uploads]}),
                 held=rewrite.outputs)


class _SourceLog:
    """The source log segment a cold export reads: its JSON files read whole (few and small), its
    parquet files opened by physical address when streamed."""

    def __init__(self, store: ObjectStore, layout: LogLayout):
        self.store, self.layout = store, layout
        self._sources: dict[str, ObjectSource] = {}
        segment = layout.segment
        self.commits = ([(segment.checkpoint.version, segment.checkpoint_commit)] if segment.checkpoint_commit
                        else []) + segment.commits
        self.files = read_log_files(store, layout.addresses, segment.json_files)
        self.ordered = checkpoint_files(layout.addresses, segment, lambda n: BytesSource(self.files[n])
                                        if n in self.files else self.source_of(n)) if segment.checkpoint else []
        self.files.update(read_log_files(store, layout.addresses,
                                         [n for n in self.ordered if n.endswith(".json") and n not in self.files]))

    def source_of(self, name: str) -> ObjectSource:
        """One source per file: it keeps the footer it read."""
        if name not in self._sources:
            self._sources[name] = ObjectSource(self.store, self.layout.addresses[LOG_DIR + name],
                                               self.layout.listing.sizes[name])
        return self._sources[name]


class _Rewrite:
    """What a cold export has rewritten so far: JSON files in memory, parquet files as uploads not
    yet visible, the missing objects they name, and what the protocol check and manifest need."""

    def __init__(self, store: ObjectStore, target: str, resolver: PathResolver):
        self.store, self.target, self.resolver = store, target, resolver
        self.outputs: dict[str, bytes] = {}  # name relative to _delta_log/ -> rewritten bytes (JSON files)
        self.uploads: dict[str, Upload] = {}  # name relative to _delta_log/ -> streamed parquet file
        self.missing: list[str] = []
        self.files_rewritten = self.checkpoint_rows = 0
        self.protocol_actions: list[dict] = []
        self.head_files = HeadFiles()

    def checkpoint_file(self, source: _SourceLog, name: str) -> None:
        sidecar_sizes = None if name.startswith("_sidecars/") else \
            {posixpath.basename(n): self.written_size(n) for n in source.ordered if n.startswith("_sidecars/")}
        if name.endswith(".json"):
            raw = source.files[name]
            actions = parse_actions(name, raw)
            self.protocol_actions += [a for a in actions if "protocol" in a or "metaData" in a]
            self.head_files.apply(actions)
            result = rewrite_commit(name, raw, self.resolver, sidecar_sizes)
            self.checkpoint_rows += len(actions)
            self.outputs[name] = result.content
        else:
            parquet = source.source_of(name)
            rows, protocol_rows = _checkpoint_summary(name, parquet)
            self.protocol_actions += protocol_rows
            self.checkpoint_rows += rows
            self.head_files.apply_checkpoint(name, parquet)
            upload = self.uploads[name] = self.store.upload(self.target + LOG_DIR + name)
            result = rewrite_checkpoint_to(name, parquet, self.resolver, upload, sidecar_sizes)
            if result.changed:
                upload.finish_writing()
            else:
                upload.copy_of(parquet.uri, parquet.size)
        self.files_rewritten += result.files_rewritten
        self.missing += result.missing

    def commits(self, source: _SourceLog, done: Callable[[int], None]) -> dict[int, int]:
        """Rewrite the commits (`done(1)` after each); each version's commit timestamp (epoch ms), for the manifest."""
        timestamps: dict[int, int] = {}
        checkpoint_commit = source.layout.segment.checkpoint_commit
        for version, name in source.commits:
            raw = source.files[name]
            actions = parse_actions(name, raw)
            self.protocol_actions += [a for a in actions if "protocol" in a or "metaData" in a]
            timestamps[version] = commit_timestamp(actions, source.layout.modification_times.get(name, 0) * 1000)
            result = rewrite_commit(name, raw, self.resolver)
            self.outputs[name] = result.content
            self.files_rewritten += result.files_rewritten
            if name != checkpoint_commit:  # c.json's adds are already in the checkpoint
                self.head_files.apply(actions)
                self.missing += result.missing
            done(1)
        return timestamps

    def written_size(self, name: str) -> int:
        return self.uploads[name].size if name in self.uploads else len(self.outputs[name])

    def write(self, name: str) -> None:
        if name in self.uploads:
            self.uploads[name].complete()
        else:
            self.store.put(self.target + LOG_DIR + name, self.outputs[name])

    def abort(self) -> None:
        for upload in self.uploads.values():
            upload.abort()  # nothing when it completed


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
