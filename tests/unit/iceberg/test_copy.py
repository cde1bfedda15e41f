"""A table copied to another location and appended to (`copy_table`, as a derived export's): every
snapshot reads as before, with the new versions, once the original is gone; no file of the copy
names the original's location; the data manifests are the original's bytes."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import fastavro
import pyarrow.parquet as pq
import pytest

from exporter.iceberg.table import copy_table, write_table
from tests.unit.iceberg.local_export import LocalFiles, export_locally, read_range
from tests.unit.iceberg.readers import duckdb_rows, pyiceberg_rows
from tests.unit.iceberg.test_deletion_vectors import (_PROTOCOL, commit, inline_vector, live_rows, replaced,
                                                      stored_vector, two_partitions)

pytestmark = pytest.mark.unit


def copier(source: Path, target: Path):
    def copy(keys: list[str]) -> None:
        for key in keys:
            (target / key).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / key, target / key)
    return copy


def strings_in(path: Path) -> list[str]:
    """Every string a file of the table holds (Avro files decoded: their blocks are compressed; the
    `.paths` hashes hold none)."""
    found: list[str] = []

    def walk(value) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    if path.suffix == ".avro":
        reader = fastavro.reader(io.BytesIO(path.read_bytes()))
        found += reader.metadata.values()
        for record in reader:
            walk(record)
    elif path.suffix == ".json":
        walk(json.loads(path.read_text()))
    elif path.suffix == ".parquet":  # a position delete file: the data file it applies to
        found += pq.read_table(path).column("file_path").to_pylist()
    return found


def test_a_copied_table_appended_to_reads_every_version_without_the_original(tmp_path):
    table = tmp_path / "source"
    adds = two_partitions(table)
    eu, us = adds["eu"]["path"], adds["us"]["path"]
    first, larger = inline_vector([0, 3]), stored_vector(table, [0, 3, 4, 9])
    commit(table, 2, [_PROTOCOL, *replaced(adds["eu"], None, first)])
    original = write_table(export_locally(table, tmp_path / "export-1"), LocalFiles(tmp_path / "iceberg-1"), read_range)
    commit(table, 3, replaced(adds["eu"], first, larger) + replaced(adds["us"], None, inline_vector([5])))
    commit(table, 4, replaced(adds["eu"], larger, first))
    files = LocalFiles(tmp_path / "iceberg-2")

    copied = copy_table(original.metadata_key, LocalFiles(tmp_path / "iceberg-1"),
                        copier(tmp_path / "iceberg-1", tmp_path / "iceberg-2"),
                        export_locally(table, tmp_path / "export-2"), files, read_range)

    old_location = LocalFiles(tmp_path / "iceberg-1").location.rstrip("/")
    originals = {path.relative_to(tmp_path / "iceberg-1").as_posix(): path.read_bytes()
                 for path in (tmp_path / "iceberg-1").rglob("*") if path.is_file()}
    shutil.rmtree(tmp_path / "iceberg-1")  # the original export pruned
    assert copied.metadata_key == "metadata/v4.metadata.json" and files.written[-1] == copied.metadata_key
    assert {v: copied.snapshot_ids[v] for v in (0, 1, 2)} == original.snapshot_ids
    expected = {0: {eu: []}, 1: {eu: [], us: []}, 2: {eu: [0, 3], us: []}, 3: {eu: [0, 3, 4, 9], us: [5]},
                4: {eu: [0, 3], us: [5]}}
    for version, live in expected.items():
        rows = live_rows(table, live)
        assert pyiceberg_rows(copied.metadata_location, copied.snapshot_ids[version]) == rows, version
        assert duckdb_rows(copied.metadata_location, copied.snapshot_ids[version]) == rows, version
    present = {path.relative_to(tmp_path / "iceberg-2").as_posix(): path
               for path in (tmp_path / "iceberg-2").rglob("*") if path.is_file()}
    assert not [(key, s) for key, path in present.items() for s in strings_in(path) if old_location in s]
    # every file of the original is there; its data manifests are copied as they were, not written anew
    assert {key for key in originals if not key.endswith(".metadata.json")} <= set(present)
    copies = set(present) - set(files.written)
    assert copies and all(key.startswith("metadata/") and present[key].read_bytes() == originals[key] for key in copies)
