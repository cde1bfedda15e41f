"""How a Delta table changed between two refs: its history (like `git log left..right`), schema,
partitioning, properties, protocol, and row/file/byte counts.

Pure logic: the caller replays each ref's `_delta_log` (`exporter.delta.replay`) and hands over a
`TableState` per side; operations are `exporter.diff.operations`, column changes `exporter.diff.schema`.
"""

import json
from typing import Any

from exporter.delta.replay import TableState, files_differing_rows
from exporter.diff.operations import operation
from exporter.diff.schema import schema_changes

# Fields of commitInfo that identify one commit; equal fingerprints at one version = the same commit.
_FINGERPRINT_FIELDS = (
    "timestamp",
    "inCommitTimestamp",
    "operation",
    "operationParameters",
    "operationMetrics",
    "txnId",
    "engineInfo",
)


class _NoBase:
    """The default of `diff_history(base=...)`: no merge base given (unlike None: absent at base)."""

    def __repr__(self) -> str:
        return "NO_BASE"


NO_BASE = _NoBase()


def diff_history(
    left: TableState | None, right: TableState | None, base: TableState | None | _NoBase = NO_BASE
) -> dict:
    """What right (topic) has that left (base branch) has not, as a JSON-serialisable dict.

    `results` holds right's commits that are not on left, newest first. A right commit is on left
    when left is the same table (`same_table`) and its history has the same version with an equal
    fingerprint (timestamp, operation, operationParameters, operationMetrics, txnId, engineInfo;
    for a commit without commitInfo, a digest of its actions). Delta logs are chains, so the highest
    version matched this way — or `base.version` when `base` is given, is the same table and agrees
    with right — is where the two sides diverged: right versions at or below it that left no longer
    lists (its old JSON commits cleaned up) are taken as shared; right versions above it are
    reported. A table dropped and created again at the same path shares no version with the old
    one, whatever their numbers: all of right's versions are reported.

    `history_truncated` is True when the report may be incomplete or overstated:
    - right's history lacks a version above the divergence point (cleaned-up JSON commits, or a
      gap), so some of right's operations cannot be listed; or
    - nothing shows where the sides diverged (no version matched, no usable `base`) while some
      reported right version is older than left's earliest listed version: left may well hold that
      commit, its history just no longer shows it. Pass `base` (the merge base) to settle this.

    `base` is the table at the merge base of the two refs: leave it out when unknown, pass None when
    the table did not exist there.

    `diff_type`: "created" when right has the table and left (or, when given, base) has not;
    "dropped" when left has it and right has not; "replaced" when both have a table there but not
    the same one (`table_ids` tells them apart); "changed" when anything reported differs; "none"
    otherwise, including when neither side has the table. An absent side compares as an empty
    table: its schema, properties and protocol are empty, its counts None.
    """
    fork = _divergence_version(left, right, base)
    results = _operations_not_on_left(left, right, fork)
    diff: dict[str, Any] = {
        "results": results,
        "history_truncated": _history_truncated(left, right, fork, results),
        "schema_changes": schema_changes(left, right),
        "partition_columns": _changed_pair(_partition_columns(left), _partition_columns(right)),
        "properties_changed": _properties_changed(left, right),
        "protocol_changed": _changed_pair(left.protocol if left else None, right.protocol if right else None),
        "row_count": _row_count(left, right),
        "files": {"left": _files(left), "right": _files(right)},
        "versions": {"left": _version(left), "right": _version(right), "base": _version(_given(base))},
        "table_ids": {"left": left.table_id if left else None, "right": right.table_id if right else None},
    }
    diff["diff_type"] = _diff_type(left, right, base, diff)
    return diff


def _given(base: TableState | None | _NoBase) -> TableState | None:
    return base if isinstance(base, TableState) else None


def _version(state: TableState | None) -> int | None:
    return state.version if state else None


def _diff_type(
    left: TableState | None, right: TableState | None, base: TableState | None | _NoBase, diff: dict
) -> str:
    if right is None:
        return "dropped" if left is not None else "none"
    if left is None or base is None:
        return "created"
    if not same_table(left, right):
        return "replaced"
    changed = (
        diff["results"]
        or diff["schema_changes"]
        or diff["partition_columns"]
        or diff["properties_changed"]
        or diff["protocol_changed"]
        or diff["row_count"]["left"] != diff["row_count"]["right"]
        or diff["files"]["left"] != diff["files"]["right"]
        or left.version != right.version
    )
    return "changed" if changed else "none"


def _fingerprint(state: TableState, version: int) -> Any:
    """What identifies the commit at `version`; None when nothing does."""
    info = state.history.get(version)
    if info is None:
        return state.commit_digests.get(version)
    return tuple(json.dumps(info.get(name), sort_keys=True, default=str) for name in _FINGERPRINT_FIELDS)


def same_table(one: TableState, other: TableState) -> bool:
    """Two states of one table, not two tables that took turns at one path: metaData.id names a
    table for its whole life (PROTOCOL.md#change-metadata). A log without one is taken to be the same."""
    return one.table_id is None or other.table_id is None or one.table_id == other.table_id


def _same_commit(one: TableState, other: TableState, version: int) -> bool:
    if version not in one.history or version not in other.history:
        return False
    fingerprint = _fingerprint(one, version)
    return fingerprint is not None and fingerprint == _fingerprint(other, version)


def _divergence_version(
    left: TableState | None, right: TableState | None, base: TableState | None | _NoBase
) -> int:
    """The highest version right shares with left; -1 when none is known to be shared."""
    if left is None or right is None or not same_table(left, right):
        return -1
    shared = [version for version in right.history if _same_commit(left, right, version)]
    fork = max(shared, default=-1)
    if isinstance(base, TableState) and _base_precedes(base, right):
        fork = max(fork, base.version)
    return fork


def _base_precedes(base: TableState, right: TableState) -> bool:
    """Base's head is in right's past, as far as right's history can tell."""
    if base.version > right.version or not same_table(base, right):
        return False
    if base.version in base.history and base.version in right.history:
        return _fingerprint(base, base.version) == _fingerprint(right, base.version)
    return True


def _operations_not_on_left(left: TableState | None, right: TableState | None, fork: int) -> list[dict]:
    if right is None:
        return []
    reported = []
    for version in sorted(right.history, reverse=True):
        # At or below the fork a version counts as shared unless left lists it with other content.
        if version > fork or (left is not None and version in left.history and _differs(left, right, version)):
            reported.append(operation(version, right.history[version]))
    return reported


def _differs(left: TableState, right: TableState, version: int) -> bool:
    return _fingerprint(left, version) != _fingerprint(right, version)


def _history_truncated(left: TableState | None, right: TableState | None, fork: int, results: list[dict]) -> bool:
    if right is None:
        return False
    listed_after_fork = sum(1 for version in right.history if fork < version <= right.version)
    if listed_after_fork < right.version - fork:
        return True
    if left is None or fork >= 0 or not same_table(left, right):
        return False  # another table's log tells nothing about right's versions
    return any(int(result["id"]) < left.earliest_version for result in results)


def _changed_pair(left: Any, right: Any) -> dict | None:
    return None if left == right else {"left": left, "right": right}


def _partition_columns(state: TableState | None) -> list[str] | None:
    return state.partition_columns if state else None


def _properties_changed(left: TableState | None, right: TableState | None) -> dict[str, dict]:
    left_properties = left.properties if left else {}
    right_properties = right.properties if right else {}
    return {
        key: {"left": left_properties.get(key), "right": right_properties.get(key)}
        for key in sorted({*left_properties, *right_properties})
        if left_properties.get(key) != right_properties.get(key)
    }


def _row_count(left: TableState | None, right: TableState | None) -> dict:
    """Each side's rows and the difference; and the rows in the files only one side has (at most
    the rows the change removes, and adds: `files_differing_rows`), None when the logs cannot tell."""
    left_rows = left.num_rows if left else None
    right_rows = right.num_rows if right else None
    difference = None if left_rows is None or right_rows is None else right_rows - left_rows
    if left and right:
        in_removed, in_added = files_differing_rows(left, right)
    else:  # one side has no table: all of the other's rows are the change's
        in_removed, in_added = (left_rows if left else 0), (right_rows if right else 0)
    return {"left": left_rows, "right": right_rows, "difference": difference,
            "in_files_removed": in_removed, "in_files_added": in_added}


def _files(state: TableState | None) -> dict | None:
    return {"count": state.num_files, "bytes": state.size_bytes} if state else None
