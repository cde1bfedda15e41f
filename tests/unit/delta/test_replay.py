"""The one reconciliation rule (PROTOCOL.md#action-reconciliation): a logical file is (path, dvId)."""

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exporter.delta.replay import UNTRACKED, TableLog, reconcile, snapshot_state, snapshot_states, with_older_commits
from exporter.parquet.splice import BytesSource

pytestmark = pytest.mark.unit

PROTOCOL = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7}}
METADATA = {"metaData": {"id": "t", "schemaString": '{"type":"struct","fields":[]}', "partitionColumns": [],
                         "configuration": {}}}


def add(path: str, dv: str | None = None, rows: int = 10) -> dict:
    action = {"path": path, "size": 100, "stats": f'{{"numRecords":{rows}}}'}
    if dv:
        action["deletionVector"] = {"storageType": "u", "pathOrInlineDv": dv, "offset": 1, "sizeInBytes": 4,
                                    "cardinality": 2}
    return {"add": action}


def remove(path: str, dv: str | None = None) -> dict:
    action = {"path": path}
    if dv:
        action["deletionVector"] = {"storageType": "u", "pathOrInlineDv": dv, "offset": 1}
    return {"remove": action}


def test_a_deletion_vector_update_replaces_the_logical_file():
    commits = [(0, [PROTOCOL, METADATA, add("a"), add("b")]),
               (1, [remove("a"), add("a", "dv1")]),  # DELETE with deletion vectors
               (2, [remove("a", "dv1"), add("a", "dv2")])]
    state = snapshot_state(TableLog(None, [], [], commits))
    assert (state.num_files, state.num_rows) == (2, 10 + 10 - 2)


def test_a_remove_of_another_deletion_vector_leaves_the_file_live():
    live: dict = {}
    for action in (add("a", "dv1"), remove("a"), remove("a", "dv2")):
        reconcile(live, action)
    assert list(live) == [("a", "udv1@1")]
    reconcile(live, remove("a", "dv1"))
    assert live == {}


def test_untracked_adds_stay_out():
    live: dict = {}
    for action in (add("a"), add("b")):
        reconcile(live, action, lambda a: a["path"] if a["path"] == "b" else UNTRACKED)
    assert live == {("b", ""): "b"}


def checkpoint_file(adds: list[dict], row_group_size: int) -> tuple[str, BytesSource]:
    """A parquet checkpoint holding the protocol, metaData and `adds` (with or without `stats_parsed`)."""
    dv = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
                    ("sizeInBytes", pa.int32()), ("cardinality", pa.int64())])
    schema = pa.schema([
        ("add", pa.struct([("path", pa.string()), ("size", pa.int64()), ("stats", pa.string()),
                           ("stats_parsed", pa.struct([("numRecords", pa.int64())])), ("deletionVector", dv)])),
        ("protocol", pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])),
        ("metaData", pa.struct([("id", pa.string()), ("schemaString", pa.string()),
                                ("partitionColumns", pa.list_(pa.string()))])),
    ])
    rows = [PROTOCOL, {"metaData": {k: v for k, v in METADATA["metaData"].items() if k != "configuration"}}, *adds]
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), buffer, row_group_size=row_group_size)
    return "00000000000000000009.checkpoint.parquet", BytesSource(buffer.getvalue())


def test_checkpoint_adds_summed_column_wise_count_as_the_same_adds_replayed_one_by_one():
    def kinds(i: int) -> dict:
        action = add(f"f{i}", dv=f"dv{i}" if i % 3 == 0 else None, rows=i)["add"]
        if i % 4 == 1:  # numRecords not the first key: the JSON is parsed
            action["stats"] = f'{{"minValues":{{"numRecords":-1}},"numRecords":{i}}}'
        if i % 4 == 2:  # stats only as a struct (delta.checkpoint.writeStatsAsJson=false)
            action["stats"], action["stats_parsed"] = None, {"numRecords": i}
        return {"add": action}

    adds = [kinds(i) for i in range(1, 40)]
    later = [(10, [remove("f5"), remove("f6", "dv6"), add("g", rows=7)])]  # f6's DV: f6 leaves; f5 leaves

    from_checkpoint = snapshot_state(TableLog(9, [checkpoint_file(adds, row_group_size=7)], [], later))
    as_json = [{"add": {**a["add"], "stats": a["add"]["stats"] or f'{{"numRecords":{a["add"]["stats_parsed"]["numRecords"]}}}'}}
               for a in adds]  # a JSON commit has no stats_parsed
    one_by_one = snapshot_state(TableLog(None, [], [], [(v, [PROTOCOL, METADATA, *as_json] if v == 9 else [])
                                                        for v in range(10)] + later))

    assert (from_checkpoint.num_files, from_checkpoint.size_bytes, from_checkpoint.num_rows) == \
        (one_by_one.num_files, one_by_one.size_bytes, one_by_one.num_rows) == \
        (39 - 2 + 1, 100 * 38, sum(range(1, 40)) - 5 - 6 + 7 - 2 * (len(range(3, 40, 3)) - 1))


def test_a_checkpoint_add_without_any_record_count_makes_the_rows_unknown():
    adds = [add("a", rows=3), {"add": {"path": "b", "size": 1, "stats": '{"minValues":{}}'}}]
    state = snapshot_state(TableLog(9, [checkpoint_file(adds, row_group_size=1)], [], []))
    assert (state.num_files, state.num_rows) == (2, None)


def test_the_table_id_is_the_newest_metadata_id():
    checkpoint = [checkpoint_file([add("a")], row_group_size=1)]
    assert snapshot_state(TableLog(9, checkpoint, [], [])).table_id == "t"
    created_again = {"metaData": {**METADATA["metaData"], "id": "u"}}
    assert snapshot_state(TableLog(9, checkpoint, [], [(10, [created_again])])).table_id == "u"


def test_commits_older_than_the_checkpoint_add_history_and_nothing_else():
    head = snapshot_state(TableLog(9, [checkpoint_file([add("a")], row_group_size=1)], [], [(10, [add("b")])]))
    older = [(v, [{"commitInfo": {"operation": "WRITE", "timestamp": v}}, add(f"old{v}")]) for v in (7, 8)]

    extended = with_older_commits(head, [*older, (10, [add("not replayed twice")])])

    assert (extended.earliest_version, sorted(extended.history), extended.history[7]["timestamp"]) == (7, [7, 8, 10], 7)
    assert (extended.num_files, extended.num_rows, extended.commit_digests) == (2, 20, head.commit_digests)


def test_logs_sharing_a_checkpoint_read_it_once_and_replay_as_each_alone():
    name, source = checkpoint_file([add(f"f{i}", rows=i) for i in range(1, 30)], row_group_size=8)
    reads = []

    class Counted:
        size = source.size

        def read_range(self, start: int, end: int) -> bytes:
            reads.append((start, end))
            return source.read_range(start, end)

    destination = [(10, [remove("f3"), add("g", rows=100)])]
    merged = [*destination, (11, [remove("f4"), remove("g"), add("h", rows=5)])]  # a branch two commits on
    logs = [TableLog(9, [(name, Counted())], [], commits, checkpoint_identity=("s3://x/9.checkpoint.parquet",))
            for commits in (destination, merged)]

    together = snapshot_states(logs)
    read_together, reads[:] = len(reads), []
    alone = [snapshot_state(log) for log in logs]

    assert together == alone and read_together * 2 == len(reads)
    assert [(s.num_files, s.num_rows) for s in together] == [(29, sum(range(1, 30)) - 3 + 100),
                                                             (28, sum(range(1, 30)) - 3 - 4 + 5)]
