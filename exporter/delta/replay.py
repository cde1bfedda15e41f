"""One Delta replay: a table's log (checkpoint + commits) to its state at the head version.

Reconciliation follows PROTOCOL.md#action-reconciliation in one place, `reconcile`: a logical
file is (path, deletion vector unique id); an add makes it live, a remove with the same key ends
it. The history diff replays with it (`snapshot_state`); the exporter uses it to tell which
missing objects the head still reads. Row counts come from `add.stats` numRecords minus
deletion-vector cardinality, and are unknown (None) rather than guessed.

Checkpoints stream: they are read one row group at a time from their sources, and only the files
that later commits name are kept one by one; every other checkpoint add is summed as it passes,
so memory follows the row group and the change since the checkpoint, not the table.
"""

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from exporter.delta.deletion_vectors import unique_id, unique_ids
from exporter.errors import CorruptLog
from exporter.parquet.splice import ParquetSource, open_parquet, read_row_group, read_row_group_pieces


@dataclass
class TableLog:
    checkpoint_version: int | None  # version of the checkpoint the log starts from, None if read from version 0
    checkpoint: list[tuple[str, ParquetSource]]  # parquet checkpoint parts / sidecars: (name, source)
    checkpoint_actions: list[dict]  # actions from JSON (V2) checkpoints, if any
    commits: list[tuple[int, list[dict]]]  # (version, actions) for every JSON commit available, ascending
    # what tells the checkpoint's objects apart (their physical addresses): logs with equal ones share it
    checkpoint_identity: tuple | None = None


@dataclass
class TableState:
    version: int  # head version
    table_id: str | None  # metaData.id at the head: which table this is (PROTOCOL.md#change-metadata)
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
    # The live files followed one by one (those the log names after its parquet checkpoint, and those
    # other logs replayed with it from the same checkpoint name; every file without one), by logical
    # file: their rows, None when unknown. What the replays of one checkpoint share (`snapshot_states`),
    # None without a checkpoint: two states of one group differ only among their followed files.
    followed: dict[tuple[str, str], int | None] = field(default_factory=dict, repr=False, compare=False)
    replay_group: object | None = field(default=None, repr=False, compare=False)


# The first key of a stats object, so unambiguous: a nested "numRecords" (a column's name) is never first.
_LEADING_NUM_RECORDS = r'^\s*\{\s*"numRecords"\s*:\s*(?P<records>\d+)\s*[,}]'
# (size, stats JSON or numRecords already known, deletion-vector cardinality) of a live logical file
_LiveFile = tuple[int, str | int | None, int]


# ---------------------------------------------------------------- replay


def snapshot_state(log: TableLog) -> TableState:
    """Replay a table's log into its state at the head version; CorruptLog when it cannot be replayed."""
    return snapshot_states([log])[0]


def snapshot_states(logs: list[TableLog]) -> list[TableState]:
    """`snapshot_state` of each log. Logs that start from the same checkpoint objects (equal
    `checkpoint_identity`: two refs of a table whose later commits differ, as a merge's two sides)
    read it once, and the files none of them names later are summed once."""
    replays = [_Replay(log) for log in logs]
    shared: dict[object, list[_Replay]] = {}
    for index, replay in enumerate(replays):
        shared.setdefault(replay.log.checkpoint_identity or index, []).append(replay)
    for group in shared.values():
        _read_checkpoint(group)
    return [replay.state() for replay in replays]


class _Replay:
    """One log's replay: the checkpoint's files its later commits name followed one by one, the
    others summed, then its commits applied."""

    def __init__(self, log: TableLog):
        self.log = log
        self.commits = _ordered_commits(log.commits)
        head = max([*self.commits, *([log.checkpoint_version] if log.checkpoint_version is not None else [])],
                   default=None)
        if head is None:
            raise CorruptLog("the table log has no checkpoint and no commit")
        self.head = head
        self.replayed = _replayed_versions(self.commits, log.checkpoint_version, head)
        # the logical files the log names after the checkpoint's parquet files: followed one by one
        self.named_later = {file_key(action[kind], kind)
                            for actions in [log.checkpoint_actions, *map(self.commits.get, self.replayed)]
                            for action in actions for kind in ("add", "remove") if isinstance(action.get(kind), Mapping)}
        self.live: dict[tuple[str, str], _LiveFile] = {}
        self.summed = _Sum()  # every other file the checkpoint holds
        self.metadata: dict | None = None
        self.protocol: dict | None = None
        self.group: object | None = None  # set by `_read_checkpoint`: the logs replayed from the same checkpoint

    def state(self) -> TableState:
        metadata, protocol, live = self.metadata, self.protocol, self.live
        for action in self.log.checkpoint_actions:
            metadata, protocol = _apply(action, live, metadata, protocol)
        for version in self.replayed:
            for action in self.commits[version]:
                metadata, protocol = _apply(action, live, metadata, protocol)
        followed = {key: _rows_of(live_file) for key, live_file in live.items()}  # each file's stats read once
        for (size, _, _), rows in zip(live.values(), followed.values()):
            self.summed.add(size, rows)
        if metadata is None:
            raise CorruptLog(f"no metaData action in the log up to version {self.head}")
        if protocol is None:
            raise CorruptLog(f"no protocol action in the log up to version {self.head}")
        history, commit_digests = _history(self.commits)
        return TableState(
            version=self.head,
            table_id=metadata.get("id"),
            earliest_version=min(self.commits) if self.commits else self.head,
            history=history,
            schema=_schema(metadata),
            partition_columns=list(metadata.get("partitionColumns") or []),
            properties=_configuration(metadata.get("configuration")),
            protocol=_protocol(protocol),
            num_files=self.summed.files,
            size_bytes=self.summed.size,
            num_rows=self.summed.rows,
            commit_digests=commit_digests,
            followed=followed,
            replay_group=self.group,
        )


def _read_checkpoint(group: list[_Replay]) -> None:
    """The checkpoint the group's logs start from, read once, a row group at a time."""
    named = sorted({path for replay in group for path, _ in replay.named_later})
    shared = _Sum()  # the files no log of the group names later
    token = object() if group[0].log.checkpoint else None  # without a parquet one, every file is followed
    for replay in group:
        replay.group = token
    for name, source in group[0].log.checkpoint:
        for row_group in checkpoint_row_groups(name, source, _REPLAYED_COLUMNS):
            if any(replay.metadata is None or replay.protocol is None for replay in group):
                metadata, protocol = _first_valid(row_group, "metaData"), _first_valid(row_group, "protocol")
                for replay in group:
                    replay.metadata, replay.protocol = replay.metadata or metadata, replay.protocol or protocol
            if "add" in row_group.column_names:
                adds = row_group.column("add")
                for start in range(0, len(adds), _SLICE):
                    _split_adds(adds.slice(start, _SLICE), named, group, shared)
    for replay in group:
        replay.summed.merge(shared)


def with_older_commits(state: TableState, commits: Iterable[tuple[int, list[dict]]]) -> TableState:
    """`state` with the history of JSON commits older than those it was replayed from (the ones
    before its checkpoint): only what identifies each commit is kept, its actions are not replayed."""
    older = {version: actions for version, actions in _ordered_commits(commits).items()
             if version < state.earliest_version}
    if not older:
        return state
    history, commit_digests = _history(older)
    return dataclasses.replace(state, earliest_version=min(older), history={**history, **state.history},
                               commit_digests={**commit_digests, **state.commit_digests})


def files_differing_rows(left: TableState, right: TableState) -> tuple[int | None, int | None]:
    """The rows in the files only `left` has, and in those only `right` has (a file whose deletion
    vector changed: the rows it newly deletes, or brings back): at most the rows a change from left
    to right removes, and adds. (None, None) when the logs cannot tell: the two were not replayed
    together from one checkpoint (nor both without one), or such a file has no `numRecords`."""
    if left.replay_group is not right.replay_group:
        return None, None
    totals = []
    for this, other in ((left, right), (right, left)):
        other_paths = {path: rows for (path, _), rows in other.followed.items()}
        total = 0
        for key, rows in this.followed.items():
            if key in other.followed:
                continue
            before = other_paths.get(key[0], 0)
            if rows is None or before is None:
                return None, None
            total += max(0, rows - before)
        totals.append(total)
    return totals[0], totals[1]


def _history(commits: Mapping[int, list[dict]]) -> tuple[dict[int, dict | None], dict[int, str]]:
    """Each commit's commitInfo, and a digest of the actions of those without one."""
    history = {version: _commit_info(actions) for version, actions in commits.items()}
    return history, {version: _digest(commits[version]) for version, info in history.items() if info is None}


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


def reconcile(live: dict[tuple[str, str], Any], action: Mapping[str, Any],
              value: Callable[[Mapping[str, Any]], Any] = lambda add: add, keep_removed: bool = False) -> None:
    """PROTOCOL.md#action-reconciliation, the one implementation: a logical file is
    (path, deletion vector unique id); an add makes it live with `value(add)` (or, when that is
    `UNTRACKED`, leaves it out of `live`), a remove with the same key ends it (with `keep_removed`
    it stays, as None: a tombstone for a file an older checkpoint, read later, still lists)."""
    if isinstance(add := action.get("add"), Mapping):
        stored = value(add)
        if stored is not UNTRACKED:
            live[file_key(add, "add")] = stored
    elif isinstance(remove := action.get("remove"), Mapping):
        if keep_removed:
            live[file_key(remove, "remove")] = None
        else:
            live.pop(file_key(remove, "remove"), None)


UNTRACKED = object()  # what `reconcile`'s `value` returns for an add the caller does not follow


def file_key(file_action: Mapping[str, Any], kind: str) -> tuple[str, str]:
    """The logical file an add or remove names: (path, deletion vector unique id)."""
    return _path(file_action, kind), unique_id(file_action.get("deletionVector"))


def _apply(
    action: Mapping[str, Any], live: dict[tuple[str, str], _LiveFile], metadata: dict | None, protocol: dict | None
) -> tuple[dict | None, dict | None]:
    """Apply one action to the live files; return the newest metaData and protocol."""
    if isinstance(new_metadata := action.get("metaData"), Mapping):
        return dict(new_metadata), protocol
    if isinstance(new_protocol := action.get("protocol"), Mapping):
        return metadata, dict(new_protocol)
    reconcile(live, action, _live_file)
    return metadata, protocol


def _live_file(add: Mapping[str, Any]) -> _LiveFile:
    deletion_vector = add.get("deletionVector")
    return int(add.get("size") or 0), add.get("stats"), int((deletion_vector or {}).get("cardinality") or 0)


def _path(file_action: Mapping[str, Any], kind: str) -> str:
    path = file_action.get("path")
    if not isinstance(path, str):
        raise CorruptLog(f"an {kind} action has no path: {json.dumps(file_action, default=str)[:200]}")
    return path


def checkpoint_row_groups(name: str, source: ParquetSource, columns: list[str]) -> Iterable[pa.Table]:
    """A parquet checkpoint file's columns (those it has; `add.path` names a nested one), one row
    group in memory at a time."""
    yield from opened_row_groups(open_parquet(source, name), name, columns)


def opened_row_groups(parquet_file: pq.ParquetFile, name: str, columns: list[str],
                      most: int | None = None) -> Iterable[pa.Table]:
    """`checkpoint_row_groups` of a checkpoint file already open (its footer read once for several
    reads); with `most`, each row group in pieces of at most `most` rows (`read_row_group_pieces`)."""
    present = [column for column in columns if _has_column(parquet_file.schema_arrow, column)]
    if not present:
        return
    for index in range(parquet_file.num_row_groups):
        if most is None:
            yield read_row_group(parquet_file, index, present, name)
        else:
            yield from read_row_group_pieces(parquet_file, index, present, name, most)


def _has_column(schema: pa.Schema, column: str) -> bool:
    names = column.split(".")
    if names[0] not in schema.names:
        return False
    data_type = schema.field(names[0]).type
    for name in names[1:]:
        if not pa.types.is_struct(data_type) or data_type.get_field_index(name) < 0:
            return False
        data_type = data_type.field(name).type
    return True


# what the replay reads of a checkpoint: the add columns it counts, not partition values or tags
_REPLAYED_COLUMNS = ["add.path", "add.size", "add.stats", "add.stats_parsed.numRecords",
                     *(f"add.deletionVector.{name}" for name in ("storageType", "pathOrInlineDv", "offset", "cardinality")),
                     "metaData", "protocol"]
_SLICE = 65_536  # rows of a row group computed on at once


def _split_adds(adds: pa.ChunkedArray, named: list[str], group: list[_Replay], shared: "_Sum") -> None:
    """A row group's checkpoint adds: those whose path a log's later commits name are kept one by one
    (by logical file) for that log, all others summed column-wise, never as Python objects one per file."""
    adds = adds.filter(adds.is_valid())
    if not len(adds):
        return
    paths = pc.struct_field(adds, "path")
    is_named = pc.fill_null(pc.is_in(paths, value_set=pa.array(named, paths.type)), False)
    for key, live_file in _add_columns(adds.filter(is_named)) if pc.any(is_named).as_py() else ():
        for replay in group:  # followed by each log, so that the files the logs differ by are all followed
            replay.live[key] = live_file
    shared.add_columns(adds.filter(pc.invert(is_named)))


def _rows_of(live_file: _LiveFile) -> int | None:
    """A live file's rows: its `numRecords` less its deletion vector's cardinality; None when unknown."""
    _, stats, cardinality = live_file
    records = num_records(stats)
    return None if records is None else records - cardinality


class _Sum:
    """Files, bytes and rows of live files; rows become unknown (None) at the first file without them."""

    def __init__(self) -> None:
        self.files, self.size, self.rows = 0, 0, 0

    def add(self, size: int, rows: int | None) -> None:
        """One live file of `size` bytes holding `rows` rows (`_rows_of`; None: unknown)."""
        self.files += 1
        self.size += size
        self.rows = None if rows is None or self.rows is None else self.rows + rows

    def merge(self, other: "_Sum") -> None:
        self.files, self.size = self.files + other.files, self.size + other.size
        self.rows = None if self.rows is None or other.rows is None else self.rows + other.rows

    def add_columns(self, adds: pa.ChunkedArray) -> None:
        """`add` for every file of a column of checkpoint adds, column-wise."""
        if not len(adds):
            return
        fields = {add_field.name for add_field in adds.type}
        self.files += len(adds)
        self.size += pc.sum(pc.fill_null(pc.struct_field(adds, "size"), 0)).as_py() or 0
        cardinality = 0
        if "deletionVector" in fields:
            cardinalities = pc.struct_field(pc.struct_field(adds, "deletionVector"), "cardinality")
            cardinality = pc.sum(pc.fill_null(cardinalities, 0)).as_py() or 0
        records = None if self.rows is None else _records_of_columns(adds, fields)
        self.rows = None if records is None or self.rows is None else self.rows + records - cardinality


def _records_of_columns(adds: pa.ChunkedArray, fields: set[str]) -> int | None:
    """Sum of numRecords over checkpoint adds, as `_num_records` reads each: the leading
    `numRecords` of the stats JSON without parsing it, else the parsed JSON, else `stats_parsed`
    where there is no JSON; None when any file has none."""
    count = len(adds)
    stats = pc.struct_field(adds, "stats") if "stats" in fields else pa.nulls(count, pa.string())
    leading = pc.cast(pc.struct_field(pc.extract_regex(stats, _LEADING_NUM_RECORDS), "records"), pa.int64())
    parsed = pa.nulls(count, pa.int64())
    if "stats_parsed" in fields and "numRecords" in {f.name for f in pc.struct_field(adds, "stats_parsed").type}:
        parsed = pc.cast(pc.struct_field(pc.struct_field(adds, "stats_parsed"), "numRecords"), pa.int64())
    known = pc.coalesce(leading, pc.if_else(pc.is_null(stats), parsed, pa.scalar(None, pa.int64())))
    total = pc.sum(known).as_py() or 0
    unknown = pc.is_null(known)
    if not pc.any(unknown).as_py():
        return total
    for json_stats in pc.filter(stats, unknown).to_pylist():  # stats JSON with numRecords not first
        records = num_records(json_stats)
        if records is None:
            return None
        total += records
    return total


def _add_columns(adds: pa.ChunkedArray) -> Iterable[tuple[tuple[str, str], _LiveFile]]:
    fields = {add_field.name for add_field in adds.type}
    count = len(adds)
    paths = pc.struct_field(adds, "path").to_pylist()
    sizes = pc.fill_null(pc.struct_field(adds, "size"), 0).to_pylist()
    stats = _records_or_stats(pc.struct_field(adds, "stats")) if "stats" in fields else [None] * count
    if "stats_parsed" in fields:
        stats = _with_parsed_records(stats, pc.struct_field(adds, "stats_parsed"))
    if "deletionVector" in fields:
        deletion_vectors = pc.struct_field(adds, "deletionVector")
        vector_ids = unique_ids(deletion_vectors)
        cardinalities = pc.fill_null(pc.struct_field(deletion_vectors, "cardinality"), 0).to_pylist()
    else:
        vector_ids, cardinalities = [""] * count, [0] * count
    return zip(zip(paths, vector_ids), zip(sizes, stats, cardinalities))


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


def _first_valid(table: pa.Table, column: str) -> dict | None:
    if column not in table.column_names:
        return None
    values = table.column(column)
    values = values.filter(values.is_valid())
    return values[0].as_py() if len(values) else None


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


def num_records(stats: str | int | None) -> int | None:
    if stats is None or isinstance(stats, int):
        return stats
    try:
        records = json.loads(stats).get("numRecords")
    except (ValueError, AttributeError):  # unparseable or not an object: unknown, not an error
        return None
    return records if isinstance(records, int) and not isinstance(records, bool) else None
