"""A row diff's rows as one Parquet file beside the exports, whichever engine computed them.

One row per change: `id` (its position), `change` (removed, added, updated), `partition` (the
`column=value/...` label), `values` and `before` (the row as a JSON object; `before` for updates
only). Row groups of `ROWS_PER_GROUP` rows in id order, so a page reads only the groups it needs;
the answer in Redis holds counts and this file's location, never the rows.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from exporter.errors import NotFound
from exporter.parquet.splice import open_parquet
from exporter.storage.objectstore import ObjectSource, ObjectStore

ROWS_PER_GROUP = 1000
SCHEMA = pa.schema([("id", pa.int64()), ("change", pa.string()), ("partition", pa.string()),
                    ("values", pa.string()), ("before", pa.string())])
_UPLOAD_CHUNK = 8 << 20


def write_rows(path: str | Path, batches: Iterable[list[dict]]) -> int:
    """Rows (dicts of SCHEMA's fields, ids in order) to a local Parquet file; how many. An empty
    answer is a file of no rows."""
    written = 0
    with pq.ParquetWriter(str(path), SCHEMA) as writer:
        pending: list[dict] = []
        for batch in batches:
            pending += batch
            while len(pending) >= ROWS_PER_GROUP:
                writer.write_table(pa.Table.from_pylist(pending[:ROWS_PER_GROUP], SCHEMA), row_group_size=ROWS_PER_GROUP)
                written, pending = written + ROWS_PER_GROUP, pending[ROWS_PER_GROUP:]
        if pending or not written:
            writer.write_table(pa.Table.from_pylist(pending, SCHEMA), row_group_size=ROWS_PER_GROUP)
            written += len(pending)
    return written


def upload_rows(store: ObjectStore, path: str | Path, location: str) -> None:
    """The local rows file to `location` (relative to the namespace), in parts: never whole in memory."""
    upload = store.upload(location)
    try:
        with Path(path).open("rb") as rows:
            while chunk := rows.read(_UPLOAD_CHUNK):
                upload.write(chunk)
        upload.complete()
    finally:
        upload.abort()  # nothing when it completed


def store_rows(store: ObjectStore, location: str, batches: Iterable[list[dict]]) -> int:
    """`write_rows` then `upload_rows`, through a temporary file; how many rows."""
    with tempfile.TemporaryDirectory(prefix="lakefs-delta-rows-") as folder:
        path = Path(folder) / "rows.parquet"
        count = write_rows(path, batches)
        upload_rows(store, path, location)
    return count


def rows_page(store: ObjectStore, rows_location: str, start: int, amount: int) -> tuple[list[dict], int]:
    """The rows from position `start` (`amount` of them), read by the row groups that hold them,
    and how many rows there are in all."""
    size = store.list_sizes(rows_location).get(rows_location)
    if size is None:
        raise NotFound(f"the rows file {store.uri(rows_location)} is gone (pruned with the exports it compares)")
    parquet_file = open_parquet(ObjectSource(store, store.address(rows_location), size), rows_location)
    total = parquet_file.metadata.num_rows
    groups = range(start // ROWS_PER_GROUP, min(parquet_file.num_row_groups, -(-(start + amount) // ROWS_PER_GROUP)))
    rows = []
    if start < total and groups:
        table = parquet_file.read_row_groups(list(groups))
        rows = [row for row in table.to_pylist() if start <= row["id"] < start + amount]
    return [{"id": row["id"], "change": row["change"], "partition": row["partition"],
             "values": json.loads(row["values"]), **({"before": json.loads(row["before"])} if row["before"] else {})}
            for row in rows], total
