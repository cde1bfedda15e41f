"""The history diff: replaying a table's log into its state, and what changed from left to right."""

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exporter.delta.replay import TableLog, TableState, snapshot_state, snapshot_states
from exporter.diff.history import diff_history
from exporter.diff.operations import operation_type
from exporter.errors import CorruptLog
from exporter.parquet.splice import BytesSource
from hooks.paging import paginate

pytestmark = pytest.mark.unit

BASE_TIME = 1_700_000_000_000
DV_SCHEMA = pa.struct(
    [
        ("storageType", pa.string()),
        ("pathOrInlineDv", pa.string()),
        ("offset", pa.int32()),
        ("sizeInBytes", pa.int32()),
        ("cardinality", pa.int64()),
    ]
)
CHECKPOINT_SCHEMA = pa.schema(
    [
        (
            "add",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("partitionValues", pa.map_(pa.string(), pa.string())),
                    ("size", pa.int64()),
                    ("modificationTime", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("stats", pa.string()),
                    ("deletionVector", DV_SCHEMA),
                ]
            ),
        ),
        ("remove", pa.struct([("path", pa.string()), ("deletionTimestamp", pa.int64()), ("dataChange", pa.bool_())])),
        (
            "metaData",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("format", pa.struct([("provider", pa.string())])),
                    ("schemaString", pa.string()),
                    ("partitionColumns", pa.list_(pa.string())),
                    ("configuration", pa.map_(pa.string(), pa.string())),
                    ("createdTime", pa.int64()),
                ]
            ),
        ),
        (
            "protocol",
            pa.struct(
                [
                    ("minReaderVersion", pa.int32()),
                    ("minWriterVersion", pa.int32()),
                    ("readerFeatures", pa.list_(pa.string())),
                    ("writerFeatures", pa.list_(pa.string())),
                ]
            ),
        ),
    ]
)


# ---------------------------------------------------------------- building logs by hand


def column(name: str, data_type: object = "integer", nullable: bool = True, column_id: int | None = None) -> dict:
    metadata = {} if column_id is None else {"delta.columnMapping.id": column_id}
    return {"name": name, "type": data_type, "nullable": nullable, "metadata": metadata}


def struct(*fields: dict) -> dict:
    return {"type": "struct", "fields": list(fields)}


DEFAULT_SCHEMA = struct(column("id", "long", False), column("name", "string"))


def metadata(schema: dict = DEFAULT_SCHEMA, partition_columns: tuple = (), configuration: dict | None = None,
             table_id: str | None = "table-1") -> dict:
    return {
        "metaData": {
            "id": table_id,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps(schema),
            "partitionColumns": list(partition_columns),
            "configuration": configuration or {},
            "createdTime": BASE_TIME,
        }
    }


def protocol(reader: int = 1, writer: int = 2, reader_features: list | None = None, writer_features=None) -> dict:
    action: dict = {"minReaderVersion": reader, "minWriterVersion": writer}
    if reader_features is not None:
        action["readerFeatures"] = reader_features
    if writer_features is not None:
        action["writerFeatures"] = writer_features
    return {"protocol": action}


def commit_info(operation: str, timestamp: int, parameters: dict | None = None, **fields) -> dict:
    info = {"timestamp": timestamp, "operation": operation, "operationParameters": parameters or {}}
    info.update(fields)
    return {"commitInfo": info}


def write(timestamp: int, mode: str = "Append") -> dict:
    return commit_info("WRITE", timestamp, {"mode": mode}, operationMetrics={"numFiles": "1"})


def deletion_vector(name: str, cardinality: int, offset: int | None = 1) -> dict:
    return {"storageType": "u", "pathOrInlineDv": name, "offset": offset, "sizeInBytes": 40, "cardinality": cardinality}


def add(path: str, size: int = 100, records: int | None = 10, dv: dict | None = None) -> dict:
    action: dict = {"path": path, "partitionValues": {}, "size": size, "modificationTime": BASE_TIME}
    if records is not None:
        action["stats"] = json.dumps({"numRecords": records, "minValues": {"numRecords": 0}})
    if dv is not None:
        action["deletionVector"] = dv
    return {"add": action}


def remove(path: str, dv: dict | None = None) -> dict:
    action: dict = {"path": path, "deletionTimestamp": BASE_TIME, "dataChange": True}
    if dv is not None:
        action["deletionVector"] = dv
    return {"remove": action}


def created(timestamp: int = BASE_TIME, schema: dict = DEFAULT_SCHEMA, **metadata_options) -> list[dict]:
    return [commit_info("CREATE TABLE", timestamp), protocol(), metadata(schema, **metadata_options)]


def state(*commits: list[dict], first: int = 0) -> TableState:
    """The state after commits numbered from `first` (0 unless the log starts at a checkpoint)."""
    return snapshot_state(TableLog(None, [], [], [(first + index, actions) for index, actions in enumerate(commits)]))


def checkpoint_table(rows: list[dict], row_group_size: int = 2) -> tuple[str, BytesSource]:
    """A classic checkpoint file, as the replay reads it: parquet bytes, in row groups of two rows."""
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=CHECKPOINT_SCHEMA), buffer, row_group_size=row_group_size)
    return "00000000000000000002.checkpoint.parquet", BytesSource(buffer.getvalue())


def checkpoint_add(path: str, size: int, records: int | None, dv: dict | None = None, leading: bool = True) -> dict:
    """`leading`: numRecords is the first key of the stats, as writers put it; else after a column named so."""
    counts = {"numRecords": records} if leading else {"minValues": {"numRecords": -1}, "numRecords": records}
    stats = None if records is None else json.dumps(counts)
    return {
        "add": {
            "path": path,
            "partitionValues": [("day", "2024-01-01")],
            "size": size,
            "modificationTime": BASE_TIME,
            "dataChange": False,
            "stats": stats,
            "deletionVector": dv,
        }
    }


def checkpoint_metadata(configuration: dict) -> dict:
    return {
        "metaData": {
            "id": "table-1",
            "format": {"provider": "parquet"},
            "schemaString": json.dumps(struct(column("id", "long"), column("day", "string"))),
            "partitionColumns": ["day"],
            "configuration": list(configuration.items()),
            "createdTime": BASE_TIME,
        }
    }


def ids(diff: dict) -> list[str]:
    return [result["id"] for result in diff["results"]]


# ---------------------------------------------------------------- snapshot state


def test_row_count_from_a_checkpoint_and_later_commits_is_net_of_deletion_vectors() -> None:
    old_dv = deletion_vector("b-dv-old", 1)
    checkpoint = checkpoint_table(
        [
            checkpoint_add("day=2024-01-01/a.parquet", 1000, 10),
            checkpoint_add("day=2024-01-01/b.parquet", 2000, 20, deletion_vector("b-dv", 3), leading=False),
            checkpoint_add("day=2024-01-01/c.parquet", 500, 5),
            {"remove": {"path": "day=2024-01-01/old.parquet", "deletionTimestamp": BASE_TIME, "dataChange": True}},
            checkpoint_metadata({"delta.enableDeletionVectors": "true", "delta.appendOnly": "false"}),
            {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                          "writerFeatures": ["deletionVectors"]}},
        ]
    )
    log = TableLog(
        checkpoint_version=2,
        checkpoint=[checkpoint],
        checkpoint_actions=[],
        commits=[
            # 2.json's adds are already in the checkpoint: counting them again would double the rows.
            (2, [write(BASE_TIME + 2), add("day=2024-01-01/c.parquet", 500, 5)]),
            (3, [write(BASE_TIME + 3), remove("day=2024-01-01/c.parquet"), add("day=2024-01-01/d.parquet", 700, 7),
                 remove("day=2024-01-01/b.parquet", old_dv)]),  # names an older DV of b: b stays
            (4, [commit_info("DELETE", BASE_TIME + 4), remove("day=2024-01-01/a.parquet"),
                 add("day=2024-01-01/a.parquet", 1000, 10, deletion_vector("a-dv", 4))]),
        ],
    )

    table = snapshot_state(log)

    assert table.num_rows == (10 - 4) + (20 - 3) + 7
    assert (table.num_files, table.size_bytes) == (3, 1000 + 2000 + 700)
    assert (table.version, table.earliest_version) == (4, 2)
    assert sorted(table.history) == [2, 3, 4]
    assert table.history[4]["operation"] == "DELETE"
    assert table.partition_columns == ["day"]
    assert table.properties == {"delta.enableDeletionVectors": "true", "delta.appendOnly": "false"}
    assert table.protocol == {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                              "writerFeatures": ["deletionVectors"]}
    assert [schema_field["name"] for schema_field in table.schema["fields"]] == ["id", "day"]


def test_a_file_without_stats_makes_the_row_count_unknown() -> None:
    left = state(created() + [add("a.parquet", records=10)])
    right = state(created() + [add("a.parquet", records=10)], [write(BASE_TIME + 1), add("b.parquet", records=None)])

    assert left.num_rows == 10
    assert right.num_rows is None
    assert diff_history(left, right)["row_count"] == {"left": 10, "right": None, "difference": None,
                                                      "in_files_removed": None, "in_files_added": None}


def test_the_rows_in_the_files_one_side_has_bound_what_a_change_removes_and_adds() -> None:
    """A merge that deletes as many rows as it inserts leaves the count as it was: the files the
    sides differ by say how many rows it may have removed and added (a deletion vector's: exactly
    the rows it newly deletes)."""
    shared = [created(), [write(BASE_TIME + 1), add("a.parquet", records=10), add("b.parquet", records=20)]]
    left = state(*shared)
    rewritten = state(*shared, [write(BASE_TIME + 2), remove("a.parquet"), add("c.parquet", records=10),
                                remove("b.parquet"), add("b.parquet", records=20, dv=deletion_vector("dv", 5)),
                                add("d.parquet", records=5)])
    counted = diff_history(left, rewritten)["row_count"]
    assert (counted["difference"], counted["in_files_removed"], counted["in_files_added"]) == (0, 10 + 5, 10 + 5)
    assert diff_history(rewritten, left)["row_count"]["in_files_removed"] == 15  # and back: the deleted rows return


def test_two_sides_of_one_checkpoint_differ_only_by_files_replayed_together() -> None:
    """Sides from one checkpoint sum the files neither names later: replayed together, each follows
    the files either names, so a checkpoint file one side removes is counted; replayed apart, the
    logs cannot tell (None), never 0."""
    checkpoint = checkpoint_table([checkpoint_add("a.parquet", 10, 7), checkpoint_add("b.parquet", 10, 3),
                                   checkpoint_metadata({}), {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}])

    def log(*commits: list[dict]) -> TableLog:
        return TableLog(2, [checkpoint], [], [(3 + n, actions) for n, actions in enumerate(commits)], ("cp",))

    left_log = log([write(BASE_TIME), add("c.parquet", records=4)])
    right_log = log([write(BASE_TIME), remove("a.parquet"), add("d.parquet", records=7)])
    left, right = snapshot_states([left_log, right_log])
    counted = diff_history(left, right)["row_count"]
    assert (counted["left"], counted["right"], counted["difference"]) == (14, 10, -4)
    assert (counted["in_files_removed"], counted["in_files_added"]) == (7 + 4, 7)
    apart = diff_history(snapshot_state(left_log), snapshot_state(right_log))["row_count"]
    assert (apart["in_files_removed"], apart["in_files_added"]) == (None, None)


def test_a_checkpoint_file_without_stats_makes_the_row_count_unknown() -> None:
    checkpoint = checkpoint_table(
        [checkpoint_add("a.parquet", 10, 3), checkpoint_add("b.parquet", 10, None), checkpoint_metadata({}),
         {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}]
    )
    table = snapshot_state(TableLog(0, [checkpoint], [], []))
    assert (table.num_rows, table.num_files, table.earliest_version, table.history) == (None, 2, 0, {})


def test_a_v2_json_checkpoint_counts_like_a_parquet_one() -> None:
    actions = [protocol(3, 7, ["v2Checkpoint"], ["v2Checkpoint"]), metadata(), add("a.parquet", 10, 4),
               add("b.parquet", 10, 6, deletion_vector("b-dv", 2, offset=None))]
    table = snapshot_state(TableLog(5, [], actions, [(6, [write(BASE_TIME), remove("b.parquet")])]))
    assert table.num_rows == 4 + (6 - 2)  # b's remove names no DV, b's add has one: another logical file
    assert table.num_files == 2


def test_a_gap_in_the_commits_to_replay_is_a_corrupt_log() -> None:
    with pytest.raises(CorruptLog, match="commit\\(s\\) 2 missing"):
        snapshot_state(TableLog(None, [], [], [(0, created()), (1, [write(BASE_TIME)]), (3, [write(BASE_TIME)])]))
    with pytest.raises(CorruptLog, match="commit\\(s\\) 6 missing between checkpoint 5"):
        snapshot_state(TableLog(5, [], [protocol(), metadata()], [(7, [write(BASE_TIME)])]))
    with pytest.raises(CorruptLog, match="no metaData"):
        snapshot_state(TableLog(None, [], [], [(0, [protocol()])]))


# ---------------------------------------------------------------- diff type


def test_a_table_only_on_right_is_created_with_every_version_an_operation() -> None:
    right = state(created(BASE_TIME + 1), [write(BASE_TIME + 2), add("a.parquet", records=5)])

    diff = diff_history(None, right)

    assert diff["diff_type"] == "created"
    assert ids(diff) == ["1", "0"]
    assert [result["operation_type"] for result in diff["results"]] == ["update", "create"]
    assert diff["history_truncated"] is False
    assert [change["change"] for change in diff["schema_changes"]] == ["added", "added"]
    assert diff["row_count"] == {"left": None, "right": 5, "difference": None, "in_files_removed": 0,
                                 "in_files_added": 5}
    assert diff["files"] == {"left": None, "right": {"count": 1, "bytes": 100}}
    assert diff["versions"] == {"left": None, "right": 1, "base": None}
    json.dumps(diff)


def test_a_table_absent_at_the_merge_base_is_created_even_when_left_has_one_too() -> None:
    left = state(created(BASE_TIME + 5))
    right = state(created(BASE_TIME + 6))

    assert diff_history(left, right)["diff_type"] == "changed"
    assert diff_history(left, right, None)["diff_type"] == "created"


def test_a_table_only_on_left_is_dropped() -> None:
    diff = diff_history(state(created()), None)
    assert diff["diff_type"] == "dropped"
    assert diff["results"] == []
    assert [change["change"] for change in diff["schema_changes"]] == ["removed", "removed"]
    json.dumps(diff)


def test_no_table_on_either_side_and_an_identical_table_are_no_difference() -> None:
    assert diff_history(None, None)["diff_type"] == "none"
    table = state(created(), [write(BASE_TIME + 1), add("a.parquet")])
    diff = diff_history(table, state(created(), [write(BASE_TIME + 1), add("a.parquet")]))
    assert diff["diff_type"] == "none"
    assert (diff["results"], diff["schema_changes"], diff["history_truncated"]) == ([], [], False)
    assert (diff["partition_columns"], diff["properties_changed"], diff["protocol_changed"]) == (None, {}, None)


def test_right_ahead_of_left_reports_only_the_new_versions() -> None:
    shared = [created(), [write(BASE_TIME + 1), add("a.parquet", records=10)]]
    left = state(*shared)
    right = state(*shared, [write(BASE_TIME + 2), add("b.parquet", size=50, records=4)])

    diff = diff_history(left, right)

    assert diff["diff_type"] == "changed"
    assert ids(diff) == ["2"]
    assert diff["row_count"] == {"left": 10, "right": 14, "difference": 4, "in_files_removed": 0, "in_files_added": 4}
    assert diff["files"] == {"left": {"count": 1, "bytes": 100}, "right": {"count": 2, "bytes": 150}}


def test_left_ahead_of_right_is_a_change_with_no_operations_on_right() -> None:
    shared = [created(), [write(BASE_TIME + 1), add("a.parquet")]]
    diff = diff_history(state(*shared, [write(BASE_TIME + 2), add("b.parquet")]), state(*shared))
    assert (diff["diff_type"], diff["results"]) == ("changed", [])


# ---------------------------------------------------------------- matching history by content


def test_diverged_histories_report_right_versions_written_after_the_base() -> None:
    shared = [created(), [write(BASE_TIME + 1), add("a.parquet")], [write(BASE_TIME + 2), add("b.parquet")]]
    base = state(*shared)
    left = state(*shared, [write(BASE_TIME + 30), add("l3.parquet")], [commit_info("OPTIMIZE", BASE_TIME + 40)])
    right = state(*shared, [write(BASE_TIME + 31), add("r3.parquet")],
                  [commit_info("MERGE", BASE_TIME + 41, {"predicate": "x"}), add("r4.parquet")])

    for diff in (diff_history(left, right), diff_history(left, right, base)):
        assert ids(diff) == ["4", "3"]
        assert [result["timestamp"] for result in diff["results"]] == [BASE_TIME + 41, BASE_TIME + 31]
        assert [result["operation"] for result in diff["results"]] == ["MERGE", "WRITE"]
        assert diff["results"][0]["operation_content"] == {"operationParameters": {"predicate": "x"}}
        assert diff["history_truncated"] is False
        assert diff["diff_type"] == "changed"


def test_a_version_without_commit_info_is_an_unknown_operation() -> None:
    shared = [created()]
    diff = diff_history(state(*shared), state(*shared, [add("a.parquet")]))
    assert diff["results"] == [
        {"id": "1", "timestamp": None, "operation": "UNKNOWN", "operation_content": {}, "operation_type": "unknown"}
    ]


def test_versions_without_commit_info_match_by_their_actions() -> None:
    shared = [created(), [add("a.parquet")]]
    left = state(*shared, [add("l.parquet")])
    right = state(*shared, [add("r.parquet")])
    assert ids(diff_history(left, right)) == ["2"]
    assert ids(diff_history(state(*shared), state(*shared))) == []


def test_an_operation_name_nobody_knows_is_unknown_not_an_error() -> None:
    diff = diff_history(state(created()), state(created(), [commit_info("FROBNICATE TABLE", BASE_TIME + 1)]))
    assert (diff["results"][0]["operation"], diff["results"][0]["operation_type"]) == ("FROBNICATE TABLE", "unknown")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("CREATE OR REPLACE TABLE AS SELECT", "create"),
        ("CLONE", "create"),
        ("CONVERT", "create"),
        ("WRITE", "update"),
        ("optimize", "update"),
        ("RENAME COLUMN", "update"),
        ("UPGRADE PROTOCOL", "update"),
        ("DELETE", "delete"),
        ("TRUNCATE", "delete"),
        ("VACUUM END", "delete"),
        ("", "unknown"),
    ],
)
def test_operation_types_follow_the_delta_operation_names(name: str, expected: str) -> None:
    assert operation_type(name) == expected


def test_an_overwrite_is_an_update() -> None:
    diff = diff_history(None, state(created(), [write(BASE_TIME + 1, mode="Overwrite")]))
    assert diff["results"][0]["operation_type"] == "update"


def test_timestamps_are_exact_milliseconds_and_fall_back_to_the_in_commit_timestamp() -> None:
    in_commit_only = {"commitInfo": {"inCommitTimestamp": 1_700_000_000_456, "operation": "WRITE"}}
    right = state([commit_info("CREATE TABLE", 1_700_000_000_123), protocol(), metadata()], [in_commit_only])

    diff = diff_history(None, right)

    assert [result["timestamp"] for result in diff["results"]] == [1_700_000_000_456, 1_700_000_000_123]
    assert diff["results"][0]["operation_content"] == {"inCommitTimestamp": 1_700_000_000_456}


# ---------------------------------------------------------------- truncated history


def test_history_is_truncated_when_right_log_starts_after_the_divergence() -> None:
    shared = [created()] + [[write(BASE_TIME + version), add(f"{version}.parquet")] for version in (1, 2, 3)]
    left = state(*shared)
    # Right wrote versions 4-8 and checkpointed at 6; its JSON commits before 6 are gone.
    checkpoint = [protocol(), metadata()] + [add(f"{version}.parquet") for version in range(1, 7)]
    right_commits = [(version, [write(BASE_TIME + version), add(f"{version}.parquet")]) for version in (6, 7, 8)]
    right = snapshot_state(TableLog(6, [], checkpoint, right_commits))

    without_base = diff_history(left, right)
    with_base = diff_history(left, right, state(*shared))

    assert (ids(without_base), without_base["history_truncated"]) == (["8", "7", "6"], True)
    assert (ids(with_base), with_base["history_truncated"]) == (["8", "7", "6"], True)  # 4 and 5 are not listed
    assert with_base["diff_type"] == without_base["diff_type"] == "changed"  # the same table, checkpointed


def test_history_is_complete_when_right_log_reaches_back_to_the_base() -> None:
    shared = [created()] + [[write(BASE_TIME + version), add(f"{version}.parquet")] for version in range(1, 6)]
    right_commits = [(version, [write(BASE_TIME + version), add(f"{version}.parquet")]) for version in range(5, 9)]
    right = snapshot_state(TableLog(4, [], [protocol(), metadata()], right_commits))

    diff = diff_history(state(*shared), right, state(*shared))

    assert (ids(diff), diff["history_truncated"]) == (["8", "7", "6"], False)


def test_a_left_log_cleaned_past_the_divergence_needs_the_base_to_tell() -> None:
    shared = [created()] + [[write(BASE_TIME + version), add(f"{version}.parquet")] for version in range(1, 4)]
    right = state(*shared, [write(BASE_TIME + 40), add("r.parquet")])
    left_commits = [(version, [write(BASE_TIME + 100 + version), add(f"l{version}.parquet")]) for version in (10, 11)]
    left = snapshot_state(TableLog(9, [], [protocol(), metadata()], left_commits))

    without_base = diff_history(left, right)
    with_base = diff_history(left, right, state(*shared))

    assert (ids(without_base), without_base["history_truncated"]) == (["4", "3", "2", "1", "0"], True)
    assert (ids(with_base), with_base["history_truncated"]) == (["4"], False)


# ---------------------------------------------------------------- a table dropped and created again


def test_a_table_created_again_at_the_path_shares_no_version_with_the_old_one() -> None:
    """The same version numbers, even an equal CREATE TABLE entry: another metaData.id is another table."""
    old = [created(), [write(BASE_TIME + 1), add("a.parquet")], [write(BASE_TIME + 2), add("b.parquet")]]
    new = [created(table_id="table-2"), *([write(BASE_TIME + 10 + v), add(f"n{v}.parquet")] for v in range(1, 6))]

    for diff in (diff_history(state(*old), state(*new)), diff_history(state(*old), state(*new), state(*old))):
        assert diff["diff_type"] == "replaced"
        assert ids(diff) == ["5", "4", "3", "2", "1", "0"]
        assert diff["history_truncated"] is False
        assert diff["table_ids"] == {"left": "table-1", "right": "table-2"}


def test_a_new_table_whose_commits_before_its_checkpoint_are_gone_is_replaced_and_truncated() -> None:
    old = [created()] + [[write(BASE_TIME + v), add(f"{v}.parquet")] for v in (1, 2)]
    checkpoint = [protocol(), metadata(table_id="table-2")] + [add(f"n{v}.parquet") for v in range(1, 5)]
    commits = [(v, [write(BASE_TIME + 10 + v), add(f"n{v}.parquet")]) for v in (4, 5)]
    right = snapshot_state(TableLog(4, [], checkpoint, commits))

    diff = diff_history(state(*old), right, state(*old))

    assert (diff["diff_type"], ids(diff), diff["history_truncated"]) == ("replaced", ["5", "4"], True)


def test_a_table_created_again_on_left_leaves_every_version_of_right_unshared() -> None:
    old = [created(), [write(BASE_TIME + 1), add("a.parquet")]]
    left = state(created(BASE_TIME + 50, table_id="table-2"), [write(BASE_TIME + 51), add("l.parquet")])
    right = state(*old, [write(BASE_TIME + 2), add("b.parquet")])

    diff = diff_history(left, right, state(*old))

    assert (diff["diff_type"], ids(diff), diff["history_truncated"]) == ("replaced", ["2", "1", "0"], False)


def test_a_log_without_a_table_id_is_matched_by_content_alone() -> None:
    shared = [created(table_id=None), [write(BASE_TIME + 1), add("a.parquet")]]
    diff = diff_history(state(*shared), state(*shared, [write(BASE_TIME + 2), add("b.parquet")]), state(*shared))
    assert (diff["diff_type"], ids(diff)) == ("changed", ["2"])


# ---------------------------------------------------------------- schema and metadata


def test_schema_changes_removed_added_nested_type_and_nullability() -> None:
    left_schema = struct(
        column("id", "integer", nullable=False),
        column("name", "string"),
        column("legacy_a", "string"),
        column("legacy_b", "double"),
        column("address", struct(column("city", "string"))),
    )
    right_schema = struct(
        column("id", "long", nullable=False),
        column("name", "string", nullable=False),
        column("address", struct(column("city", "string"), column("zip", "string"))),
    )

    diff = diff_history(state(created(schema=left_schema)), state(created(schema=right_schema)))

    assert sorted(diff["schema_changes"], key=lambda change: change["column"]) == [
        {"change": "added", "column": "address.zip", "left": None, "right": "string"},
        {"change": "type_changed", "column": "id", "left": "integer", "right": "long"},
        {"change": "removed", "column": "legacy_a", "left": "string", "right": None},
        {"change": "removed", "column": "legacy_b", "left": "double", "right": None},
        {"change": "nullability_changed", "column": "name", "left": True, "right": False},
    ]


def test_fields_inside_arrays_and_maps_are_followed() -> None:
    left_schema = struct(
        column("events", {"type": "array", "elementType": struct(column("kind", "string")), "containsNull": True}),
        column("scores", {"type": "map", "keyType": "string", "valueType": "integer", "valueContainsNull": True}),
    )
    right_schema = struct(
        column("events", {"type": "array", "elementType": struct(column("kind", "string"), column("at", "timestamp")),
                          "containsNull": True}),
        column("scores", {"type": "map", "keyType": "string", "valueType": "long", "valueContainsNull": True}),
    )
    diff = diff_history(state(created(schema=left_schema)), state(created(schema=right_schema)))
    assert diff["schema_changes"] == [
        {"change": "added", "column": "events.element.at", "left": None, "right": "timestamp"},
        {"change": "type_changed", "column": "scores.value", "left": "integer", "right": "long"},
    ]


def test_a_rename_is_matched_by_column_mapping_id() -> None:
    mapped = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "3"}
    left_schema = struct(column("id", "long", column_id=1), column("full_name", "string", column_id=2),
                         column("info", struct(column("mail", "string", column_id=4)), column_id=3))
    right_schema = struct(column("id", "long", column_id=1), column("name", "string", column_id=2),
                          column("info", struct(column("email", "string", column_id=4)), column_id=3))

    diff = diff_history(state(created(schema=left_schema, configuration=mapped)),
                        state(created(schema=right_schema, configuration=mapped)))
    by_name = diff_history(state(created(schema=left_schema)), state(created(schema=right_schema)))

    assert diff["schema_changes"] == [
        {"change": "renamed", "column": "name", "left": "full_name", "right": "name"},
        {"change": "renamed", "column": "info.email", "left": "info.mail", "right": "info.email"},
    ]
    assert sorted(change["change"] for change in by_name["schema_changes"]) == ["added", "added", "removed", "removed"]


def test_partition_property_and_protocol_changes() -> None:
    left = state(created(partition_columns=("day",), configuration={"delta.appendOnly": "true", "owner": "a"}))
    right = state([commit_info("CREATE TABLE", BASE_TIME), protocol(3, 7, ["deletionVectors"], ["deletionVectors"]),
                   metadata(partition_columns=("day", "hour"), configuration={"owner": "b", "new": "x"})])

    diff = diff_history(left, right)

    assert diff["partition_columns"] == {"left": ["day"], "right": ["day", "hour"]}
    assert diff["properties_changed"] == {
        "delta.appendOnly": {"left": "true", "right": None},
        "new": {"left": None, "right": "x"},
        "owner": {"left": "a", "right": "b"},
    }
    assert diff["protocol_changed"]["right"]["readerFeatures"] == ["deletionVectors"]
    assert diff["protocol_changed"]["left"]["minReaderVersion"] == 1
    json.dumps(diff)


# ---------------------------------------------------------------- paging


RESULTS = [{"id": str(version)} for version in range(5, 0, -1)]  # newest first: 5, 4, 3, 2, 1


def test_pages_walk_the_results_newest_first() -> None:
    page, pagination = paginate(RESULTS, None, 2)
    assert [result["id"] for result in page] == ["5", "4"]
    assert pagination == {"has_more": True, "next_offset": "4", "max_per_page": 1000, "results": 2}

    page, pagination = paginate(RESULTS, pagination["next_offset"], 2)
    assert [result["id"] for result in page] == ["3", "2"]

    page, pagination = paginate(RESULTS, pagination["next_offset"], 2)
    assert [result["id"] for result in page] == ["1"]
    assert pagination == {"has_more": False, "next_offset": "", "max_per_page": 1000, "results": 1}


def test_page_boundaries() -> None:
    assert paginate(RESULTS, None, 5)[1]["has_more"] is False
    assert paginate(RESULTS, None, 1000)[1]["results"] == 5
    last = {"has_more": False, "next_offset": "", "max_per_page": 1000, "results": 0}
    assert paginate(RESULTS, "1", 10) == ([], last)
    assert [result["id"] for result in paginate(RESULTS, "9", 1)[0]] == ["5"]  # an id newer than all
    assert paginate([], None, 1)[0] == []
    for amount in (0, 1001):
        with pytest.raises(ValueError, match="amount"):
            paginate(RESULTS, None, amount)
