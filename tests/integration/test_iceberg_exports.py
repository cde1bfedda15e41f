"""A user turns `iceberg.enabled` on and reads an export with Iceberg readers: PyIceberg
(`StaticTable.from_metadata`) and DuckDB (`iceberg_scan`, S3 secret for MinIO) read exactly the rows
Spark reads from the source through lakeFS at the commit, at the head and at an older snapshot.

The table is written by Spark through lakeFS's S3 gateway: partitioned, column mapping `name`,
deletion vectors from DELETE and UPDATE, a checkpoint; a first commit is exported cold, a second
(a DELETE: a deletion vector replaced) incrementally.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from exporter.config import IcebergConfig
from tests.integration.deltatables import add_descriptor, export_one, read_version, table_uri
from tests.unit.iceberg.readers import duckdb_connection, duckdb_rows, pyiceberg_rows, rows_of

pytestmark = pytest.mark.integration

PATH = "tables/orders"


def spark_rows(spark, repository: str, commit_id: str, version: int) -> list[tuple]:
    """Rows Spark reads from the source through lakeFS at the commit, as the Iceberg readers' rows."""
    frame = read_version(spark, table_uri(repository, commit_id, PATH), version)
    return rows_of([pa.Table.from_pylist([row.asDict() for row in frame.collect()])])


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


def test_pyiceberg_and_duckdb_read_an_export_as_spark_reads_the_source(spark, lakefs, config, repository, s3, readers):
    properties, connection = readers
    config = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
    uri = table_uri(repository, "main", PATH)
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
    add_descriptor(lakefs, repository, "orders", PATH)
    first = lakefs.commit_branch(repository, "main", "orders")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id = 7")                                             # 5
    second = lakefs.commit_branch(repository, "main", "orders: delete")
    assert any("deletion_vector_" in e["path"] for e in lakefs.list_objects(repository, second, PATH + "/"))

    cold = export_one(config, lakefs, repository, "main", first, "orders")
    incremental = export_one(config, lakefs, repository, "main", second, "orders")

    assert cold.ok and incremental.ok and incremental.incremental, (cold.error, incremental.error)
    for outcome, commit_id, head, older in ((cold, first, 4, 3), (incremental, second, 5, 4)):
        record = outcome.iceberg
        assert record["state"] == "written", record
        assert record["metadata_location"] == f"{outcome.location}metadata/v{head}.metadata.json"
        assert sorted(map(int, record["snapshot_ids"])) == list(range(3, head + 1))  # from the checkpoint
        bucket, _, key = outcome.location.removeprefix("s3://").partition("/")
        manifest = json.loads(s3.get_object(Bucket=bucket, Key=key + "_lakefs_export.json")["Body"].read())
        assert manifest["iceberg"] == record
        expected = spark_rows(spark, repository, commit_id, head)
        assert pyiceberg_rows(record["metadata_location"], properties=properties) == expected
        assert duckdb_rows(record["metadata_location"], connection=connection) == expected
        snapshot = record["snapshot_ids"][str(older)]
        expected = spark_rows(spark, repository, commit_id, older)
        assert pyiceberg_rows(record["metadata_location"], snapshot, properties=properties) == expected
        assert duckdb_rows(record["metadata_location"], snapshot, connection=connection) == expected
    assert len(spark_rows(spark, repository, second, 5)) == 41 - 8 + 1 - 1
