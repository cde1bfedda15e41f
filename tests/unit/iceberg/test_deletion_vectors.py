"""Deletion vectors read by Iceberg readers as position delete files: a log with vectors written by
hand (delta-rs writes none, and no Spark is used here), inline and stored in a file, a vector
replaced by a larger one and then by a smaller one (a restore)."""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from pathlib import Path
from urllib.parse import urlsplit

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exporter.iceberg.table import write_table
from tests.unit.diff.test_row_diff import bitmap_array, z85
from tests.unit.iceberg.local_export import LocalFiles, export_locally, read_range
from tests.unit.iceberg.readers import duckdb_rows, pyiceberg_rows, rows_of

pytestmark = pytest.mark.unit
_PROTOCOL = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
                          "writerFeatures": ["deletionVectors"]}}


def inline_vector(rows: list[int]) -> dict:
    payload = bitmap_array(rows)
    return {"storageType": "i", "pathOrInlineDv": z85(payload), "sizeInBytes": len(payload),
            "cardinality": len(rows)}


def stored_vector(table: Path, rows: list[int]) -> dict:
    """A vector in `deletion_vector_<uuid>.bin` at the table root, named as storage type `u` names it."""
    payload = bitmap_array(rows)
    file_uuid = uuid.uuid4()
    framed = b"\x01" + struct.pack(">i", len(payload)) + payload + struct.pack(">I", zlib.crc32(payload))
    (table / f"deletion_vector_{file_uuid}.bin").write_bytes(framed)
    return {"storageType": "u", "pathOrInlineDv": z85(file_uuid.bytes), "offset": 1, "sizeInBytes": len(payload),
            "cardinality": len(rows)}


def commit(table: Path, version: int, actions: list[dict]) -> None:
    info = {"commitInfo": {"timestamp": 1_700_000_000_000 + version, "operation": "DELETE"}}
    lines = [json.dumps(action) for action in [info, *actions]]
    (table / "_delta_log" / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def replaced(add: dict, old: dict | None, new: dict | None) -> list[dict]:
    """A file's vector replaced: the logical file with the old vector removed, the new one added."""
    remove = {"path": add["path"], "dataChange": True, "deletionTimestamp": 0, "size": add["size"],
              "partitionValues": add["partitionValues"], **({"deletionVector": old} if old else {})}
    stats = json.loads(add["stats"])
    return [{"remove": remove},
            {"add": {**add, "stats": json.dumps({**stats, "tightBounds": False}), "deletionVector": new}}]


def live_rows(table: Path, files: dict[str, list[int]]) -> list[tuple]:
    """The rows of data files (relative path -> deleted positions), partition values from the path."""
    batches = []
    for path, deleted in files.items():
        data = pq.read_table(table / path, partitioning=None)
        keep = [i for i in range(data.num_rows) if i not in set(deleted)]
        region = path.split("/")[0].split("=")[1]
        data = data.take(keep).append_column("region", pa.array([region] * len(keep), pa.string()))
        batches += data.to_batches()
    return rows_of(batches)


def two_partitions(table) -> dict[str, dict]:
    """A delta-rs table of 10 rows in each of two partitions, `eu` and `us` (versions 0 and 1): their adds."""
    for region in ("eu", "us"):
        deltalake.write_deltalake(str(table), pa.table({"id": pa.array(range(10), pa.int64()),
                                                        "region": [region] * 10}),
                                  partition_by=["region"], mode="append")
    adds = {}
    for version in (0, 1):
        for line in (table / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
            if "add" in (action := json.loads(line)):
                adds[action["add"]["partitionValues"]["region"]] = action["add"]
    return adds


def vector_history(table: Path) -> dict[int, dict[str, list[int]]]:
    """Versions 0-4 of a table with vectors written by hand (delta-rs writes none): inline and
    stored in a file, replaced by a larger one, then by the first again (a restore: fewer rows
    deleted). The rows each version deletes, by data file and version from 1 on."""
    adds = two_partitions(table)
    eu, us = adds["eu"]["path"], adds["us"]["path"]
    first, larger = inline_vector([0, 3]), stored_vector(table, [0, 3, 4, 9])
    commit(table, 2, [_PROTOCOL, *replaced(adds["eu"], None, first)])
    commit(table, 3, replaced(adds["eu"], first, larger) + replaced(adds["us"], None, inline_vector([5])))
    commit(table, 4, replaced(adds["eu"], larger, first))
    return {1: {eu: [], us: []}, 2: {eu: [0, 3], us: []}, 3: {eu: [0, 3, 4, 9], us: [5]}, 4: {eu: [0, 3], us: [5]}}


def test_deletion_vectors_are_deleted_rows_for_both_readers(tmp_path):
    table = tmp_path / "source"
    expected = vector_history(table)

    result = write_table(export_locally(table, tmp_path / "export"), LocalFiles(tmp_path / "iceberg"), read_range)

    for version, files in expected.items():
        rows = live_rows(table, files)
        assert pyiceberg_rows(result.metadata_location, result.snapshot_ids[version]) == rows, version
        assert duckdb_rows(result.metadata_location, result.snapshot_ids[version]) == rows, version
    # one per (file, vector): the restore's vector is the first one again, the same object
    assert len(list((tmp_path / "iceberg" / "data" / "deletes").iterdir())) == 3
    # versions 2-4 were committed in 2023, after versions 0-1 of today: the snapshots' times
    # increase as Delta's readers make them (Iceberg's Java, Go and Rust readers refuse a snapshot
    # log that goes back more than a minute: "Expected sorted snapshot log entries")
    metadata = json.loads(Path(urlsplit(result.metadata_location).path).read_text())
    times = [entry["timestamp-ms"] for entry in metadata["snapshot-log"]]
    assert times == sorted(times) and len(set(times)) == len(times), times
    assert metadata["last-updated-ms"] >= times[-1]
