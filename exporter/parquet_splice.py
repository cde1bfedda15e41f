"""Re-encode a few leaf columns of a Parquet file and keep every other byte of it.

A checkpoint (or sidecar) is rewritten by replacing only the column chunks of its path leaves
(`add.path`, `add.deletionVector.pathOrInlineDv`, ...). Every other column chunk is copied byte
for byte, and the footer keeps the source's schema elements, key-value metadata, `created_by` and
column orders, so physical types (INT96, INT32/INT64 decimals), logical annotations, field ids,
nullability, codecs and the row-group layout are exactly the source's: nothing is decoded and
re-encoded that is not rewritten. Page indexes and bloom filters are dropped: optional, and their
offsets would point into the old file. Layout: parquet-format `README.md#file-format`.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from exporter.errors import CorruptLog, ExporterError
from exporter.thrift import I64, LIST, STRUCT, ThriftList, ThriftStruct, decode_struct, encode_struct

MAGIC = b"PAR1"
_ENCRYPTED_MAGIC = b"PARE"
# FileMetaData, RowGroup, ColumnChunk, ColumnMetaData field ids (parquet.thrift)
_FILE_ROW_GROUPS = 4
_RG_COLUMNS, _RG_TOTAL_BYTE_SIZE, _RG_FILE_OFFSET, _RG_TOTAL_COMPRESSED_SIZE = 1, 2, 5, 6
_CC_FILE_PATH, _CC_FILE_OFFSET, _CC_META_DATA = 1, 2, 3
_CC_PAGE_INDEX_FIELDS = (4, 5, 6, 7)  # offset index / column index offsets and lengths
_CC_ENCRYPTED_FIELDS = (8, 9)
_CMD_PATH_IN_SCHEMA, _CMD_CODEC, _CMD_NUM_VALUES = 3, 4, 5
_CMD_TOTAL_UNCOMPRESSED, _CMD_TOTAL_COMPRESSED = 6, 7
_CMD_DATA_PAGE_OFFSET, _CMD_INDEX_PAGE_OFFSET, _CMD_DICTIONARY_PAGE_OFFSET = 9, 10, 11
_CMD_BLOOM_FILTER_FIELDS = (14, 15)
# parquet.thrift CompressionCodec -> pyarrow's name; LZO and Hadoop-framed LZ4 have no pyarrow writer
_CODECS = {0: "NONE", 1: "SNAPPY", 2: "GZIP", 4: "BROTLI", 6: "ZSTD", 7: "LZ4"}

RowGroupRewrite = Callable[[pa.Table], "pa.Table | None"]


def read_footer(raw: bytes, name: str) -> ThriftStruct:
    """The file's FileMetaData."""
    if len(raw) < 12 or raw[:4] != MAGIC:
        raise CorruptLog(f"_delta_log/{name}: not a parquet file (no PAR1 header)")
    if raw[-4:] == _ENCRYPTED_MAGIC:
        raise ExporterError(f"_delta_log/{name}: the parquet footer is encrypted; the exporter cannot rewrite it")
    if raw[-4:] != MAGIC:
        raise CorruptLog(f"_delta_log/{name}: not a parquet file (no PAR1 trailer): truncated?")
    length = int.from_bytes(raw[-8:-4], "little")
    if length <= 0 or length > len(raw) - 12:
        raise CorruptLog(f"_delta_log/{name}: parquet footer length {length} does not fit the file")
    return decode_struct(raw[-8 - length:-8])


def splice_leaves(raw: bytes, name: str, leaves: list[str], rewrite: RowGroupRewrite) -> bytes:
    """`raw` with the column chunks of `leaves` (dotted leaf paths) replaced by `rewrite`'s output.

    `rewrite` gets each row group's `leaves` as an Arrow table and returns a table of the same
    schema and length, or None to keep the row group's values. When no row group changes, `raw`
    itself is returned.
    """
    source = _open(raw, name)
    present = [leaf for leaf in leaves if leaf in _leaf_indexes(source)]
    if not present:
        return raw
    tables: list[pa.Table] = []
    changed = False
    for index in range(source.num_row_groups):
        original = source.read_row_group(index, columns=present)
        rewritten = rewrite(original)
        changed = changed or rewritten is not None
        tables.append(original if rewritten is None else rewritten)
    if not changed:
        return raw
    replacement = _encode_leaves(source, present, tables, name)
    return _splice(raw, name, replacement, present)


def _open(raw: bytes, name: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(io.BytesIO(raw))
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise CorruptLog(f"_delta_log/{name}: not a readable parquet file: {exc}") from None


def _leaf_indexes(parquet_file: pq.ParquetFile) -> dict[str, int]:
    schema = parquet_file.schema
    return {schema.column(i).path: i for i in range(len(schema))}


def _encode_leaves(source: pq.ParquetFile, leaves: list[str], tables: list[pa.Table], name: str) -> bytes:
    """A parquet file of just `leaves`, one row group per source row group, each leaf with its source codec."""
    metadata, indexes = source.metadata, _leaf_indexes(source)
    codecs = {}
    for leaf in leaves:
        column = metadata.row_group(0).column(indexes[leaf]) if metadata.num_row_groups else None
        codecs[leaf] = _CODECS.get(_codec_number(column.compression), "SNAPPY") if column else "SNAPPY"
    sink = io.BytesIO()
    schema = tables[0].schema
    # Paths are distinct per row: a dictionary would only cost; short enums (storageType) keep one.
    dictionary = [leaf for leaf in leaves if not leaf.endswith(("path", "pathOrInlineDv"))]
    with pq.ParquetWriter(sink, schema, compression=codecs, use_dictionary=dictionary or False,
                          store_schema=False, write_statistics=True) as writer:
        for table in tables:
            writer.write_table(table, row_group_size=max(table.num_rows, 1))
    encoded = sink.getvalue()
    check = pq.ParquetFile(io.BytesIO(encoded))
    if check.metadata.num_row_groups != metadata.num_row_groups:
        raise ExporterError(f"_delta_log/{name}: rewriting its path columns changed the row groups "
                            f"({metadata.num_row_groups} -> {check.metadata.num_row_groups}); refusing")
    for position, leaf in enumerate(leaves):
        before, after = source.schema.column(indexes[leaf]), check.schema.column(position)
        if (before.physical_type, before.max_definition_level, before.max_repetition_level) != \
                (after.physical_type, after.max_definition_level, after.max_repetition_level):
            raise ExporterError(f"_delta_log/{name}: column {leaf} cannot be rewritten with its physical layout "
                                f"({before.physical_type}/{before.max_definition_level}/{before.max_repetition_level} "
                                f"became {after.physical_type}/{after.max_definition_level}/{after.max_repetition_level})")
    return encoded


def _codec_number(compression: str) -> int:
    names = {"UNCOMPRESSED": 0, "SNAPPY": 1, "GZIP": 2, "LZO": 3, "BROTLI": 4, "LZ4": 5, "ZSTD": 6, "LZ4_RAW": 7}
    return names.get(compression, 1)


def _chunk_range(chunk: ThriftStruct, limit: int, name: str) -> tuple[int, int]:
    """(start, end) of a column chunk's pages in its file."""
    if chunk.get(_CC_FILE_PATH) is not None:
        raise ExporterError(f"_delta_log/{name}: a column chunk lives in another file; the exporter cannot copy it")
    if any(chunk.get(f) is not None for f in _CC_ENCRYPTED_FIELDS):
        raise ExporterError(f"_delta_log/{name}: encrypted columns; the exporter cannot rewrite them")
    meta: ThriftStruct = chunk.get(_CC_META_DATA)
    offsets = [o for o in (meta.get(_CMD_DICTIONARY_PAGE_OFFSET), meta.get(_CMD_DATA_PAGE_OFFSET)) if o and o >= 4]
    start = min(offsets, default=0)
    end = start + (meta.get(_CMD_TOTAL_COMPRESSED) or 0)
    if not offsets or end > limit:
        raise CorruptLog(f"_delta_log/{name}: column chunk {_dotted(meta)} lies outside the file")
    return start, end


def _dotted(meta: ThriftStruct) -> str:
    path = meta.get(_CMD_PATH_IN_SCHEMA)
    return ".".join(p.decode("utf-8", "replace") for p in path.items) if path else "?"


def _moved(chunk: ThriftStruct, old_start: int, old_end: int, new_start: int) -> ThriftStruct:
    """The chunk's metadata for its pages copied from `old_start` to `new_start`."""
    shift = new_start - old_start
    meta = ThriftStruct(list(chunk.get(_CC_META_DATA).fields))
    for field_id in (_CMD_DATA_PAGE_OFFSET, _CMD_DICTIONARY_PAGE_OFFSET, _CMD_INDEX_PAGE_OFFSET):
        offset = meta.get(field_id)
        if offset is not None:
            meta.set(field_id, I64, offset + shift if old_start <= offset < old_end else offset)
    meta.drop(*_CMD_BLOOM_FILTER_FIELDS)
    moved = ThriftStruct(list(chunk.fields))
    moved.drop(*_CC_PAGE_INDEX_FIELDS)
    moved.set(_CC_META_DATA, STRUCT, meta)
    file_offset = chunk.get(_CC_FILE_OFFSET)
    moved.set(_CC_FILE_OFFSET, I64, file_offset + shift if file_offset is not None and old_start <= file_offset < old_end
              else new_start)
    return moved


def _splice(raw: bytes, name: str, replacement: bytes, leaves: list[str]) -> bytes:
    footer = read_footer(raw, name)
    new_footer = read_footer(replacement, name)
    source_limit = len(raw) - 8 - int.from_bytes(raw[-8:-4], "little")
    replacement_limit = len(replacement) - 8 - int.from_bytes(replacement[-8:-4], "little")
    replaced_paths = {tuple(leaf.split(".")): position for position, leaf in enumerate(leaves)}
    out = bytearray(MAGIC)
    row_groups = []
    for group, new_group in zip(footer.get(_FILE_ROW_GROUPS).items, new_footer.get(_FILE_ROW_GROUPS).items):
        chunks = []
        new_chunks = new_group.get(_RG_COLUMNS).items
        for chunk in group.get(_RG_COLUMNS).items:
            path = tuple(p.decode() for p in chunk.get(_CC_META_DATA).get(_CMD_PATH_IN_SCHEMA).items)
            position = replaced_paths.get(path)
            body, limit, origin = (raw, source_limit, chunk) if position is None else \
                (replacement, replacement_limit, new_chunks[position])
            start, end = _chunk_range(origin, limit, name)
            moved = _moved(origin, start, end, len(out))
            if position is not None:  # the source's own path spelling in the schema
                moved.get(_CC_META_DATA).set(_CMD_PATH_IN_SCHEMA, LIST, chunk.get(_CC_META_DATA).get(_CMD_PATH_IN_SCHEMA))
                if new_chunks[position].get(_CC_META_DATA).get(_CMD_NUM_VALUES) != \
                        chunk.get(_CC_META_DATA).get(_CMD_NUM_VALUES):
                    raise ExporterError(f"_delta_log/{name}: rewritten column {'.'.join(path)} has a different "
                                        "number of values than the source; refusing")
            out += body[start:end]
            chunks.append(moved)
        rewritten_group = ThriftStruct(list(group.fields))
        rewritten_group.set(_RG_COLUMNS, LIST, ThriftList(STRUCT, chunks))
        metas = [c.get(_CC_META_DATA) for c in chunks]
        rewritten_group.set(_RG_TOTAL_BYTE_SIZE, I64, sum(m.get(_CMD_TOTAL_UNCOMPRESSED) or 0 for m in metas))
        if chunks:
            rewritten_group.set(_RG_FILE_OFFSET, I64, chunks[0].get(_CC_FILE_OFFSET))
        rewritten_group.set(_RG_TOTAL_COMPRESSED_SIZE, I64, sum(m.get(_CMD_TOTAL_COMPRESSED) or 0 for m in metas))
        row_groups.append(rewritten_group)
    footer.set(_FILE_ROW_GROUPS, LIST, ThriftList(STRUCT, row_groups))
    encoded = encode_struct(footer)
    out += encoded
    out += len(encoded).to_bytes(4, "little") + MAGIC
    return bytes(out)

