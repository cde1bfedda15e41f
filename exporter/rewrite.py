"""Rewriting the paths of file actions (`add`, `remove`, `cdc`) to absolute physical URIs.

Everything else passes through untouched: readers must ignore unknown fields, so the export keeps
them (PROTOCOL.md#protocol-evolution). JSON lines that need no change stay byte-identical; Arrow
checkpoints keep their schema and null masks exactly.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from exporter.deltalog import parse_action_line
from exporter.errors import CorruptLog
from exporter.paths import PathResolver, deletion_vector_relative_path

FILE_ACTIONS = ("add", "remove", "cdc")
# Only a missing `add` (or its deletion vector) breaks the snapshot; a vacuumed `remove`/`cdc` keeps its path.
_REQUIRED_ACTION = "add"
_RELATIVE_DV = "u"  # PROTOCOL.md#deletion-vector-descriptor-schema
_ABSOLUTE_DV = "p"


@dataclass
class RewriteResult:
    content: bytes
    files_rewritten: int  # data-file paths plus deletion-vector references replaced
    missing: list[str] = field(default_factory=list)  # add paths / deletion-vector files with no object


# ---------------------------------------------------------------- JSON commits, JSON checkpoints


def rewrite_commit(file_name: str, raw: bytes, resolver: PathResolver) -> RewriteResult:
    """Rewrite a newline-delimited JSON commit, V2 JSON checkpoint or JSON sidecar."""
    files_rewritten = 0
    missing: list[str] = []
    lines = raw.split(b"\n")  # the empty last element keeps a trailing newline
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rewritten, count = _rewrite_line(file_name, line_number, line, resolver, missing)
        except CorruptLog as error:
            raise CorruptLog(f"{file_name} line {line_number}: {error}") from error
        if count:
            lines[line_number - 1] = rewritten
            files_rewritten += count
    return RewriteResult(b"\n".join(lines), files_rewritten, list(dict.fromkeys(missing)))


def _rewrite_line(
    file_name: str, line_number: int, line: bytes, resolver: PathResolver, missing: list[str]
) -> tuple[bytes, int]:
    """The line with its file action rewritten, and how many references changed (0: keep the line)."""
    carriage_return = b"\r" if line.endswith(b"\r") else b""
    action = parse_action_line(file_name, line_number, line)
    count = 0
    for kind in FILE_ACTIONS:
        if isinstance(file_action := action.get(kind), dict):
            count += _rewrite_file_action(kind, file_action, resolver, missing)
    return (_serialise(action) + carriage_return if count else line), count


def _rewrite_file_action(kind: str, file_action: dict[str, Any], resolver: PathResolver, missing: list[str]) -> int:
    count = 0
    path = file_action.get("path")
    if isinstance(path, str):
        uri = resolver.resolve(path)
        if uri is None and kind == _REQUIRED_ACTION:
            missing.append(path)
        elif uri is not None and uri != path:
            file_action["path"] = uri
            count += 1
    deletion_vector = file_action.get("deletionVector")
    if isinstance(deletion_vector, dict) and deletion_vector.get("storageType") == _RELATIVE_DV:
        path_or_inline_dv = deletion_vector.get("pathOrInlineDv")
        if not isinstance(path_or_inline_dv, str):
            raise CorruptLog(f"{kind} {path!r}: deletion vector of storageType 'u' has no pathOrInlineDv")
        uri = resolver.resolve_deletion_vector(path_or_inline_dv)
        if uri is None and kind == _REQUIRED_ACTION:
            missing.append(deletion_vector_relative_path(path_or_inline_dv))
        elif uri is not None:
            # Assigning keeps key order; offset, sizeInBytes, cardinality and unknown keys stay.
            deletion_vector["storageType"] = _ABSOLUTE_DV
            deletion_vector["pathOrInlineDv"] = uri
            count += 1
    return count


def _serialise(action: dict[str, Any]) -> bytes:
    try:
        return json.dumps(action, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escaped in the source: keep it escaped
        return json.dumps(action, separators=(",", ":")).encode("ascii")


# ------------------------------------------------------------- Parquet checkpoints and sidecars


def rewrite_checkpoint(table: pa.Table, resolver: PathResolver) -> tuple[pa.Table, int, list[str]]:
    """Rewrite the file-action columns of a parquet checkpoint, checkpoint part or sidecar.

    Returns (table, files_rewritten, missing). The schema, the null masks and every other column
    are kept exactly; each distinct path is resolved once, then mapped back with Arrow kernels.
    """
    columns = list(table.columns)
    files_rewritten = 0
    missing: list[str] = []
    for kind in FILE_ACTIONS:
        index = table.schema.get_field_index(kind)
        if index < 0 or not pa.types.is_struct(table.schema.field(index).type):
            continue
        columns[index], count, column_missing = _rewrite_action_column(kind, table.column(index), resolver)
        files_rewritten += count
        missing += column_missing
    return pa.Table.from_arrays(columns, schema=table.schema), files_rewritten, list(dict.fromkeys(missing))


@dataclass
class _Replacements:
    """Distinct source values and what replaces each one (null: keep the source value)."""

    sources: pa.Array
    targets: pa.Array
    missing: list[str]

    @property
    def changes_anything(self) -> bool:
        return self.targets.null_count < len(self.targets)

    def map(self, visible: pa.Array) -> pa.Array:
        """Per row: the replacement of a visible value, or null to keep the row as it is."""
        return self.targets.take(pc.index_in(visible, value_set=self.sources))


def _replacements(visible: list[pa.Array], value_type: pa.DataType, resolve: Callable[[str], str | None]) -> _Replacements:
    sources = pc.unique(pa.chunked_array(visible, type=value_type)).drop_null()
    originals = sources.to_pylist()
    uris = [resolve(original) for original in originals]
    targets = [None if uri is None or uri == original else uri for original, uri in zip(originals, uris)]
    missing = [original for original, uri in zip(originals, uris) if uri is None]
    return _Replacements(sources, pa.array(targets, type=value_type), missing)


def _rewrite_action_column(
    kind: str, column: pa.ChunkedArray, resolver: PathResolver
) -> tuple[pa.ChunkedArray, int, list[str]]:
    action_type: pa.StructType = column.type
    chunks: list[pa.StructArray] = column.chunks
    path_index = action_type.get_field_index("path")
    dv_fields = _deletion_vector_fields(action_type)

    paths = _path_replacements(chunks, action_type, path_index, resolver) if path_index >= 0 else None
    dvs = _deletion_vector_replacements(chunks, dv_fields, resolver) if dv_fields else None
    missing = []
    if kind == _REQUIRED_ACTION:
        missing += paths.missing if paths else []
        missing += [deletion_vector_relative_path(value) for value in dvs.missing] if dvs else []
    if not (paths and paths.changes_anything) and not (dvs and dvs.changes_anything):
        return column, 0, missing

    files_rewritten = 0
    new_chunks = []
    for chunk in chunks:
        replaced: dict[int, pa.Array] = {}
        if paths and paths.changes_anything:
            new_paths = paths.map(pc.struct_field(chunk, [path_index]))
            replaced[path_index] = pc.if_else(pc.is_valid(new_paths), new_paths, chunk.field(path_index))
            files_rewritten += len(new_paths) - new_paths.null_count
        if dvs and dvs.changes_anything:
            replaced[dv_fields[0]], count = _rewrite_deletion_vectors(chunk, dv_fields, dvs)
            files_rewritten += count
        new_chunks.append(_with_children(chunk, replaced))
    return pa.chunked_array(new_chunks, type=action_type), files_rewritten, missing


def _path_replacements(
    chunks: list[pa.StructArray], action_type: pa.StructType, path_index: int, resolver: PathResolver
) -> _Replacements:
    # struct_field nulls the rows where the action itself is null: those are other actions' rows.
    visible = [pc.struct_field(chunk, [path_index]) for chunk in chunks]
    return _replacements(visible, action_type.field(path_index).type, resolver.resolve)


def _deletion_vector_fields(action_type: pa.StructType) -> tuple[int, int, int] | None:
    """(deletionVector, storageType, pathOrInlineDv) child indexes, when the column has them."""
    dv_index = action_type.get_field_index("deletionVector")
    if dv_index < 0 or not pa.types.is_struct(action_type.field(dv_index).type):
        return None
    dv_type = action_type.field(dv_index).type
    storage_index = dv_type.get_field_index("storageType")
    path_index = dv_type.get_field_index("pathOrInlineDv")
    return (dv_index, storage_index, path_index) if storage_index >= 0 and path_index >= 0 else None


def _relative_deletion_vectors(chunk: pa.StructArray, dv_fields: tuple[int, int, int]) -> pa.Array:
    """pathOrInlineDv of visible storageType `u` descriptors; null on every other row."""
    dv_index, storage_index, path_index = dv_fields
    storage_type = pc.struct_field(chunk, [dv_index, storage_index])
    path_or_inline_dv = pc.struct_field(chunk, [dv_index, path_index])
    return pc.if_else(pc.equal(storage_type, _RELATIVE_DV), path_or_inline_dv, pa.scalar(None, path_or_inline_dv.type))


def _deletion_vector_replacements(
    chunks: list[pa.StructArray], dv_fields: tuple[int, int, int], resolver: PathResolver
) -> _Replacements:
    visible = [_relative_deletion_vectors(chunk, dv_fields) for chunk in chunks]
    dv_type = chunks[0].type.field(dv_fields[0]).type if chunks else None
    value_type = dv_type.field(dv_fields[2]).type if dv_type else pa.string()
    return _replacements(visible, value_type, resolver.resolve_deletion_vector)


def _rewrite_deletion_vectors(
    chunk: pa.StructArray, dv_fields: tuple[int, int, int], dvs: _Replacements
) -> tuple[pa.StructArray, int]:
    """The chunk's deletionVector child with resolved `u` descriptors turned into `p` ones."""
    dv_index, storage_index, path_index = dv_fields
    deletion_vectors: pa.StructArray = chunk.field(dv_index)
    uris = dvs.map(_relative_deletion_vectors(chunk, dv_fields))
    rewritten = pc.is_valid(uris)
    storage_type = deletion_vectors.field(storage_index)
    absolute = pa.scalar(_ABSOLUTE_DV, storage_type.type)
    replaced = {
        storage_index: pc.if_else(rewritten, absolute, storage_type),
        path_index: pc.if_else(rewritten, uris, deletion_vectors.field(path_index)),
    }
    return _with_children(deletion_vectors, replaced), len(uris) - uris.null_count


def _with_children(struct: pa.StructArray, replaced: dict[int, pa.Array]) -> pa.StructArray:
    """`struct` with some children swapped, its type and null mask unchanged."""
    if not replaced:
        return struct
    children = [replaced.get(index, struct.field(index)) for index in range(struct.type.num_fields)]
    mask = struct.is_null() if struct.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(struct.type), mask=mask)
