"""Rewriting file-action paths in JSON commits and parquet checkpoints."""

import io
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exporter.delta.actions import parse_actions
from exporter.delta.log import LogListing, select_segment
from exporter.delta.paths import is_absolute_uri
from exporter.errors import CorruptLog
from exporter.export.resolve import PathResolver
from exporter.export.rewrite import rewrite_checkpoint, rewrite_commit

pytestmark = pytest.mark.unit

DV_FILE = "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
DV_U = "ab^-aqEH.-t@S}K{vb[*k^"  # PROTOCOL.md example 1: the descriptor of DV_FILE
SPARK_DV_U = "Ys#IoS6<adOUyLC}FIGm"  # names deletion_vector_bbbeccd0-...; no object for it below
SPARK_DV = '{"storageType":"u","pathOrInlineDv":"' + SPARK_DV_U + '","offset":1,"sizeInBytes":34,"cardinality":1}'
ADDRESSES = {
    "p=x y/part-1.parquet": "s3://bucket/ns/data/g1/c1",
    "p=a%25b/part-2.parquet": "s3://bucket/ns/data/g2/c2",
    "p=c+d/part-3.parquet": "s3://bucket/ns/data/g3/c3",
    "part-4.parquet": "s3://bucket/imported/dir with space/part-4.parquet",
    "_change_data/cdc-1.parquet": "s3://bucket/ns/data/g5/c5",
    DV_FILE: "s3://bucket/ns/data/g6/c6",
}


def resolver() -> PathResolver:
    return PathResolver(ADDRESSES)


def lines(*actions: str) -> bytes:
    return "".join(action + "\n" for action in actions).encode()


# ---------------------------------------------------------------------------------- JSON


COMMIT_INFO = (
    '{"commitInfo":{"timestamp":1700000000000,"operation":"WRITE",'
    '"bigCounter":12345678901234567890123,"unknownNested":{"a":[1,2.5,null]}}}'
)


def test_add_path_is_rewritten_and_everything_else_is_kept() -> None:
    raw = lines(
        COMMIT_INFO,
        '{"add":{"path":"p=x%20y/part-1.parquet","partitionValues":{"p":"x y"},"size":12345678901234567890123,'
        '"modificationTime":1,"dataChange":true,"stats":"{\\"numRecords\\":3}","futureField":{"k":"é"}}}',
        '{"txn":{"appId":"app","version":3}}',
    )
    result = rewrite_commit("00000000000000000001.json", raw, resolver())
    out = result.content.decode().split("\n")
    assert out[0] == COMMIT_INFO  # first, byte-identical, big int intact
    assert out[1] == (
        '{"add":{"path":"s3://bucket/ns/data/g1/c1","partitionValues":{"p":"x y"},"size":12345678901234567890123,'
        '"modificationTime":1,"dataChange":true,"stats":"{\\"numRecords\\":3}","futureField":{"k":"é"}}}'
    )
    assert out[2] == '{"txn":{"appId":"app","version":3}}'
    assert out[3] == ""  # the trailing newline is kept
    assert (result.files_rewritten, result.missing) == (1, [])


def test_add_then_remove_of_one_file_get_the_identical_uri() -> None:
    path_resolver = resolver()
    added = rewrite_commit("1.json", lines('{"add":{"path":"p=a%2525b/part-2.parquet"}}'), path_resolver)
    removed = rewrite_commit("2.json", lines('{"remove":{"path":"p=a%2525b/part-2.parquet"}}'), path_resolver)
    add_path = parse_actions("1.json", added.content)[0]["add"]["path"]
    remove_path = parse_actions("2.json", removed.content)[0]["remove"]["path"]
    assert add_path == remove_path == "s3://bucket/ns/data/g2/c2"


def test_plus_in_a_log_path_is_a_plus_and_an_imported_key_is_encoded() -> None:
    raw = lines('{"add":{"path":"p=c+d/part-3.parquet"}}', '{"add":{"path":"part-4.parquet"}}')
    actions = parse_actions("x.json", rewrite_commit("x.json", raw, resolver()).content)
    assert [action["add"]["path"] for action in actions] == [
        "s3://bucket/ns/data/g3/c3",
        "s3://bucket/imported/dir%20with%20space/part-4.parquet",
    ]


def test_relative_deletion_vector_becomes_an_absolute_one() -> None:
    raw = lines(
        '{"add":{"path":"part-4.parquet","deletionVector":{"storageType":"u","pathOrInlineDv":"' + DV_U + '",'
        '"offset":4,"sizeInBytes":40,"cardinality":6,"maxRowIndex":99}}}'
    )
    result = rewrite_commit("x.json", raw, resolver())
    dv = parse_actions("x.json", result.content)[0]["add"]["deletionVector"]
    assert list(dv.items()) == [
        ("storageType", "p"),
        ("pathOrInlineDv", "s3://bucket/ns/data/g6/c6"),
        ("offset", 4),
        ("sizeInBytes", 40),
        ("cardinality", 6),
        ("maxRowIndex", 99),
    ]
    assert result.files_rewritten == 2


def test_inline_and_absolute_deletion_vectors_are_left_alone() -> None:
    inline = (
        '{"remove":{"path":"s3://abs/f.parquet","deletionVector":{"storageType":"i",'
        '"pathOrInlineDv":"wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L","sizeInBytes":40,"cardinality":6}}}'
    )
    absolute = (
        '{"add":{"path":"s3://abs/g.parquet","deletionVector":{"storageType":"p",'
        '"pathOrInlineDv":"s3://abs/dv.bin","offset":4,"sizeInBytes":40,"cardinality":6}}}'
    )
    raw = lines(inline, absolute)
    result = rewrite_commit("x.json", raw, resolver())
    assert result.content == raw
    assert (result.files_rewritten, result.missing) == (0, [])


def test_missing_add_files_and_deletion_vectors_are_all_reported() -> None:
    raw = lines(
        '{"add":{"path":"gone-1.parquet"}}',
        '{"add":{"path":"part-4.parquet","deletionVector":' + SPARK_DV + "}}",
        '{"add":{"path":"p=x%20y/gone-2.parquet"}}',
    )
    result = rewrite_commit("x.json", raw, resolver())
    assert result.missing == [
        "gone-1.parquet",
        "deletion_vector_bbbeccd0-a844-4684-9da2-7dbdfa6e9319.bin",
        "p=x%20y/gone-2.parquet",
    ]


def test_vacuumed_remove_and_cdc_keep_their_paths() -> None:
    remove = '{"remove":{"path":"vacuumed.parquet","deletionTimestamp":1,"dataChange":true}}'
    remove_dv = '{"remove":{"path":"p=x%20y/part-1.parquet","deletionVector":' + SPARK_DV + "}}"
    cdc = '{"cdc":{"path":"_change_data/vacuumed.parquet","partitionValues":{},"size":1,"dataChange":false}}'
    result = rewrite_commit("x.json", lines(remove, remove_dv, cdc), resolver())
    out = result.content.decode().split("\n")
    assert out[0] == remove and out[2] == cdc
    kept_dv = json.loads(out[1])["remove"]
    assert kept_dv["path"] == "s3://bucket/ns/data/g1/c1"
    assert kept_dv["deletionVector"]["storageType"] == "u"
    assert kept_dv["deletionVector"]["pathOrInlineDv"] == SPARK_DV_U
    assert result.missing == []


def test_cdc_paths_are_rewritten() -> None:
    raw = lines('{"cdc":{"path":"_change_data/cdc-1.parquet","partitionValues":{},"size":1,"dataChange":false}}')
    assert json.loads(rewrite_commit("x.json", raw, resolver()).content)["cdc"]["path"] == "s3://bucket/ns/data/g5/c5"


def test_absolute_paths_are_untouched_byte_for_byte() -> None:
    raw = lines('{"add":{"path":"s3://other/x%20y.parquet",  "size": 1.50}}')
    assert rewrite_commit("x.json", raw, resolver()).content == raw


def test_line_endings_and_a_missing_final_newline_are_kept() -> None:
    raw = b'{"commitInfo":{}}\r\n{"add":{"path":"p=c+d/part-3.parquet"}}\r\n\n{"txn":{"appId":"a","version":1}}'
    out = rewrite_commit("x.json", raw, resolver()).content
    assert out == raw.replace(b"p=c+d/part-3.parquet", b"s3://bucket/ns/data/g3/c3")


def test_an_unparsable_line_names_file_and_line() -> None:
    with pytest.raises(CorruptLog, match=r"00000000000000000003\.json line 2"):
        rewrite_commit("00000000000000000003.json", b'{"commitInfo":{}}\n{"add":{"path":"a"\n', resolver())


def test_a_malformed_deletion_vector_names_file_and_line() -> None:
    bad_dv = '{"storageType":"u","pathOrInlineDv":"short"}'
    raw = lines('{"commitInfo":{}}', '{"add":{"path":"part-4.parquet","deletionVector":' + bad_dv + "}}")
    with pytest.raises(CorruptLog, match=r"x\.json line 2: .*'short'"):
        rewrite_commit("x.json", raw, resolver())


# -------------------------------------------------------------------------------- parquet


DV_TYPE = pa.struct(
    [
        pa.field("storageType", pa.string(), nullable=False),
        pa.field("pathOrInlineDv", pa.string(), nullable=False),
        ("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32(), nullable=False),
        pa.field("cardinality", pa.int64(), nullable=False),
    ]
)
ADD_TYPE = pa.struct(
    [
        pa.field("path", pa.string(), nullable=False, metadata={b"k": b"v"}),
        ("size", pa.int64()),
        ("futureField", pa.string()),
        ("deletionVector", DV_TYPE),
    ]
)
REMOVE_TYPE = pa.struct([("path", pa.string()), ("deletionTimestamp", pa.int64()), ("deletionVector", DV_TYPE)])
CHECKPOINT_SCHEMA = pa.schema(
    [
        ("txn", pa.struct([("appId", pa.string()), ("version", pa.int64())])),
        ("add", ADD_TYPE),
        ("remove", REMOVE_TYPE),
        ("metaData", pa.struct([("id", pa.string())])),
    ],
    metadata={b"writer": b"test"},
)


def dv(storage_type: str, value: str) -> dict:
    return {"storageType": storage_type, "pathOrInlineDv": value, "offset": 4, "sizeInBytes": 40, "cardinality": 6}


def add(path: str, deletion_vector: dict | None = None) -> dict:
    return {"path": path, "size": 10, "futureField": "kept", "deletionVector": deletion_vector}


# One action per row; the other action columns are null on that row.
ROWS = [
    {"txn": {"appId": "app", "version": 12345678901}},
    {"metaData": {"id": "table-id"}},
    {"add": add("p=x%20y/part-1.parquet")},
    {"add": add("part-4.parquet", dv("u", DV_U))},
    {"add": add("s3://abs/f.parquet", dv("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L"))},
    {"remove": {"path": "p=a%2525b/part-2.parquet", "deletionTimestamp": 7, "deletionVector": dv("u", DV_U)}},
    {"remove": {"path": "vacuumed.parquet", "deletionTimestamp": 8, "deletionVector": None}},
    {"add": add("p=c+d/part-3.parquet", dv("p", "s3://abs/dv.bin"))},
    {"remove": {"path": None, "deletionTimestamp": 9, "deletionVector": None}},
]


def checkpoint_table(rows: list[dict] = ROWS) -> pa.Table:
    """The rows as a table of two chunks, with placeholder values under null structs, as delta-rs writes."""
    columns = {}
    for field in CHECKPOINT_SCHEMA:
        values = [row.get(field.name) for row in rows]
        if field.name == "add":  # a non-nullable `path` needs a value even where `add` is null
            values = [value if value else add("") for value in values]
            mask = pa.array([row.get("add") is None for row in rows])
            columns[field.name] = pa.StructArray.from_arrays(
                [pa.array([v[f.name] for v in values], f.type) for f in field.type], fields=list(field.type), mask=mask
            )
        else:
            columns[field.name] = pa.array(values, field.type)
    table = pa.Table.from_pydict(columns, schema=CHECKPOINT_SCHEMA)
    return pa.Table.from_batches(table.to_batches(max_chunksize=5), schema=CHECKPOINT_SCHEMA)


def test_checkpoint_paths_and_deletion_vectors_are_rewritten() -> None:
    table = checkpoint_table()
    assert table.column("add").num_chunks == 2
    out, files_rewritten, missing = rewrite_checkpoint(table, resolver())
    adds = out.column("add").to_pylist()
    assert adds[2]["path"] == "s3://bucket/ns/data/g1/c1"
    assert adds[3] == {
        "path": "s3://bucket/imported/dir%20with%20space/part-4.parquet",
        "size": 10,
        "futureField": "kept",
        "deletionVector": {**dv("u", DV_U), "storageType": "p", "pathOrInlineDv": "s3://bucket/ns/data/g6/c6"},
    }
    assert adds[4] == add("s3://abs/f.parquet", dv("i", "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L"))
    assert adds[7] == add("s3://bucket/ns/data/g3/c3", dv("p", "s3://abs/dv.bin"))
    removes = out.column("remove").to_pylist()
    assert removes[5]["path"] == "s3://bucket/ns/data/g2/c2"
    assert removes[5]["deletionVector"]["pathOrInlineDv"] == "s3://bucket/ns/data/g6/c6"
    assert removes[6]["path"] == "vacuumed.parquet"  # vacuumed: kept, not reported
    assert removes[8] == {"path": None, "deletionTimestamp": 9, "deletionVector": None}
    assert (files_rewritten, missing) == (6, [])


def test_checkpoint_schema_null_masks_and_other_columns_are_kept_exactly() -> None:
    table = checkpoint_table()
    out, _, _ = rewrite_checkpoint(table, resolver())
    assert out.schema.equals(table.schema, check_metadata=True)
    assert out.schema.field("add").type.field("path").metadata == {b"k": b"v"}
    for name in ("add", "remove"):
        assert out.column(name).is_null().equals(table.column(name).is_null())
        dv_before = pa.chunked_array([chunk.field("deletionVector") for chunk in table.column(name).chunks])
        dv_after = pa.chunked_array([chunk.field("deletionVector") for chunk in out.column(name).chunks])
        assert dv_after.is_null().equals(dv_before.is_null())
    for name in ("txn", "metaData"):
        assert out.column(name).equals(table.column(name))
    out.validate(full=True)


def test_rewritten_checkpoint_can_be_written_as_parquet_and_read_back() -> None:
    out, _, _ = rewrite_checkpoint(checkpoint_table(), resolver())
    buffer = io.BytesIO()
    pq.write_table(out, buffer)  # fails if a non-nullable child lost its placeholder values
    assert pq.read_table(io.BytesIO(buffer.getvalue())).equals(out)


def test_checkpoint_missing_add_files_and_deletion_vectors_are_reported() -> None:
    rows = [
        {"add": add("gone.parquet")},
        {"add": add("part-4.parquet", dv("u", SPARK_DV_U))},
        {"remove": {"path": "also-gone.parquet", "deletionTimestamp": 1, "deletionVector": dv("u", SPARK_DV_U)}},
    ]
    out, _, missing = rewrite_checkpoint(checkpoint_table(rows), resolver())
    assert sorted(missing) == ["deletion_vector_bbbeccd0-a844-4684-9da2-7dbdfa6e9319.bin", "gone.parquet"]
    remove = out.column("remove").to_pylist()[2]
    assert remove["path"] == "also-gone.parquet"
    assert remove["deletionVector"]["storageType"] == "u"


def test_checkpoint_and_commit_give_the_same_file_the_same_uri() -> None:
    path_resolver = resolver()
    out, _, _ = rewrite_checkpoint(checkpoint_table(), path_resolver)
    commit = rewrite_commit("9.json", lines('{"remove":{"path":"p=x%20y/part-1.parquet"}}'), path_resolver)
    assert parse_actions("9.json", commit.content)[0]["remove"]["path"] == out.column("add").to_pylist()[2]["path"]


def test_a_checkpoint_without_file_actions_is_returned_unchanged() -> None:
    table = pa.table({"checkpointMetadata": pa.array([{"version": 3}], pa.struct([("version", pa.int64())]))})
    out, files_rewritten, missing = rewrite_checkpoint(table, resolver())
    assert out.equals(table) and (files_rewritten, missing) == (0, [])


def test_an_empty_checkpoint_table_is_fine() -> None:
    table = CHECKPOINT_SCHEMA.empty_table()
    out, files_rewritten, _ = rewrite_checkpoint(table, resolver())
    assert out.schema.equals(table.schema, check_metadata=True) and out.num_rows == 0 and files_rewritten == 0


# ------------------------------------------------------------------ a table delta-rs wrote


def test_a_real_delta_rs_table_gets_only_absolute_add_paths(tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    location = str(tmp_path / "table")
    for batch in range(3):
        data = pa.table({"id": [batch, batch + 10], "part": ["a b", "c+d%"]})
        deltalake.write_deltalake(location, data, mode="append", partition_by=["part"])
    deltalake.DeltaTable(location).create_checkpoint()
    deltalake.write_deltalake(location, pa.table({"id": [99], "part": ["é"]}), mode="append", partition_by=["part"])

    data_files = {
        os.path.relpath(os.path.join(root, name), location)
        for root, _, names in os.walk(location)
        for name in names
        if not os.path.relpath(root, location).startswith("_delta_log")
    }
    addresses = {key: f"s3://bucket/phys/data/g{number}/c{number}" for number, key in enumerate(sorted(data_files))}
    log_dir = Path(location) / "_delta_log"
    listing = LogListing.from_names((entry.name, entry.stat().st_size) for entry in log_dir.iterdir())
    segment = select_segment(listing)
    assert segment.checkpoint is not None and segment.checkpoint.kind == "classic"
    assert segment.head_version == 3 and [version for version, _ in segment.commits] == [3]

    path_resolver = PathResolver(addresses)
    checkpoint, _, missing = rewrite_checkpoint(pq.read_table(log_dir / segment.checkpoint.files[0]), path_resolver)
    assert missing == []
    checkpoint_adds = [action["path"] for action in checkpoint.column("add").to_pylist() if action]
    commit_adds = []
    for _, name in segment.commits:
        result = rewrite_commit(name, (log_dir / name).read_bytes(), path_resolver)
        assert result.missing == []
        commit_adds += [action["add"]["path"] for action in parse_actions(name, result.content) if "add" in action]
    assert len(checkpoint_adds) == 6 and len(commit_adds) == 1
    all_adds = checkpoint_adds + commit_adds
    assert all(is_absolute_uri(path) and path.startswith("s3://bucket/phys/data/") for path in all_adds)
    assert set(checkpoint_adds + commit_adds) == set(addresses.values())


def _z85(data: bytes) -> str:
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    out = ""
    for start in range(0, len(data), 4):
        word = int.from_bytes(data[start:start + 4], "big")
        out += "".join(alphabet[word // 85 ** k % 85] for k in range(4, -1, -1))
    return out


@pytest.mark.parametrize("first_word", [69 * 85 ** 4 + 5, 10 * 85 ** 4 + 64 * 85 ** 3],
                         ids=["id starting with /", "id looking like a scheme (a:...)"])
def test_a_relative_deletion_vector_whose_id_looks_absolute_is_rewritten_in_a_checkpoint(first_word):
    """Z85 has `/` and `:`: a `u` id can look like a URI; the storageType column decides, not the value."""
    import io
    import uuid as uuid_module

    import pyarrow as pa
    import pyarrow.parquet as pq

    from exporter.delta.deletion_vectors import relative_path
    from exporter.export.resolve import PathResolver
    from exporter.export.rewrite import rewrite_checkpoint_file

    dv_id = _z85(first_word.to_bytes(4, "big") + bytes(12))
    assert dv_id[0] == "/" or dv_id[1] == ":", dv_id
    file_name = relative_path(dv_id)
    assert file_name == f"deletion_vector_{uuid_module.UUID(bytes=first_word.to_bytes(4, 'big') + bytes(12))}.bin"
    dv_type = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
                         ("sizeInBytes", pa.int32()), ("cardinality", pa.int64())])
    add_type = pa.struct([("path", pa.string()), ("deletionVector", dv_type)])
    adds = pa.array([{"path": "part-0.parquet", "deletionVector": {"storageType": "u", "pathOrInlineDv": dv_id,
                                                                   "offset": 1, "sizeInBytes": 34, "cardinality": 2}}],
                    type=add_type)
    sink = io.BytesIO()
    pq.write_table(pa.table({"add": adds}), sink)
    resolver = PathResolver({"part-0.parquet": "s3://b/ns/data/g/c0", file_name: "s3://b/ns/data/g/c1"})

    result = rewrite_checkpoint_file("1.checkpoint.parquet", sink.getvalue(), resolver)

    dv = pq.read_table(io.BytesIO(result.content)).column("add")[0].as_py()["deletionVector"]
    assert (dv["storageType"], dv["pathOrInlineDv"]) == ("p", "s3://b/ns/data/g/c1"), dv
    assert result.files_rewritten == 2 and result.missing == []
