"""An exported Delta table read as Iceberg: PyIceberg and DuckDB's iceberg extension return exactly
delta-rs's rows at the head and at every older version (snapshot time travel), partition values
included; an append adds versions without rewriting what it keeps."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo
from pyiceberg.table import StaticTable

from exporter.errors import CorruptLog, IcebergUnsupported
from exporter.iceberg import manifests
from exporter.iceberg.manifest_set import MERGE_AT
from exporter.iceberg.manifests import read_manifest_list
from exporter.iceberg.table import DELTA_VERSION, append_table, write_table
from tests.unit.iceberg.local_export import LocalFiles, export_locally, read_range
from tests.unit.iceberg.readers import delta_rows, duckdb_connection, duckdb_rows, pyiceberg_rows, rows_of

pytestmark = pytest.mark.unit
PARTITIONS = ["region", "day", "bucket"]


def batch(ids: list[int], region: str | None, day: dt.date, bucket: int, extra: bool = False) -> pa.Table:
    n = len(ids)
    columns = {
        "id": pa.array(ids, pa.int64()),
        "name": pa.array([f"name-{i}" if i % 5 else None for i in ids], pa.string()),
        "small": pa.array([i % 100 for i in ids], pa.int16()),
        "ratio": pa.array([i / 7 for i in ids], pa.float64()),
        "flag": pa.array([i % 2 == 0 for i in ids], pa.bool_()),
        "amount": pa.array([Decimal(i) / 4 for i in ids], pa.decimal128(12, 2)),
        "at": pa.array([dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=1_234_567 * i)
                        for i in ids], pa.timestamp("us", tz="UTC")),
        "local": pa.array([dt.datetime(2024, 3, 1) + dt.timedelta(microseconds=7_654_321 * i) for i in ids],
                          pa.timestamp("us")),
        "region": pa.array([region] * n, pa.string()),
        "day": pa.array([day] * n, pa.date32()),
        "bucket": pa.array([bucket] * n, pa.int32()),
    }
    if extra:
        columns["note"] = pa.array([f"note {i}" for i in ids], pa.string())
    return pa.table(columns)


def write(table: Path, data: pa.Table, mode: str = "append", **options) -> None:
    deltalake.write_deltalake(str(table), data, partition_by=PARTITIONS, mode=mode, **options)


def build_history(table: Path) -> None:
    """Versions 0-7: appends over three kinds of partition, a delete, a checkpoint at 4, an overwrite
    of one partition, a schema change, and a null partition value."""
    write(table, batch([1, 2, 3, 4], "eu", dt.date(2024, 1, 1), 1))                       # 0
    write(table, batch([5, 6], "us", dt.date(2024, 1, 2), 2))                             # 1
    write(table, batch([7, 8, 9], "eu", dt.date(2024, 1, 2), 1))                          # 2
    deltalake.DeltaTable(str(table)).delete("id = 2 OR id = 8")                           # 3
    write(table, batch([10], "ap", dt.date(2024, 1, 3), 3))                               # 4
    deltalake.DeltaTable(str(table)).create_checkpoint()
    write(table, batch([11, 12], "us", dt.date(2024, 1, 2), 2), mode="overwrite",        # 5
          predicate="region = 'us'")
    write(table, batch([13, 14], "eu", dt.date(2024, 1, 4), 4, extra=True), schema_mode="merge")  # 6
    write(table, batch([15], None, dt.date(2024, 1, 5), 5, extra=True))                   # 7


def test_every_version_reads_as_delta_rs_reads_it(tmp_path):
    source = tmp_path / "source"
    build_history(source)
    result = write_table(export_locally(source, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)

    assert sorted(result.snapshot_ids) == [4, 5, 6, 7]  # from the checkpoint to the head
    assert result.metadata_key == "metadata/v7.metadata.json"
    head = delta_rows(source, 7)
    assert len(head) == 11
    assert pyiceberg_rows(result.metadata_location) == head
    assert duckdb_rows(result.metadata_location) == head
    for version, snapshot_id in result.snapshot_ids.items():
        expected = delta_rows(source, version)
        assert pyiceberg_rows(result.metadata_location, snapshot_id) == expected, version
        assert duckdb_rows(result.metadata_location, snapshot_id) == expected, version


def test_without_a_checkpoint_every_version_from_0_is_a_snapshot(tmp_path):
    source = tmp_path / "source"
    write(source, batch([1, 2], "eu", dt.date(2024, 1, 1), 1))
    write(source, batch([3], "us", dt.date(2024, 1, 2), 2))
    deltalake.DeltaTable(str(source)).delete("id = 1")
    result = write_table(export_locally(source, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)

    assert sorted(result.snapshot_ids) == [0, 1, 2]
    for version, snapshot_id in result.snapshot_ids.items():
        assert pyiceberg_rows(result.metadata_location, snapshot_id) == delta_rows(source, version)
        assert duckdb_rows(result.metadata_location, snapshot_id) == delta_rows(source, version)


def test_snapshots_carry_the_delta_version_and_commit_time(tmp_path):
    source = tmp_path / "source"
    write(source, batch([1], "eu", dt.date(2024, 1, 1), 1))
    write(source, batch([2], "eu", dt.date(2024, 1, 1), 1))
    result = write_table(export_locally(source, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)

    metadata = json.loads((tmp_path / "iceberg" / result.metadata_key).read_text())
    history = deltalake.DeltaTable(str(source)).history()
    commit_times = {entry["version"]: entry["timestamp"] for entry in history}
    snapshots = {int(s["summary"][DELTA_VERSION]): s for s in metadata["snapshots"]}
    assert {v: s["snapshot-id"] for v, s in snapshots.items()} == result.snapshot_ids
    assert {v: s["timestamp-ms"] for v, s in snapshots.items()} == commit_times
    assert metadata["current-snapshot-id"] == result.snapshot_ids[1]
    assert snapshots[1]["parent-snapshot-id"] == result.snapshot_ids[0]


def test_the_metadata_file_is_written_last(tmp_path):
    source = tmp_path / "source"
    build_history(source)
    files = LocalFiles(tmp_path / "iceberg")
    result = write_table(export_locally(source, tmp_path / "export"), files, read_range, manifest_entries=2)

    assert files.written[-1] == result.metadata_key
    assert [key for key in files.written if key.endswith(".metadata.json")] == [result.metadata_key]


def test_small_manifests_read_the_same_and_removes_rewrite_only_their_manifests(tmp_path):
    source = tmp_path / "source"
    build_history(source)
    files = LocalFiles(tmp_path / "iceberg")
    result = write_table(export_locally(source, tmp_path / "export"), files, read_range, manifest_entries=2)

    for version, snapshot_id in result.snapshot_ids.items():
        assert pyiceberg_rows(result.metadata_location, snapshot_id) == delta_rows(source, version)
        assert duckdb_rows(result.metadata_location, snapshot_id) == delta_rows(source, version)
    # version 6 only adds: its snapshot writes one manifest and rewrites none
    written_by_6 = [k for k in files.written if k.startswith(f"metadata/{result.snapshot_ids[6]}-m") and k.endswith(".avro")]
    assert len(written_by_6) == 1


def test_one_file_commits_merge_into_few_manifests_that_read_the_same(tmp_path):
    """Twenty one-file commits and a delete: the head names a bounded number of manifests (small ones
    merged, `MERGE_AT` at a time, their entries kept as `existing`), every version reads as delta-rs
    reads it, and an append after them keeps the bound."""
    source = tmp_path / "source"
    for i in range(20):
        write(source, batch([i], "eu", dt.date(2024, 1, 1 + i % 3), 1))
        if i == 12:
            deltalake.DeltaTable(str(source)).delete("id = 3 OR id = 11")
    files = LocalFiles(tmp_path / "iceberg")
    first = write_table(export_locally(source, tmp_path / "export"), files, read_range, manifest_entries=100)
    write(source, batch([20, 21], "us", dt.date(2024, 1, 9), 2))
    second = append_table(first.metadata_key, export_locally(source, tmp_path / "export"), files, read_range,
                          manifest_entries=100)

    for result in (first, second):
        head = json.loads((tmp_path / "iceberg" / result.metadata_key).read_text())
        listed = read_manifest_list(Path(urlsplit(head["snapshots"][-1]["manifest-list"]).path).read_bytes())
        assert len(listed) <= MERGE_AT + 1, [m["manifest_path"] for m in listed]  # 22 commits: 22 manifests unmerged
        assert max(m["existing_files_count"] for m in listed) >= MERGE_AT - 2  # a merged one, its deletes left out
    for version, snapshot_id in second.snapshot_ids.items():
        assert pyiceberg_rows(second.metadata_location, snapshot_id) == delta_rows(source, version), version
    assert duckdb_rows(second.metadata_location, second.snapshot_ids[max(second.snapshot_ids)]) == delta_rows(source, 21)


def append_history(table: Path) -> None:
    """Versions 8-9 after `build_history`: an append with the added column, a delete."""
    write(table, batch([16, 17], "eu", dt.date(2024, 1, 1), 1, extra=True))            # 8
    deltalake.DeltaTable(str(table)).delete("id = 1 OR id = 16")                         # 9


def test_an_append_adds_the_new_versions_and_keeps_the_rest(tmp_path, monkeypatch):
    monkeypatch.setattr(manifests, "PATH_HASHES_AT", 1)  # every manifest keeps its path hashes, however small
    source = tmp_path / "source"
    build_history(source)
    files = LocalFiles(tmp_path / "iceberg")
    first = write_table(export_locally(source, tmp_path / "export"), files, read_range)
    append_history(source)
    files.written.clear()
    second = append_table(first.metadata_key, export_locally(source, tmp_path / "export"), files, read_range)

    assert second.metadata_key == "metadata/v9.metadata.json"
    assert sorted(second.snapshot_ids) == [4, 5, 6, 7, 8, 9]
    assert {v: second.snapshot_ids[v] for v in first.snapshot_ids} == first.snapshot_ids
    assert not any(key.startswith(f"metadata/snap-{first.snapshot_ids[7]}") for key in files.written)
    for version, snapshot_id in second.snapshot_ids.items():
        assert pyiceberg_rows(second.metadata_location, snapshot_id) == delta_rows(source, version), version
        assert duckdb_rows(second.metadata_location, snapshot_id) == delta_rows(source, version), version
    metadata = json.loads((tmp_path / "iceberg" / second.metadata_key).read_text())
    assert [entry["metadata-file"] for entry in metadata["metadata-log"]] == [first.metadata_location]
    # an append reads only the manifests holding a file it removes (their paths' hashes say which)
    head_list = tmp_path / "iceberg" / f"metadata/snap-{first.snapshot_ids[7]}.avro"
    kept = {m["manifest_path"] for m in read_manifest_list(head_list.read_bytes())}
    read = {uri for uri in files.reads if uri.endswith(".avro") and "-m" in uri}
    assert read & kept and read & kept < kept


def test_small_manifests_keep_no_path_hashes_and_an_append_reads_them_to_remove_a_file(tmp_path):
    """A manifest of fewer than `PATH_HASHES_AT` live files has no hashes beside it (one PUT less for
    each commit's manifest): an append looks a removed path up by reading it, and every version
    still reads as delta-rs reads it."""
    source = tmp_path / "source"
    build_history(source)
    files = LocalFiles(tmp_path / "iceberg")
    first = write_table(export_locally(source, tmp_path / "export"), files, read_range)
    written = list(files.written)
    append_history(source)
    files.reads.clear()
    second = append_table(first.metadata_key, export_locally(source, tmp_path / "export"), files, read_range)

    assert any(key.endswith(".avro") and "-m" in key for key in written)
    assert not [key for key in [*written, *files.written] if key.endswith(".paths")]
    assert any(uri.endswith(".avro") and "-m" in uri for uri in files.reads)  # version 9's delete: looked up by reading
    for version, snapshot_id in second.snapshot_ids.items():
        assert pyiceberg_rows(second.metadata_location, snapshot_id) == delta_rows(source, version), version


def nested(ids: list[int], part: str, collections: bool = True) -> pa.Table:
    columns = {
        "id": pa.array(ids, pa.int64()),
        "point": pa.array([{"x": i, "label": f"p{i}" if i % 2 else None} for i in ids],
                          pa.struct([("x", pa.int64()), ("label", pa.string())])),
        "tags": pa.array([[f"t{i}", f"u{i}"] if i % 3 else [] for i in ids], pa.list_(pa.string())),
        "scores": pa.array([[("a", i), ("b", -i)] for i in ids], pa.map_(pa.string(), pa.int64())),
        "part": pa.array([part] * len(ids), pa.string()),
    }
    return pa.table({name: values for name, values in columns.items() if collections or name not in ("tags", "scores")})


@pytest.mark.parametrize("mode", ["none", "name"])
def test_nested_columns_with_and_without_column_mapping(tmp_path, mode):
    """Under column mapping the data files name columns by physical name with field ids: ids and the
    name mapping must both be right for the rows to read (arrays and maps: see the next test)."""
    source = tmp_path / "source"
    configuration = {} if mode == "none" else {"delta.columnMapping.mode": mode}
    collections = mode == "none"
    deltalake.write_deltalake(str(source), nested([1, 2, 3], "a", collections), partition_by=["part"],
                              configuration=configuration)
    deltalake.write_deltalake(str(source), nested([4, 5], "b", collections), partition_by=["part"], mode="append")
    deltalake.DeltaTable(str(source)).delete("id = 2")
    result = write_table(export_locally(source, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)

    for version, snapshot_id in result.snapshot_ids.items():
        assert pyiceberg_rows(result.metadata_location, snapshot_id) == delta_rows(source, version), version
        assert duckdb_rows(result.metadata_location, snapshot_id) == delta_rows(source, version), version


def test_arrays_and_maps_under_column_mapping_without_nested_ids_are_refused(tmp_path):
    """delta-rs writes no field ids inside them; DuckDB 1.4.4 then reads their elements as null."""
    source = tmp_path / "source"
    deltalake.write_deltalake(str(source), nested([1], "a"), configuration={"delta.columnMapping.mode": "name"})
    with pytest.raises(IcebergUnsupported, match=r"column 'tags' is an array under column mapping without "
                                                 r"delta\.columnMapping\.nested\.ids"):
        write_table(export_locally(source, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)
    assert not (tmp_path / "iceberg").exists()  # refused before anything is written


def test_every_row_is_found_by_its_own_values_bounds_skip_only_other_files(tmp_path):
    """delta-rs cuts timestamps in stats to milliseconds: a bound taken as written would skip the file
    holding a row whose microseconds are past it."""
    source = tmp_path / "source"
    build_history(source)
    result = write_table(export_locally(source, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)
    table = StaticTable.from_metadata(result.metadata_location)
    connection = duckdb_connection()

    assert len(list(table.scan(row_filter=EqualTo("id", 13)).plan_files())) == 1  # the bounds do skip files
    for row in map(dict, delta_rows(source, 7)):
        for name in ("at", "local", "amount", "name", "id"):
            if row[name] is None:
                continue
            value = row[name].isoformat() if isinstance(row[name], dt.datetime) else row[name]
            # PyIceberg's plan (reading would filter string_view columns, which its pyarrow cannot)
            planned = table.scan(row_filter=EqualTo(name, value)).plan_files()
            ids = {i for task in planned for i in pq.read_table(urlsplit(task.file.file_path).path,
                                                                columns=["id"]).column("id").to_pylist()}
            assert row["id"] in ids, (name, value)
            sql_type = {"at": "TIMESTAMPTZ", "local": "TIMESTAMP", "amount": "DECIMAL(12, 2)", "name": "VARCHAR"}
            found = connection.execute(f"SELECT * FROM iceberg_scan('{result.metadata_location}') "
                                       f"WHERE \"{name}\" = CAST(? AS {sql_type.get(name, 'BIGINT')})",
                                       [str(value)]).fetch_arrow_table()
            assert row in map(dict, rows_of(found.to_batches())), (name, value)


@pytest.mark.parametrize("mode", ["none", "id"])
def test_change_data_feed_columns_a_data_file_holds_beside_the_tables_are_left_out(tmp_path, mode):
    """With the change data feed on, Delta Spark's DML writes data files holding `_change_type`
    (null) and `__is_cdc` (false) beside the table's columns, without field ids; Delta readers
    read only the schema's columns, and so must Iceberg readers (PyIceberg refuses a file column
    the name mapping does not name)."""
    source = tmp_path / "source"
    (source / "_delta_log").mkdir(parents=True)
    physical = "col-5f1a" if mode == "id" else "id"
    id_field = pa.field(physical, pa.int64(), metadata={b"PARQUET:field_id": b"1"} if mode == "id" else None)
    data = pa.table([pa.array([1, 2], pa.int64()), pa.array([None, None], pa.string()), pa.array([False, False])],
                    schema=pa.schema([id_field, ("_change_type", pa.string()), ("__is_cdc", pa.bool_())]))
    pq.write_table(data, source / "part-0.parquet")
    mapping = {"delta.columnMapping.id": 1, "delta.columnMapping.physicalName": physical} if mode == "id" else {}
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": mapping}]}
    configuration = {"delta.enableChangeDataFeed": "true"}
    if mode == "id":
        configuration.update({"delta.columnMapping.mode": "id", "delta.columnMapping.maxColumnId": "1"})
    actions = [{"protocol": {"minReaderVersion": 2, "minWriterVersion": 5} if mode == "id" else
                {"minReaderVersion": 1, "minWriterVersion": 4}},
               {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                             "schemaString": json.dumps(schema), "partitionColumns": [],
                             "configuration": configuration, "createdTime": 0}},
               {"add": {"path": "part-0.parquet", "partitionValues": {}, "dataChange": True, "modificationTime": 0,
                        "size": (source / "part-0.parquet").stat().st_size, "stats": json.dumps({"numRecords": 2})}}]
    (source / "_delta_log" / f"{0:020d}.json").write_text("\n".join(map(json.dumps, actions)) + "\n")

    result = write_table(export_locally(source, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)

    expected = [(("id", 1),), (("id", 2),)]
    assert delta_rows(source, 0) == expected
    assert pyiceberg_rows(result.metadata_location) == expected
    assert duckdb_rows(result.metadata_location) == expected


@pytest.mark.parametrize("mode", ["none", "name"])
def test_partition_columns_whose_names_avro_refuses_read_in_every_reader(tmp_path, mode):
    """A partition column named `event-date` (or `1st`) names a field of the manifests' Avro
    partition record: written as Iceberg's Java writer writes it (`event_x2Ddate`), DuckDB reads the
    table (before: `Invalid Avro identifier`), and PyIceberg resolves it by id."""
    source = tmp_path / "source"
    configuration = {} if mode == "none" else {"delta.columnMapping.mode": mode}
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "event-date": ["2026-01-01", "2026-01-02", "2026-01-01"],
                     "1st": ["a", "b", "a"]})
    deltalake.write_deltalake(str(source), data, partition_by=["event-date", "1st"], configuration=configuration)
    deltalake.write_deltalake(str(source), data.slice(0, 1), partition_by=["event-date", "1st"], mode="append")
    result = write_table(export_locally(source, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)

    for version, snapshot_id in result.snapshot_ids.items():
        assert pyiceberg_rows(result.metadata_location, snapshot_id) == delta_rows(source, version), version
        assert duckdb_rows(result.metadata_location, snapshot_id) == delta_rows(source, version), version
    table = StaticTable.from_metadata(result.metadata_location)
    assert len(list(table.scan(row_filter=EqualTo("event-date", "2026-01-02")).plan_files())) == 1  # pruned by partition


def test_versions_naming_vacuumed_files_get_no_snapshot_and_the_head_reads_as_delta_rs(tmp_path):
    """The checkpoint at 4 holds files the overwrite at 5 removed and a vacuum then deleted: the
    export keeps their paths relative, and the Iceberg table starts at 5 (every file it names exists)."""
    source = tmp_path / "source"
    build_history(source)
    expected = {version: delta_rows(source, version) for version in (5, 6, 7)}
    deltalake.DeltaTable(str(source)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    expected[8] = expected[9] = expected[7]  # the vacuum's own two commits

    result = write_table(export_locally(source, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)

    assert sorted(result.snapshot_ids) == [5, 6, 7, 8, 9]
    for version, snapshot_id in result.snapshot_ids.items():
        assert pyiceberg_rows(result.metadata_location, snapshot_id) == expected[version], version
        assert duckdb_rows(result.metadata_location, snapshot_id) == expected[version], version


def test_a_head_naming_a_vacuumed_file_is_refused_with_the_file(tmp_path):
    source = tmp_path / "source"
    write(source, batch([1, 2], "eu", dt.date(2024, 1, 1), 1))
    write(source, batch([3], "us", dt.date(2024, 1, 2), 2))
    lost = next(source.glob("region=us/**/*.parquet"))
    lost.unlink()

    with pytest.raises(CorruptLog, match="holds no object for"):
        write_table(export_locally(source, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)
