"""Apache Spark reading through Iceberg's own Spark runtime returns exactly delta-rs's rows from the
Iceberg tables `exporter.iceberg` writes: at the head and at every older snapshot, with filters
pushed into Iceberg's scan (file bounds), after an append, and with deletion vectors (position
delete files). The Delta tables are the unit tests' (tests/unit/iceberg/), exported to a local
folder; no lakeFS stack is needed.

There is no Iceberg runtime built for Spark 4.2: 4.1's (`RUNTIME`) is binary incompatible with it
at the entry points. `spark.read.format("iceberg").load(...)` fails in `IcebergSource` with
`IncompatibleClassChangeError: Found interface ...CatalogManager, but class was expected`, an
Iceberg `SparkCatalog` (`spark.sql.catalog.x`) cannot even be loaded (`SparkView can not implement
...catalog.View, because it is not an interface`), and `DataSourceV2Relation.create` calls
`SparkTable.columns()`, which calls the gone `CatalogV2Util.structTypeToV2Columns(StructType)`.
So a table is loaded as `SparkCatalog.loadTable(ident, version)` would load it (Iceberg's
`StaticTableOperations` over the metadata file, `SparkTable.create(table, TimeTravel.version(id))`)
and put in a `DataSourceV2Relation` built from its schema; from there on, planning, filter pushdown,
the scan and the Parquet and delete readers are Iceberg's own. Once a runtime for Spark 4.2
exists, `frame` should become `spark.read.format("iceberg").option("snapshot-id", id).load(location)`.

Spark runs in a child process: the integration suite's own SparkSession (Delta, `tests/conftest.py`)
may already be up in pytest's process, and a process has one SparkContext.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing
import traceback
from decimal import Decimal

import pytest

from exporter.iceberg.table import append_table, write_table
from tests.unit.iceberg.local_export import LocalFiles, export_locally, read_range
from tests.unit.iceberg.readers import delta_rows, rows_of
from tests.unit.iceberg.test_deletion_vectors import live_rows, vector_history
from tests.unit.iceberg.test_readers import append_history, build_history

pytestmark = pytest.mark.integration
RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"  # the newest; none is built for Spark 4.2
REPLY_SECONDS = 600  # the first session resolves the runtime (48 MB) from Maven Central


def session():
    """A plain local SparkSession with Iceberg's runtime (no Delta), timestamps in UTC."""
    from pyspark.sql import SparkSession

    from devtools.spark import IVY_DIR

    spark = (SparkSession.builder.master("local[2]").appName("iceberg-reader")
             .config("spark.jars.packages", RUNTIME)
             .config("spark.jars.ivy", str(IVY_DIR))
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC")  # Arrow's `timestamp` zone, as delta-rs's
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def frame(spark, metadata_location: str, snapshot_id: int | None = None):
    """The table of a metadata file (at a snapshot) as a DataFrame read by Iceberg's Spark source."""
    from pyspark.sql import DataFrame

    jvm = spark._jvm
    iceberg = jvm.org.apache.iceberg
    operations = iceberg.StaticTableOperations(metadata_location,
                                               iceberg.hadoop.HadoopFileIO(spark._jsc.hadoopConfiguration()))
    table = iceberg.BaseTable(operations, metadata_location)
    spark_table = (iceberg.spark.source.SparkTable(table) if snapshot_id is None else
                   iceberg.spark.source.SparkTable.create(table, iceberg.spark.TimeTravel.version(str(snapshot_id))))
    output = jvm.org.apache.spark.sql.catalyst.types.DataTypeUtils.toAttributes(spark_table.schema())
    none = jvm.scala.Option.empty()
    relation = jvm.org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation(
        spark_table, output, none, none, jvm.org.apache.spark.sql.util.CaseInsensitiveStringMap.empty(), none)
    return DataFrame(jvm.org.apache.spark.sql.classic.Dataset.ofRows(spark._jsparkSession, relation), spark)


def serve(connection) -> None:
    """The child: answers (metadata location, snapshot id, SQL filter) with the rows as an Arrow
    table, or ("error", traceback); None stops the session and the process."""
    try:
        spark = session()
    except BaseException:
        connection.send(("error", traceback.format_exc()))
        return
    connection.send(("ready", spark.version))
    try:
        while (request := connection.recv()) is not None:
            location, snapshot_id, where = request
            try:
                data = frame(spark, location, snapshot_id)
                connection.send(("rows", (data if where is None else data.where(where)).toArrow()))
            except Exception:
                connection.send(("error", traceback.format_exc()))
    finally:
        spark.stop()


class SparkReader:
    def __init__(self):
        self.connection, child = multiprocessing.get_context("spawn").Pipe()
        self.process = multiprocessing.get_context("spawn").Process(target=serve, args=(child,), daemon=True)
        self.process.start()
        self.version = self._reply("ready")

    def _reply(self, kind: str):
        if not self.connection.poll(REPLY_SECONDS):
            raise TimeoutError(f"no answer from the Spark process in {REPLY_SECONDS}s")
        got, value = self.connection.recv()
        if got != kind:
            raise RuntimeError(f"the Spark process failed:\n{value}")
        return value

    def rows(self, metadata_location: str, snapshot_id: int | None = None, where: str | None = None) -> list[tuple]:
        self.connection.send((metadata_location, snapshot_id, where))
        return rows_of(self._reply("rows").to_batches())

    def stop(self) -> None:
        if self.process.is_alive():
            self.connection.send(None)
            self.process.join(120)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(30)


@pytest.fixture(scope="module")
def spark_iceberg():
    reader = SparkReader()
    yield reader
    reader.stop()


def test_every_version_reads_as_delta_rs_reads_it(tmp_path, spark_iceberg):
    """Three kinds of partition column (a null value too), a delete, a checkpoint, a partition
    overwritten, a column added; decimals, timestamps with and without zone, nulls."""
    source = tmp_path / "source"
    build_history(source)
    result = write_table(export_locally(source, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)

    assert sorted(result.snapshot_ids) == [4, 5, 6, 7]
    head = delta_rows(source, 7)
    assert len(head) == 11
    assert spark_iceberg.rows(result.metadata_location) == head
    for version, snapshot_id in result.snapshot_ids.items():
        assert spark_iceberg.rows(result.metadata_location, snapshot_id) == delta_rows(source, version), version


def test_every_row_is_found_by_its_own_values(tmp_path, spark_iceberg):
    """Filters reach Iceberg's scan, which skips files by the bounds written (delta-rs cuts
    timestamps in stats to milliseconds): no file holding a matching row may be skipped."""
    source = tmp_path / "source"
    build_history(source)
    result = write_table(export_locally(source, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)

    def literal(value) -> str:
        if isinstance(value, dt.datetime):
            kind = "TIMESTAMP_NTZ" if value.tzinfo is None else "TIMESTAMP"
            return f"{kind} '{value.replace(tzinfo=None).isoformat(sep=' ')}'"  # the session's zone is UTC
        if isinstance(value, Decimal):
            return f"CAST('{value}' AS DECIMAL(12, 2))"
        return f"'{value}'" if isinstance(value, str) else str(value)

    head = delta_rows(source, 7)
    for row in map(dict, head):
        for name in ("id", "name", "amount", "at", "local", "region", "day"):
            if row[name] is None:
                continue
            value = f"DATE '{row[name]}'" if name == "day" else literal(row[name])
            found = spark_iceberg.rows(result.metadata_location, where=f"`{name}` = {value}")
            assert tuple(sorted(row.items())) in found, (name, value)
    assert spark_iceberg.rows(result.metadata_location, where="region IS NULL") == [r for r in head
                                                                                      if dict(r)["region"] is None]


def test_an_appended_table_reads_as_delta_rs_reads_it(tmp_path, spark_iceberg):
    source = tmp_path / "source"
    build_history(source)
    files = LocalFiles(tmp_path / "iceberg")
    first = write_table(export_locally(source, tmp_path / "export"), files, read_range)
    append_history(source)
    second = append_table(first.metadata_key, export_locally(source, tmp_path / "export"), files, read_range)

    assert sorted(second.snapshot_ids) == [4, 5, 6, 7, 8, 9]
    assert spark_iceberg.rows(second.metadata_location) == delta_rows(source, 9)
    for version in (5, 8):
        assert spark_iceberg.rows(second.metadata_location, second.snapshot_ids[version]) == \
            delta_rows(source, version), version


def test_deletion_vectors_are_deleted_rows(tmp_path, spark_iceberg):
    """A log with vectors written by hand (`vector_history`), read as position deletes."""
    table = tmp_path / "source"
    expected = vector_history(table)

    # the hand-written commits are dated 2023, after delta-rs's of today: Iceberg's Java `TableMetadata`
    # refuses a snapshot log going back more than a minute ("[BUG] Expected sorted snapshot log
    # entries."), so the snapshots' times increase as Delta's readers make commit times increase
    result = write_table(export_locally(table, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)

    for version, deleted in expected.items():
        rows = live_rows(table, deleted)
        assert spark_iceberg.rows(result.metadata_location, result.snapshot_ids[version]) == rows, version
    assert spark_iceberg.rows(result.metadata_location) == live_rows(table, expected[4])
