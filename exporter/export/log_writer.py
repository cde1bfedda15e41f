"""Writing an export's `_delta_log`, in the one order that makes it trustworthy, and its outcome.

Order of writes (`write_log`): the commits (and the checkpoint's other files) together, then the
file that starts the log segment, so no reader sees a table before all of it is written; then
`_last_checkpoint`; and last the manifest `_lakefs_export.json` that marks the export complete.
With `iceberg.enabled` the manifest records the Iceberg table as `pending`: it is written after,
off the export's critical path (`exporter.export.iceberg_metadata.complete_iceberg_metadata`).
`discard_export` undoes it all in the reverse order.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, wait
from dataclasses import dataclass, field

from exporter.delta.log import LAST_CHECKPOINT, LOG_DIR, LogSegment, commit_name
from exporter.export.manifest import ICEBERG, PENDING, ExportManifest
from exporter.iceberg import names
from exporter.storage.layout import MANIFEST, iceberg_location
from exporter.storage.objectstore import ObjectStore
from exporter.threads import IO_THREADS, io_pool


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
    outage: bool = False  # for failures: a service the export needs was down (retried for a time)
    incremental: bool = False  # copied the parent's export and added the new commits
    cold_reason: str = ""  # why the parent's export could not be reused
    iceberg: dict | None = None  # with iceberg.enabled: the Iceberg table's record (`PENDING` until written)
    # log files the export wrote from memory (the new commits), by name under _delta_log/: what its
    # Iceberg step need not read back when it is handed them
    held: dict[str, bytes] = field(default_factory=dict, repr=False)

    def summary(self) -> str:
        if not self.ok:
            return f"FAILED  {self.table} ({self.table_path}): {self.error}"
        if self.skipped:
            return f"EXISTS  {self.table} -> {self.location} (already exported)"
        how = "incremental" if self.incremental else "cold"
        iceberg = "" if self.iceberg is None else f"; Iceberg {self.iceberg['state']}: " + (
            self.iceberg.get("metadata_location") or self.iceberg.get("reason", ""))
        return (f"OK      {self.table} -> {self.location}  versions {self.checkpoint_version if self.checkpoint_version is not None else 0}"
                f"..{self.head_version}, {self.files_rewritten} paths rewritten, {self.lakefs_calls} lakeFS calls, "
                f"{self.seconds:.2f}s ({how}){iceberg}")


def write_log(segment: LogSegment, sidecars: list[str], write: Callable[[str], None],
              still_held: Callable[[], None] | None = None) -> None:
    """Write an exported `_delta_log` so that no reader sees a table until all of it is there.

    Readers (Delta Spark, delta-rs) build a snapshot from a checkpoint or from version 0 and refuse a
    log that has neither below the commits they need. So the file that starts the segment (the
    checkpoint's last part, or `0.json` without a checkpoint) is written last: before it exists every
    read fails (latest, time travel, CDF); once it exists every version is there.
    Commit times: readers without in-commit timestamps take a commit's time from its file's
    modification time. The commits (with a checkpoint, with its sidecars and all parts but the
    last) are written together, in any order, so their times are those of one moment, not of the
    source: Delta Spark, which makes commit times increase (`exporter.delta.actions.after`), takes
    each version's time and 1 ms more where it is not after the previous version's. Without a
    checkpoint they all precede `0.json`, so Spark takes `0.json`'s time (when the export became a
    table) and 1 ms more for each later version. The source's times are in the manifest. (Until
    2026-11-26 commits went one at a time in version order so their own times would increase, and
    without a checkpoint a second time after `0.json`: a request, or a round trip, per version.)
    `write(name)` writes one file (name under `_delta_log/`): a put of new bytes, or a copy.
    `still_held()` (it raises when the writer's lock is no longer its own) runs before that file.
    """
    commits = [n for _, n in segment.commits]
    if segment.checkpoint is None:
        start, before = commits[0], commits[1:]
    else:
        parts = segment.checkpoint.files
        start = parts[-1]  # an incomplete part set is no checkpoint; a V2 checkpoint names its sidecars
        before = ([segment.checkpoint_commit] if segment.checkpoint_commit else []) + commits + sidecars + parts[:-1]
    _write_together(write, before)
    _commit_point(still_held)
    write(start)  # the table exists from here on
    if segment.checkpoint is not None:
        write(LAST_CHECKPOINT)


def _write_together(write: Callable[[str], None], names: list[str]) -> None:
    """`write` each name at once. When one fails, those not started are cancelled and those running
    end before the error is raised, so the discard that follows a failure leaves none behind; an
    exception raised in this thread meanwhile (a task's time limit) stops at once (`io_pool`)."""
    with io_pool(IO_THREADS) as pool:
        futures = [pool.submit(write, name) for name in names]
        wait(futures, return_when=FIRST_EXCEPTION)
        for future in futures:
            future.cancel()  # those not started yet
        wait(futures)
        for future in futures:
            future.result()


def write_manifest(store: ObjectStore, target: str, manifest: ExportManifest, outcome: ExportOutcome, iceberg: bool = False,
                   still_held: Callable[[], None] | None = None) -> ExportManifest:
    """The manifest, written last: it marks the export complete. With `iceberg`, it records the
    Iceberg table as `pending` (in `outcome` too): `complete_iceberg_metadata` writes it after.
    The manifest as written."""
    document = {key: value for key, value in manifest.document.items() if key != ICEBERG}  # a copy's names the other's
    if iceberg:
        outcome.iceberg = document[ICEBERG] = dict(PENDING)
    _commit_point(still_held)
    written = ExportManifest(document)
    written.write(store, target)
    return written


def _commit_point(still_held: Callable[[], None] | None) -> None:
    if still_held is not None:
        still_held()


def discard_export(store: ObjectStore, target: str) -> int:
    """Remove what an export wrote, first the files that make it a table (the Iceberg metadata.json,
    then the manifest and the log's start), so it never reads as one."""
    keys = store.list_keys(target)
    log = target + LOG_DIR
    iceberg_tables = [k for k in keys if names.is_metadata_file(k, iceberg_location(target))]
    store.delete(iceberg_tables)
    starts = [k for k in keys if k == target + MANIFEST or k == log + LAST_CHECKPOINT
              or (k.startswith(log) and (".checkpoint." in k or k.endswith(commit_name(0))))]
    store.delete(starts)
    store.delete([k for k in keys if k not in {*iceberg_tables, *starts}])
    return len(keys)
