"""An export changes only the path values: parquet checkpoints keep their exact physical schema and
every other column chunk's bytes; JSON lines keep every byte but the replaced values."""

import datetime
import decimal
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exporter.errors import CorruptLog
from exporter.export.json_splice import splice_json
from exporter.export.resolve import PathResolver
from exporter.export.rewrite import rewrite_checkpoint_file, rewrite_commit
from exporter.parquet.splice import read_footer
from exporter.parquet.thrift import decode_struct, encode_struct

pytestmark = pytest.mark.unit

DV_FILE = "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
DV_U = "ab^-aqEH.-t@S}K{vb[*k^"  # PROTOCOL.md example: the descriptor of DV_FILE
ADDRESSES = {f"part-{i}.parquet": f"s3://bucket/ns/data/g{i}/c{i}" for i in range(6)}
ADDRESSES[DV_FILE] = "s3://bucket/ns/data/dv/c-dv"


def resolver() -> PathResolver:
    return PathResolver(ADDRESSES)


# ------------------------------------------------------------------------------ parquet


UTC = "UTC"
STATS = pa.struct([
    ("ts_ms_utc", pa.timestamp("ms", UTC)), ("ts_us_utc", pa.timestamp("us", UTC)),
    ("ts_us_local", pa.timestamp("us")), ("ts_ms_local", pa.timestamp("ms")),
    ("dec_9", pa.decimal128(9, 2)), ("dec_18", pa.decimal128(18, 4)), ("dec_30", pa.decimal128(30, 5)),
    ("day", pa.date32()), ("tags", pa.list_(pa.string())),
])
DELETION_VECTOR = pa.struct([
    ("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
    ("sizeInBytes", pa.int32()), ("cardinality", pa.int64()),
])
ADD = pa.struct([
    pa.field("path", pa.string(), nullable=False), ("partitionValues", pa.map_(pa.string(), pa.string())),
    ("size", pa.int64()), ("modificationTime", pa.int64()), ("dataChange", pa.bool_()),
    ("stats", pa.string()), ("tags", pa.map_(pa.string(), pa.string())), ("deletionVector", DELETION_VECTOR),
    ("stats_parsed", pa.struct([("numRecords", pa.int64()), ("minValues", STATS)])),
    ("partitionValues_parsed", pa.struct([("day", pa.date32()), ("at", pa.timestamp("us", UTC))])),
])
REMOVE = pa.struct([("path", pa.string()), ("deletionTimestamp", pa.int64()), ("dataChange", pa.bool_()),
                    ("deletionVector", DELETION_VECTOR)])
COMMIT_INFO = pa.struct([("timestamp", pa.timestamp("us", UTC)), ("operation", pa.string())])
SCHEMA = pa.schema([
    pa.field("txn", pa.struct([("appId", pa.string()), ("version", pa.int64())]),
             metadata={b"PARQUET:field_id": b"7"}),
    ("add", ADD), ("remove", REMOVE),
    ("metaData", pa.struct([("id", pa.string()), ("configuration", pa.map_(pa.string(), pa.string()))])),
    ("protocol", pa.struct([("minReaderVersion", pa.int32()), ("readerFeatures", pa.list_(pa.string()))])),
    ("commitInfo", COMMIT_INFO),
])
MOMENT = datetime.datetime(2024, 2, 29, 13, 14, 15, 123456, tzinfo=datetime.timezone.utc)


def checkpoint_rows(count: int) -> list[dict]:
    rows = [{"metaData": {"id": "t", "configuration": [("delta.enableDeletionVectors", "true")]}},
            {"protocol": {"minReaderVersion": 3, "readerFeatures": ["deletionVectors"]}},
            {"txn": {"appId": "app", "version": 9}},
            {"commitInfo": {"timestamp": MOMENT, "operation": "WRITE"}}]
    for i in range(count):
        deletion_vector = {"storageType": "u", "pathOrInlineDv": DV_U, "offset": 1, "sizeInBytes": 34,
                           "cardinality": 2} if i == 1 else None
        stats = {"ts_ms_utc": MOMENT, "ts_us_utc": MOMENT, "ts_us_local": MOMENT.replace(tzinfo=None),
                 "ts_ms_local": MOMENT.replace(tzinfo=None, microsecond=123000),
                 "dec_9": decimal.Decimal("1234567.89"), "dec_18": decimal.Decimal("12345678901234.5678"),
                 "dec_30": decimal.Decimal("1234567890123456789012345.12345"), "day": MOMENT.date(), "tags": ["a", None]}
        rows.append({"add": {"path": f"part-{i}.parquet", "partitionValues": [("day", "2024-02-29")], "size": 10 + i,
                             "modificationTime": 1, "dataChange": False, "stats": '{"numRecords":3}',
                             "tags": None, "deletionVector": deletion_vector,
                             "stats_parsed": {"numRecords": 3, "minValues": stats},
                             "partitionValues_parsed": {"day": MOMENT.date(), "at": MOMENT}}})
    rows.append({"remove": {"path": "part-gone.parquet", "deletionTimestamp": 5, "dataChange": True}})
    return rows


def schema_text(parquet_file: pq.ParquetFile) -> str:
    """The printed parquet schema (physical and logical types, repetition, field ids), minus the object's address."""
    return str(parquet_file.schema).split("\n", 1)[1]


def write_checkpoint(rows: list[dict], **options) -> bytes:
    sink = io.BytesIO()
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    pq.write_table(table, sink, row_group_size=3, **options)
    return sink.getvalue()


WRITERS = {
    "int96 timestamps": {"use_deprecated_int96_timestamps": True},
    "millis and micros, decimals as INT32/INT64": {"store_decimal_as_integer": True, "compression": "zstd"},
    "decimals as FIXED_LEN_BYTE_ARRAY, gzip, no dictionary": {"compression": "gzip", "use_dictionary": False},
    "legacy nested list names": {"use_compliant_nested_type": False, "compression": "none"},
}


@pytest.mark.parametrize("writer", WRITERS)
def test_checkpoint_keeps_its_physical_schema_and_other_column_bytes(writer: str) -> None:
    raw = write_checkpoint(checkpoint_rows(5), **WRITERS[writer])

    result = rewrite_checkpoint_file("00000000000000000010.checkpoint.parquet", raw, resolver())

    before, after = pq.ParquetFile(io.BytesIO(raw)), pq.ParquetFile(io.BytesIO(result.content))
    assert after.schema.equals(before.schema)
    assert schema_text(after) == schema_text(before)  # physical types, logical annotations, repetition
    assert after.schema_arrow == before.schema_arrow  # field ids included (kept in field metadata)
    assert read_footer(result.content, "x").get(1) == read_footer(raw, "x").get(1)  # format version
    assert after.metadata.num_row_groups == before.metadata.num_row_groups
    assert after.metadata.created_by == before.metadata.created_by
    for group in range(before.metadata.num_row_groups):
        old, new = before.metadata.row_group(group), after.metadata.row_group(group)
        assert new.num_rows == old.num_rows
        for column in range(old.num_columns):
            assert new.column(column).path_in_schema == old.column(column).path_in_schema
            assert new.column(column).compression == old.column(column).compression
            if old.column(column).path_in_schema.rsplit(".", 1)[-1] not in ("path", "pathOrInlineDv", "storageType"):
                assert new.column(column).statistics == old.column(column).statistics
    # Every column other than the rewritten ones decodes to the same values, INT96 included.
    read = {"coerce_int96_timestamp_unit": "us"}
    old_table = pq.read_table(io.BytesIO(raw), **read)
    new_table = pq.read_table(io.BytesIO(result.content), **read)
    for name in ("txn", "metaData", "protocol", "commitInfo"):
        assert new_table.column(name) == old_table.column(name)
    adds = new_table.column("add").to_pylist()
    assert [a["path"] for a in adds if a] == [f"s3://bucket/ns/data/g{i}/c{i}" for i in range(5)]
    assert adds[5]["deletionVector"] == {"storageType": "p", "pathOrInlineDv": "s3://bucket/ns/data/dv/c-dv",
                                         "offset": 1, "sizeInBytes": 34, "cardinality": 2}
    old_adds = old_table.column("add").to_pylist()
    strip = lambda a: {k: v for k, v in a.items() if k not in ("path", "deletionVector")} if a else a  # noqa: E731
    assert [strip(a) for a in adds] == [strip(a) for a in old_adds]
    assert new_table.column("remove").to_pylist()[-1]["path"] == "part-gone.parquet"  # vacuumed: kept
    assert result.files_rewritten == 6 and result.missing == []


def test_int96_columns_stay_int96() -> None:
    raw = write_checkpoint(checkpoint_rows(2), use_deprecated_int96_timestamps=True)
    result = rewrite_checkpoint_file("1.checkpoint.parquet", raw, resolver())
    schema = pq.ParquetFile(io.BytesIO(result.content)).schema
    physical = {schema.column(i).path: schema.column(i).physical_type for i in range(len(schema))}
    assert physical["commitInfo.timestamp"] == "INT96"
    assert physical["add.stats_parsed.minValues.ts_ms_utc"] == "INT96"
    assert physical["add.partitionValues_parsed.at"] == "INT96"


def test_decimals_keep_their_physical_encoding() -> None:
    raw = write_checkpoint(checkpoint_rows(2), store_decimal_as_integer=True)
    result = rewrite_checkpoint_file("1.checkpoint.parquet", raw, resolver())
    schema = pq.ParquetFile(io.BytesIO(result.content)).schema
    physical = {schema.column(i).path.rsplit(".", 1)[-1]: schema.column(i).physical_type for i in range(len(schema))}
    assert (physical["dec_9"], physical["dec_18"], physical["dec_30"]) == ("INT32", "INT64", "FIXED_LEN_BYTE_ARRAY")


def test_a_checkpoint_with_nothing_to_rewrite_comes_back_byte_identical() -> None:
    rows = [r for r in checkpoint_rows(0) if "remove" not in r]
    raw = write_checkpoint(rows)
    assert rewrite_checkpoint_file("1.checkpoint.parquet", raw, resolver()).content == raw


def test_v2_sidecar_sizes_and_names_are_updated_in_parquet() -> None:
    sidecar = pa.struct([("path", pa.string()), ("sizeInBytes", pa.int64()), ("modificationTime", pa.int64())])
    schema = pa.schema([("checkpointMetadata", pa.struct([("version", pa.int64())])), ("sidecar", sidecar),
                        ("commitInfo", COMMIT_INFO)])
    rows = [{"checkpointMetadata": {"version": 4}},
            {"sidecar": {"path": "a.parquet", "sizeInBytes": 10, "modificationTime": 7}},
            {"sidecar": {"path": "s3://bucket/t/_delta_log/_sidecars/b%20c.parquet", "sizeInBytes": 20, "modificationTime": 8}},
            {"commitInfo": {"timestamp": MOMENT, "operation": "WRITE"}}]
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), sink, use_deprecated_int96_timestamps=True)
    raw = sink.getvalue()

    result = rewrite_checkpoint_file("4.checkpoint.0f7bd4c4-ee57-4c5b-98ce-e3c7a2a8e1e2.parquet", raw, resolver(),
                                     sidecar_sizes={"a.parquet": 111, "b c.parquet": 222})

    after = pq.ParquetFile(io.BytesIO(result.content))
    assert schema_text(after) == schema_text(pq.ParquetFile(io.BytesIO(raw)))
    sidecars = [s for s in after.read().column("sidecar").to_pylist() if s]
    assert sidecars == [{"path": "a.parquet", "sizeInBytes": 111, "modificationTime": 7},
                        {"path": "b%20c.parquet", "sizeInBytes": 222, "modificationTime": 8}]


def test_a_sidecar_file_is_rewritten_like_a_checkpoint() -> None:
    sink = io.BytesIO()
    adds = [{"add": {"path": f"part-{i}.parquet", "size": 1}} for i in range(3)]
    pq.write_table(pa.Table.from_pylist(adds, schema=pa.schema([("add", pa.struct([("path", pa.string()),
                                                                                     ("size", pa.int64())]))])), sink)
    result = rewrite_checkpoint_file("_sidecars/x.parquet", sink.getvalue(), resolver())
    assert [a["add"]["path"] for a in pq.read_table(io.BytesIO(result.content)).to_pylist()] == \
        [f"s3://bucket/ns/data/g{i}/c{i}" for i in range(3)]


def test_a_truncated_checkpoint_is_a_corrupt_log() -> None:
    raw = write_checkpoint(checkpoint_rows(2))
    with pytest.raises(CorruptLog, match="1.checkpoint.parquet"):
        rewrite_checkpoint_file("1.checkpoint.parquet", raw[:-100], resolver())


def test_thrift_footer_round_trips_byte_for_byte() -> None:
    for options in WRITERS.values():
        raw = write_checkpoint(checkpoint_rows(3), **options)
        length = int.from_bytes(raw[-8:-4], "little")
        footer = raw[-8 - length:-8]
        assert encode_struct(decode_struct(footer)) == footer


# ------------------------------------------------------------------------------ JSON


def test_only_the_path_bytes_change_in_a_json_line() -> None:
    line = ('{ "add" : {"path":"part-1.parquet", "size":1.10,"big":123456789012345678901234567890,'
            '"huge":1e400,"dup":1,"dup":2,"modificationTime":0 ,"u":"\\u00e9\\ud83d\\ude00",'
            '"partitionValues":{}, "stats":"{\\"numRecords\\":1}"} , "zzz":[1 ,2]}')
    result = rewrite_commit("00000000000000000001.json", line.encode() + b"\n", resolver())
    expected = line.replace('"path":"part-1.parquet"', '"path":"s3://bucket/ns/data/g1/c1"')
    assert result.content == expected.encode() + b"\n"


def test_a_relative_deletion_vector_is_spliced_to_an_absolute_one() -> None:
    line = ('{"add":{"path":"part-2.parquet","deletionVector":{"storageType":"u", "pathOrInlineDv":"' + DV_U.replace("\\", "\\\\")
            + '","offset":1,"sizeInBytes":34,"cardinality":1.0E0},"x":1.50}}')
    result = rewrite_commit("1.json", line.encode(), resolver())
    assert result.content.decode() == (
        '{"add":{"path":"s3://bucket/ns/data/g2/c2","deletionVector":{"storageType":"p", '
        '"pathOrInlineDv":"s3://bucket/ns/data/dv/c-dv","offset":1,"sizeInBytes":34,"cardinality":1.0E0},"x":1.50}}')


def test_with_duplicate_keys_the_one_json_reads_is_replaced() -> None:
    line = b'{"remove":{"path":"part-9.parquet","path":"part-3.parquet","dataChange":true}}'
    assert splice_json(line, {("remove", "path"): "NEW"}) == b'{"remove":{"path":"part-9.parquet","path":"NEW","dataChange":true}}'


def test_v2_json_checkpoint_sidecar_sizes_are_spliced() -> None:
    raw = (b'{"checkpointMetadata":{"version":4}}\n'
           b'{"sidecar":{"path":"a.parquet","sizeInBytes":10,"modificationTime":1.0e12,"tags":null}}\r\n')
    result = rewrite_commit("4.checkpoint.0f7bd4c4-ee57-4c5b-98ce-e3c7a2a8e1e2.json", raw, resolver(),
                            sidecar_sizes={"a.parquet": 1234})
    assert result.content == raw.replace(b'"sizeInBytes":10', b'"sizeInBytes":1234')


def test_untouched_json_lines_are_byte_identical() -> None:
    raw = b'{"commitInfo":{"timestamp":1.10,"n":1e400}}\n{"txn":{"appId":"a","version":3}}\n'
    assert rewrite_commit("1.json", raw, resolver()).content == raw
    assert json.loads(raw.split(b"\n")[0])["commitInfo"]["timestamp"] == 1.1  # what re-serialising would lose


def test_row_groups_are_rewritten_together_up_to_a_number_of_rows_with_the_same_file_as_one_at_a_time() -> None:
    from exporter.parquet.splice import BytesSource, splice_leaves_to

    raw = write_checkpoint(checkpoint_rows(14))  # 19 rows in row groups of 3: 6 of 3 and one of 1
    handed: dict[int, list[int]] = {}

    def upper(rows_at_once: int):
        def rewrite(leaves: pa.Table) -> pa.Table:
            handed.setdefault(rows_at_once, []).append(leaves.num_rows)
            add = leaves.column("add").combine_chunks()  # a struct of the one leaf asked for
            upper_paths = pa.compute.utf8_upper(add.field("path"))
            return leaves.set_column(0, "add", pa.StructArray.from_arrays([upper_paths], fields=[add.type.field("path")],
                                                                          mask=add.is_null()))
        return rewrite

    written = {}
    for rows_at_once in (0, 7, 1000):
        sink = io.BytesIO()
        assert splice_leaves_to(BytesSource(raw), "x.checkpoint.parquet", ["add.path"], upper(rows_at_once), sink,
                                rows_at_once=rows_at_once)
        written[rows_at_once] = sink.getvalue()
    assert handed == {0: [3, 3, 3, 3, 3, 3, 1], 7: [6, 6, 7], 1000: [19]}
    assert written[7] == written[0] and written[1000] == written[0]  # the same bytes, row group by row group
    after = pq.ParquetFile(io.BytesIO(written[0]))
    assert [after.metadata.row_group(i).num_rows for i in range(after.metadata.num_row_groups)] == [3] * 6 + [1]
    assert [a["path"] for a in pq.read_table(io.BytesIO(written[0])).column("add").to_pylist() if a] == \
        [f"PART-{i}.PARQUET" for i in range(14)]
