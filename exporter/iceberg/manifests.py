"""Manifests and manifest lists (spec.md#manifests, spec.md#manifest-lists), format version 2, as
Avro files whose schemas carry the spec's field ids (readers resolve fields by id).
"""

from __future__ import annotations

import base64
import functools
import io
import json
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
from isal import isal_zlib

from exporter.iceberg.stats import FileMetrics
from exporter.iceberg.values import avro_type, from_avro, single_value

FORMAT_VERSION = 2
DATA, DELETES = 0, 1  # manifest content, and a file's: data, position deletes
EXISTING, ADDED, DELETED = 0, 1, 2  # manifest entry status
# Files of DEFLATE_FROM bytes of records or more are deflated, smaller ones not ("null", as every Avro
# reader must read; a commit's one-entry manifest, a manifest list): deflating them saved a few hundred
# bytes but released the GIL twice, and the snapshot-writing thread then waited for it behind the
# puts' threads (155 µs a file in a cold step's 50 commits, for 4 µs of deflate)
DEFLATE_FROM = 16 << 10
# deflate's fastest level: with zlib a 100,000-entry manifest compressed in 30 ms, not 100 ms, for
# about a tenth more bytes (its paths and stats repeat; deflate finds that at any level). Deflated by
# ISA-L (`isal_zlib`): the same format and size as zlib's at this level, in a fifth of the time (50,000
# entries: 4 ms, not 21 ms), the GIL released
_LEVEL = 1
# a table property: each manifest has its live entries' data paths, hashed (`manifest_set.path_hashes`), at
# `names.path_hashes_key` (8 bytes a file): an append finds the manifests a path is in without reading them
PATH_HASHES = "lakefs-delta.manifest-path-hashes"
PATH_HASHES_AT = 64  # a manifest of fewer live entries keeps none beside it: its manifest list carries them
# a manifest list's Avro metadata: the path hashes of its manifests that keep none beside them (`keeps_path_hashes`),
# JSON of manifest path -> base64 of their 8-byte hashes: an append finds a path without reading those manifests
LISTED_PATH_HASHES = "lakefs-delta.path-hashes"


def keeps_path_hashes(record: dict) -> bool:
    """Whether a manifest (its manifest list record) of a `PATH_HASHES` table has its path hashes
    beside it: one of at least `PATH_HASHES_AT` live entries. A smaller one's are in its manifest
    list (`LISTED_PATH_HASHES`; an object beside it would cost a PUT for each commit's manifest, a
    third of a cold table's writes), or, in a list written without them, it is read instead."""
    return record["added_files_count"] + record["existing_files_count"] >= PATH_HASHES_AT


@dataclass(frozen=True)
class PartitionField:
    """An identity partition field (Delta partitions by column value, nothing else)."""

    name: str
    field_id: int  # 1000 and up, its own id space (spec.md#partition-specs)
    source_id: int
    iceberg_type: str

    def document(self) -> dict:
        return {"name": self.name, "transform": "identity", "source-id": self.source_id, "field-id": self.field_id}


def _optional(avro: Any) -> Any:
    return ["null", avro]


def _map(key_id: int, value_id: int, value_type: str) -> Any:
    """An Iceberg map with int keys: an Avro array of key/value records (spec.md#avro)."""
    return _optional({"type": "array", "logicalType": "map", "items": {
        "type": "record", "name": f"k{key_id}_v{value_id}",
        "fields": [{"name": "key", "type": "int", "field-id": key_id},
                   {"name": "value", "type": value_type, "field-id": value_id}]}})


def _field(name: str, field_id: int, avro: Any, optional: bool = False) -> dict:
    if optional:
        return {"name": name, "type": _optional(avro), "default": None, "field-id": field_id}
    return {"name": name, "type": avro, "field-id": field_id}


def avro_name(name: str) -> str:
    """A partition field's name as an Avro field may hold it ([A-Za-z_][A-Za-z0-9_]*), made as
    Iceberg's Java writer makes it (AvroSchemaUtil.makeCompatibleName: a leading digit `_<digit>`,
    any other character `_x<its hex code>`): `event-date` is `event_x2Ddate`. Readers resolve the
    field by its id; DuckDB refuses a file whose Avro names are invalid."""
    def safe(index: int, character: str) -> str:
        if character == "_" or character.isascii() and (character.isalpha() or (index and character.isdigit())):
            return character
        return f"_{character}" if character.isdigit() else f"_x{ord(character):X}"
    return "".join(safe(index, character) for index, character in enumerate(name)) or "_"


def manifest_entry_schema(partition_fields: list[PartitionField]) -> dict:
    """spec.md#manifests: `manifest_entry` with the `data_file` struct of format version 2."""
    partition = {"type": "record", "name": "r102", "fields": [
        _field(avro_name(f.name), f.field_id, avro_type(f.iceberg_type, f.field_id)[1], optional=True)
        for f in partition_fields]}
    data_file = {"type": "record", "name": "r2", "fields": [
        _field("content", 134, "int"),
        _field("file_path", 100, "string"),
        _field("file_format", 101, "string"),
        _field("partition", 102, partition),
        _field("record_count", 103, "long"),
        _field("file_size_in_bytes", 104, "long"),
        {"name": "column_sizes", "type": _map(117, 118, "long"), "default": None, "field-id": 108},
        {"name": "value_counts", "type": _map(119, 120, "long"), "default": None, "field-id": 109},
        {"name": "null_value_counts", "type": _map(121, 122, "long"), "default": None, "field-id": 110},
        {"name": "nan_value_counts", "type": _map(138, 139, "long"), "default": None, "field-id": 137},
        {"name": "lower_bounds", "type": _map(126, 127, "bytes"), "default": None, "field-id": 125},
        {"name": "upper_bounds", "type": _map(129, 130, "bytes"), "default": None, "field-id": 128},
        _field("key_metadata", 131, "bytes", optional=True),
        _field("split_offsets", 132, {"type": "array", "items": "long", "element-id": 133}, optional=True),
        _field("equality_ids", 135, {"type": "array", "items": "int", "element-id": 136}, optional=True),
        _field("sort_order_id", 140, "int", optional=True),
    ]}
    return {"type": "record", "name": "manifest_entry", "fields": [
        _field("status", 0, "int"),
        _field("snapshot_id", 1, "long", optional=True),
        _field("sequence_number", 3, "long", optional=True),
        _field("file_sequence_number", 4, "long", optional=True),
        _field("data_file", 2, data_file),
    ]}


@functools.lru_cache(maxsize=64)
def _entry_schema(partition_fields: tuple[PartitionField, ...]) -> tuple[dict, str]:
    """`manifest_entry_schema` parsed for fastavro's encoder, and as a file's header names it: once
    per partition spec."""
    schema = manifest_entry_schema(list(partition_fields))
    return fastavro.parse_schema(schema), json.dumps(schema)


MANIFEST_FILE_SCHEMA = {"type": "record", "name": "manifest_file", "fields": [
    _field("manifest_path", 500, "string"),
    _field("manifest_length", 501, "long"),
    _field("partition_spec_id", 502, "int"),
    _field("content", 517, "int"),
    _field("sequence_number", 515, "long"),
    _field("min_sequence_number", 516, "long"),
    _field("added_snapshot_id", 503, "long"),
    _field("added_files_count", 504, "int"),
    _field("existing_files_count", 505, "int"),
    _field("deleted_files_count", 506, "int"),
    _field("added_rows_count", 512, "long"),
    _field("existing_rows_count", 513, "long"),
    _field("deleted_rows_count", 514, "long"),
    _field("partitions", 507, {"type": "array", "element-id": 508, "items": {
        "type": "record", "name": "r508", "fields": [
            _field("contains_null", 509, "boolean"),
            _field("contains_nan", 518, "boolean", optional=True),
            _field("lower_bound", 510, "bytes", optional=True),
            _field("upper_bound", 511, "bytes", optional=True)]}}, optional=True),
    _field("key_metadata", 519, "bytes", optional=True),
]}
_MANIFEST_FILE = fastavro.parse_schema(MANIFEST_FILE_SCHEMA), json.dumps(MANIFEST_FILE_SCHEMA)


def data_file(content: int, path: str, partition: dict, record_count: int, size: int,
              metrics: FileMetrics | None = None, bounds: dict[int, bytes] | None = None) -> dict:
    """A `data_file` struct (a data file, or a position delete file) as the Avro writer takes it:
    a data file's column `metrics`, or a delete file's `bounds` (lower and upper the same)."""
    def as_map(values: dict | None) -> list[dict] | None:
        return [{"key": key, "value": value} for key, value in sorted(values.items())] if values else None

    nulls, lower, upper = (metrics.null_value_counts, metrics.lower_bounds, metrics.upper_bounds) if metrics else \
        (None, bounds, bounds)
    return {"content": content, "file_path": path, "file_format": "PARQUET", "partition": partition,
            "record_count": record_count, "file_size_in_bytes": size, "column_sizes": None, "value_counts": None,
            "null_value_counts": as_map(nulls), "nan_value_counts": None,
            "lower_bounds": as_map(lower), "upper_bounds": as_map(upper), "key_metadata": None,
            "split_offsets": None, "equality_ids": None, "sort_order_id": None}


def bound_of(entry: dict, kind: str, field_id: int) -> bytes | None:
    """A bound of a data file entry read back (`kind` is lower_bounds or upper_bounds)."""
    for pair in entry["data_file"].get(kind) or []:
        if pair["key"] == field_id:
            return pair["value"]
    return None


def write_manifest(entries: list[dict], content: int, spec_id: int, partition_fields: list[PartitionField],
                   schema: dict) -> tuple[bytes, dict]:
    """A manifest's bytes, and its manifest list record without path, length, sequence numbers or
    the snapshot that added it (the caller knows those)."""
    renamed = {f.name: avro_name(f.name) for f in partition_fields if avro_name(f.name) != f.name}
    records = [_renamed_partition(entry, renamed) for entry in entries] if renamed else entries
    body = _avro_file(_entry_schema(tuple(partition_fields)),
                      _manifest_metadata(content, spec_id, partition_fields, schema), records)
    counts = {status: [0, 0] for status in (EXISTING, ADDED, DELETED)}  # files, rows
    for entry in entries:
        counts[entry["status"]][0] += 1
        counts[entry["status"]][1] += entry["data_file"]["record_count"]
    live = [e for e in entries if e["status"] != DELETED]
    record = {"partition_spec_id": spec_id, "content": content,
              "min_sequence_number": min((e["sequence_number"] for e in live), default=None),
              "added_files_count": counts[ADDED][0], "existing_files_count": counts[EXISTING][0],
              "deleted_files_count": counts[DELETED][0], "added_rows_count": counts[ADDED][1],
              "existing_rows_count": counts[EXISTING][1], "deleted_rows_count": counts[DELETED][1],
              "partitions": _partition_summaries(live, partition_fields), "key_metadata": None}
    return body, record


def write_encoded_manifest(rows: pa.Array, record_count: int, partition_values: dict[str, list], spec_id: int,
                           partition_fields: list[PartitionField], schema: dict) -> tuple[bytes, dict]:
    """`write_manifest` of ADDED data file entries already in Avro's binary encoding (`columns`),
    one block; `partition_values`: each partition field's distinct values among them."""
    offsets = np.frombuffer(rows.buffers()[1], np.int32)[rows.offset:rows.offset + len(rows) + 1]
    data = memoryview(rows.buffers()[2])[offsets[0]:offsets[-1]] if len(rows) else b""
    body = _avro_file(_entry_schema(tuple(partition_fields)),
                      _manifest_metadata(DATA, spec_id, partition_fields, schema), (), (data, len(rows)))
    record = {"partition_spec_id": spec_id, "content": DATA, "min_sequence_number": None,
              "added_files_count": len(rows), "existing_files_count": 0, "deleted_files_count": 0,
              "added_rows_count": record_count, "existing_rows_count": 0, "deleted_rows_count": 0,
              "partitions": partition_summaries(partition_values, partition_fields), "key_metadata": None}
    return body, record


def avro_long(value: int) -> bytes:
    """Avro's zig-zag varint of a long."""
    zigzag, out = (value << 1) ^ (value >> 63), bytearray()
    while zigzag > 0x7F:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


def _manifest_metadata(content: int, spec_id: int, partition_fields: list[PartitionField], schema: dict) -> dict:
    return {"schema": json.dumps(schema), "schema-id": str(schema["schema-id"]),
            "partition-spec": json.dumps([f.document() for f in partition_fields]),
            "partition-spec-id": str(spec_id), "format-version": str(FORMAT_VERSION),
            "content": "data" if content == DATA else "deletes"}


def _partition_summaries(entries: list[dict], partition_fields: list[PartitionField]) -> list[dict] | None:
    return partition_summaries({f.name: [e["data_file"]["partition"].get(f.name) for e in entries]
                                for f in partition_fields}, partition_fields)


def partition_summaries(partition_values: dict[str, list], partition_fields: list[PartitionField]) -> list[dict] | None:
    """spec.md#manifest-lists `field_summary`: per partition field, its value range in the manifest
    (`partition_values`: each field's values there, None for null)."""
    if not partition_fields:
        return None
    summaries = []
    for partition_field in partition_fields:
        values = partition_values[partition_field.name]
        present = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
        summary = {"contains_null": any(v is None for v in values), "lower_bound": None, "upper_bound": None,
                   "contains_nan": any(isinstance(v, float) and math.isnan(v) for v in values)}
        if present:
            summary["lower_bound"] = single_value(min(present), partition_field.iceberg_type)
            summary["upper_bound"] = single_value(max(present), partition_field.iceberg_type)
        summaries.append(summary)
    return summaries


def read_manifest_list(raw: bytes) -> list[dict]:
    return read_manifest_list_hashes(raw)[0]


def read_manifest_list_hashes(raw: bytes) -> tuple[list[dict], dict[str, bytes]]:
    """A manifest list's records, and the path hashes it carries (`LISTED_PATH_HASHES`) by manifest
    path (none in a list written without them)."""
    reader = fastavro.reader(io.BytesIO(raw))
    listed = json.loads(reader.metadata.get(LISTED_PATH_HASHES) or "{}")
    return list(reader), {path: base64.b64decode(hashes) for path, hashes in listed.items()}


def read_manifest(raw: bytes) -> Iterable[dict]:
    """The entries of a manifest this module wrote, partition values in `values`' forms, by the
    partition fields' own names (`avro_name` undone, from the manifest's partition spec)."""
    reader = fastavro.reader(io.BytesIO(raw))
    names = {avro_name(f["name"]): f["name"] for f in json.loads(reader.metadata.get("partition-spec") or "[]")}
    for entry in reader:
        partition = entry["data_file"]["partition"]
        entry["data_file"]["partition"] = {names.get(name, name): from_avro(value) for name, value in partition.items()}
        yield entry


def _renamed_partition(entry: dict, renamed: dict[str, str]) -> dict:
    partition = {renamed.get(name, name): value for name, value in entry["data_file"]["partition"].items()}
    return {**entry, "data_file": {**entry["data_file"], "partition": partition}}


def write_manifest_list(records: list[dict], snapshot_id: int, parent_id: int | None, sequence_number: int,
                        path_hashes: dict[str, bytes] | None = None) -> bytes:
    """`path_hashes`: of the manifests that keep none beside them, by path (`LISTED_PATH_HASHES`)."""
    metadata = {"snapshot-id": str(snapshot_id), "parent-snapshot-id": "null" if parent_id is None else str(parent_id),
                "sequence-number": str(sequence_number), "format-version": str(FORMAT_VERSION)}
    if path_hashes:
        metadata[LISTED_PATH_HASHES] = json.dumps({path: base64.b64encode(hashes).decode()
                                                   for path, hashes in path_hashes.items()}, separators=(",", ":"))
    return _avro_file(_MANIFEST_FILE, metadata, records)


def _avro_file(schema: tuple[dict, str], metadata: dict[str, str], records: Iterable[dict],
               encoded: tuple[bytes | memoryview, int] | None = None) -> bytes:
    """An Avro object container file (Avro's spec, "Object Container Files") of one block, deflated
    from DEFLATE_FROM bytes: `records` encoded by `schema` (parsed, and its JSON), or `encoded`
    (records already in Avro's binary encoding, and how many); no block without records. Its header
    written here, the schema's JSON made once: fastavro's writer made each header anew, 48 of the 70
    µs of a commit's manifest."""
    if encoded is None:
        out = io.BytesIO()
        count = 0
        for record in records:
            fastavro.schemaless_writer(out, schema[0], record)
            count += 1
        encoded = out.getbuffer(), count
    data, count = encoded
    deflated = len(data) >= DEFLATE_FROM
    items = [("avro.schema", schema[1]), ("avro.codec", "deflate" if deflated else "null"), *metadata.items()]
    header = [b"Obj\x01", avro_long(len(items))]
    for text in (text for item in items for text in item):  # strings as Avro's bytes: length, then UTF-8
        raw = text.encode()
        header += [avro_long(len(raw)), raw]
    # random, as the spec has it, without os.urandom's system call (it left the GIL: 29 µs a file);
    # `random` is seeded anew in a forked process
    sync_marker = random.randbytes(16)
    header += [b"\x00", sync_marker]  # the metadata map's end
    if not count:
        return b"".join(header)
    block = isal_zlib.compress(data, _LEVEL, -15) if deflated else data
    return b"".join([*header, avro_long(count), avro_long(len(block)), block, sync_marker])
