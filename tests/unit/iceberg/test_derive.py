"""A table derived from another (`derive_table`, as a derived export's): every snapshot reads as
before, with the new versions; the other's files are named where they are and only its current
manifest list (and a manifest holding a removed file) is read; only the new versions' files are
written, the metadata file at the table's own location."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.iceberg.manifests import read_manifest_list
from exporter.iceberg.table import derive_table, write_table
from tests.unit.iceberg.local_export import LocalFiles, export_locally, read_range
from tests.unit.iceberg.readers import duckdb_rows, pyiceberg_rows
from tests.unit.iceberg.test_deletion_vectors import (_PROTOCOL, commit, inline_vector, live_rows, replaced,
                                                      stored_vector, two_partitions)

pytestmark = pytest.mark.unit


def contents(folder: Path) -> dict[str, bytes]:
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def test_a_derived_table_reads_every_version_and_writes_only_the_new_ones(tmp_path):
    table = tmp_path / "source"
    adds = two_partitions(table)
    eu, us = adds["eu"]["path"], adds["us"]["path"]
    first, larger = inline_vector([0, 3]), stored_vector(table, [0, 3, 4, 9])
    commit(table, 2, [_PROTOCOL, *replaced(adds["eu"], None, first)])
    original = write_table(export_locally(table, tmp_path / "export-1"), LocalFiles(tmp_path / "files-1"), read_range,
                           table=LocalFiles(tmp_path / "table-1"))
    before = contents(tmp_path / "files-1")
    source = json.loads((tmp_path / "table-1" / original.metadata_key).read_text())
    commit(table, 3, replaced(adds["eu"], first, larger) + replaced(adds["us"], None, inline_vector([5])))
    commit(table, 4, replaced(adds["eu"], larger, first))
    files, own = LocalFiles(tmp_path / "files-2"), LocalFiles(tmp_path / "table-2")

    derived = derive_table(source, export_locally(table, tmp_path / "export-2"), files, own, read_range)

    assert derived.metadata_key == "metadata/v4.metadata.json" and own.written == [derived.metadata_key]
    assert derived.metadata_location.startswith(own.location)
    assert {v: derived.snapshot_ids[v] for v in (0, 1, 2)} == original.snapshot_ids
    expected = {0: {eu: []}, 1: {eu: [], us: []}, 2: {eu: [0, 3], us: []}, 3: {eu: [0, 3, 4, 9], us: [5]},
                4: {eu: [0, 3], us: [5]}}
    for version, live in expected.items():
        rows = live_rows(table, live)
        assert pyiceberg_rows(derived.metadata_location, derived.snapshot_ids[version]) == rows, version
        assert duckdb_rows(derived.metadata_location, derived.snapshot_ids[version]) == rows, version
    assert contents(tmp_path / "files-1") == before  # the other's files are as they were
    metadata = json.loads((tmp_path / "table-2" / derived.metadata_key).read_text())
    assert metadata["location"] == own.location.rstrip("/") and metadata["metadata-log"] == []
    assert metadata["table-uuid"] != source["table-uuid"]
    # only versions 3 and 4 were written: their manifest lists, manifests and delete files
    new_lists = {f"metadata/snap-{derived.snapshot_ids[v]}.avro" for v in (3, 4)}
    assert new_lists <= set(files.written) and not any(f"snap-{original.snapshot_ids[v]}" in key
                                                       for key in files.written for v in (0, 1, 2))
    # the other's files are read only from its current manifest list: nothing else of its snapshots
    head_list = f"{LocalFiles(tmp_path / 'files-1').location}metadata/snap-{original.snapshot_ids[2]}.avro"
    others = [uri for uri in files.reads if uri.startswith(LocalFiles(tmp_path / "files-1").location)]
    current = {m["manifest_path"] for m in read_manifest_list((tmp_path / "files-1" / head_list.rsplit("/", 2)[1] /
                                                               head_list.rsplit("/", 1)[1]).read_bytes())}
    assert others[0] == head_list and all(uri == head_list or uri.removesuffix(".paths") + ".avro" in current
                                          or uri in current for uri in others), others



def test_an_append_finds_a_path_in_small_manifests_by_the_hashes_their_list_carries(tmp_path):
    """A table of one-file commits has small manifests, which keep no path hashes beside them: their
    manifest list carries them. A derived table's 1-file append reads none of those manifests; a
    remove reads the one holding its file, and both readers read the rows left, as delta-rs does."""
    import deltalake
    import pyarrow as pa

    from tests.unit.iceberg.readers import delta_rows

    table = tmp_path / "source"
    for part in range(5):  # versions 0-4, a file each
        deltalake.write_deltalake(str(table), pa.table({"id": pa.array(range(part * 10, part * 10 + 10), pa.int64())}),
                                  mode="append")
    original = write_table(export_locally(table, tmp_path / "export-1"), LocalFiles(tmp_path / "files-1"), read_range,
                           table=LocalFiles(tmp_path / "table-1"))
    source_files = LocalFiles(tmp_path / "files-1").location
    head_list = f"{source_files}metadata/snap-{original.snapshot_ids[4]}.avro"
    deltalake.write_deltalake(str(table), pa.table({"id": pa.array([100], pa.int64())}), mode="append")  # version 5
    files = LocalFiles(tmp_path / "files-2")

    appended = derive_table(json.loads((tmp_path / "table-1" / original.metadata_key).read_text()),
                            export_locally(table, tmp_path / "export-2"), files, LocalFiles(tmp_path / "table-2"),
                            read_range)

    assert [uri for uri in files.reads if uri.startswith(source_files)] == [head_list]
    first = json.loads((table / "_delta_log" / f"{0:020d}.json").read_text().splitlines()[-1])["add"]
    commit(table, 6, [{"remove": {"path": first["path"], "dataChange": True, "deletionTimestamp": 0,
                                  "size": first["size"], "partitionValues": {}}}])
    files = LocalFiles(tmp_path / "files-3")

    removed = derive_table(json.loads((tmp_path / "table-2" / appended.metadata_key).read_text()),
                           export_locally(table, tmp_path / "export-3"), files, LocalFiles(tmp_path / "table-3"),
                           read_range)

    manifests_read = [uri for uri in files.reads if uri.endswith(".avro") and "/snap-" not in uri]
    assert len(manifests_read) == 1 and manifests_read[0].startswith(source_files), files.reads
    assert pyiceberg_rows(removed.metadata_location) == duckdb_rows(removed.metadata_location) == delta_rows(table, 6)
    assert len(delta_rows(table, 6)) == 41
