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
import math
from collections.abc import Callable, Iterator
from typing import BinaryIO, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from exporter.errors import CorruptLog, ExporterError
from exporter.parquet.thrift import I64, LIST, STRUCT, ThriftList, ThriftStruct, decode_struct, encode_struct

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
    return _SourceFile(BytesSource(raw), name).footer()[0]


class ParquetSource(Protocol):
    """A parquet file read by byte ranges: in memory, or an object read with ranged GETs."""

    size: int

    def read_range(self, start: int, end: int) -> bytes: ...


class BytesSource:
    def __init__(self, raw: bytes):
        self.raw, self.size = raw, len(raw)

    def read_range(self, start: int, end: int) -> bytes:
        return self.raw[start:end]


def splice_leaves_to(source: ParquetSource, name: str, leaves: list[str], rewrite: RowGroupRewrite,
                     sink: BinaryIO, rows_at_once: int = 0) -> bool:
    """Write `source` to `sink` with the column chunks of `leaves` (dotted leaf paths) replaced by
    `rewrite`'s output, one row group at a time; True when anything changed.

    `rewrite` gets row groups' `leaves` as an Arrow table and returns a table of the same schema and
    length, or None to keep their values: one row group's, or with `rows_at_once` those of
    consecutive row groups of up to that many rows together (a rewrite whose cost has a part per
    call, e.g. a pass over a listing, pays it once for them). Memory is that many rows (their bytes
    and their decoded leaves), or one row group, whatever the file's size. When nothing changes,
    what was written to `sink` is the same file re-framed (page indexes dropped): the caller keeps
    the source instead.
    """
    file = _SourceFile(source, name)
    footer, footer_start = file.footer()
    parquet_file = _open(file, name)
    indexes = _leaf_indexes(parquet_file)
    present = [leaf for leaf in leaves if leaf in indexes]
    if not present:
        return False
    replaced_paths = {tuple(leaf.split(".")): position for position, leaf in enumerate(present)}
    sink.write(MAGIC)
    written = len(MAGIC)
    changed = False
    row_groups = []
    groups = footer.get(_FILE_ROW_GROUPS).items
    for together in _consecutive(parquet_file.metadata, rows_at_once):
        ranges, spans = {}, {}
        for index in together:
            ranges[index] = [_chunk_range(chunk, footer_start, name) for chunk in groups[index].get(_RG_COLUMNS).items]
            span_start = min((start for start, _ in ranges[index]), default=footer_start)
            spans[index] = (span_start, source.read_range(span_start, max((end for _, end in ranges[index]),
                                                                          default=footer_start)))
        file.hold(list(spans.values()))
        tables = [read_row_group(parquet_file, index, present, name) for index in together]
        rewritten = rewrite(tables[0] if len(tables) == 1 else pa.concat_tables(tables))
        offset = 0
        for index, table in zip(together, tables):
            group, (span_start, span) = groups[index], spans.pop(index)
            new_chunks: list[ThriftStruct] = []
            replacement = replacement_limit = None
            if rewritten is not None:
                changed = True
                replacement = _encode_leaves(parquet_file, index, present, rewritten.slice(offset, table.num_rows), name)
                replacement_limit = len(replacement) - 8 - int.from_bytes(replacement[-8:-4], "little")
                new_chunks = read_footer(replacement, name).get(_FILE_ROW_GROUPS).items[0].get(_RG_COLUMNS).items
            offset += table.num_rows
            chunks = []
            for chunk, (start, end) in zip(group.get(_RG_COLUMNS).items, ranges[index]):
                path = tuple(p.decode() for p in chunk.get(_CC_META_DATA).get(_CMD_PATH_IN_SCHEMA).items)
                position = replaced_paths.get(path) if replacement is not None else None
                if position is None:
                    body, origin = span[start - span_start:end - span_start], chunk
                else:
                    origin = new_chunks[position]
                    start, end = _chunk_range(origin, replacement_limit, name)
                    body = replacement[start:end]
                moved = _moved(origin, start, end, written)
                if position is not None:
                    _as_the_source(moved, chunk, name, path)
                sink.write(body)
                written += len(body)
                chunks.append(moved)
            row_groups.append(_row_group(group, chunks))
            del span, replacement
        del tables, rewritten
        file.hold([])
        pa.default_memory_pool().release_unused()  # give the row groups' buffers back before the next
    footer.set(_FILE_ROW_GROUPS, LIST, ThriftList(STRUCT, row_groups))
    encoded = encode_struct(footer)
    sink.write(encoded + len(encoded).to_bytes(4, "little") + MAGIC)
    return changed


def _consecutive(metadata: pq.FileMetaData, rows: int) -> list[list[int]]:
    """The file's row groups (indexes) cut into runs of consecutive ones of at most `rows` rows
    together, a row group bigger than that alone (every row group alone when `rows` is 0)."""
    runs: list[list[int]] = []
    held = 0
    for index in range(metadata.num_row_groups):
        count = metadata.row_group(index).num_rows
        if not runs or held + count > rows:
            runs.append([])
            held = 0
        runs[-1].append(index)
        held += count
    return runs


def _as_the_source(moved: ThriftStruct, chunk: ThriftStruct, name: str, path: tuple[str, ...]) -> None:
    """A rewritten chunk keeps the source's path spelling in the schema, and must hold as many values."""
    moved.get(_CC_META_DATA).set(_CMD_PATH_IN_SCHEMA, LIST, chunk.get(_CC_META_DATA).get(_CMD_PATH_IN_SCHEMA))
    if moved.get(_CC_META_DATA).get(_CMD_NUM_VALUES) != chunk.get(_CC_META_DATA).get(_CMD_NUM_VALUES):
        raise ExporterError(f"{_shown(name)}: rewritten column {'.'.join(path)} has a different "
                            "number of values than the source; refusing")


def _row_group(group: ThriftStruct, chunks: list[ThriftStruct]) -> ThriftStruct:
    rewritten = ThriftStruct(list(group.fields))
    rewritten.set(_RG_COLUMNS, LIST, ThriftList(STRUCT, chunks))
    metas = [c.get(_CC_META_DATA) for c in chunks]
    rewritten.set(_RG_TOTAL_BYTE_SIZE, I64, sum(m.get(_CMD_TOTAL_UNCOMPRESSED) or 0 for m in metas))
    if chunks:
        rewritten.set(_RG_FILE_OFFSET, I64, chunks[0].get(_CC_FILE_OFFSET))
    rewritten.set(_RG_TOTAL_COMPRESSED_SIZE, I64, sum(m.get(_CMD_TOTAL_COMPRESSED) or 0 for m in metas))
    return rewritten


def _shown(name: str) -> str:
    """A file in an error: a log file by its name under `_delta_log/`, a data file by its URI."""
    return name if "://" in name else f"_delta_log/{name}"


class _SourceFile(io.RawIOBase):
    """A seekable file over a `ParquetSource` for pyarrow: reads inside the footer or the row groups
    held (`hold`) come from memory, anything else is one ranged read."""

    _TAIL = 64 << 10

    def __init__(self, source: ParquetSource, name: str):
        self.source, self.name, self.position = source, name, 0
        self._windows: list[tuple[int, bytes]] = []

    def footer(self) -> tuple[ThriftStruct, int]:
        """The FileMetaData and where it starts; the file's tail stays in memory."""
        tail_start, tail = self.tail()
        footer_start = self.source.size - 8 - int.from_bytes(tail[-8:-4], "little")
        return decode_struct(tail[footer_start - tail_start:-8]), footer_start

    def tail(self) -> tuple[int, bytes]:
        """The file's tail, from where it starts to the end, footer whole, checked and kept in memory
        (pyarrow's reads of it are answered from there). Not decoded: pyarrow decodes it again anyway,
        and this module's decoder took 0.02 s a checkpoint, three times a 100,000-file Iceberg step."""
        size, name = self.source.size, self.name
        if size < 12 or self.source.read_range(0, 4) != MAGIC:
            raise CorruptLog(f"{_shown(name)}: not a parquet file (no PAR1 header)")
        tail_start = max(0, size - self._TAIL)
        tail = self.source.read_range(tail_start, size)
        if tail[-4:] == _ENCRYPTED_MAGIC:
            raise ExporterError(f"{_shown(name)}: the parquet footer is encrypted; the exporter cannot rewrite it")
        if tail[-4:] != MAGIC:
            raise CorruptLog(f"{_shown(name)}: not a parquet file (no PAR1 trailer): truncated?")
        length = int.from_bytes(tail[-8:-4], "little")
        if length <= 0 or length > size - 12:
            raise CorruptLog(f"{_shown(name)}: parquet footer length {length} does not fit the file")
        footer_start = size - 8 - length
        if footer_start < tail_start:
            tail = self.source.read_range(footer_start, size)
            tail_start = footer_start
        self._tail = (tail_start, tail)
        self._windows = [self._tail]
        return self._tail

    def hold(self, windows: list[tuple[int, bytes]]) -> None:
        """Serve pyarrow's reads from these (start, bytes) windows too, instead of the ones held before."""
        self._windows = [self._tail, *windows]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.position = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.source.size}[whence] + offset
        return self.position

    def read(self, size: int = -1) -> bytes:
        end = self.source.size if size is None or size < 0 else min(self.position + size, self.source.size)
        start, self.position = self.position, max(end, self.position)
        for window_start, data in self._windows:
            if window_start <= start and end <= window_start + len(data):
                return data[start - window_start:end - window_start]
        return self.source.read_range(start, end)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


def open_parquet(source: ParquetSource, name: str) -> pq.ParquetFile:
    """A parquet file read by byte ranges (columns and row groups read on demand), or CorruptLog."""
    file = _SourceFile(source, name)
    file.tail()
    return _open(file, name)


def _open(source, name: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(source)
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise CorruptLog(f"{_shown(name)}: not a readable parquet file: {exc}") from None


def read_columns(source: ParquetSource, name: str, columns: list[str] | None = None) -> pa.Table:
    """The named columns (those present; all when None) of a parquet log file, or CorruptLog."""
    return read_present_columns(open_parquet(source, name), name, columns)


def read_present_columns(parquet_file: pq.ParquetFile, name: str, columns: list[str] | None = None) -> pa.Table:
    """`read_columns` of a file already open."""
    present = None if columns is None else [c for c in columns if c in parquet_file.schema_arrow.names]
    try:
        return parquet_file.read(columns=present)
    except Exception as exc:
        raise CorruptLog(f"{_shown(name)}: not a readable parquet checkpoint: {exc}") from None


def read_row_group(parquet_file: pq.ParquetFile, index: int, columns: list[str], name: str) -> pa.Table:
    try:
        return parquet_file.read_row_group(index, columns=columns)
    except Exception as exc:
        raise CorruptLog(f"{_shown(name)}: row group {index} is not readable: {exc}") from None


def read_row_group_pieces(parquet_file: pq.ParquetFile, index: int, columns: list[str], name: str,
                          most: int) -> Iterator[pa.Table]:
    """`read_row_group` in tables of at most `most` rows (of `even_size`), each decoded when asked for:
    the caller works on the first while the row group is not decoded whole (the first 32,768 of a
    65,536-row group in 4-6 ms, not 13-26 ms), and holds one piece, not the group, at a time."""
    rows = parquet_file.metadata.row_group(index).num_rows
    try:
        for batch in parquet_file.iter_batches(batch_size=even_size(rows, most), row_groups=[index], columns=columns):
            yield pa.Table.from_batches([batch])
    except Exception as exc:
        raise CorruptLog(f"{_shown(name)}: row group {index} is not readable: {exc}") from None


def even_size(count: int, most: int) -> int:
    """The size of the fewest pieces of at most `most` that `count` things go into, of equal sizes
    (but the last): pieces worked on at once end together (a 34,464-file row group as 32,768 and
    1,696 kept a core idle for 30 ms)."""
    return max(1, math.ceil(count / max(1, math.ceil(count / most))))


def _leaf_indexes(parquet_file: pq.ParquetFile) -> dict[str, int]:
    schema = parquet_file.schema
    return {schema.column(i).path: i for i in range(len(schema))}


def _encode_leaves(source: pq.ParquetFile, row_group: int, leaves: list[str], table: pa.Table, name: str) -> bytes:
    """A parquet file of just `leaves` in one row group, each leaf with the source chunk's codec."""
    metadata, indexes = source.metadata, _leaf_indexes(source)
    codecs = {leaf: _CODECS.get(_codec_number(metadata.row_group(row_group).column(indexes[leaf]).compression), "SNAPPY")
              for leaf in leaves}
    sink = io.BytesIO()
    # Paths are distinct per row: a dictionary would only cost; short enums (storageType) keep one.
    dictionary = [leaf for leaf in leaves if not leaf.endswith(("path", "pathOrInlineDv"))]
    with pq.ParquetWriter(sink, table.schema, compression=codecs, use_dictionary=dictionary or False,
                          store_schema=False, write_statistics=True) as writer:
        writer.write_table(table, row_group_size=max(table.num_rows, 1))
    encoded = sink.getvalue()
    check = pq.ParquetFile(io.BytesIO(encoded))
    if check.metadata.num_row_groups != 1:
        raise ExporterError(f"{_shown(name)}: rewriting its path columns changed the row groups "
                            f"(1 -> {check.metadata.num_row_groups}); refusing")
    for position, leaf in enumerate(leaves):
        before, after = source.schema.column(indexes[leaf]), check.schema.column(position)
        if (before.physical_type, before.max_definition_level, before.max_repetition_level) != \
                (after.physical_type, after.max_definition_level, after.max_repetition_level):
            raise ExporterError(f"{_shown(name)}: column {leaf} cannot be rewritten with its physical layout "
                                f"({before.physical_type}/{before.max_definition_level}/{before.max_repetition_level} "
                                f"became {after.physical_type}/{after.max_definition_level}/{after.max_repetition_level})")
    return encoded


def _codec_number(compression: str) -> int:
    names = {"UNCOMPRESSED": 0, "SNAPPY": 1, "GZIP": 2, "LZO": 3, "BROTLI": 4, "LZ4": 5, "ZSTD": 6, "LZ4_RAW": 7}
    return names.get(compression, 1)


def _chunk_range(chunk: ThriftStruct, limit: int, name: str) -> tuple[int, int]:
    """(start, end) of a column chunk's pages in its file."""
    if chunk.get(_CC_FILE_PATH) is not None:
        raise ExporterError(f"{_shown(name)}: a column chunk lives in another file; the exporter cannot copy it")
    if any(chunk.get(f) is not None for f in _CC_ENCRYPTED_FIELDS):
        raise ExporterError(f"{_shown(name)}: encrypted columns; the exporter cannot rewrite them")
    meta: ThriftStruct = chunk.get(_CC_META_DATA)
    offsets = [o for o in (meta.get(_CMD_DICTIONARY_PAGE_OFFSET), meta.get(_CMD_DATA_PAGE_OFFSET)) if o and o >= 4]
    start = min(offsets, default=0)
    end = start + (meta.get(_CMD_TOTAL_COMPRESSED) or 0)
    if not offsets or end > limit:
        raise CorruptLog(f"{_shown(name)}: column chunk {_dotted(meta)} lies outside the file")
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
