"""Reading a `_delta_log/` this exporter wrote (an export, a branch table) back from the object
store: its layout, its files, and the live files of its snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporter.deltalog import LogListing, LogSegment, parse_actions, select_segment
from exporter.logstore import LOG_DIR, checkpoint_files
from exporter.objectstore import ObjectSource, ObjectStore
from exporter.parquet_splice import BytesSource, ParquetSource
from exporter.snapshot import checkpoint_row_groups, reconcile

_MAPS = {"partitionValues", "tags", "configuration", "options"}  # parquet maps read back as (key, value) lists
_DERIVED = {"stats_parsed", "partitionValues_parsed"}  # checkpoint-only columns, not action fields


@dataclass
class ExportedLog:
    """A `_delta_log/` the exporter wrote (an export, a branch table), read from the object store."""

    store: ObjectStore
    location: str
    sizes: dict[str, int]  # name under _delta_log/ -> size
    listing: LogListing
    segment: LogSegment

    def raw(self, name: str) -> bytes:
        return self.store.get(self.location + LOG_DIR + name)

    def source(self, name: str) -> ParquetSource:
        return ObjectSource(self.store, self.store.uri(self.location + LOG_DIR + name), self.sizes[name])

    def checkpoint_files(self) -> list[str]:
        """The checkpoint's files in write order (sidecars first); none without a checkpoint."""
        if self.segment.checkpoint is None:
            return []
        names = {LOG_DIR + name: name for name in self.sizes}
        return checkpoint_files(names, self.segment, lambda name: BytesSource(self.raw(name))
                                if name.endswith(".json") else self.source(name))


def read_exported_log(store: ObjectStore, location: str) -> ExportedLog | None:
    prefix = location + LOG_DIR
    sizes = {key[len(prefix):]: size for key, size in store.list_sizes(prefix).items()}
    if not sizes:
        return None
    listing = LogListing.from_names(sizes.items())
    return ExportedLog(store, location, sizes, listing, select_segment(listing))


@dataclass
class Replayed:
    live: dict[tuple[str, str], dict]  # logical file -> its add action
    metadata: dict | None
    protocol: dict | None
    in_commit_timestamp: int  # the head commit's, 0 without one


def replay(log: ExportedLog) -> Replayed:
    """Every live file of an exported log with its whole add action (the synthetic version needs
    them): memory grows with the table, which only a divergence pays."""
    live: dict[tuple[str, str], dict] = {}
    metadata = protocol = None
    segment = log.segment
    for name in log.checkpoint_files():
        if name.endswith(".json"):
            actions = parse_actions(name, log.raw(name))
        else:
            actions = [{column: row} for group in checkpoint_row_groups(name, log.source(name), ["add", "metaData", "protocol"])
                       for column in group.column_names for row in group.column(column).to_pylist() if row is not None]
        for action in map(_plain, actions):
            metadata = action.get("metaData", metadata)
            protocol = action.get("protocol", protocol)
            reconcile(live, action)
    last: list[dict] = []
    for _, name in segment.commits:
        last = parse_actions(name, log.raw(name))
        for action in map(_plain, last):
            metadata = action.get("metaData", metadata)
            protocol = action.get("protocol", protocol)
            reconcile(live, action)
    timestamps = [a["commitInfo"].get("inCommitTimestamp") for a in last if isinstance(a.get("commitInfo"), dict)]
    return Replayed(live, metadata, protocol, next((t for t in timestamps if isinstance(t, int)), 0))


def _plain(value: Any, name: str = "") -> Any:
    """An action as JSON has it: parquet's absent fields (None) dropped, maps as objects."""
    if name in _MAPS and isinstance(value, list):
        return {k: v for k, v in value}
    if isinstance(value, dict):
        return {k: _plain(v, k) for k, v in value.items() if v is not None and k not in _DERIVED}
    return value


