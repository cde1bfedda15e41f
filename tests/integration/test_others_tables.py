"""Tables from delta-kernel-rs's and delta-rs's test suites, exported: the Iceberg table reads in
PyIceberg and DuckDB exactly as Spark reads the source table, at every version it has a snapshot of.

Each table is uploaded to lakeFS as its package ships it (every file, byte for byte), committed and
exported with the Iceberg step on. Spark reads the local copy at each version (of a table with more
than 12 snapshots, every third, delta-rs the others); PyIceberg and DuckDB read the export's Iceberg
table at that version's snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from exporter.config import IcebergConfig
from tests.integration.deltatables import read_version, spark_settings
from tests.integration.others_tables import DELTA_RS, KERNEL, Package, table
from tests.integration.test_foreign_writers import gateway, upload_and_export  # noqa: F401 (a fixture)
from tests.integration.test_iceberg_exports import readers  # noqa: F401 (a fixture)
from tests.integration.writers import local_uri
from tests.unit.iceberg.readers import delta_rows, duckdb_rows, pyiceberg_rows, rows_of

pytestmark = pytest.mark.integration

# These tables were written years ago: Spark refuses time travel past the 7-day deleted-file retention.
SPARK_CONF = {"spark.databricks.delta.vacuum.enforceTimeTravelWithinDeletedFileRetentionDuration": "false",
              # Spark read compacted-log-files-table's log compaction file 0-5 as 14 rows at version 5 where
              # its commits (and delta-rs) give 3: the reference reads the commits.
              "spark.databricks.delta.deltaLog.minorCompaction.useForReads": "false"}


@dataclass(frozen=True)
class Case:
    package: Package
    name: str
    carries: str
    reference: str = "spark"
    refused: str | None = None      # what the Iceberg step's refusal says, when Iceberg v2 cannot hold the table
    pyiceberg_misreads: str | None = None  # a column PyIceberg's reader cannot read right (the reason in `carries`)


CASES = [
    Case(KERNEL, "cdf-table-with-dv", "inline and on-disk deletion vectors; Spark refuses it (changeDataFeed in "
                                      "metaData, not in the protocol's features), so delta-rs is the reference",
         reference="delta-rs"),
    Case(KERNEL, "with-short-dv", "deletion vectors of a few rows"),
    Case(KERNEL, "table-with-dv-small", "deletion vectors"),
    Case(KERNEL, "v2-checkpoints-parquet-with-sidecars", "V2 checkpoints in Parquet with sidecars"),
    Case(KERNEL, "v2-checkpoints-json-with-sidecars", "V2 checkpoints in JSON with sidecars"),
    Case(KERNEL, "v2-classic-checkpoint-json", "a classic-named V2 checkpoint"),
    Case(KERNEL, "parquet_row_group_skipping", "a multi-part checkpoint, a part without statistics"),
    Case(KERNEL, "compacted-log-files-table", "deletion vectors and change data files over 25 versions, log compaction "
                                              "files (cdf-table-with-cdc-and-dvs without them is the same table)"),
    Case(KERNEL, "data-reader-timestamp_ntz", "timestamp_ntz, partitioned by it"),
    Case(KERNEL, "app-txn-checkpoint", "a checkpoint with parsed statistics beside JSON ones"),
    Case(KERNEL, "basic-decimal-table", "decimal partition values"),
    Case(KERNEL, "type-widening", "byte, short and int widened to double and long",
         refused="was widened from byte to double (the Delta typeWidening feature): Iceberg readers cannot promote"),
    Case(DELTA_RS, "delta-1.2.1-only-struct-stats", "a checkpoint with struct-only statistics, nested types"),
    Case(DELTA_RS, "table_with_column_mapping", "column mapping by name"),
    Case(DELTA_RS, "table_with_deletion_logs", "deletion vectors over 21 versions, a checkpoint"),
    Case(DELTA_RS, "delta-2.2.0-partitioned-types", "partition values of several types"),
    Case(DELTA_RS, "delta-0.2.0", "a table from Delta 0.2.0, a checkpoint"),
    Case(DELTA_RS, "table_with_edge_timestamps", "INT96 timestamps in year 9999: PyIceberg 0.12 reads INT96 as "
                                                 "nanoseconds through pyarrow and wraps past 2262",
         pyiceberg_misreads="BIG_DATE"),
]


SPARK_EVERY = 3  # a table of many snapshots: Spark reads every third version (and the first and last), delta-rs the rest


def reference_rows(case: Case, spark, local_dir, version: int, versions: list[int]) -> list[tuple]:
    """Spark's rows of the source at `version`; delta-rs's where Spark refuses the table, and between
    Spark's versions of a table with more than 12 snapshots (each Spark read costs about 3 s here)."""
    sampled = len(versions) > 12 and version not in (versions[0], versions[-1]) and version % SPARK_EVERY
    if case.reference == "delta-rs" or sampled:
        return delta_rows(local_dir, version)
    return rows_of(read_version(spark, local_uri(local_dir), version).toArrow().to_batches())


def without(rows: list[tuple], column: str | None) -> list[tuple]:
    return sorted((tuple(pair for pair in row if pair[0] != column) for row in rows), key=repr)


@pytest.fixture
def spark_for_old_tables(spark):
    with spark_settings(spark, SPARK_CONF):
        yield spark


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_iceberg_table_reads_as_spark_reads_the_source(case, spark_for_old_tables, lakefs, config, repository,
                                                           gateway, readers, tmp_path):  # noqa: F811
    config = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
    local_dir = table(case.package, case.name, tmp_path)

    outcome = upload_and_export(lakefs, config, gateway, repository, local_dir, case.name.replace("_", "-").lower())

    assert outcome.ok, outcome.error
    record = outcome.iceberg
    if case.refused:
        assert record["state"] == "refused" and case.refused in record["reason"], record
        assert "\n" not in outcome.summary() and "Iceberg refused: column" in outcome.summary()  # the CLI's line
        return
    assert record["state"] == "written", record
    properties, connection = readers
    versions = sorted((int(v), s) for v, s in record["snapshot_ids"].items())
    assert versions[-1][0] == outcome.head_version
    for version, snapshot in versions:
        expected = reference_rows(case, spark_for_old_tables, local_dir, version, [v for v, _ in versions])
        assert duckdb_rows(record["metadata_location"], snapshot, connection=connection) == expected, \
            f"DuckDB, version {version}"
        assert without(pyiceberg_rows(record["metadata_location"], snapshot, properties=properties),
                       case.pyiceberg_misreads) == without(expected, case.pyiceberg_misreads), \
            f"PyIceberg, version {version}"
