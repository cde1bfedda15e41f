"""A branch table's state, `_lakefs_branch_table.json` beside its `_delta_log/`: its head, the
lakeFS commit each version came from, the table paths its versions read. Read and written here
only; writing it is an append's commit point."""

from __future__ import annotations

import json

from exporter.errors import NotFound
from exporter.storage.layout import STATE
from exporter.storage.objectstore import ObjectStore


def read_state(store: ObjectStore, location: str) -> dict | None:
    """The branch table's state (None: no branch table). One written before `table_paths` was
    recorded holds the versions of its one `table_path`."""
    try:
        state = json.loads(store.get(location + STATE))
    except NotFound:
        return None
    if "table_paths" not in state and "table_path" in state:
        state["table_paths"] = [state["table_path"]]
    return state


def write_state(store: ObjectStore, target: str, state: dict) -> None:
    # compact: with an indent Python's json encodes in Python, not C, and a state names every version
    store.put(target + STATE, json.dumps(state, separators=(",", ":")).encode(), "application/json")


def read_from(state: dict, table_path: str) -> bool:
    """Record `table_path` as the one the next versions are read from: last of `table_paths`
    (each path once, none ever dropped: older versions stay readable) and `table_path`. Whether
    the state changed."""
    if state["table_paths"][-1:] == [table_path]:
        return False
    state.update(table_path=table_path,
                 table_paths=[path for path in state["table_paths"] if path != table_path] + [table_path])
    return True
