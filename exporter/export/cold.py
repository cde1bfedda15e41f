"""A cold export of one table's `_delta_log` at a commit: the newest checkpoint and every later
commit, paths rewritten to absolute physical addresses, checkpoints streamed row group by row group.
"""

from __future__ import annotations

import functools
import json
import posixpath
import time
from collections.abc import Callable

import pyarrow.parquet as pq

from exporter.delta.actions import check_protocol, commit_timestamp, parse_actions
from exporter.delta.log import LAST_CHECKPOINT, LOG_DIR
from exporter.delta.spark_schema import spark_schema
from exporter.errors import MissingDataFiles
from exporter.export.log_writer import ExportOutcome, manifest_document, write_log
from exporter.export.missing import HeadFiles
from exporter.export.resolve import PathResolver
from exporter.export.rewrite import rewrite_checkpoint_to, rewrite_commit
from exporter.lakefs.client import LakeFS
from exporter.lakefs.descriptors import TableDescriptor
from exporter.lakefs.gateway_paths import LakeFSPaths
from exporter.lakefs.table_log import LogLayout, checkpoint_files, list_log, read_log_files
from exporter.parquet.splice import BytesSource, ParquetSource, open_parquet, read_present_columns
from exporter.storage.layout import MANIFEST
from exporter.storage.objectstore import ObjectSource, ObjectStore, Upload


def export_cold(lakefs: LakeFS, store: ObjectStore, repository: str, ref: str, commit_id: str, table: TableDescriptor,
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
    snapshot = HeadFiles()
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
