"""The rows Iceberg readers return from a table `exporter.iceberg` wrote, and delta-rs's rows of the
same version, as sorted multisets of plain values."""

from __future__ import annotations

from pathlib import Path

import deltalake
import duckdb
import duckdb_ext
import pyarrow as pa
from pyiceberg.table import StaticTable


def rows_of(batches) -> list[tuple]:
    """Rows as sorted tuples of (column, value) pairs: column order and integer widths do not matter."""
    return sorted((tuple(sorted(row.items())) for batch in batches for row in batch.to_pylist()), key=repr)


def delta_rows(table: Path, version: int) -> list[tuple]:
    # DataFusion, not to_pyarrow_table(): delta-rs 1.6's pyarrow dataset reads column-mapped columns as nulls
    query = deltalake.QueryBuilder().register("t", deltalake.DeltaTable(str(table), version=version))
    return rows_of(pa.table(query.execute("SELECT * FROM t").read_all()).to_batches())


def pyiceberg_rows(metadata_location: str, snapshot_id: int | None = None,
                   properties: dict[str, str] | None = None) -> list[tuple]:
    """`properties`: PyIceberg's FileIO properties (`s3.endpoint`, keys) for a table in S3."""
    # batches, not to_arrow(): PyIceberg 0.12 cannot concatenate a delta-rs file read as `string` with a
    # DataFusion-written one read as `string_view` (ArrowTypeError "Unable to merge")
    scan = StaticTable.from_metadata(metadata_location, properties=properties or {}).scan(snapshot_id=snapshot_id)
    return rows_of(scan.to_arrow_batch_reader())


def duckdb_connection() -> duckdb.DuckDBPyConnection:
    """DuckDB with the iceberg extension (and avro, which it needs) from their PyPI wheels."""
    connection = duckdb.connect(config={"extension_directory": f"{list(duckdb_ext.__path__)[0]}/extensions",
                                        "autoinstall_known_extensions": False})
    connection.execute("LOAD avro; LOAD iceberg; SET TimeZone = 'UTC'")
    return connection


def duckdb_rows(metadata_location: str, snapshot_id: int | None = None,
                connection: duckdb.DuckDBPyConnection | None = None) -> list[tuple]:
    connection = connection or duckdb_connection()
    at = "" if snapshot_id is None else f", snapshot_from_id => {snapshot_id}"
    result = connection.execute(f"SELECT * FROM iceberg_scan('{metadata_location}'{at})").fetch_arrow_table()
    return rows_of(result.to_batches())
