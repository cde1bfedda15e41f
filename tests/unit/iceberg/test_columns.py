"""A checkpoint's files written column by column (`exporter.iceberg.columns`) are the same manifest
entries, partition summaries and totals as written file by file (`stats`, `values`: the rules'
reference), for stats of every kind the fast path takes, and for slices it must leave to the slow one."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import exporter.iceberg.manifest_set as manifest_set
import exporter.iceberg.table as table_module
from exporter.iceberg.manifests import read_manifest, read_manifest_list
from exporter.iceberg.path_hashes import hashes_bytes, hashes_of, path_hash, path_hashes
from tests.unit.iceberg.local_export import LocalFiles, LocalLog, read_range

pytestmark = pytest.mark.unit

FIELDS = [("id", "long"), ("small", "integer"), ("ratio", "double"), ("f", "float"), ("flag", "boolean"),
          ("name", "string"), ("day", "date"), ("at", "timestamp"), ("local", "timestamp_ntz"),
          ("region", "string"), ("bucket", "integer")]
ADD = pa.struct([("path", pa.string()), ("partitionValues", pa.map_(pa.string(), pa.string())),
                 ("size", pa.int64()), ("modificationTime", pa.int64()), ("dataChange", pa.bool_()),
                 ("stats", pa.string())])


def stats(records, minimum=None, maximum=None, nulls=None, **more) -> str:
    document = {"numRecords": records, "minValues": minimum or {}, "maxValues": maximum or {},
                "nullCount": nulls or {}, **more}
    return json.dumps({k: v for k, v in document.items() if v is not None})


GOOD = [
    stats(10, {"id": 1, "small": -2, "ratio": 0.0, "f": 1.5, "flag": False, "name": "abc", "day": "2024-01-02",
               "at": "2024-01-02T03:04:05.123Z", "local": "2024-01-02T03:04:05.123"},
          {"id": 9, "small": 7, "ratio": -0.0, "f": 3.25, "flag": True, "name": "abd", "day": "2024-01-03",
           "at": "2024-01-02T03:04:06.5+01:00", "local": "2024-01-02T03:04:06"}, {"id": 0, "name": 3}),
    stats(5, {"id": -5, "ratio": 1e400, "name": "\u00e9t\u00e9", "at": "2024-01-02T03:04:05"},
          {"id": 2 ** 40, "ratio": 0.1, "f": 0.1}, {"id": 5, "name": 2, "small": 0}, tightBounds=False),
    stats(3, {"id": 4}, {"id": 4}, {"id": 3, "flag": 1}, tightBounds=True),
    stats(7, nulls={"ratio": 7}, tightBounds=False),
    None,  # no stats: the footer says how many rows (file by file)
    '{"minValues": {"id": 1}}',  # no numRecords: likewise
]
WRONG_TYPE = GOOD[:2] + [stats(3, {"id": "4"}, {"id": 4.5})]  # the slice goes file by file
# every file has every column's bounds and null count: its maps are the same blocks for every file
_LOWER = {"id": 1, "small": -2, "ratio": -1.5, "f": 1.5, "flag": False, "name": "abc", "day": "2024-01-02",
          "at": "2024-01-02T03:04:05.123Z", "local": "2024-01-02T03:04:05.123", "region": "eu", "bucket": 3}
_UPPER = {"id": 9, "small": 7, "ratio": 2.5, "f": 3.25, "flag": True, "name": "abd", "day": "2024-01-03",
          "at": "2024-01-02T03:04:06Z", "local": "2024-01-02T03:04:06", "region": "eu", "bucket": 3}
COMPLETE = [stats(10 + i, _LOWER, _UPPER, {name: i for name in _LOWER}) for i in range(4)]


# the types Delta Spark gives `stats_parsed`'s values, by the column's Delta type
_TYPED = {"long": pa.int64(), "integer": pa.int32(), "double": pa.float64(), "float": pa.float32(),
          "boolean": pa.bool_(), "string": pa.string(), "date": pa.date32(), "timestamp": pa.timestamp("us", "UTC"),
          "timestamp_ntz": pa.timestamp("us")}


def typed_stats(all_stats: list[str | None], fields: list[tuple[str, str]]) -> pa.Array:
    """`stats_parsed` as Delta Spark derives it from each file's stats JSON (`from_json` against the
    table's schema): a value of another type is null; no stats, a null struct."""
    def value(raw, delta_type: str):
        arrow = _TYPED[delta_type]
        try:
            if delta_type == "date":
                return None if not isinstance(raw, str) else pa.scalar(raw).cast(arrow).as_py()
            if delta_type.startswith("timestamp"):
                return None if not isinstance(raw, str) else pa.scalar(raw.replace("Z", "")[:23]).cast(arrow).as_py()
            if isinstance(raw, bool) != pa.types.is_boolean(arrow) or isinstance(raw, (str, dict, list)) != \
                    pa.types.is_string(arrow) or (isinstance(raw, float) and pa.types.is_integer(arrow)):
                return None
            return pa.scalar(raw, arrow).as_py()
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
            return None

    values = pa.struct([(name, _TYPED[kind]) for name, kind in fields])
    counts = pa.struct([(name, pa.int64()) for name, _ in fields])
    typed = pa.struct([("numRecords", pa.int64()), ("minValues", values), ("maxValues", values),
                       ("nullCount", counts), ("tightBounds", pa.bool_())])
    rows = []
    for text in all_stats:
        document = json.loads(text) if text else None
        if document is None:
            rows.append(None)
            continue
        rows.append({"numRecords": document.get("numRecords"), "tightBounds": document.get("tightBounds"),
                     **{kind: {name: value(document.get(kind, {}).get(name), delta_type) for name, delta_type in fields}
                        for kind in ("minValues", "maxValues")},
                     "nullCount": {name: count if isinstance(count := document.get("nullCount", {}).get(name), int)
                                   else None for name, _ in fields}})
    return pa.array(rows, typed)


def write_log(folder: Path, all_stats: list[str | None], fields: list[tuple[str, str]] = FIELDS,
              typed: bool = False) -> LocalLog:
    """A checkpoint of a file for each of `all_stats`; with `typed`, its `stats_parsed` too."""
    log = folder / "export" / "_delta_log"
    log.mkdir(parents=True)
    footer = folder / "data.parquet"
    pq.write_table(pa.table({"id": pa.array(range(4), pa.int64())}), footer)
    schema = {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields]}
    metadata = {"id": "columns", "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(schema),
                "partitionColumns": ["region", "bucket"], "configuration": {}, "createdTime": 0}
    (log / f"{0:020d}.json").write_text(json.dumps({"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}})
                                        + "\n" + json.dumps({"metaData": metadata}) + "\n")
    partitions = [[("region", "eu"), ("bucket", "3")], [("region", ""), ("bucket", "-1")], [("bucket", "3")]]
    adds = [{"path": f"file://{footer}" if i >= 4 else f"s3://bucket/data/part%20{i}.parquet",
             "partitionValues": partitions[i % 3], "size": footer.stat().st_size if i >= 4 else 100 + i,
             "modificationTime": 0, "dataChange": False,
             "stats": text} for i, text in enumerate(all_stats)]
    add = pa.array(adds, ADD)
    if typed:
        stats_parsed = typed_stats(all_stats, [(n, t) for n, t in fields if n not in ("region", "bucket")])
        add = pa.StructArray.from_arrays([*add.flatten(), stats_parsed], names=[*ADD.names, "stats_parsed"])
    add = pa.concat_arrays([pa.nulls(2, add.type), add])
    protocol = pa.array([{"minReaderVersion": 1, "minWriterVersion": 2}] + [None] * (len(adds) + 1))
    meta_type = pa.struct([("id", pa.string()), ("schemaString", pa.string()),
                           ("partitionColumns", pa.list_(pa.string())), ("configuration", pa.map_(pa.string(), pa.string())),
                           ("createdTime", pa.int64())])
    meta = pa.array([None, {**metadata, "configuration": []}] + [None] * len(adds), meta_type)
    pq.write_table(pa.table({"protocol": protocol, "metaData": meta, "add": add}), log / f"{1:020d}.checkpoint.parquet")
    (log / f"{1:020d}.json").write_text(json.dumps({"commitInfo": {"timestamp": 1}}) + "\n")
    return LocalLog(folder / "export")


def written(folder: Path, log: LocalLog, sort: bool = True) -> tuple[list[dict], list, dict]:
    files = LocalFiles(folder)
    result = table_module.write_table(log, files, read_range)
    metadata = json.loads((folder / result.metadata_key).read_text())
    listed = read_manifest_list((folder / f"metadata/snap-{result.snapshot_ids[1]}.avro").read_bytes())
    entries = [entry for record in listed
               for entry in read_manifest((folder / record["manifest_path"][len(files.location):]).read_bytes())]
    summary = {k: v for k, v in metadata["snapshots"][-1]["summary"].items()}
    ordered = sorted(entries, key=lambda e: e["data_file"]["file_path"]) if sort else entries
    return ordered, [r["partitions"] for r in listed], summary


@pytest.mark.parametrize("slice_size", [manifest_set.ENCODE_SLICE, 2], ids=["one-slice", "slices-on-threads"])
@pytest.mark.parametrize("all_stats", [GOOD, COMPLETE, WRONG_TYPE], ids=["taken", "complete", "left-to-the-slow-path"])
def test_columns_write_what_the_file_by_file_path_writes(tmp_path, monkeypatch, all_stats, slice_size):
    monkeypatch.setattr(manifest_set, "ENCODE_SLICE", slice_size)
    log = write_log(tmp_path, all_stats)
    fast = written(tmp_path / "fast", log)
    monkeypatch.setattr(manifest_set, "manifest_entries", lambda *arguments: None)
    slow = written(tmp_path / "slow", log)

    assert fast[0] == slow[0]  # every entry: path, partition, counts, null counts, bounds
    assert fast[2] == slow[2]  # the snapshot's totals
    assert any(entry["data_file"]["lower_bounds"] for entry in fast[0])


UNCUT = [(name, kind) for name, kind in FIELDS if not kind.startswith("timestamp")]  # none the typed stats leave


@pytest.mark.parametrize("fields", [UNCUT, FIELDS], ids=["typed-stats-taken", "a-timestamp-column-reads-the-json"])
@pytest.mark.parametrize("all_stats", [GOOD, WRONG_TYPE], ids=["good", "a-value-of-another-type"])
def test_columns_from_typed_stats_write_what_the_file_by_file_path_writes(tmp_path, monkeypatch, fields, all_stats):
    """A checkpoint with `stats_parsed` (Delta Spark writes it by default) beside the JSON: the same
    entries and totals as file by file from the JSON, whether the typed stats are read or not."""
    import exporter.iceberg.columns as columns

    log = write_log(tmp_path, all_stats, fields, typed=True)
    parsed_json = []
    parse = columns._parse_stats
    monkeypatch.setattr(columns, "_parse_stats", lambda *arguments: parsed_json.append(1) or parse(*arguments))
    read = []
    real = manifest_set.manifest_entries
    monkeypatch.setattr(manifest_set, "manifest_entries", lambda *arguments: read.append(real(*arguments)) or read[-1])
    fast = written(tmp_path / "fast", log)
    monkeypatch.setattr(manifest_set, "manifest_entries", lambda *arguments: None)
    slow = written(tmp_path / "slow", log)

    assert fast[0] == slow[0]
    assert fast[2] == slow[2]
    assert any(entry["data_file"]["lower_bounds"] for entry in fast[0])
    # typed: the 4 files with numRecords taken, also the one whose JSON has a value of another type;
    # with a timestamp column: the JSON path's answer (that slice goes file by file)
    expected = ([4] if all_stats is GOOD else [3]) if fields is UNCUT else ([4] if all_stats is GOOD else [])
    assert [len(entries.rows) for entries in read if entries is not None] == expected
    assert bool(parsed_json) == (fields is not UNCUT)  # the JSON is read only where the typed stats are not


def test_slices_encoded_on_threads_write_what_one_slice_writes_in_its_order(tmp_path, monkeypatch):
    """A checkpoint of several slices (`ENCODE_SLICE`) is encoded ahead on threads, each slice's
    manifest written there: the same entries, entry for entry in the checkpoint's order, and totals
    as one slice in this thread, in a manifest for each slice."""
    import threading

    log = write_log(tmp_path, GOOD)
    one = written(tmp_path / "one", log, sort=False)
    threads = []
    real = manifest_set.manifest_entries
    monkeypatch.setattr(manifest_set, "manifest_entries",
                        lambda *arguments: threads.append(threading.current_thread()) or real(*arguments))
    monkeypatch.setattr(manifest_set, "ENCODE_SLICE", 2)
    sliced = written(tmp_path / "sliced", log, sort=False)

    assert sliced[0] == one[0] and sliced[2] == one[2]
    # the 4 files taken: a manifest for each of their 2 slices, not one; the 2 left in one of their own
    assert len(one[1]) == 2 and len(sliced[1]) == 3
    assert len(threads) == 3 and threading.main_thread() not in threads  # 6 files: 3 slices, none here


@pytest.mark.parametrize("rows, most, sizes", [(0, 10, []), (3, 10, [3]), (5, 10, [3, 2]), (8, 10, [4, 4]),
                                              (9, 10, [3, 3, 3]), (5, 2, [2, 2, 1])])
def test_a_batch_is_cut_into_the_fewest_slices_of_equal_sizes_in_order(monkeypatch, rows, most, sizes):
    """Encoded two at once, slices of equal sizes end together (not 4, 4 and a lone 1 for 9 files);
    none larger than the files a manifest takes (`most`), each slice being a manifest."""
    monkeypatch.setattr(manifest_set, "ENCODE_SLICE", 4)
    slices = list(manifest_set._slices([pa.array(range(rows))], most))

    assert [len(s) for s in slices] == sizes
    assert [value for s in slices for value in s.to_pylist()] == list(range(rows))


def test_a_manifest_written_by_columns_sums_up_its_partitions(tmp_path):
    summaries = written(tmp_path / "fast", write_log(tmp_path, GOOD))[1]
    # the 4 files taken: (eu, 3), ("" = null, -1), (no value = null, 3), (eu, 3)
    assert {"contains_null": True, "contains_nan": False, "lower_bound": b"eu", "upper_bound": b"eu"} in \
        [fields[0] for fields in summaries]
    assert {"contains_null": False, "contains_nan": False, "lower_bound": struct.pack("<i", -1),
            "upper_bound": struct.pack("<i", 3)} in [fields[1] for fields in summaries]


def test_the_fast_path_takes_good_stats(tmp_path, monkeypatch):
    """What the comparison above compares: slices the columns take (not all left to the slow path)."""
    taken = []
    real = manifest_set.manifest_entries
    monkeypatch.setattr(manifest_set, "manifest_entries",
                        lambda *arguments: taken.append(real(*arguments)) or taken[-1])
    table_module.write_table(write_log(tmp_path, GOOD), LocalFiles(tmp_path / "iceberg"), read_range)
    assert [len(entries.rows) for entries in taken] == [4]


def test_a_checkpoint_with_parsed_stats_only_is_taken_by_columns_or_goes_file_by_file_not_to_an_error():
    """delta-kernel-rs's checkpoints may carry `add.stats_parsed` and no `add.stats` column: the
    column path raised ArrowInvalid (No match for FieldRef.Name(stats)) and the table got no Iceberg
    table. The typed stats are taken; with a column they cannot give exactly (a timestamp), file by file."""
    from exporter.iceberg.columns import manifest_entries
    from exporter.iceberg.stats import StatsColumn

    def adds(value_type: pa.DataType) -> pa.StructArray:
        minimum = pa.StructArray.from_arrays([pa.array([1], value_type)], names=["at"])
        return pa.StructArray.from_arrays(
            [pa.array(["part-0.parquet"]), pa.array([10], pa.int64()),
             pa.StructArray.from_arrays([pa.array([3], pa.int64()), minimum], names=["numRecords", "minValues"])],
            names=["path", "size", "stats_parsed"])

    entries = manifest_entries(adds(pa.int64()), [StatsColumn("at", 1, "long", True)], [], snapshot_id=1,
                               sequence_number=1)
    assert entries is not None and entries.record_counts.tolist() == [3] and not entries.left.to_pylist()[0]
    assert entries.path_hashes.tolist() == [path_hash("part-0.parquet")]
    assert manifest_entries(adds(pa.timestamp("us", "UTC")), [StatsColumn("at", 1, "timestamptz", True)], [],
                            snapshot_id=1, sequence_number=1) is None
    # a type Delta does not write (an unsigned count could exceed a long): not taken typed either
    assert manifest_entries(adds(pa.uint64()), [StatsColumn("at", 1, "long", True)], [], snapshot_id=1,
                            sequence_number=1) is None


def test_a_slices_path_hashes_are_of_its_paths_as_its_manifest_names_them():
    """The hashes kept beside a checkpoint's manifest (what an append and the signer look a file up
    by) are those of its entries' paths, a `%` escape decoded once as the manifest names the file."""
    from exporter.iceberg.columns import manifest_entries
    from exporter.iceberg.stats import StatsColumn

    paths = ["s3://b/day=1%3A00/part%200.parquet", "s3://b/é/part-1.parquet", "s3://b/part-2.parquet"]
    adds = pa.StructArray.from_arrays([pa.array(paths), pa.array([10] * 3, pa.int64()),
                                       pa.array(['{"numRecords":3}'] * 3)], names=["path", "size", "stats"])
    entries = manifest_entries(adds, [StatsColumn("at", 1, "long", True)], [], snapshot_id=1, sequence_number=1)

    named = ["s3://b/day=1:00/part 0.parquet", "s3://b/é/part-1.parquet", "s3://b/part-2.parquet"]
    assert entries.path_hashes.tolist() == [path_hash(p) for p in named]


def test_path_hashes_read_back_as_written_and_a_torn_object_is_refused():
    """The 8-byte hashes beside a manifest: what is written reads back the same, signed values
    included, sorted (as an older writer's, kept in its manifest's order, read back too); an object
    that is not whole hashes is an error, not a shorter list."""
    paths = [f"s3://bucket/p={i % 3}/part {i}.parquet" for i in range(64)]
    hashes = path_hashes(paths)
    assert any(h < 0 for h in hashes.tolist()) and any(h > 0 for h in hashes.tolist())
    assert hashes.tolist() == sorted(path_hash(p) for p in paths)
    raw = hashes_bytes(hashes)
    assert len(raw) == 8 * len(paths)
    assert hashes_of(raw).tolist() == sorted(path_hash(p) for p in paths)
    in_manifest_order = b"".join(path_hash(p).to_bytes(8, "little", signed=True) for p in paths)
    assert hashes_of(in_manifest_order).tolist() == hashes.tolist()
    assert manifest_set._any_shared(path_hashes([paths[40]]), hashes_of(in_manifest_order))
    with pytest.raises(ValueError, match="not a whole number"):
        hashes_of(raw[:-3])


def test_a_path_hashes_as_the_tables_written_before_keep_it():
    """The hashes a table keeps must come out the same from every later exporter (an append looks
    its files up by them, the signer signs by them): 8 bytes of BLAKE2b of the path's UTF-8."""
    import hashlib

    for path in ("s3://lake/repo/data/part-0.parquet", "s3://lake/día/é.parquet"):
        expected = int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "little", signed=True)
        assert path_hash(path) == expected == int(path_hashes([path])[0])
    assert path_hash("s3://lake/repo/data/part-0.parquet") == -1107931198382125609


@pytest.mark.parametrize("files", [1000, 10], ids=["bisected", "as-sets"])
def test_a_path_is_found_in_a_manifests_hashes_whichever_side_is_larger(files):
    """A commit's retired paths against a manifest's hashes: looked up from the smaller side, the
    same answer either way, and none for an empty side; two small sides compared as sets."""
    manifest = path_hashes(f"s3://b/m/{i}.parquet" for i in range(files))
    for wanted, shared in ((["s3://b/m/7.parquet"], True), (["s3://b/new.parquet"], False),
                           (["s3://b/new.parquet", "s3://b/m/9.parquet"], True),
                           ([f"s3://b/other/{i}" for i in range(5000)], False),
                           ([*(f"s3://b/other/{i}" for i in range(5000)), f"s3://b/m/{files - 1}.parquet"], True),
                           ([], False)):
        hashes = path_hashes(wanted)
        assert manifest_set._any_shared(hashes, manifest) is shared, (len(wanted), shared)
        assert manifest_set._any_shared(manifest, hashes) is shared


@pytest.mark.parametrize("lookups", [1, 3, 65], ids=["bisected in Python", "bisected in Python", "by numpy"])
def test_hashes_past_either_end_of_a_manifests_are_not_found_and_its_ends_are(lookups):
    manifest = np.arange(-100, 100, dtype=np.int64) * 2  # -200 ... 198, even
    for values, shared in (([-201], False), ([199], False), ([2 ** 62], False), ([-200], True), ([198], True),
                           ([5], False), ([6], True)):
        wanted = np.sort(np.array([*values, *(7 + 2 * i for i in range(lookups - 1))], np.int64))  # odd: not in it
        assert manifest_set._any_shared(wanted, manifest) is shared, (values, lookups)


def test_the_column_varints_are_avros_longs_of_every_length():
    """The column encoder's varints (a byte position at a time) against `avro_long`, the scalar
    rule: zero, both signs, each length from one byte to ten, and the int64 extremes."""
    import numpy as np

    from exporter.iceberg.columns import _varints
    from exporter.iceberg.manifests import avro_long

    values = [0, 1, -1, 63, -64, 64, -65, 2**31 - 1, -2**31, 2**62, -2**63, 2**63 - 1,
              *(sign * 2**bits for bits in range(0, 63, 7) for sign in (1, -1))]
    assert _varints(np.array(values, np.int64)).to_pylist() == [avro_long(v) for v in values]
    assert {len(avro_long(v)) for v in values} == set(range(1, 11))
    assert _varints(np.array([], np.int64)).to_pylist() == []


def test_a_merge_takes_manifests_of_about_its_size_never_a_large_one_for_a_few_small():
    """`_tier`: the smallest manifests up to the first larger than all before it together. A table's
    checkpoint manifest of 1,000 files is left out of a merge of eight 1-file ones; merged ones of
    about the same size are taken together, so merged manifests double."""
    def manifests(*sizes):
        return [manifest_set.Manifest(f"s3://b/m{i}.avro", {"added_files_count": size, "existing_files_count": 0},
                                      None) for i, size in enumerate(sizes)]

    def tier(*sizes):
        return sorted(m.live for m in manifest_set._tier(manifests(*sizes)))

    assert tier(1000, *[1] * 8) == [1] * 8
    assert tier(8, *[1] * 8) == [1] * 8 + [8]
    assert tier(16, 8, *[1] * 8) == [1] * 8 + [8, 16]
    assert tier(32, *[1] * 8) == [1] * 8
    assert tier(5) == [5]
