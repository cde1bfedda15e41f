"""A checkpoint's adds as manifest entries column by column: the rules of `stats` and `values` for a
slice of files at once, and the entries' Avro binary encoding (spec.md#avro) built with Arrow and
numpy, so a file costs no Python call of its own (a dict per file cost about 50 µs).

Only what is taken exactly goes this way: stats parsed by Arrow's JSON reader against the types the
columns must have (a value of another type fails the slice), or read typed from the checkpoint's
`stats_parsed` where it has them and no column is a timestamp (its JSON tells how far the writer cut
it; the struct does not), bounds of integers, floating point numbers, booleans and strings packed as
arrays, of dates and timestamps by `stats`' own functions.
A slice with stats Arrow cannot read, a decimal column, or an int beyond its type returns None;
a file with a deletion vector or without `numRecords` is left out (`Entries.left`). Those go file by
file (`table._Builder._add`), as every file went before.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import fastavro
import numpy as np
# `pa.array` of a numpy array imports numpy.ma on first use: imported here, when a worker starts, not
# inside its first Iceberg step (0.02 s from bytecode, 0.08 s from source: a third of a 10,000-file table's step)
import numpy.ma  # noqa: F401
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from exporter.delta.paths import physical_address
from exporter.iceberg.manifests import PartitionField, avro_long
from exporter.iceberg.path_hashes import utf8_digests
from exporter.iceberg.stats import StatsColumn, lower_bound, upper_bound
from exporter.iceberg.values import avro_type, partition_value

_ARROW = {"int": pa.int64(), "long": pa.int64(), "double": pa.float64(), "float": pa.float64(),
          "boolean": pa.bool_(), "string": pa.string(), "date": pa.string(), "timestamp": pa.string(),
          "timestamptz": pa.string()}
_BY_PYTHON = {"date", "timestamp", "timestamptz"}  # bounds through `stats`' functions, value by value
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_EMPTY_OPTIONAL = b"\x00"  # an optional field's null: union branch 0


@dataclass
class Entries:
    """Encoded manifest entries of the files a slice holds, but those `left` (a mask over the slice)."""

    rows: pa.Array  # binary: each entry's Avro encoding
    path_hashes: np.ndarray  # each entry's data file, hashed (`path_hashes.utf8_digests`)
    record_counts: np.ndarray
    sizes: np.ndarray
    partitions: dict[str, tuple[np.ndarray, list]]  # field name -> (each file's index into values, values)
    left: pa.Array  # boolean over the slice: files to add one by one


@dataclass(frozen=True)
class PartitionColumn:
    field: PartitionField
    physical_name: str  # the key in `add.partitionValues`
    name: str  # the column's name, for errors


def manifest_entries(adds: pa.StructArray, columns: Sequence[StatsColumn], partition: Sequence[PartitionColumn],
                     snapshot_id: int, sequence_number: int) -> Entries | None:
    """The ADDED entries (status 1) of a slice of add actions, or None when the slice must go file by file."""
    if any(c.iceberg_type not in _ARROW and c.iceberg_type != "binary" for c in columns):
        return None  # decimals (and any type added later): their JSON numbers need Python's Decimal
    names = {f.name for f in adds.type}
    typed = "stats_parsed" in names and _takes_typed(adds.type.field("stats_parsed").type, columns)
    if typed:  # Delta Spark's checkpoints carry them (`checkpoint.writeStatsAsStruct`, on by default): no JSON read
        stats = pc.struct_field(adds, "stats_parsed")
        left = pc.is_null(stats)
    elif "stats" in names:
        stats = pc.struct_field(adds, "stats")
        left = pc.or_kleene(pc.is_null(stats), pc.equal(stats, ""))
    else:  # `stats_parsed` only (delta-kernel-rs writes them) with a column they cannot give exactly: file by file
        return None
    if "deletionVector" in names:
        left = pc.or_kleene(left, pc.is_valid(pc.struct_field(adds, "deletionVector")))
    left = pc.fill_null(left, True)
    taken = adds.filter(pc.invert(left)) if pc.any(left).as_py() else adds  # no copy when every file is taken
    if typed:
        parsed = _typed_stats(pc.struct_field(taken, "stats_parsed"), columns)
    elif _holds(pc.struct_field(taken, "stats"), "\n"):
        return None  # not one JSON document a line
    else:
        parsed = _parse_stats(pc.struct_field(taken, "stats"), columns)
    if parsed is None:
        return None
    records = parsed.column("numRecords").combine_chunks()
    if records.null_count:  # no numRecords: the footer says, file by file
        missing = np.zeros(len(adds), bool)
        missing[np.flatnonzero(~_mask(left))[_mask(pc.is_null(records))]] = True
        left = pc.or_(left, pa.array(missing))
        keep = pc.is_valid(records)
        taken, parsed = taken.filter(keep), parsed.filter(keep)
        records = parsed.column("numRecords").combine_chunks()
    record_counts = records.to_numpy()
    if not len(taken):
        nothing = np.zeros(0, np.int64)
        return Entries(pa.array([], pa.binary()), nothing, record_counts, nothing, {}, left)
    encoded = _encode(taken, parsed, record_counts, columns, partition, snapshot_id, sequence_number)
    if encoded is None:
        return None
    rows, hashes, partitions = encoded
    return Entries(rows, hashes, record_counts, pc.struct_field(taken, "size").to_numpy(zero_copy_only=False),
                   partitions, left)


def _stats_schema(columns: Sequence[StatsColumn]) -> pa.Schema:
    """The stats of a slice as `_encode` takes them: each kind a struct of every column's value in
    `_ARROW`'s type (the JSON read against it, `stats_parsed` cast to it)."""
    def struct(kind: str) -> pa.DataType:
        return pa.struct([(c.physical_name, pa.int64() if kind == "nullCount" else _ARROW[c.iceberg_type])
                          for c in columns if kind == "nullCount" or c.iceberg_type in _ARROW])

    return pa.schema([("numRecords", pa.int64()), ("tightBounds", pa.bool_()),
                      *((kind, struct(kind)) for kind in ("nullCount", "minValues", "maxValues"))])


def _parse_stats(stats: pa.Array, columns: Sequence[StatsColumn]) -> pa.Table | None:
    schema = _stats_schema(columns)
    lines = pa.ListArray.from_arrays(pa.array([0, len(stats)], pa.int32()), stats.cast(pa.string()))
    body = pc.binary_join(lines, "\n").cast(pa.binary())[0].as_buffer()  # one JSON document a line
    try:
        return pj.read_json(pa.BufferReader(body), read_options=pj.ReadOptions(use_threads=False,
                                                                              block_size=max(body.size, 1) + 1),
                            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None  # a value of another type, not JSON, ...: `stats` decides, file by file


# the types `stats_parsed` may hold a column's stats in, taken exactly as its JSON would be (each
# cast to `_ARROW`'s type without loss: Delta has no unsigned integers); a timestamp's is not (its JSON
# says how many digits the writer cut it to, the upper bound's widening)
_TYPED = {"int": pa.types.is_signed_integer, "long": pa.types.is_signed_integer, "double": pa.types.is_floating,
          "float": pa.types.is_floating, "boolean": pa.types.is_boolean,
          "string": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "date": pa.types.is_date32}


def _takes_typed(stats_type: pa.DataType, columns: Sequence[StatsColumn]) -> bool:
    """Whether `stats_parsed` of this type gives every column's stats as its JSON would (`_typed_stats`)."""
    if not pa.types.is_struct(stats_type) or stats_type.get_field_index("numRecords") < 0 or \
            not pa.types.is_signed_integer(stats_type.field("numRecords").type):
        return False
    if stats_type.get_field_index("tightBounds") >= 0 and not pa.types.is_boolean(stats_type.field("tightBounds").type):
        return False
    for kind in ("minValues", "maxValues", "nullCount"):
        if stats_type.get_field_index(kind) < 0:
            continue
        values = stats_type.field(kind).type
        if not pa.types.is_struct(values):
            return False
        for column in columns:
            if values.get_field_index(column.physical_name) < 0:
                continue
            value_type = values.field(column.physical_name).type
            if kind == "nullCount":
                if not pa.types.is_signed_integer(value_type):
                    return False
            elif column.iceberg_type != "binary" and not _TYPED.get(column.iceberg_type, lambda t: False)(value_type):
                return False
    return True


def _typed_stats(stats: pa.Array, columns: Sequence[StatsColumn]) -> pa.Table:
    """`stats_parsed` (of a type `_takes_typed` takes) as `_parse_stats` gives the JSON (`_stats_schema`),
    null where the file has none."""
    def cast(parent: pa.Array | None, name: str, kind: pa.DataType) -> pa.Array:
        if parent is None or parent.type.get_field_index(name) < 0:
            return pa.nulls(len(stats), kind)
        value = pc.struct_field(parent, name)  # null where the parent is
        if not pa.types.is_struct(kind):
            return value.cast(kind)
        if not kind.num_fields:
            return pa.nulls(len(stats), kind)
        return pa.StructArray.from_arrays([cast(value, field.name, field.type) for field in kind], fields=list(kind))

    return pa.table({field.name: cast(stats, field.name, field.type) for field in _stats_schema(columns)})


def _encode(adds: pa.StructArray, parsed: pa.Table, record_counts: np.ndarray, columns: Sequence[StatsColumn],
            partition: Sequence[PartitionColumn], snapshot_id: int, sequence_number: int):
    tight = pc.fill_null(parsed.column("tightBounds"), True).to_numpy(zero_copy_only=False)
    null_counts, lowers, uppers = [], [], []
    for column in sorted(columns, key=lambda c: c.field_id):
        key = _varint_scalar(column.field_id)
        counts = pc.struct_field(parsed.column("nullCount").combine_chunks(), column.physical_name)
        usable = pc.and_(pc.is_valid(counts), pa.array(
            tight | (counts.fill_null(-1).to_numpy() == 0) | (counts.fill_null(-1).to_numpy() == record_counts)))
        null_counts.append(_item(usable, key, _varints(counts.fill_null(0).to_numpy())))
        if column.iceberg_type not in _ARROW:
            continue
        for kind, out in (("minValues", lowers), ("maxValues", uppers)):
            values = pc.struct_field(parsed.column(kind).combine_chunks(), column.physical_name)
            bounds = _bounds(values, column, lower=kind == "minValues")
            if bounds is None:
                return None
            out.append(_item(pc.is_valid(bounds), key, *_length_prefixed(bounds)))
    paths = pc.struct_field(adds, "path").cast(pa.string())
    if _holds(paths, "%"):  # decoded once, as `_Builder._add` does
        paths = pa.array([physical_address(p) if "%" in p else p for p in paths.to_pylist()], pa.string())
    partition_values, distinct = _partitions(adds, partition)
    head = (b"\x02\x02" + avro_long(snapshot_id) + b"\x02" + avro_long(sequence_number) + b"\x02" + avro_long(sequence_number)
            + b"\x00")  # status ADDED, snapshot, sequence numbers; data_file: content DATA
    rows = _join(pa.scalar(head), *_length_prefixed(paths.cast(pa.binary())),
                 pa.scalar(b"\x0ePARQUET"), partition_values, _varints(record_counts),
                 _varints(pc.struct_field(adds, "size").to_numpy(zero_copy_only=False)),
                 pa.scalar(_EMPTY_OPTIONAL * 2),  # column_sizes, value_counts
                 *_map(null_counts), pa.scalar(_EMPTY_OPTIONAL),  # null counts, nan counts
                 *_map(lowers), *_map(uppers),
                 pa.scalar(_EMPTY_OPTIONAL * 4))  # key_metadata, split_offsets, equality_ids, sort_order_id
    return rows, utf8_digests(paths), distinct


_NULL_ITEM = pa.scalar(None, pa.binary())


@dataclass
class _Item:
    """A map item of each file (its key/value record's pieces), null where the file has none."""

    valid: pa.Array  # boolean
    pieces: list[pa.Array]


def _item(valid: pa.Array, key: pa.Scalar, value: pa.Array, nulled: pa.Array | None = None) -> _Item:
    """The item `key: value` of each file where `valid`; `nulled`, a last piece, is null already where
    not. Where every file has it, the key is one scalar piece (`_join` joins it to its neighbours)."""
    if not valid.false_count:
        return _Item(valid, [key, value] if nulled is None else [key, value, nulled])
    pieces = [pc.if_else(valid, key, _NULL_ITEM), pc.if_else(valid, value, _NULL_ITEM)]
    return _Item(valid, pieces if nulled is None else [*pieces, nulled])


def _bounds(values: pa.Array, column: StatsColumn, lower: bool) -> pa.Array | None:
    """Single-value binary bounds (spec.md#binary-single-value-serialization), null where there is
    none; None when one would differ from `stats`' rule (an int beyond its type, a float beyond float32)."""
    kind = column.iceberg_type
    if kind == "string":
        return values.cast(pa.binary()) if lower and column.ordered_like_bytes else pa.nulls(len(values), pa.binary())
    if kind in _BY_PYTHON:
        bound = lower_bound if lower else upper_bound
        return pa.array([None if v is None else bound(v, column) for v in values.to_pylist()], pa.binary())
    valid = _mask(pc.is_valid(values))
    if kind == "boolean":
        packed = _mask(values.fill_null(False)).astype(np.uint8).reshape(-1, 1)
    elif kind in ("int", "long"):
        numbers = values.fill_null(0).to_numpy()
        if kind == "int" and ((numbers < -2**31) | (numbers >= 2**31)).any():
            return None
        packed = numbers.astype("<i4" if kind == "int" else "<i8").view(np.uint8).reshape(len(values), -1)
    else:  # float, double
        numbers = values.fill_null(0.0).to_numpy()
        valid &= np.isfinite(numbers)
        numbers = np.where(numbers == 0, -0.0 if lower else 0.0, numbers)
        if kind == "float":
            if (np.abs(numbers[valid]) > _FLOAT32_MAX).any():
                return None
            packed = numbers.astype("<f4").view(np.uint8).reshape(len(values), -1)
        else:
            packed = numbers.astype("<f8").view(np.uint8).reshape(len(values), -1)
    width = packed.shape[1]
    fixed = pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), len(values),
                                                 [None, pa.py_buffer(np.ascontiguousarray(packed).tobytes())])
    return pc.if_else(pa.array(valid), fixed.cast(pa.binary()), _NULL_ITEM)


def _partitions(adds: pa.StructArray, partition: Sequence[PartitionColumn]) -> tuple[pa.Array | pa.Scalar, dict]:
    """Each file's partition tuple encoded (a union per field), and each field's distinct values:
    each distinct text converted once, by `values.partition_value`."""
    if not partition:
        return pa.scalar(b""), {}
    values = pc.struct_field(adds, "partitionValues")
    pieces, distinct = [], {}
    for column in partition:
        texts = pc.map_lookup(values, pa.scalar(column.physical_name), "first")
        encoded = pc.dictionary_encode(texts.cast(pa.string()), null_encoding="encode")
        schema = fastavro.parse_schema(avro_type(column.field.iceberg_type, column.field.field_id))
        converted = [partition_value(text, column.field.iceberg_type, column.name)
                     for text in encoded.dictionary.to_pylist()]
        forms = []
        for value in converted:
            out = io.BytesIO()
            fastavro.schemaless_writer(out, schema, value)
            forms.append(out.getvalue())
        pieces.append(pc.take(pa.array(forms, pa.binary()), encoded.indices))
        distinct[column.field.name] = (encoded.indices.to_numpy(zero_copy_only=False), converted)
    return _join(*pieces), distinct


def _map(items: list[_Item]) -> list[pa.Array | pa.Scalar]:
    """The pieces of an optional map (an Avro array of key/value records): null without items, else
    one block; pieces, not joined, so that each file's bytes are copied once, by the entries' join
    (joined here, a 100,000-file table's maps took a tenth of its Iceberg step)."""
    if not items:
        return [pa.scalar(_EMPTY_OPTIONAL)]
    pieces = [piece for item in items for piece in item.pieces]
    if not any(item.valid.false_count for item in items):  # every file has every item: one block of them all
        return [pa.scalar(b"\x02" + avro_long(len(items))), *pieces, pa.scalar(b"\x00")]
    counts = sum(_mask(item.valid).astype(np.int64) for item in items)
    some = pa.array(counts > 0)
    start = pc.if_else(some, _join(pa.scalar(b"\x02"), _varints(counts)), pa.scalar(_EMPTY_OPTIONAL))
    return [start, *pieces, pc.if_else(some, pa.scalar(b"\x00"), _NULL_ITEM)]


def _holds(texts: pa.Array, needle: str) -> bool:
    """Whether any of `texts` holds `needle`: their data scanned at once, 10 MB in about a millisecond
    (`match_substring` took 11 ms a slice of 65,536 stats); the data of a slice may hold rows beyond
    it, which only sends those texts the slower way."""
    if texts.type not in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()):
        return pc.any(pc.match_substring(texts, needle)).as_py() or False
    data = texts.buffers()[2]
    return data is not None and needle.encode() in data.to_pybytes()


def _mask(values: pa.Array) -> np.ndarray:
    return values.to_numpy(zero_copy_only=False).astype(bool)


def _join(*pieces) -> pa.Array:
    """Each file's pieces joined, adjacent scalars first joined once (22 pieces for 33,334 files took
    7.6 ms, the same as 13 pieces 3.9 ms)."""
    joined: list = []
    for piece in pieces:
        if isinstance(piece, pa.Scalar) and joined and isinstance(joined[-1], pa.Scalar):
            joined[-1] = pa.scalar(joined[-1].as_buffer().to_pybytes() + piece.as_buffer().to_pybytes(), pa.binary())
        else:
            joined.append(piece)
    return pc.binary_join_element_wise(*joined, b"", null_handling="replace", null_replacement=b"")


def _length_prefixed(values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Avro bytes: each value's length, then the value (the two pieces, joined by the caller)."""
    return _varints(pc.binary_length(values).fill_null(0).to_numpy().astype(np.int64)), values


def _varint_scalar(value: int) -> pa.Scalar:
    return pa.scalar(avro_long(value), pa.binary())


def _varints(values: np.ndarray) -> pa.Array:
    """Avro's zig-zag varints of 64-bit integers (spec: long), as a binary array: built a byte
    position at a time, as many positions as the longest takes (counts and sizes: two or three)."""
    numbers = np.asarray(values, np.int64)
    zigzag = ((numbers << 1) ^ (numbers >> 63)).astype(np.uint64)
    length = np.ones(len(numbers), np.int32)
    longer = zigzag >> np.uint64(7)
    while longer.any():
        length += longer != 0
        longer >>= np.uint64(7)
    offsets = np.zeros(len(numbers) + 1, np.int32)
    np.cumsum(length, out=offsets[1:])
    data = np.empty(int(offsets[-1]), np.uint8)
    rest, starts = zigzag, offsets[:-1]
    for position in range(int(length.max(initial=0))):
        at = length > position
        more = (length > position + 1).astype(np.uint8) << np.uint8(7)
        data[starts[at] + position] = ((rest & np.uint64(0x7F)).astype(np.uint8) | more)[at]
        rest = rest >> np.uint64(7)
    return pa.BinaryArray.from_buffers(pa.binary(), len(numbers), [None, pa.py_buffer(offsets.tobytes()),
                                                                   pa.py_buffer(data.tobytes())])
