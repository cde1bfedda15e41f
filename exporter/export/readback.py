"""Reading a `_delta_log/` this exporter wrote (an export, a branch table) back from the object
store: its layout and its files (`exporter.delta.live_files` replays it)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from exporter.delta.checkpoint import checkpoint_files
from exporter.delta.log import LOG_DIR, LogListing, LogSegment, select_segment
from exporter.parquet.splice import BytesSource, ParquetSource
from exporter.storage.objectstore import ObjectSource, ObjectStore
from exporter.threads import prefetched


@dataclass
class ExportedLog:
    """A `_delta_log/` the exporter wrote (an export, a branch table), read from the object store."""

    store: ObjectStore
    location: str
    sizes: dict[str, int]  # name under _delta_log/ -> size
    listing: LogListing
    segment: LogSegment
    held: Mapping[str, bytes] = field(default_factory=dict)  # files whose bytes the reader holds (it wrote them)

    def raw(self, name: str) -> bytes:
        known = self.held.get(name)
        return known if known is not None else self.store.get(self.location + LOG_DIR + name)

    def raws(self, names: list[str]) -> Iterator[bytes]:
        """Those held as they are, without a thread (handing 50 commits held to threads cost a cold
        100,000-file Iceberg step about 8 ms), the others read ahead."""
        if all(name in self.held for name in names):
            return map(self.held.__getitem__, names)
        return prefetched(self.raw, names)

    def source(self, name: str) -> ParquetSource:
        return ObjectSource(self.store, self.store.address(self.location + LOG_DIR + name), self.sizes[name])

    def checkpoint_files(self) -> list[str]:
        """The checkpoint's files in write order (sidecars first); none without a checkpoint."""
        if self.segment.checkpoint is None:
            return []
        names = {LOG_DIR + name: name for name in self.sizes}
        return checkpoint_files(names, self.segment, lambda name: BytesSource(self.raw(name))
                                if name.endswith(".json") else self.source(name))


def read_exported_log(store: ObjectStore, location: str, held: Mapping[str, bytes] = {},
                      files: Mapping[str, int] | None = None) -> ExportedLog | None:
    """The log at `location`, listed, or as `files` names it (its files under `_delta_log/` and their
    sizes, as its export's manifest records them: no listing); `held`: files of it whose bytes the
    caller holds."""
    prefix = location + LOG_DIR
    sizes = dict(files) if files is not None else \
        {key[len(prefix):]: size for key, size in store.list_sizes(prefix).items()}
    if not sizes:
        return None
    listing = LogListing.from_names(sizes.items())
    return ExportedLog(store, location, sizes, listing, select_segment(listing), held)
