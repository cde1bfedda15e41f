"""A checkpoint's live adds, streamed a slice at a time (`LiveFiles`): the other actions' rows
around and between the adds, files removed by later commits, deletion vectors and several row
groups give the live files the reconciliation rule gives, whichever way they are asked for."""

import io
import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import exporter.delta.live_files as live_files
from exporter.delta.live_files import LiveFiles
from exporter.delta.log import Checkpoint, LogSegment
from exporter.parquet.splice import BytesSource

pytestmark = pytest.mark.unit

DV = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
                ("sizeInBytes", pa.int32()), ("cardinality", pa.int64())])
ADD = pa.struct([("path", pa.string()), ("size", pa.int64()), ("deletionVector", DV)])
PROTOCOL = {"minReaderVersion": 3, "minWriterVersion": 7}
METADATA = {"id": "t", "schemaString": '{"type":"struct","fields":[]}', "partitionColumns": []}


def dv(name: str) -> dict:
    return {"storageType": "u", "pathOrInlineDv": name, "offset": 1, "sizeInBytes": 4, "cardinality": 2}


class Log:
    """A checkpoint at version 1 (rows in `rows` order: None for another action's row) and commits after it."""

    def __init__(self, rows: list[dict | None], commits: list[list[dict]], row_group_size: int):
        protocol = [PROTOCOL if i == 0 else None for i in range(len(rows))]
        metadata = [{**METADATA, "configuration": []} if i == 0 else None for i in range(len(rows))]
        table = pa.table({"protocol": pa.array(protocol, pa.struct([("minReaderVersion", pa.int32()),
                                                                     ("minWriterVersion", pa.int32())])),
                          "metaData": pa.array(metadata, pa.struct([("id", pa.string()), ("schemaString", pa.string()),
                                                                    ("partitionColumns", pa.list_(pa.string())),
                                                                    ("configuration", pa.map_(pa.string(), pa.string()))])),
                          "add": pa.array(rows, ADD)})
        sink = io.BytesIO()
        pq.write_table(table, sink, row_group_size=row_group_size)
        self.files = {f"{1:020d}.checkpoint.parquet": sink.getvalue()}
        names = []
        for version, actions in enumerate(commits, start=2):
            name = f"{version:020d}.json"
            self.files[name] = "\n".join(json.dumps(a) for a in actions).encode()
            names.append((version, name))
        self.segment = LogSegment(Checkpoint(1, "classic", [f"{1:020d}.checkpoint.parquet"]), names, None,
                                  1 + len(commits))

    def raw(self, name: str) -> bytes:
        return self.files[name]

    def raws(self, names: list[str]):
        return map(self.raw, names)

    def source(self, name: str) -> BytesSource:
        return BytesSource(self.files[name])

    def checkpoint_files(self) -> list[str]:
        return list(self.segment.checkpoint.files)


def adds(count: int) -> list[dict]:
    return [{"path": f"part-{i}.parquet", "size": i, "deletionVector": dv(f"dv{i}") if i % 3 == 0 else None}
            for i in range(count)]


def key(add: dict) -> str:
    vector = add.get("deletionVector")
    return add["path"] + "\0" + ("" if not vector else vector["storageType"] + vector["pathOrInlineDv"] + "@1")


@pytest.mark.parametrize("later", ["none", "removes", "removes and adds"])
@pytest.mark.parametrize("slice_rows", [4, 1000])
def test_the_checkpoints_live_adds_are_the_reconciled_ones_however_sliced(monkeypatch, later, slice_rows):
    monkeypatch.setattr(live_files, "_SLICE", slice_rows)  # slices cross the other actions' rows and the removed files
    files = adds(20)
    rows = [None, None, *files[:7], None, *files[7:]]  # protocol and metaData first, a txn-like row between
    commits = [] if later == "none" else [[{"remove": {"path": "part-3.parquet", "deletionVector": dv("dv3")}},
                                           {"remove": {"path": "part-8.parquet"}}, {"remove": {"path": "part-11.parquet"}}]]
    if later == "removes and adds":
        commits.append([{"add": {"path": "part-99.parquet", "size": 99}}, {"remove": {"path": "part-0.parquet",
                                                                                      "deletionVector": dv("dv0")}}])
    live = LiveFiles(Log(rows, commits, row_group_size=9))
    removed = {"none": set(), "removes": {3, 8, 11}, "removes and adds": {0, 3, 8, 11}}[later]
    expected = [f for i, f in enumerate(files) if i not in removed]
    added = [{"path": "part-99.parquet", "size": 99}] if later == "removes and adds" else []

    batches = list(live.checkpoint_batches())
    assert [p for batch in batches for p in pc.struct_field(batch, "path").to_pylist()] == [f["path"] for f in expected]
    for most in (2, 4, 1000):  # row groups of 9 read in pieces of 2 (5 pieces), 3 (3 pieces) and 9 rows
        pieces = list(live.checkpoint_batches(most=most))
        assert [p for piece in pieces for p in pc.struct_field(piece, "path").to_pylist()] == \
            [f["path"] for f in expected], most
        assert max(map(len, pieces)) <= most
    assert sorted(f["path"] for f in live.files()) == sorted(f["path"] for f in expected + added)
    assert sorted(live.keys().to_pylist()) == sorted(key(f) for f in expected + added)
    wanted = pa.array([key(expected[1]), key(expected[-1])])
    assert [a["path"] for a in live.adds(wanted)] == [expected[1]["path"], expected[-1]["path"]]
    assert (live.protocol, live.metadata["id"]) == (PROTOCOL, "t")


@pytest.mark.parametrize("commits_name_them", [False, True])
def test_metadata_and_protocol_read_no_row_group_past_the_one_that_holds_them(monkeypatch, commits_name_them):
    """The checkpoint's first row group holds metaData and protocol: no later row group is read for
    them (each is a ranged read of the checkpoint), none at all when a later commit carries both; its
    footer is read once, for them and for the adds."""
    read: list[list[str]] = []
    row_groups = live_files.opened_row_groups
    monkeypatch.setattr(live_files, "opened_row_groups",
                        lambda parquet_file, name, columns, most=None: (
                            read.append(columns) or group for group in row_groups(parquet_file, name, columns, most)))
    opened = []
    open_parquet = live_files.open_parquet
    monkeypatch.setattr(live_files, "open_parquet", lambda source, name: opened.append(name) or open_parquet(source, name))
    newer = {**METADATA, "id": "newer"}
    commits = [[{"protocol": PROTOCOL}, {"metaData": newer}]] if commits_name_them else []
    live = LiveFiles(Log([None, None, *adds(10)], commits, row_group_size=4))

    assert live.metadata["id"] == ("newer" if commits_name_them else "t") and live.protocol == PROTOCOL
    assert len(read) == (0 if commits_name_them else 1)
    assert sum(len(batch) for batch in live.checkpoint_batches(whole=True)) == 10
    assert sum(len(batch) for batch in live.checkpoint_batches(whole=True, most=3)) == 10
    assert opened == [f"{1:020d}.checkpoint.parquet"]  # its footer read once, for metaData and for the adds


def test_a_row_group_read_in_pieces_is_decoded_as_each_is_asked_for_and_a_broken_one_is_corrupt():
    """`read_row_group_pieces`: the pieces of a row group are of even size, decoded one at a time (a
    piece's data broken past the first piece is found only when that piece is asked for), and a
    broken one is a CorruptLog naming the file and row group."""
    from exporter.errors import CorruptLog
    from exporter.parquet.splice import read_row_group_pieces

    sink = io.BytesIO()
    pq.write_table(pa.table({"path": [f"part-{i:05d}.parquet" for i in range(10_000)]}), sink, row_group_size=10_000,
                   data_page_size=1024, compression="none", use_dictionary=False)
    good = sink.getvalue()
    pieces = read_row_group_pieces(pq.ParquetFile(io.BytesIO(good)), 0, ["path"], "c.parquet", 4_000)
    assert [len(piece) for piece in pieces] == [3_334, 3_334, 3_332]
    broken = bytearray(good)
    at = good.index(b"part-09000.parquet")  # a page of the last piece, its bytes made a page header's garbage
    broken[at - 64:at + 64] = b"\xff" * 128
    pieces = read_row_group_pieces(pq.ParquetFile(io.BytesIO(bytes(broken))), 0, ["path"], "c.parquet", 4_000)
    assert len(next(pieces)) == 3_334  # the first piece: decoded before the break is reached
    with pytest.raises(CorruptLog, match=r"c\.parquet: row group 0 is not readable"):
        list(pieces)
