"""Which versions of an exported Delta log an Iceberg table can have: a snapshot can name only
objects, so none of a version that names a file lakeFS has no object for (its path stayed relative)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc

from exporter.delta.actions import parse_actions
from exporter.delta.live_files import LiveFiles, SnapshotLog
from exporter.delta.paths import absolute_column, is_absolute, log_path_to_key
from exporter.errors import CorruptLog


class GoneFile(CorruptLog):
    """A version names a file lakeFS has no object for: an Iceberg snapshot can name only objects."""

    def __init__(self, path: str):
        super().__init__(f"the log names {path!r}, which lakeFS holds no object for (vacuumed?): an Iceberg "
                         "snapshot can name only objects")


def first_whole_version(log: SnapshotLog) -> int:
    """The oldest version from which every live file has an object (an absolute path in the export):
    after the last remove of a file whose path stayed relative. The head must be whole."""
    checkpoint = log.segment.checkpoint
    start, gone = (checkpoint.version, _gone_at_checkpoint(log)) if checkpoint else (0, set())
    for version, name in log.segment.commits:
        actions = parse_actions(name, log.raw(name))
        for action in actions:
            if isinstance(action.get("remove"), dict) and log_path_to_key(action["remove"]["path"]) in gone:
                gone.discard(log_path_to_key(action["remove"]["path"]))
                start = version
        gone.update(log_path_to_key(a["add"]["path"]) for a in actions
                    if isinstance(a.get("add"), dict) and not is_absolute(a["add"]["path"]))
    if gone:
        raise GoneFile(sorted(gone)[0])
    return start


def _gone_at_checkpoint(log: SnapshotLog) -> set[str]:
    live = LiveFiles(LogUpTo(log, log.segment.checkpoint.version))
    gone = {log_path_to_key(add["path"]) for add in live.later_files() if not is_absolute(add["path"])}
    for adds in live.checkpoint_batches():
        paths = pc.struct_field(adds, "path")
        gone.update(map(log_path_to_key, paths.filter(pc.invert(absolute_column(paths))).to_pylist()))
    return gone


@dataclass
class LogUpTo:
    """A log read only up to `version`: the checkpoint and the commits up to it."""

    log: SnapshotLog
    version: int
    segment: Any = None

    def __post_init__(self) -> None:
        self.segment = dataclasses.replace(self.log.segment, head_version=self.version, commits=[
            (version, name) for version, name in self.log.segment.commits if version <= self.version])

    def raw(self, name: str) -> bytes:
        return self.log.raw(name)

    def raws(self, names: list[str]) -> Iterator[bytes]:
        return self.log.raws(names)

    def source(self, name: str):
        return self.log.source(name)

    def checkpoint_files(self) -> list[str]:
        return self.log.checkpoint_files()
