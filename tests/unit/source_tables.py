"""A source Delta table for unit tests: written by delta-rs in a local folder, each state committed
into a `FakeLakeFS` repository under the table's path, with its `_lakefs_tables/` descriptor."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import deltalake
import pyarrow as pa

from exporter.lakefs.descriptors import TableDescriptor
from tests.fakes import FakeLakeFS


class SourceTable:
    def __init__(self, lakefs: FakeLakeFS, repository: str, name: str, folder: Path, branch: str = "main"):
        self.lakefs, self.repository, self.branch = lakefs, repository, branch
        self.descriptor = TableDescriptor(name, f"tables/{name}", f"_lakefs_tables/{name}.yaml")
        self.folder = folder
        self._committed: dict[str, bytes] = {}  # path in the repository -> bytes committed

    def append(self, *ids: int) -> SourceTable:
        deltalake.write_deltalake(str(self.folder), pa.table({"id": pa.array(ids, pa.int64())}), mode="append")
        return self

    def partitioned(self, *parts: int) -> SourceTable:
        """An append of one row per part, partitioned by `part`: its files live in `part=<n>/`."""
        deltalake.write_deltalake(str(self.folder), pa.table({"id": pa.array(parts, pa.int64()),
                                                               "part": pa.array(parts, pa.int64())}),
                                  mode="append", partition_by=["part"])
        return self

    def checkpoint(self) -> SourceTable:
        deltalake.DeltaTable(str(self.folder)).create_checkpoint()
        return self

    def commit(self, leave_out: Iterable[str] = (), extra: dict[str, bytes | None] | None = None,
               creation_date: int | None = None) -> str:
        """Commit the folder's new and changed files (not those named in `leave_out`, relative to the
        table) and the descriptor, plus `extra` (repository paths: bytes, or None to delete); the id."""
        files = {f"{self.descriptor.prefix}{path.relative_to(self.folder).as_posix()}": path.read_bytes()
                 for path in sorted(self.folder.rglob("*")) if path.is_file()}
        files = {path: raw for path, raw in files.items() if path[len(self.descriptor.prefix):] not in set(leave_out)}
        files[self.descriptor.descriptor] = (f"name: {self.descriptor.name}\ntype: delta\n"
                                             f"path: {self.descriptor.path}\n").encode()
        changed = {path: raw for path, raw in files.items() if self._committed.get(path) != raw}
        changed.update(extra or {})
        for path, raw in changed.items():
            if raw is None:
                self._committed.pop(path, None)
            else:
                self._committed[path] = raw
        return self.lakefs.commit_files(self.repository, self.branch, changed, f"{self.descriptor.name}",
                                        creation_date=creation_date)

    def data_files(self) -> list[str]:
        """The data files committed so far, by repository path, oldest first."""
        return [path for path in self._committed if path.endswith(".parquet") and "/_delta_log/" not in path]
