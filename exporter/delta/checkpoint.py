"""A checkpoint's files (PROTOCOL.md#checkpoints): the parts, and the sidecars V2 checkpoints point at.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping
from urllib.parse import unquote

from exporter.delta.actions import parse_actions
from exporter.delta.log import LOG_DIR, LogSegment
from exporter.errors import CorruptLog
from exporter.parquet.splice import ParquetSource, read_columns


class MissingSidecars(CorruptLog):
    """A checkpoint names sidecars the listing given does not hold."""


def checkpoint_files(addresses: Mapping[str, str], segment: LogSegment, source_of: Callable[[str], ParquetSource]) -> list[str]:
    """The checkpoint's files in write order: the sidecars its parts point at, then the parts.
    `source_of(name)` reads a `_delta_log/` file (in memory, or by ranges from the object store)."""
    sidecars: list[str] = []
    for name in segment.checkpoint.files:  # V2 checkpoints, even classic-named ones, may point at sidecars
        source = source_of(name)
        if name.endswith(".json"):
            paths = [a["sidecar"]["path"] for a in parse_actions(name, source.read_range(0, source.size)) if "sidecar" in a]
        else:
            column = read_columns(source, name, ["sidecar"])
            paths = [row["path"] for row in column.column("sidecar").to_pylist() if row] if column.num_columns else []
        # sidecars always live in the table's own _delta_log/_sidecars/ (PROTOCOL.md#sidecar-files)
        sidecars += ["_sidecars/" + posixpath.basename(unquote(p)) for p in paths]
    absent = [s for s in sidecars if LOG_DIR + s not in addresses]
    if absent:
        raise MissingSidecars(f"V2 checkpoint {segment.checkpoint.files[0]} names sidecar(s) not in the log: "
                              f"{', '.join(absent)}")
    return sidecars + list(segment.checkpoint.files)
