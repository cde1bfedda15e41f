"""A user turns `iceberg.enabled` on and reads an export with Iceberg readers: PyIceberg
(`StaticTable.from_metadata`) and DuckDB (`iceberg_scan`, S3 secret for MinIO) read exactly the rows
Spark reads from the source through lakeFS at the commit, at the head and at an older snapshot,
whether the Iceberg table was written after the export or (`iceberg.same_task`) with it.

The first table is written by Spark through lakeFS's S3 gateway: partitioned, column mapping
`name`, deletion vectors from DELETE and UPDATE, a checkpoint; a first commit is exported cold, a
second (a DELETE: a deletion vector replaced) incrementally. Then tables of other kinds: column
mapping `id` (a column renamed and one dropped), change data feed on (its `_change_data` files are
no table rows), one written by delta-rs 1.6 (awkward partition values, an overwrite, deletes), and
a branch table after appends (a checkpoint past the Iceberg table's head) and after a divergence.
"""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest

from exporter.config import IcebergConfig, RetentionConfig
from exporter.branch_tables.table import append_commit, branch_table_versions
from exporter.export.commit import export_commit
from exporter.export.job import ExportAt
from exporter.upkeep.retention import iceberg_grace_seconds, prune
from tests.integration.deltatables import add_descriptor, export_one, read_version, table_uri
from tests.integration.test_branch_tables import commit_and_append
from tests.integration.test_foreign_writers import gateway, upload_and_export  # noqa: F401 (a fixture)
from tests.integration.writers import write_with_deltalake
from tests.unit.iceberg.readers import delta_rows, duckdb_connection, duckdb_rows, pyiceberg_rows, rows_of
from tests.fakes import lake_of

pytestmark = pytest.mark.integration

PATH = "tables/orders"


def spark_rows(spark, repository: str, commit_id: str, version: int, path: str = PATH) -> list[tuple]:
    """Rows Spark reads from the source through lakeFS at the commit, as the Iceberg readers' rows
    (through Arrow: a `timestamp` is an instant there, as Iceberg's `timestamptz` reads)."""
    return rows_of(read_version(spark, table_uri(repository, commit_id, path), version).toArrow().to_batches())


def assert_iceberg_reads(record: dict, expected: dict[int, list[tuple]], readers) -> None:
    """PyIceberg and DuckDB read the table `record` names as `expected` says: at the head (its
    newest version) and at each other version's snapshot."""
    properties, connection = readers
    assert record["state"] == "written", record
    head = max(expected)
    assert max(map(int, record["snapshot_ids"])) == head
    location = record["metadata_location"]
    for version, rows in sorted(expected.items()):
        snapshot = None if version == head else record["snapshot_ids"][str(version)]
        assert pyiceberg_rows(location, snapshot, properties=properties) == rows, f"PyIceberg, version {version}"
        assert duckdb_rows(location, snapshot, connection=connection) == rows, f"DuckDB, version {version}"


@pytest.fixture(scope="module")
def readers(stack_env):
    """PyIceberg's FileIO properties and a DuckDB connection with an S3 secret, both for MinIO."""
    endpoint = stack_env["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"]
    key, secret = (stack_env["LAKEFS_DELTA_OBJECT_STORE_ACCESS_KEY_ID"],
                   stack_env["LAKEFS_DELTA_OBJECT_STORE_SECRET_ACCESS_KEY"])
    properties = {"s3.endpoint": endpoint, "s3.access-key-id": key, "s3.secret-access-key": secret,
                  "s3.region": "us-east-1"}
    connection = duckdb_connection()
    connection.execute("LOAD httpfs")
    connection.execute(f"CREATE SECRET minio (TYPE s3, KEY_ID '{key}', SECRET '{secret}', REGION 'us-east-1', "
                       f"ENDPOINT '{endpoint.split('://', 1)[1]}', URL_STYLE 'path', USE_SSL false)")
    return properties, connection


def write_orders(spark, uri: str) -> None:
    """Versions 0-4 of Spark's `orders` at `uri`: partitioned, column mapping `name`, deletion vectors
    from DELETE and UPDATE, a checkpoint at version 3."""
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, `amount eur` DECIMAL(10,2), note STRING, region STRING, "
              "day DATE) USING delta PARTITIONED BY (region, day) TBLPROPERTIES ('delta.enableDeletionVectors' = "
              "'true', 'delta.columnMapping.mode' = 'name', 'delta.checkpointInterval' = '3')")       # 0
    regions = ("eu", "us", "ap")
    values = ", ".join(f"({i}, {i * 1.25}, 'n{i}', '{regions[i % 3]}', DATE'2024-01-0{1 + i % 2}')"
                       for i in range(1, 41))
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES {values}, (41, 2.5, NULL, 'eu', DATE'2024-01-03')")  # 1
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id % 5 = 0")                                         # 2
    spark.sql(f"UPDATE delta.`{uri}` SET note = 'updated' WHERE id < 4")                    # 3: checkpoint
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (42, 9.99, 'late', 'us', DATE'2024-01-01')")           # 4


def test_pyiceberg_and_duckdb_read_an_export_as_spark_reads_the_source(spark, lakefs, config, repository, s3, readers,
                                                                        monkeypatch):
    """The cold export's Iceberg table written after it, as by its task; the incremental one's with
    `iceberg.same_task`, in the export's own call, continuing the cold one's from what it holds."""
    config = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
    same_task = config.model_copy(update={"iceberg": IcebergConfig(enabled=True, same_task=True)})
    uri = table_uri(repository, "main", PATH)
    write_orders(spark, uri)
    add_descriptor(lakefs, repository, "orders", PATH)
    first = lakefs.commit_branch(repository, "main", "orders")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id = 7")                                             # 5
    second = lakefs.commit_branch(repository, "main", "orders: delete")
    assert any("deletion_vector_" in e.path for e in lakefs.list_objects(repository, second, PATH + "/"))

    cold = export_one(config, lakefs, repository, "main", first, "orders")
    with monkeypatch.context() as patched:
        patched.setattr("exporter.export.commit.export_iceberg", lambda *a, **k: pytest.fail("written after, not with"))
        incremental = export_one(same_task, lakefs, repository, "main", second, "orders")

    assert cold.ok and incremental.ok and incremental.incremental, (cold.error, incremental.error)
    for outcome, commit_id, head, older in ((cold, first, 4, 3), (incremental, second, 5, 4)):
        record = outcome.iceberg
        assert record["metadata_location"] == f"{outcome.location}metadata/v{head}.metadata.json"
        assert sorted(map(int, record["snapshot_ids"])) == list(range(3, head + 1))  # from the checkpoint
        bucket, _, key = outcome.location.removeprefix("s3://").partition("/")
        manifest = json.loads(s3.get_object(Bucket=bucket, Key=key + "_lakefs_export.json")["Body"].read())
        assert manifest["iceberg"] == record
        assert_iceberg_reads(record, {v: spark_rows(spark, repository, commit_id, v) for v in (older, head)}, readers)
    assert len(spark_rows(spark, repository, second, 5)) == 41 - 8 + 1 - 1

    # prune removes the cold export; the incremental export's table names the cold one's Iceberg files
    # where they are, and prune's collection keeps them while it does (two runs past the grace)
    expected = {v: spark_rows(spark, repository, second, v) for v in (3, 4, 5)}
    policy = RetentionConfig(keep_last=1, keep_hours=0)
    now = time.time() + 2 * iceberg_grace_seconds(config) + 60
    plans = [prune(lake_of(config, lakefs), repository, policy, now=now + i * iceberg_grace_seconds(config) * 2)
             for i in range(2)]
    assert plans[0].deleted == [cold.location.rsplit("/", 2)[0] + "/"], plans[0]
    assert plans[0].iceberg_files_deleted == plans[1].iceberg_files_deleted == 0, plans
    assert_iceberg_reads(incremental.iceberg, expected, readers)


def test_pyiceberg_and_duckdb_read_column_mapping_id_and_change_data_feed_exports_as_spark(spark, lakefs, config,
                                                                                          repository, readers):
    config = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
    mapped, changes = table_uri(repository, "main", "tables/mapped"), table_uri(repository, "main", "tables/changes")
    spark.sql(f"CREATE TABLE delta.`{mapped}` (id INT, `full name` STRING, at TIMESTAMP, local TIMESTAMP_NTZ, "
              "price DECIMAL(12,3)) USING delta TBLPROPERTIES ('delta.columnMapping.mode' = 'id')")      # 0
    spark.sql(f"INSERT INTO delta.`{mapped}` VALUES (1, 'Ann', TIMESTAMP'2024-03-01 10:00:00.123456', "
              "TIMESTAMP_NTZ'2024-03-01 10:00:00', 1.125), (2, NULL, NULL, NULL, -99999.999)")         # 1
    spark.sql(f"ALTER TABLE delta.`{mapped}` RENAME COLUMN `full name` TO name")                         # 2
    spark.sql(f"ALTER TABLE delta.`{mapped}` DROP COLUMN price")                                         # 3
    spark.sql(f"INSERT INTO delta.`{mapped}` VALUES (3, 'Cy', TIMESTAMP'1969-12-31 23:59:59', "
              "TIMESTAMP_NTZ'2038-01-19 03:14:08')")                                                     # 4
    spark.sql(f"CREATE TABLE delta.`{changes}` (id INT, kind STRING) USING delta "
              "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")                                  # 0
    spark.sql(f"INSERT INTO delta.`{changes}` VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')")           # 1
    spark.sql(f"UPDATE delta.`{changes}` SET kind = 'changed' WHERE id < 3")                            # 2
    spark.sql(f"DELETE FROM delta.`{changes}` WHERE id = 4")                                            # 3
    add_descriptor(lakefs, repository, "mapped", "tables/mapped")
    add_descriptor(lakefs, repository, "changes", "tables/changes")
    commit_id = lakefs.commit_branch(repository, "main", "mapped, changes")
    assert list(lakefs.list_objects(repository, commit_id, "tables/changes/_change_data/")), "CDF wrote change files"

    outcomes = {o.table: o for o in export_commit(lake_of(config, lakefs), ExportAt(repository, "main", commit_id))}

    for name, versions in (("mapped", (1, 4)), ("changes", (2, 3))):
        assert outcomes[name].ok, outcomes[name].error
        assert_iceberg_reads(outcomes[name].iceberg, {v: spark_rows(spark, repository, commit_id, v, f"tables/{name}")
                                                      for v in versions}, readers)


def test_pyiceberg_and_duckdb_read_an_export_of_a_delta_rs_table_as_delta_rs(lakefs, config, repository, gateway,
                                                                           readers, tmp_path):
    config = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
    local_dir = tmp_path / "table"
    written = write_with_deltalake("1.6.6", local_dir)  # awkward partition values, an overwrite, deletes, a checkpoint

    outcome = upload_and_export(lakefs, config, gateway, repository, local_dir, "rs")

    assert outcome.ok, outcome.error
    versions = (written["checkpoint_version"], written["head_version"])
    assert_iceberg_reads(outcome.iceberg, {v: delta_rows(local_dir, v) for v in versions}, readers)


def test_pyiceberg_and_duckdb_read_a_branch_table_after_appends_and_a_divergence(spark, lakefs, config, repository,
                                                                                readers):
    config = config.model_copy(update={"iceberg": IcebergConfig(enabled=True), "branch_tables": ("main",)})
    path = "tables/ledger"
    uri = table_uri(repository, "main", path)
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, amount DECIMAL(10,2), region STRING) USING delta "
              "PARTITIONED BY (region) TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', "
              "'delta.checkpointInterval' = '3')")                                                       # 0
    values = ", ".join(f"({i}, {i}.5, '{('eu', 'us')[i % 2]}')" for i in range(1, 13))
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES {values}")                                             # 1
    add_descriptor(lakefs, repository, "ledger", path)
    first = commit_and_append(config, lakefs, repository, "ledger", "versions 0-1")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id % 4 = 0")                                            # 2
    second = commit_and_append(config, lakefs, repository, "ledger", "version 2: deletion vectors")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (13, 0.01, 'ap')")                           # 3: a checkpoint
    spark.sql(f"UPDATE delta.`{uri}` SET amount = 0 WHERE id < 3")                                     # 4
    third = commit_and_append(config, lakefs, repository, "ledger", "versions 3-4")

    appended = branch_table_versions(lake_of(config, lakefs), repository, "main", "ledger")
    assert "rewritten" not in appended["iceberg"], appended["iceberg"]  # appended past checkpoint 3
    assert sorted(map(int, appended["iceberg"]["snapshot_ids"])) == [0, 1, 2, 3, 4]
    assert_iceberg_reads(appended["iceberg"], {1: spark_rows(spark, repository, first, 1, path),
                                               2: spark_rows(spark, repository, second, 2, path),
                                               4: spark_rows(spark, repository, third, 4, path)}, readers)

    reverted = lakefs.revert(repository, "main", third)  # the source's head moves back to version 2
    assert export_one(config, lakefs, repository, "main", reverted, "ledger").ok
    synced = append_commit(lake_of(config, lakefs), repository, "main", reverted, "ledger")

    assert synced.appended == [5] and synced.synthetic
    record = branch_table_versions(lake_of(config, lakefs), repository, "main", "ledger")["iceberg"]
    assert {v: record["snapshot_ids"][v] for v in appended["iceberg"]["snapshot_ids"]} == \
        appended["iceberg"]["snapshot_ids"]
    assert_iceberg_reads(record, {4: spark_rows(spark, repository, third, 4, path),
                                  5: spark_rows(spark, repository, reverted, 2, path)}, readers)


def test_a_branch_tables_older_snapshot_reads_a_column_the_head_moved_back_past(spark, lakefs, config, repository,
                                                                                readers):
    """Issue 38 item 14: the source's head moves back past the version that added `extra`; the
    synthetic version's schema has no `extra`, and the snapshot of the version that had it still
    reads it in PyIceberg and DuckDB (before: "Could not find field with name: extra")."""
    config = config.model_copy(update={"iceberg": IcebergConfig(enabled=True), "branch_tables": ("main",)})
    path = "tables/narrowed"
    uri = table_uri(repository, "main", path)
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT) USING delta")                                      # 0
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (1), (2)")                                            # 1
    add_descriptor(lakefs, repository, "narrowed", path)
    first = commit_and_append(config, lakefs, repository, "narrowed", "versions 0-1")
    spark.sql(f"ALTER TABLE delta.`{uri}` ADD COLUMNS (extra STRING)")                                 # 2
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (3, 'x'), (4, NULL)")                                 # 3
    second = commit_and_append(config, lakefs, repository, "narrowed", "versions 2-3: a column added")

    reverted = lakefs.revert(repository, "main", second)  # the source's head moves back to version 1
    assert export_one(config, lakefs, repository, "main", reverted, "narrowed").ok
    synced = append_commit(lake_of(config, lakefs), repository, "main", reverted, "narrowed")

    assert synced.appended == [4] and synced.synthetic
    record = branch_table_versions(lake_of(config, lakefs), repository, "main", "narrowed")["iceberg"]
    with_extra = spark_rows(spark, repository, second, 3, path)
    assert ("extra", "x") in {column for row in with_extra for column in row}
    assert_iceberg_reads(record, {1: spark_rows(spark, repository, first, 1, path), 3: with_extra,
                                  4: spark_rows(spark, repository, reverted, 1, path)}, readers)


def test_after_the_log_retention_a_branch_tables_iceberg_table_reads_every_version_the_delta_log_keeps(
        spark, lakefs, config, repository, readers):
    """The log retention, run at a clock 30 days after checkpoint 3 was written, removes versions
    0-2 of the branch table; the next append expires their Iceberg snapshots and deletes the files
    only they named: PyIceberg and DuckDB read each version still kept as Spark reads the source."""
    from exporter.delta.live_files import LiveFiles
    from exporter.branch_tables.table import expire_log
    from exporter.branch_tables.state import read_state
    from exporter.export.readback import read_exported_log
    from exporter.storage.layout import branch_table_location
    from exporter.storage.objectstore import ObjectStore

    config = config.model_copy(update={"iceberg": IcebergConfig(enabled=True), "branch_tables": ("main",)})
    path = "tables/aging"
    uri = table_uri(repository, "main", path)
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, region STRING) USING delta PARTITIONED BY (region) "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', 'delta.checkpointInterval' = '3')")  # 0
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (1, 'eu'), (2, 'us'), (3, 'eu')")                       # 1
    add_descriptor(lakefs, repository, "aging", path)
    commits = {1: commit_and_append(config, lakefs, repository, "aging", "versions 0-1")}
    for version, change in ((2, "INSERT INTO {} VALUES (4, 'us')"), (3, "DELETE FROM {} WHERE id = 1"),  # 3: a checkpoint
                            (4, "INSERT INTO {} VALUES (5, 'ap')"), (5, "UPDATE {} SET id = 30 WHERE id = 3")):
        spark.sql(change.format(f"delta.`{uri}`"))
        commits[version] = commit_and_append(config, lakefs, repository, "aging", f"version {version}")
    store = ObjectStore(config, lakefs.storage_namespace(repository))
    target = branch_table_location(config, "main", "aging")
    written = {name.rsplit("/", 1)[-1]: at for name, _, at in store.list_objects(target + "_delta_log/")}
    before = branch_table_versions(lake_of(config, lakefs), repository, "main", "aging")["iceberg"]
    assert sorted(map(int, before["snapshot_ids"])) == [0, 1, 2, 3, 4, 5]
    clock = written[f"{3:020d}.checkpoint.parquet"] + 30 * 86400 + 0.25
    assert expire_log(store, target, read_state(store, target), LiveFiles(read_exported_log(store, target)).metadata,
                      3, now=clock) >= 3
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (6, 'eu')")                                              # 6
    commits[6] = commit_and_append(config, lakefs, repository, "aging", "version 6")

    record = branch_table_versions(lake_of(config, lakefs), repository, "main", "aging")["iceberg"]
    assert sorted(map(int, record["snapshot_ids"])) == [3, 4, 5, 6], record
    assert {v: record["snapshot_ids"][v] for v in "345"} == {v: before["snapshot_ids"][v] for v in "345"}
    assert_iceberg_reads(record, {v: spark_rows(spark, repository, commits[v], v, path) for v in (3, 4, 5, 6)}, readers)
    metadata_files = [key for key in store.list_keys(target + "metadata/") if key.endswith(".metadata.json")]
    assert not any(key.endswith(("/v1.metadata.json", "/v2.metadata.json")) for key in metadata_files), metadata_files
