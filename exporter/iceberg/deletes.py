"""A Delta deletion vector as an Iceberg position delete file (spec.md#position-delete-files): the
row positions it deletes in one data file, `file_path` and `pos` under the spec's reserved ids.

Format version 2 position deletes, not version 3 deletion vectors (Puffin), though PyIceberg 0.12
and DuckDB 1.4.4's iceberg extension read both (measured): v3 is a property of the whole table, so
every engine that reads only v2 could read none of it, and v3's row lineage would have to be kept
too. One delete file per data file and vector, so a vector replaced later retires just its own.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from exporter.delta.deletion_vectors import deleted_rows

FILE_PATH_ID, POS_ID = 2147483546, 2147483545  # spec.md#reserved-field-ids
_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
])


def position_deletes(data_path: str, descriptor: Mapping[str, Any],
                     read_range: Callable[[str, int, int], bytes]) -> tuple[bytes, int]:
    """The position delete file of `data_path`'s deletion vector (its positions in order) and how
    many rows it deletes."""
    rows = deleted_rows(descriptor, read_range)
    positions = pa.array(rows.to_array(), pa.int64()) if len(rows) else pa.array([], pa.int64())
    table = pa.table([pa.array([data_path] * len(positions), pa.string()), positions], schema=_SCHEMA)
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd")
    return out.getvalue(), len(positions)
