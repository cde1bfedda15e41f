"""The folders of a table's files at a commit, as lakeFS paths: what the grant asks lakeFS about
besides the table's `_delta_log/`, since a prefix policy may refuse a folder inside a table (a
partition's). Read from the log at the commit (`exporter.delta.folders`), from its checkpoint on,
once per (repository, commit, table path): a commit never changes."""

from __future__ import annotations

from exporter.delta.actions import parse_actions
from exporter.delta.folders import file_folders
from exporter.errors import TableNotFound
from exporter.kept import Kept
from exporter.lakefs.lake import Lake
from exporter.lakefs.table_log import load_log

TABLES_KEPT = 256  # tables' folder sets kept at most (a full store starts over)


def table_folders(lake: Lake, repository: str, commit_id: str, table_path: str) -> tuple[str, ...]:
    """The lakeFS paths (each ending in `/`) of the folders below the table's root that hold a file
    its log names at the commit, sorted; () when there is no table there. The root itself is not
    one: a policy that refuses it refuses the `_delta_log/` the grant asks about first."""
    store = lake.store(repository)
    try:
        loaded = load_log(lake.lakefs, store, repository, commit_id, table_path, log_only=True)
    except TableNotFound:
        return ()
    checkpoint = [(name, loaded.source(store, name)) for name in loaded.checkpoint_files if name.endswith(".parquet")]
    named = [name for name in loaded.checkpoint_files if name.endswith(".json")]
    named += [name for _, name in loaded.segment.commits]
    actions = [action for name in named for action in parse_actions(name, loaded.files[name])]
    root = table_path.strip("/")
    return tuple(sorted(f"{root}/{folder}/" for folder in file_folders(checkpoint, actions) if folder))


class TableFolders:
    """`table_folders`, kept per (repository, commit id, table path), bounded."""

    def __init__(self, lake: Lake, entries: int = TABLES_KEPT):
        self.lake = lake
        self._kept: Kept[tuple[str, str, str], tuple[str, ...]] = Kept(entries=entries)

    def of(self, repository: str, commit_id: str, table_path: str) -> tuple[str, ...]:
        return self._kept.keep((repository, commit_id, table_path.strip("/")),
                               lambda: table_folders(self.lake, repository, commit_id, table_path))
