"""How a Delta table changed between two refs: its history (like `git log left..right`), schema,
partitioning, properties, protocol, and row/file/byte counts.

Pure logic: the caller reads each ref's `_delta_log` and hands over a `TableLog` per side.
Replay follows PROTOCOL.md#action-reconciliation; row counts come from `add.stats` numRecords
minus deletion-vector cardinality, and are unknown (None) rather than guessed.
"""

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from exporter.errors import CorruptLog

MAX_PER_PAGE = 1000
_COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
_COLUMN_MAPPING_ID = "delta.columnMapping.id"
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


@dataclass
class TableLog:
    checkpoint_version: int | None  # version of the checkpoint the log starts from, None if read from version 0
    checkpoint: list[pa.Table]  # parquet checkpoint parts / sidecars as read by pyarrow (may be empty)
    checkpoint_actions: list[dict]  # actions from JSON (V2) checkpoints, if any
    commits: list[tuple[int, list[dict]]]  # (version, actions) for every JSON commit available, ascending


@dataclass
class TableState:
    version: int  # head version
    earliest_version: int  # first version whose commitInfo is available
    history: dict[int, dict | None]  # version -> commitInfo, None when that commit has none
    schema: dict  # parsed metaData.schemaString
    partition_columns: list[str]
    properties: dict[str, str]  # metaData.configuration
    protocol: dict  # minReaderVersion, minWriterVersion, readerFeatures, writerFeatures
    num_files: int
    size_bytes: int
    num_rows: int | None  # None when any live add lacks numRecords: never guessed
    # version -> digest of its actions, for commits without commitInfo only: the content to match on.
    commit_digests: dict[int, str] = field(default_factory=dict)


# The first key of a stats object, so unambiguous: a nested "numRecords" (a column's name) is never first.
_LEADING_NUM_RECORDS = r'^\s*\{\s*"numRecords"\s*:\s*(?P<records>\d+)\s*[,}]'
# (deletion-vector unique id, size, stats JSON or numRecords already known, deletion-vector cardinality)
_LiveFile = tuple[str, int, str | int | None, int]


# ---------------------------------------------------------------- replay


def snapshot_state(log: TableLog) -> TableState:
    """Replay a table's log into its state at the head version; CorruptLog when it cannot be replayed."""
    commits = _ordered_commits(log.commits)
    head = max([*commits, *([log.checkpoint_version] if log.checkpoint_version is not None else [])], default=None)
    if head is None:
        raise CorruptLog("the table log has no checkpoint and no commit")
    replayed = _replayed_versions(commits, log.checkpoint_version, head)

    live = _checkpoint_files(log.checkpoint)
    metadata = _checkpoint_action(log.checkpoint, "metaData")
    protocol = _checkpoint_action(log.checkpoint, "protocol")
    for action in log.checkpoint_actions:
        metadata, protocol = _apply(action, live, metadata, protocol)
    for version in replayed:
        for action in commits[version]:
            metadata, protocol = _apply(action, live, metadata, protocol)

    if metadata is None:
        raise CorruptLog(f"no metaData action in the log up to version {head}")
    if protocol is None:
        raise CorruptLog(f"no protocol action in the log up to version {head}")
    history = {version: _commit_info(actions) for version, actions in commits.items()}
    return TableState(
        version=head,
        earliest_version=min(commits) if commits else head,
        history=history,
        schema=_schema(metadata),
        partition_columns=list(metadata.get("partitionColumns") or []),
        properties=_configuration(metadata.get("configuration")),
        protocol=_protocol(protocol),
        num_files=len(live),
        size_bytes=sum(live_file[1] for live_file in live.values()),
        num_rows=_num_rows(live.values()),
        commit_digests={version: _digest(commits[version]) for version, info in history.items() if info is None},
    )


def _ordered_commits(commits: Iterable[tuple[int, list[dict]]]) -> dict[int, list[dict]]:
    ordered: dict[int, list[dict]] = {}
    for version, actions in sorted(commits, key=lambda commit: commit[0]):
        if version in ordered:
            raise CorruptLog(f"commit version {version} appears twice in the table log")
        ordered[version] = actions
    return ordered


def _replayed_versions(commits: Mapping[int, list[dict]], checkpoint_version: int | None, head: int) -> range:
    """Versions whose actions add to the checkpoint; all of them must be there."""
    first = 0 if checkpoint_version is None else checkpoint_version + 1
    missing = [version for version in range(first, head + 1) if version not in commits]
    if missing:
        since = "version 0" if checkpoint_version is None else f"checkpoint {checkpoint_version}"
        shown = ", ".join(map(str, missing[:20])) + (" ..." if len(missing) > 20 else "")
        raise CorruptLog(f"commit(s) {shown} missing between {since} and head version {head}: cannot replay")
    return range(first, head + 1)


def _apply(
    action: Mapping[str, Any], live: dict[str, _LiveFile], metadata: dict | None, protocol: dict | None
) -> tuple[dict | None, dict | None]:
    """Apply one action to the live files; return the newest metaData and protocol."""
    if isinstance(add := action.get("add"), Mapping):
        # Adds are unique by path: the newest (path, dvId) wins (PROTOCOL.md#action-reconciliation).
        deletion_vector = add.get("deletionVector")
        live[_path(add, "add")] = (
            deletion_vector_id(deletion_vector),
            int(add.get("size") or 0),
            add.get("stats"),
            int((deletion_vector or {}).get("cardinality") or 0),
        )
    elif isinstance(remove := action.get("remove"), Mapping):
        path = _path(remove, "remove")
        current = live.get(path)
        if current is not None and current[0] == deletion_vector_id(remove.get("deletionVector")):
            del live[path]
    elif isinstance(new_metadata := action.get("metaData"), Mapping):
        metadata = dict(new_metadata)
    elif isinstance(new_protocol := action.get("protocol"), Mapping):
        protocol = dict(new_protocol)
    return metadata, protocol


def _path(file_action: Mapping[str, Any], kind: str) -> str:
    path = file_action.get("path")
    if not isinstance(path, str):
        raise CorruptLog(f"an {kind} action has no path: {json.dumps(file_action, default=str)[:200]}")
    return path


def deletion_vector_id(deletion_vector: Mapping[str, Any] | None) -> str:
    """PROTOCOL.md#deletion-vector-descriptor-schema uniqueId; "" for a file without one."""
    if not deletion_vector:
        return ""
    offset = deletion_vector.get("offset")
    suffix = "" if offset is None else f"@{offset}"
    return f"{deletion_vector.get('storageType', '')}{deletion_vector.get('pathOrInlineDv', '')}{suffix}"


def _checkpoint_files(tables: Iterable[pa.Table]) -> dict[str, _LiveFile]:
    """The checkpoint's adds (already reconciled), read column by column."""
    live: dict[str, _LiveFile] = {}
    for table in tables:
        if "add" not in table.column_names:
            continue
        adds = table.column("add")
        adds = adds.filter(adds.is_valid())
        if len(adds):
            live.update(_add_columns(adds))
    return live


def _add_columns(adds: pa.ChunkedArray) -> Iterable[tuple[str, _LiveFile]]:
    fields = {add_field.name for add_field in adds.type}
    count = len(adds)
    paths = pc.struct_field(adds, "path").to_pylist()
    sizes = pc.fill_null(pc.struct_field(adds, "size"), 0).to_pylist()
    stats = _records_or_stats(pc.struct_field(adds, "stats")) if "stats" in fields else [None] * count
    if "stats_parsed" in fields:
        stats = _with_parsed_records(stats, pc.struct_field(adds, "stats_parsed"))
    if "deletionVector" in fields:
        deletion_vectors = pc.struct_field(adds, "deletionVector")
        unique_ids = _deletion_vector_ids(deletion_vectors)
        cardinalities = pc.fill_null(pc.struct_field(deletion_vectors, "cardinality"), 0).to_pylist()
    else:
        unique_ids, cardinalities = [""] * count, [0] * count
    return zip(paths, zip(unique_ids, sizes, stats, cardinalities))


def _records_or_stats(stats: pa.ChunkedArray) -> list[str | int | None]:
    """numRecords read without parsing JSON where it is the first key (as writers put it), else the JSON."""
    matched = pc.extract_regex(stats, _LEADING_NUM_RECORDS)  # null where it is not first, or no stats
    records = pc.cast(pc.struct_field(matched, "records"), pa.int64())
    unmatched = pc.if_else(pc.is_null(records), stats, pa.scalar(None, stats.type)).to_pylist()
    return [json_stats if known is None else known for known, json_stats in zip(records.to_pylist(), unmatched)]


def _with_parsed_records(stats: list[str | int | None], stats_parsed: pa.ChunkedArray) -> list[str | int | None]:
    """Checkpoints may carry stats only as a struct (`delta.checkpoint.writeStatsAsJson=false`)."""
    if "numRecords" not in {stats_field.name for stats_field in stats_parsed.type}:
        return list(stats)
    records = pc.struct_field(stats_parsed, "numRecords").to_pylist()
    return [json_stats if json_stats is not None else count for json_stats, count in zip(stats, records)]


def _deletion_vector_ids(deletion_vectors: pa.ChunkedArray) -> list[str]:
    """Vectorised `deletion_vector_id`: storageType + pathOrInlineDv [+ "@" + offset]."""
    names = {dv_field.name for dv_field in deletion_vectors.type}
    storage = pc.struct_field(deletion_vectors, "storageType")
    location = pc.struct_field(deletion_vectors, "pathOrInlineDv")
    suffix = pa.scalar("")
    if "offset" in names:
        offset = pc.cast(pc.struct_field(deletion_vectors, "offset"), pa.string())
        suffix = pc.fill_null(pc.binary_join_element_wise("@", offset, ""), "")
    return pc.fill_null(pc.binary_join_element_wise(storage, location, suffix, ""), "").to_pylist()


def _checkpoint_action(tables: Iterable[pa.Table], column: str) -> dict | None:
    for table in tables:
        if column in table.column_names:
            values = table.column(column)
            values = values.filter(values.is_valid())
            if len(values):
                return values[0].as_py()
    return None


def _commit_info(actions: Iterable[Mapping[str, Any]]) -> dict | None:
    for action in actions:
        if isinstance(info := action.get("commitInfo"), dict):
            return info
    return None


def _digest(actions: list[dict]) -> str:
    return hashlib.sha256(json.dumps(actions, sort_keys=True, default=str).encode()).hexdigest()


def _schema(metadata: Mapping[str, Any]) -> dict:
    try:
        schema = json.loads(metadata.get("schemaString") or "")
    except ValueError as error:
        raise CorruptLog(f"metaData.schemaString is not valid JSON ({error})") from error
    if not isinstance(schema, dict):
        raise CorruptLog("metaData.schemaString is not a JSON object")
    return schema


def _configuration(configuration: Any) -> dict[str, str]:
    """A map as JSON gives it (dict) or as pyarrow gives it (list of (key, value) pairs)."""
    if not configuration:
        return {}
    return dict(configuration.items() if isinstance(configuration, Mapping) else configuration)


def _protocol(protocol: Mapping[str, Any]) -> dict:
    def features(name: str) -> list[str] | None:
        value = protocol.get(name)
        return None if value is None else sorted(value)

    return {
        "minReaderVersion": protocol.get("minReaderVersion"),
        "minWriterVersion": protocol.get("minWriterVersion"),
        "readerFeatures": features("readerFeatures"),
        "writerFeatures": features("writerFeatures"),
    }


def _num_rows(live_files: Iterable[_LiveFile]) -> int | None:
    total = 0
    for _, _, stats, cardinality in live_files:
        records = _num_records(stats)
        if records is None:
            return None
        total += records - cardinality
    return total


def _num_records(stats: str | int | None) -> int | None:
    if stats is None or isinstance(stats, int):
        return stats
    try:
        records = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):  # unparseable or not an object: unknown, not an error
        return None
    return records if isinstance(records, int) and not isinstance(records, bool) else None


# ---------------------------------------------------------------- diff


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
    when left's history has the same version with an equal fingerprint (timestamp, operation,
    operationParameters, operationMetrics, txnId, engineInfo; for a commit without commitInfo, a
    digest of its actions). Delta logs are chains, so the highest version matched this way — or
    `base.version` when `base` is given and agrees with right — is where the two sides diverged:
    right versions at or below it that left no longer lists (its old JSON commits cleaned up) are
    taken as shared; right versions above it are reported.

    `history_truncated` is True when the report may be incomplete or overstated:
    - right's history lacks a version above the divergence point (cleaned-up JSON commits, or a
      gap), so some of right's operations cannot be listed; or
    - nothing shows where the sides diverged (no version matched, no usable `base`) while some
      reported right version is older than left's earliest listed version: left may well hold that
      commit, its history just no longer shows it. Pass `base` (the merge base) to settle this.

    `base` is the table at the merge base of the two refs: leave it out when unknown, pass None when
    the table did not exist there.

    `diff_type`: "created" when right has the table and left (or, when given, base) has not;
    "dropped" when left has it and right has not; "changed" when anything reported differs;
    "none" otherwise, including when neither side has the table. An absent side compares as an
    empty table: its schema, properties and protocol are empty, its counts None.
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


def _same_commit(one: TableState, other: TableState, version: int) -> bool:
    if version not in one.history or version not in other.history:
        return False
    fingerprint = _fingerprint(one, version)
    return fingerprint is not None and fingerprint == _fingerprint(other, version)


def _divergence_version(
    left: TableState | None, right: TableState | None, base: TableState | None | _NoBase
) -> int:
    """The highest version right shares with left; -1 when none is known to be shared."""
    if left is None or right is None:
        return -1
    shared = [version for version in right.history if _same_commit(left, right, version)]
    fork = max(shared, default=-1)
    if isinstance(base, TableState) and _base_precedes(base, right):
        fork = max(fork, base.version)
    return fork


def _base_precedes(base: TableState, right: TableState) -> bool:
    """Base's head is in right's past, as far as right's history can tell."""
    if base.version > right.version:
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
    if left is None or fork >= 0:
        return False
    return any(int(result["id"]) < left.earliest_version for result in results)


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
    value = commit_info.get("timestamp")
    if value is None:
        value = commit_info.get("inCommitTimestamp")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


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
    left_rows = left.num_rows if left else None
    right_rows = right.num_rows if right else None
    difference = None if left_rows is None or right_rows is None else right_rows - left_rows
    return {"left": left_rows, "right": right_rows, "difference": difference}


def _files(state: TableState | None) -> dict | None:
    return {"count": state.num_files, "bytes": state.size_bytes} if state else None


# ---------------------------------------------------------------- schema


def schema_changes(left: TableState | None, right: TableState | None) -> list[dict]:
    """Column changes from left's schema to right's, nested struct fields as dotted paths.

    With column mapping (mode name or id) on both sides, fields are matched by
    `delta.columnMapping.id`, so a rename is a rename; otherwise by name. Array elements and map
    keys/values are followed as `column.element`, `column.key`, `column.value`.
    """
    by_id = _column_mapped(left) and _column_mapped(right)
    left_fields = (left.schema if left else {}).get("fields") or []
    right_fields = (right.schema if right else {}).get("fields") or []
    return _field_changes(left_fields, right_fields, "", "", by_id)


def _column_mapped(state: TableState | None) -> bool:
    return state is not None and state.properties.get(_COLUMN_MAPPING_MODE) in ("name", "id")


def _field_key(schema_field: Mapping[str, Any], by_id: bool) -> tuple[str, Any]:
    column_id = (schema_field.get("metadata") or {}).get(_COLUMN_MAPPING_ID) if by_id else None
    return ("id", column_id) if column_id is not None else ("name", schema_field.get("name"))


def _field_changes(left_fields: list, right_fields: list, left_prefix: str, right_prefix: str, by_id: bool) -> list:
    left_by_key = {_field_key(left_field, by_id): left_field for left_field in left_fields}
    right_keys = set()
    changes: list[dict] = []
    for right_field in right_fields:
        key = _field_key(right_field, by_id)
        right_keys.add(key)
        right_path = _join(right_prefix, right_field["name"])
        left_field = left_by_key.get(key)
        if left_field is None:
            changes.append(_change("added", right_path, None, _type_name(right_field["type"])))
            continue
        left_path = _join(left_prefix, left_field["name"])
        if left_field["name"] != right_field["name"]:
            changes.append(_change("renamed", right_path, left_path, right_path))
        if bool(left_field.get("nullable", True)) != bool(right_field.get("nullable", True)):
            changes.append(
                _change("nullability_changed", right_path, left_field.get("nullable"), right_field.get("nullable"))
            )
        changes.extend(_type_changes(left_field["type"], right_field["type"], left_path, right_path, by_id))
    for key, left_field in left_by_key.items():
        if key not in right_keys:
            changes.append(
                _change("removed", _join(left_prefix, left_field["name"]), _type_name(left_field["type"]), None)
            )
    return changes


def _type_changes(left_type: Any, right_type: Any, left_path: str, right_path: str, by_id: bool) -> list[dict]:
    left_kind, right_kind = _kind(left_type), _kind(right_type)
    if left_kind == right_kind == "struct":
        left_fields, right_fields = left_type.get("fields") or [], right_type.get("fields") or []
        return _field_changes(left_fields, right_fields, left_path, right_path, by_id)
    if left_kind == right_kind == "array":
        return _nested_changes(left_type, right_type, left_path, right_path, by_id, _ARRAY_ELEMENT)
    if left_kind == right_kind == "map":
        key_changes = _type_changes(
            left_type["keyType"], right_type["keyType"], f"{left_path}.key", f"{right_path}.key", by_id
        )
        return key_changes + _nested_changes(left_type, right_type, left_path, right_path, by_id, _MAP_VALUE)
    if _type_name(left_type) != _type_name(right_type):
        return [_change("type_changed", right_path, _type_name(left_type), _type_name(right_type))]
    return []


# (path part, type key, nullability key) of what an array or a map holds (PROTOCOL.md#schema-serialization-format)
_ARRAY_ELEMENT = ("element", "elementType", "containsNull")
_MAP_VALUE = ("value", "valueType", "valueContainsNull")


def _nested_changes(
    left_type: Mapping, right_type: Mapping, left_path: str, right_path: str, by_id: bool, names: tuple[str, str, str]
) -> list[dict]:
    """Changes inside an array element or a map value: `column.element` / `column.value`."""
    part, type_key, nullable_key = names
    changes = []
    left_nullable, right_nullable = left_type.get(nullable_key, True), right_type.get(nullable_key, True)
    if bool(left_nullable) != bool(right_nullable):
        changes.append(_change("nullability_changed", f"{right_path}.{part}", left_nullable, right_nullable))
    changes.extend(
        _type_changes(left_type[type_key], right_type[type_key], f"{left_path}.{part}", f"{right_path}.{part}", by_id)
    )
    return changes


def _kind(data_type: Any) -> str:
    return data_type.get("type", "") if isinstance(data_type, Mapping) else "primitive"


def _type_name(data_type: Any) -> str:
    """A primitive's own name; `struct`, `array<...>`, `map<...,...>` for nested types."""
    if isinstance(data_type, str):
        return data_type
    kind = _kind(data_type)
    if kind == "array":
        return f"array<{_type_name(data_type.get('elementType'))}>"
    if kind == "map":
        return f"map<{_type_name(data_type.get('keyType'))},{_type_name(data_type.get('valueType'))}>"
    if kind == "struct":
        return "struct"  # its fields are compared one by one
    return json.dumps(data_type, sort_keys=True)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _change(change: str, column: str, left: Any, right: Any) -> dict:
    return {"change": change, "column": column, "left": left, "right": right}


# ---------------------------------------------------------------- paging


def paginate(results: list[dict], after: str | None, amount: int) -> tuple[list[dict], dict]:
    """A page of newest-first `results` after the entry whose id is `after` (exclusive).

    An `after` that names no entry (e.g. a version since dropped from the diff) starts at the
    first entry older than it. `next_offset` is the page's last id when more follow, else "".
    """
    if not 1 <= amount <= MAX_PER_PAGE:
        raise ValueError(f"amount must be between 1 and {MAX_PER_PAGE}, got {amount}")
    start = _page_start(results, after)
    page = results[start : start + amount]
    has_more = start + amount < len(results)
    return page, {
        "has_more": has_more,
        "next_offset": page[-1]["id"] if has_more else "",
        "max_per_page": MAX_PER_PAGE,
        "results": len(page),
    }


def _page_start(results: list[dict], after: str | None) -> int:
    if not after:
        return 0
    for index, result in enumerate(results):
        if result["id"] == after:
            return index + 1
    try:
        after_version = int(after)
    except ValueError:
        raise ValueError(f"after must be a version number (an id from the results), got {after!r}") from None
    return next((index for index, result in enumerate(results) if int(result["id"]) < after_version), len(results))
