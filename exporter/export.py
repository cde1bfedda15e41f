"""Export one table's `_delta_log` at a commit: newest checkpoint + later commits, absolute paths.

Order of writes is what makes an export trustworthy: checkpoint (and sidecars), commits, then
`_last_checkpoint`, and last the manifest `_lakefs_export.json` that marks the export complete.
"""

from __future__ import annotations

import io
import json
import posixpath
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow.compute as pc
import pyarrow.parquet as pq

import exporter
from exporter.config import Config
from exporter.deltalog import LogSegment, check_protocol, parse_actions
from exporter.errors import ExporterError, MissingDataFiles, TableNotFound
from exporter.history import deletion_vector_id
from exporter.lakefs import LakeFS
from exporter.logstore import IO_THREADS, LOG_DIR, load_log, read_parquet
from exporter.objectstore import ObjectStore
from exporter.paths import PathResolver, deletion_vector_relative_path
from exporter.rewrite import resize_sidecars, resize_sidecars_json, rewrite_checkpoint, rewrite_commit
from exporter.tables import TableDescriptor, changed_tables, discover_tables

MANIFEST = "_lakefs_export.json"


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

    def summary(self) -> str:
        if not self.ok:
            return f"FAILED  {self.table} ({self.table_path}): {self.error}"
        if self.skipped:
            return f"EXISTS  {self.table} -> {self.location} (already exported)"
        return (f"OK      {self.table} -> {self.location}  versions {self.checkpoint_version if self.checkpoint_version is not None else 0}"
                f"..{self.head_version}, {self.files_rewritten} paths rewritten, {self.lakefs_calls} lakeFS calls, {self.seconds:.2f}s")


def export_location(config: Config, ref: str, commit_id: str, table: str) -> str:
    """Relative to the storage namespace."""
    return f"{config.export_prefix.strip('/')}/{ref}/{commit_id}/{table}/"


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


def missing_exports(config: Config, repository: str, ref: str, commit_id: str, lakefs: LakeFS | None = None) -> list[str]:
    """Names of the tables this commit changed that have no complete export (no manifest) yet."""
    lakefs = lakefs or LakeFS(config.lakefs)
    namespace = lakefs.storage_namespace(repository)
    store = ObjectStore(config, namespace)
    tables = changed_tables(lakefs, repository, commit_id, discover_tables(lakefs, repository, commit_id).tables)
    return [t.name for t in tables
            if not store.exists(export_location(config, ref, commit_id, t.name) + MANIFEST)]


def find_table(lakefs: LakeFS, repository: str, commit_id: str, name: str) -> TableDescriptor:
    for table in discover_tables(lakefs, repository, commit_id).tables:
        if table.name == name:
            return table
    raise TableNotFound(f"no valid descriptor for table {name!r} in _lakefs_tables/ at commit {commit_id}")


def export_table(config: Config, repository: str, ref: str, commit_id: str, table: TableDescriptor,
                 lakefs: LakeFS | None = None) -> ExportOutcome:
    """Export one table; failures come back as an outcome with the reason, never half-marked as done."""
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
        _export(lakefs, store, repository, ref, commit_id, table, target, outcome, started)
        outcome.ok = True
    except ExporterError as exc:
        outcome.error, outcome.permanent = str(exc), exc.permanent
    finally:
        outcome.seconds = time.monotonic() - started
        outcome.lakefs_calls = lakefs.calls - calls_before
    return outcome


def _export(lakefs: LakeFS, store: ObjectStore, repository: str, ref: str, commit_id: str, table: TableDescriptor,
            target: str, outcome: ExportOutcome, started: float) -> None:
    loaded = load_log(lakefs, store, repository, commit_id, table.path)
    segment, addresses, log_files = loaded.segment, loaded.addresses, loaded.files
    read = time.monotonic()

    resolver = PathResolver(addresses)
    outputs: dict[str, bytes] = {}  # name relative to _delta_log/ -> rewritten bytes
    missing: list[str] = []
    rewritten = 0
    checkpoint_rows = 0
    protocol_actions: list[dict] = []
    snapshot = _Snapshot()
    if segment.checkpoint is not None:
        for name in loaded.checkpoint_files:
            raw = log_files[name]
            sidecar_sizes = {posixpath.basename(n): len(b) for n, b in outputs.items() if n.startswith("_sidecars/")}
            if name.endswith(".json"):
                actions = parse_actions(name, raw)
                protocol_actions += [a for a in actions if "protocol" in a or "metaData" in a]
                snapshot.apply(actions)
                result = rewrite_commit(name, raw, resolver)
                outputs[name], count, lost = result.content, result.files_rewritten, result.missing
                if sidecar_sizes and not name.startswith("_sidecars/"):
                    outputs[name] = resize_sidecars_json(outputs[name], sidecar_sizes)
                checkpoint_rows += len(actions)
            else:
                checkpoint = read_parquet(name, raw)
                protocol_actions += _protocol_rows(checkpoint)
                snapshot.apply_checkpoint(checkpoint)
                new_table, count, lost = rewrite_checkpoint(checkpoint, resolver)
                if sidecar_sizes and not name.startswith("_sidecars/"):
                    new_table = resize_sidecars(new_table, sidecar_sizes)
                outputs[name] = _write_parquet(new_table)
                checkpoint_rows += checkpoint.num_rows
            rewritten += count
            missing += lost
    commit_names = ([segment.checkpoint_commit] if segment.checkpoint_commit else []) + [n for _, n in segment.commits]
    for name in commit_names:
        raw = log_files[name]
        actions = parse_actions(name, raw)
        protocol_actions += [a for a in actions if "protocol" in a or "metaData" in a]
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

    checkpoint_files = segment.checkpoint.files if segment.checkpoint else []
    first = {n: b for n, b in outputs.items() if n in checkpoint_files or n.startswith("_sidecars/")}
    then = {n: b for n, b in outputs.items() if n not in first}
    _put_all(store, target + LOG_DIR, first)  # the checkpoint before the commits that follow it
    _put_all(store, target + LOG_DIR, then)
    if segment.checkpoint is not None:
        store.put(target + LOG_DIR + "_last_checkpoint", _last_checkpoint(segment, checkpoint_rows, first),
                  "application/json")

    outcome.checkpoint_version = segment.checkpoint.version if segment.checkpoint else None
    outcome.head_version = segment.head_version
    outcome.versions = len(segment.commits) + (1 if segment.checkpoint else 0)
    outcome.files_rewritten = rewritten
    manifest = {
        "repository": repository, "ref": ref, "commit_id": commit_id, "table": table.name, "table_path": table.path,
        "checkpoint_version": outcome.checkpoint_version, "head_version": segment.head_version,
        "versions": [v for v, _ in segment.commits], "files_rewritten": rewritten,
        "log_files_written": len(outputs), "lakefs_calls": lakefs.calls,
        "timings_seconds": {"list_and_read": round(read - started, 3),
                            "rewrite": round(rewritten_at - read, 3), "write": round(time.monotonic() - rewritten_at, 3)},
        "exporter_version": exporter.__version__,
        "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    store.put(target + MANIFEST, json.dumps(manifest, indent=2).encode(), "application/json")  # last: marks done


class _Snapshot:
    """Which add paths (and deletion-vector files) the head reads. Replayed only when a file is missing."""

    def __init__(self) -> None:
        self.checkpoints: list = []  # parquet checkpoint tables, in order
        self.commits: list[list[dict]] = []  # actions of JSON checkpoints and commits, in log order

    def apply(self, actions: list[dict]) -> None:
        self.commits.append(actions)

    def apply_checkpoint(self, checkpoint) -> None:
        self.checkpoints.append(checkpoint)

    def required(self, missing: list[str]) -> list[str]:
        if not missing:
            return []
        # logical file = (path, deletion vector id), as readers reconcile (PROTOCOL.md#action-reconciliation)
        live: dict[tuple, dict | None] = {}
        for checkpoint in self.checkpoints:
            if "add" in checkpoint.column_names:
                adds = checkpoint.column("add")
                paths = pc.struct_field(adds, "path").to_pylist()
                has_dv = "deletionVector" in {f.name for f in adds.type}
                dvs = pc.struct_field(adds, "deletionVector").to_pylist() if has_dv else [None] * len(paths)
                live.update(((p, deletion_vector_id(dv)), dv) for p, dv in zip(paths, dvs) if p is not None)
        for actions in self.commits:
            for action in actions:
                for kind in ("add", "remove"):
                    file_action = action.get(kind)
                    if isinstance(file_action, dict):
                        key = (file_action.get("path"), deletion_vector_id(file_action.get("deletionVector")))
                        if kind == "add":
                            live[key] = file_action.get("deletionVector")
                        else:
                            live.pop(key, None)
        live_paths = {path for path, _ in live}
        live_dvs = {deletion_vector_relative_path(dv["pathOrInlineDv"]) for dv in live.values()
                    if dv and dv.get("storageType") == "u"}
        return sorted({m for m in missing if m in live_paths or m in live_dvs})



def _put_all(store: ObjectStore, prefix: str, files: dict[str, bytes]) -> None:
    with ThreadPoolExecutor(IO_THREADS) as pool:
        list(pool.map(lambda item: store.put(prefix + item[0], item[1]), files.items()))


def _write_parquet(table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="snappy")
    return sink.getvalue()


def _protocol_rows(checkpoint) -> list[dict]:
    """The checkpoint's protocol and metaData rows, for the feature check."""
    rows: list[dict] = []
    for column in ("protocol", "metaData"):
        if column in checkpoint.column_names:
            rows += [{column: value} for value in checkpoint.column(column).to_pylist() if value is not None]
    for row in rows:
        configuration = row.get("metaData", {}).get("configuration")
        if isinstance(configuration, list):  # parquet maps come back as key/value pairs
            row["metaData"]["configuration"] = dict(configuration)
    return rows


def _last_checkpoint(segment: LogSegment, rows: int, written: dict[str, bytes]) -> bytes:
    """True for the export: sizes of the rewritten files, no checksum (PROTOCOL.md#last-checkpoint-file)."""
    checkpoint = segment.checkpoint
    document = {"version": checkpoint.version, "size": rows,
                "sizeInBytes": sum(len(written[n]) for n in checkpoint.files)}
    if checkpoint.kind == "multipart":
        document["parts"] = len(checkpoint.files)
    return json.dumps(document).encode()
