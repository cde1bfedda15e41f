"""Delta operations as the history diff shows them: one entry per commit, typed create/update/delete."""

from collections.abc import Mapping
from typing import Any, Literal

from exporter.delta.actions import in_commit_timestamp

_NOT_CONTENT = ("operation", "timestamp")  # shown as fields of their own in a result
OperationType = Literal["create", "update", "delete", "unknown"]
# Names from delta-io/delta DeltaOperations.scala and delta-rs DeltaOperation::name().
_OPERATION_TYPES: dict[str, OperationType] = {
    **dict.fromkeys(
        (
            "CREATE TABLE",
            "CREATE TABLE AS SELECT",
            "CREATE OR REPLACE TABLE",
            "CREATE OR REPLACE TABLE AS SELECT",
            "REPLACE TABLE",
            "REPLACE TABLE AS SELECT",
            "CREATE TABLE LIKE",
            "CLONE",
            "SHALLOW CLONE",
            "DEEP CLONE",
            "CONVERT",
        ),
        "create",
    ),
    **dict.fromkeys(
        (
            "WRITE",
            "COPY INTO",
            "STREAMING UPDATE",
            "MERGE",
            "UPDATE",
            "OPTIMIZE",
            "REORG",
            "REORG TABLE UPGRADE UNIFORM",
            "ADD COLUMN",
            "ADD COLUMNS",
            "CHANGE COLUMN",
            "CHANGE COLUMNS",
            "RENAME COLUMN",
            "REPLACE COLUMNS",
            "DROP COLUMNS",
            "UPDATE SCHEMA",
            "UPDATE COLUMN METADATA",
            "UPDATE FIELD METADATA",
            "UPDATE TABLE METADATA",
            "SET TBLPROPERTIES",
            "UNSET TBLPROPERTIES",
            "ADD CONSTRAINT",
            "DROP CONSTRAINT",
            "ADD FEATURE",
            "DROP FEATURE",
            "UPGRADE PROTOCOL",
            "ADD DELETION VECTORS TOMBSTONES",
            "REMOVE COLUMN MAPPING",  # rewrites files under logical names: no row is deleted
            "COMPUTE STATS",
            "CLUSTER BY",
            "ROW TRACKING BACKFILL",
            "DOMAIN METADATA CLEANUP",
            "RESTORE",
            "MANUAL UPDATE",
            "EMPTY COMMIT",
        ),
        "update",
    ),
    # FSCK (delta-rs) only removes adds whose objects are gone: its one effect is fewer rows.
    **dict.fromkeys(("DELETE", "TRUNCATE", "VACUUM START", "VACUUM END", "FSCK"), "delete"),
}


def operation(version: int, commit_info: dict | None) -> dict:
    """One entry of `results`: a commit as lakeFS's OTF diff showed it, timestamps in exact ms."""
    if commit_info is None:
        return {
            "id": str(version),
            "timestamp": None,
            "operation": "UNKNOWN",
            "operation_content": {},
            "operation_type": "unknown",
        }
    name = commit_info.get("operation")
    name = name if isinstance(name, str) and name else "UNKNOWN"
    return {
        "id": str(version),
        "timestamp": _timestamp(commit_info),
        "operation": name,
        "operation_content": {key: value for key, value in commit_info.items() if key not in _NOT_CONTENT},
        "operation_type": operation_type(name),
    }


def operation_type(name: str) -> OperationType:
    """create / update / delete for the Delta Spark and delta-rs operation names; anything else unknown."""
    return _OPERATION_TYPES.get(" ".join(name.upper().split()), "unknown")


def _timestamp(commit_info: Mapping[str, Any]) -> int | None:
    """When the commit happened: its in-commit timestamp (the one rule, `exporter.delta.actions`),
    else the writer's `commitInfo.timestamp`."""
    value = in_commit_timestamp([{"commitInfo": commit_info}])
    if value is None:
        value = commit_info.get("timestamp")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None
