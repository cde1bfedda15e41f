"""Incremental export: a commit reuses its first parent's complete export of the table.

When the table only gained objects since the parent (new data files, new JSON commits; no new
checkpoint, nothing removed or overwritten), every file of the parent's export is exactly what a
cold export of this commit would write, since each path resolves to the same physical address. So
those files are copied server-side (no bytes through this process), and only the new commits are
read and rewritten, their paths resolved one lakeFS stat each. Anything else falls back to the
cold export, with the reason in the manifest.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

from exporter.delta.actions import check_protocol, commit_timestamp, increasing, parse_actions
from exporter.delta.head_files import HeadFiles
from exporter.delta.log import LAST_CHECKPOINT, LOG_DIR, LogListing, select_segment
from exporter.errors import MissingDataFiles, NotFound
from exporter.export.job import ExportJob
from exporter.export.log_writer import discard_export, write_log
from exporter.export.manifest import LOG_FILES, ExportManifest
from exporter.export.resolve import PathResolver
from exporter.export.rewrite import rewrite_commit
from exporter.lakefs.client import LakeFS
from exporter.lakefs.descriptors import changes_under
from exporter.lakefs.gateway_paths import LakeFSPaths
from exporter.lakefs.table_log import list_log, read_log_files
from exporter.storage.layout import MANIFEST
from exporter.storage.objectstore import ObjectStore

MAX_STATS = 200  # paths resolved one call each; beyond this a cold export's listing costs fewer calls


class ColdExportNeeded(Exception):
    """Why the parent's export cannot be reused."""


class _StatAddresses:
    """Physical addresses looked up one object at a time, for the few paths of new commits."""

    def __init__(self, lakefs: LakeFS, repository: str, commit_id: str, prefix: str):
        self.lakefs, self.repository, self.commit_id, self.prefix = lakefs, repository, commit_id, prefix
        self.found: dict[str, str | None] = {}

    def get(self, key: str) -> str | None:
        if key not in self.found:
            if len(self.found) >= MAX_STATS:
                raise ColdExportNeeded(f"the new commits name more than {MAX_STATS} files")
            self.found[key] = self.lakefs.physical_address(self.repository, self.commit_id, self.prefix + key)
        return self.found[key]

    def get_many(self, keys: list[str | None]) -> list[str | None]:
        return [None if key is None else self.get(key) for key in keys]


@contextmanager
def _source_kept(store: ObjectStore, source: str, target: str) -> Iterator[None]:
    """Copies from another export, which prune may remove meanwhile (it holds that export's lock, not
    this one's): a source gone mid-copy means a cold export, what was copied removed first."""
    try:
        yield
    except NotFound:
        if store.exists(source + MANIFEST):
            raise  # the source is there: something else is missing
        discard_export(store, target)
        raise ColdExportNeeded(f"the export it was copied from, {store.uri(source)}, was removed meanwhile") from None


def copy_export(job: ExportJob, from_ref: str) -> None:
    """The same commit's complete export under another ref (a tag on an exported commit), copied
    server-side in the fail-closed write order; or ColdExportNeeded before anything is written."""
    store, target, outcome = job.store, job.target, job.outcome
    source = job.location(from_ref, job.commit_id)
    try:
        manifest = ExportManifest.read(store, source)
    except NotFound:
        raise ColdExportNeeded(f"no complete export of this commit under {from_ref!r}") from None
    if (why := manifest.not_reusable_for(job.table.path)) is not None:
        raise ColdExportNeeded(f"the export under {from_ref!r} cannot be copied: {why}")
    sizes = {key[len(source + LOG_DIR):]: size for key, size in store.list_sizes(source + LOG_DIR).items()}
    names = list(sizes)
    segment = select_segment(LogListing.from_names((name, 0) for name in names))
    with _source_kept(store, source, target):
        write_log(segment, [n for n in names if n.startswith("_sidecars/")],
                  lambda name: store.copy(source + LOG_DIR + name, target + LOG_DIR + name), job.still_held)
    job.report("log copied", len(names), len(names), "files")
    outcome.checkpoint_version, outcome.head_version = manifest.checkpoint_version, manifest.head_version
    outcome.files_rewritten = manifest.files_rewritten
    job.complete(manifest.changed(ref=job.ref, location=outcome.location, derived_from=store.uri(source),
                                  exported_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                  **{LOG_FILES: dict(sorted(sizes.items()))}),
                 derived_from=(source, manifest))


def _parent_export(job: ExportJob) -> tuple[str, ExportManifest]:
    """The parent's complete export of the table (its folder and manifest) when this commit only
    added objects under the table since; else ColdExportNeeded saying why."""
    if job.known is not None:  # handed over by the task that chose the tables: not asked again
        parent_id, changes = job.known.parent, job.known.changes
    else:
        commit = job.lakefs.commit(job.repository, job.commit_id)
        if not commit.parents:
            raise ColdExportNeeded("the commit has no parent")
        parent_id = commit.parents[0]
        changes = changes_under(job.lakefs, job.repository, parent_id, commit.id, job.table.prefix)
    source = job.location(job.ref, parent_id)
    try:
        parent = ExportManifest.read(job.store, source)
    except NotFound:
        raise ColdExportNeeded("the parent commit has no complete export under this ref") from None
    if (why := parent.not_reusable_for(job.table.path)) is not None:
        raise ColdExportNeeded(f"the parent's export cannot be built on: {why}")
    for change in changes:
        if change.get("type") != "added":
            raise ColdExportNeeded(f"{change['path']} was {change.get('type')} since the parent")
        if change["path"] == job.table.prefix + LOG_DIR + LAST_CHECKPOINT:
            raise ColdExportNeeded("the table gained a _last_checkpoint since the parent")
    return source, parent


def export_incrementally(job: ExportJob) -> None:
    """Export from the parent's export, or raise ColdExportNeeded (before anything is written)."""
    lakefs, store, table, outcome = job.lakefs, job.store, job.table, job.outcome
    source, parent = _parent_export(job)
    layout = list_log(lakefs, store, job.repository, job.commit_id, table.path, log_only=True)
    segment = layout.segment
    checkpoint_version = segment.checkpoint.version if segment.checkpoint else None
    if checkpoint_version != parent.checkpoint_version:
        raise ColdExportNeeded(f"a new checkpoint (version {checkpoint_version}) since the parent")
    new = [(version, name) for version, name in segment.commits if version > parent.head_version]
    read = time.monotonic()

    raw = read_log_files(store, layout.addresses, [name for _, name in new])
    resolver = PathResolver(_StatAddresses(lakefs, job.repository, job.commit_id, table.prefix),
                            LakeFSPaths(lakefs, store.bucket))
    outputs: dict[str, bytes] = {}
    protocol_actions, missing, rewritten = [], [], 0
    snapshot = HeadFiles()
    timestamps = parent.source_timestamps
    done = job.counter("commits rewritten", len(new), "versions")
    for version, name in new:
        actions = parse_actions(name, raw[name])
        protocol_actions += [a for a in actions if "protocol" in a or "metaData" in a]
        timestamps[version] = commit_timestamp(actions, layout.modification_times.get(name, 0) * 1000)
        result = rewrite_commit(name, raw[name], resolver)
        outputs[name] = result.content
        rewritten += result.files_rewritten
        missing += result.missing
        snapshot.apply(actions)
        done(1)
    timestamps = increasing(timestamps)  # the parent's are Delta's commit times already: the new ones follow them
    check_protocol(protocol_actions)
    required = snapshot.required(missing)  # adds the new commits make live; older ones existed at the parent
    if required:
        raise MissingDataFiles(table.name, required)
    rewritten_at = time.monotonic()

    sidecars = [key[len(source + LOG_DIR):] for key in store.list_keys(source + LOG_DIR + "_sidecars/")] \
        if checkpoint_version is not None else []  # only a checkpoint has sidecars
    log = job.target + LOG_DIR

    def write(name: str) -> None:
        if name in outputs:
            store.put(log + name, outputs[name])
        else:
            store.copy(source + LOG_DIR + name, log + name)

    with _source_kept(store, source, job.target):
        write_log(segment, sidecars, write, job.still_held)
    written = len(segment.commits) + len(sidecars) + (
        len(segment.checkpoint.files) + 1 + (1 if segment.checkpoint_commit else 0) if segment.checkpoint else 0)
    job.report("log written", written, written, "files")
    outcome.checkpoint_version, outcome.head_version = checkpoint_version, segment.head_version
    outcome.versions = len(new)
    outcome.files_rewritten = rewritten
    job.complete(job.manifest(segment, timestamps, log_files_written=written, read_at=read, rewritten_at=rewritten_at,
                              derived_from=store.uri(source), log_files=_log_files(parent, outputs, written)),
                 derived_from=(source, parent), held=outputs)


def _log_files(parent: ExportManifest, outputs: dict[str, bytes], written: int) -> dict[str, int] | None:
    """The export's log files and sizes: the new commits' (`outputs`) and the copies' as the
    parent's manifest records them; None when it records none, or not `written` files in all."""
    if parent.log_files is None:
        return None
    files = {**parent.log_files, **{name: len(raw) for name, raw in outputs.items()}}
    return files if len(files) == written else None
