"""Which missing data files (and deletion-vector files) the head of a table still reads: an
export refuses a table only for those. One of the replay's processors (see `live_files`).
"""

from __future__ import annotations

import pyarrow.compute as pc

from exporter.delta.deletion_vectors import stored_file, unique_id
from exporter.delta.replay import UNTRACKED, checkpoint_row_groups, reconcile
from exporter.parquet.splice import ParquetSource


class HeadFiles:
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
            return path in lost or stored_file(dv) in lost

        # logical file = (path, deletion vector id), as readers reconcile (PROTOCOL.md#action-reconciliation)
        live: dict[tuple, dict | None] = {}
        for name, source in self.checkpoints:
            for paths, dvs in _checkpoint_adds(name, source):
                live.update(((p, unique_id(dv)), dv) for p, dv in zip(paths, dvs) if names_lost(p, dv))
        for actions in self.commits:
            for action in actions:
                reconcile(live, action, lambda add: add.get("deletionVector")
                          if names_lost(add.get("path"), add.get("deletionVector")) else UNTRACKED)
        live_paths = {path for path, _ in live}
        live_dvs = {stored_file(dv) for dv in live.values()}
        return sorted({m for m in missing if m in live_paths or m in live_dvs})


def _checkpoint_adds(name: str, source: ParquetSource):
    """(paths, deletion vectors) of each row group's `add` column: one row group in memory at a time."""
    for row_group in checkpoint_row_groups(name, source, ["add"]):
        adds = row_group.column("add")
        paths = pc.struct_field(adds, "path").to_pylist()
        has_dv = "deletionVector" in {f.name for f in adds.type}
        yield paths, (pc.struct_field(adds, "deletionVector").to_pylist() if has_dv else [None] * len(paths))
