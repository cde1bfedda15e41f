"""Manifests and manifest lists as Avro object container files (`exporter.iceberg.manifests`): what
the writer's own header and block hold reads back through fastavro's reader (and Avro's other
readers, `test_readers`), records, counts and metadata alike."""

from __future__ import annotations

import io
import json

import fastavro
import pyarrow as pa
import pytest

from exporter.iceberg import manifests
from exporter.iceberg.manifests import ADDED, DATA, LISTED_PATH_HASHES, MANIFEST_FILE_SCHEMA, PartitionField, \
    data_file, manifest_entry_schema, read_manifest, read_manifest_list_hashes, write_encoded_manifest, \
    write_manifest, write_manifest_list

pytestmark = pytest.mark.unit

SCHEMA = {"type": "struct", "schema-id": 3, "fields": [{"id": 1, "name": "día", "required": False, "type": "long"}]}
FIELDS = [PartitionField("día", 1000, 1, "long")]


def entry(path: str, day: int | None) -> dict:
    return {"status": ADDED, "snapshot_id": 7, "sequence_number": 2, "file_sequence_number": 2,
            "data_file": data_file(DATA, path, {"día": day}, 10, 100)}


def test_a_manifest_reads_back_its_entries_schema_and_metadata():
    entries = [entry(f"s3://b/día={i % 2}/part-{i}.parquet", i % 2 or None) for i in range(5)]
    body, record = write_manifest(entries, DATA, 4, FIELDS, SCHEMA)

    reader = fastavro.reader(io.BytesIO(body))
    assert reader.codec == "null"  # under DEFLATE_FROM bytes of records: not deflated
    assert json.loads(reader.metadata["avro.schema"]) == manifest_entry_schema(FIELDS)
    assert json.loads(reader.metadata["schema"]) == SCHEMA and reader.metadata["schema-id"] == "3"
    assert json.loads(reader.metadata["partition-spec"]) == [FIELDS[0].document()]
    assert reader.metadata["partition-spec-id"] == "4" and reader.metadata["content"] == "data"
    assert [e["data_file"]["file_path"] for e in read_manifest(body)] == [e["data_file"]["file_path"] for e in entries]
    assert [e["data_file"]["partition"] for e in read_manifest(body)] == [{"día": i % 2 or None} for i in range(5)]
    assert record["added_files_count"] == 5 and record["added_rows_count"] == 50


@pytest.mark.parametrize("files", [1, 300])
def test_records_from_deflate_from_bytes_are_deflated_fewer_are_not_and_both_read_back(files):
    entries = [entry(f"s3://b/día={i % 2}/part-{i:04d}-{'x' * 40}.parquet", i % 2) for i in range(files)]
    body, _ = write_manifest(entries, DATA, 4, FIELDS, SCHEMA)
    big = files * 100 > manifests.DEFLATE_FROM  # 300 entries of more than 100 bytes
    assert fastavro.reader(io.BytesIO(body)).codec == ("deflate" if big else "null")
    assert [e["data_file"]["file_path"] for e in read_manifest(body)] == [e["data_file"]["file_path"] for e in entries]


def test_a_manifest_of_no_entries_and_a_list_of_no_records_are_whole_files_without_a_block():
    body, record = write_manifest([], DATA, 0, [], SCHEMA)
    assert list(read_manifest(body)) == [] and record["added_files_count"] == 0
    encoded, _ = write_encoded_manifest(pa.array([], pa.binary()), 0, {}, 0, [], SCHEMA)
    assert list(read_manifest(encoded)) == []
    assert read_manifest_list_hashes(write_manifest_list([], 1, None, 1)) == ([], {})


def test_a_manifest_list_reads_back_its_records_and_the_path_hashes_it_carries():
    _, record = write_manifest([entry("s3://b/a.parquet", 1)], DATA, 0, FIELDS, SCHEMA)
    records = [{**record, "manifest_path": f"s3://b/metadata/m{i}.avro", "manifest_length": 100 + i,
                "sequence_number": 2, "min_sequence_number": 2, "added_snapshot_id": 7} for i in range(3)]
    hashes = {"s3://b/metadata/m1.avro": bytes(range(16))}
    raw = write_manifest_list(records, 7, 6, 2, hashes)

    reader = fastavro.reader(io.BytesIO(raw))
    assert json.loads(reader.metadata["avro.schema"]) == MANIFEST_FILE_SCHEMA
    assert {k: reader.metadata[k] for k in ("snapshot-id", "parent-snapshot-id", "sequence-number")} == \
        {"snapshot-id": "7", "parent-snapshot-id": "6", "sequence-number": "2"}
    assert LISTED_PATH_HASHES in reader.metadata
    assert read_manifest_list_hashes(raw) == (records, hashes)


def test_encoded_entries_read_back_as_the_same_entries_written_record_by_record():
    """`write_encoded_manifest` takes entries in Avro's binary encoding (as `columns` makes them):
    the same file's entries as `write_manifest` of the records themselves."""
    entries = [entry(f"s3://b/part-{i}.parquet", i) for i in range(4)]
    parsed = fastavro.parse_schema(manifest_entry_schema(FIELDS))
    rows = []
    for e in entries:
        out = io.BytesIO()
        named = {"d_xEDa": e["data_file"]["partition"]["día"]}  # the Avro name of `día` (`avro_name`)
        fastavro.schemaless_writer(out, parsed, {**e, "data_file": {**e["data_file"], "partition": named}})
        rows.append(out.getvalue())
    encoded, record = write_encoded_manifest(pa.array(rows, pa.binary()).slice(1), 30, {"día": [1, 2, 3]}, 0, FIELDS,
                                             SCHEMA)

    assert list(read_manifest(encoded)) == list(read_manifest(write_manifest(entries[1:], DATA, 0, FIELDS, SCHEMA)[0]))
    assert record["added_files_count"] == 3
