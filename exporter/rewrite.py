"""Rewriting the paths of file actions (`add`, `remove`, `cdc`) to absolute physical URIs.

Everything else passes through untouched: readers must ignore unknown fields, so the export keeps
them (PROTOCOL.md#protocol-evolution). JSON lines that need no change stay byte-identical; Arrow
checkpoints keep their schema and null masks exactly.
"""

import itertools
import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

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
        action = parse_action_line(file_name, line_number, line)
        try:
            count = sum(
                _rewrite_file_action(kind, file_action, resolver, missing)
                for kind in FILE_ACTIONS
                if isinstance(file_action := action.get(kind), dict)
            )
        except CorruptLog as error:
            raise CorruptLog(f"{file_name} line {line_number}: {error}") from error
        if count:  # untouched lines stay byte-identical: no re-serialisation
            carriage_return = b"\r" if line.endswith(b"\r") else b""
            lines[line_number - 1] = _serialise(action) + carriage_return
            files_rewritten += count
    return RewriteResult(b"\n".join(lines), files_rewritten, list(dict.fromkeys(missing)))


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
class _ValueRewrite:
    """A child column's distinct values, each resolved once, and how rows map back onto them."""

    indices: list[pa.Array]  # per chunk: each row's distinct value (null: the row has no visible value)
    targets: pa.Array  # per distinct value: what to write, the value itself when it is kept
    changed: pa.Array  # per distinct value: whether its target differs from it
    missing: list[str]  # distinct values whose object is gone

    @property
    def changes_anything(self) -> bool:
        return self.changed.true_count > 0

    def targets_of(self, chunk_number: int) -> pa.Array:
        return self.targets.take(self.indices[chunk_number])

    def changed_rows(self, chunk_number: int) -> pa.Array:
        return self.changed.take(self.indices[chunk_number]).fill_null(False)


def _value_rewrite(
    visible: list[pa.Array], value_type: pa.DataType, resolve_many: Callable[[list[str]], list[str | None]]
) -> _ValueRewrite:
    """Resolve the distinct non-null values of `visible` (one array per chunk) once each."""
    # One dictionary over all chunks: each distinct path is resolved once, whatever chunk it is in.
    encoded = pc.dictionary_encode(pa.concat_arrays(visible) if visible else pa.array([], value_type))
    sources = encoded.dictionary.to_pylist()
    uris = resolve_many(sources)
    targets = [source if uri is None else uri for source, uri in zip(sources, uris)]
    offsets = itertools.accumulate((len(chunk) for chunk in visible), initial=0)
    return _ValueRewrite(
        indices=[encoded.indices.slice(offset, len(chunk)) for offset, chunk in zip(offsets, visible)],
        targets=pa.array(targets, type=value_type),
        changed=pa.array([target != source for source, target in zip(sources, targets)], type=pa.bool_()),
        missing=[source for source, uri in zip(sources, uris) if uri is None],
    )


def _rewrite_action_column(
    kind: str, column: pa.ChunkedArray, resolver: PathResolver
) -> tuple[pa.ChunkedArray, int, list[str]]:
    action_type: pa.StructType = column.type
    chunks: list[pa.StructArray] = column.chunks
    path_index = action_type.get_field_index("path")
    dv_fields = _deletion_vector_fields(action_type)

    paths = _path_rewrite(chunks, action_type, path_index, resolver) if path_index >= 0 else None
    dvs = _deletion_vector_rewrite(chunks, dv_fields, resolver) if dv_fields else None
    missing = []
    if kind == _REQUIRED_ACTION:
        missing += paths.missing if paths else []
        missing += [deletion_vector_relative_path(value) for value in dvs.missing] if dvs else []
    paths = paths if paths and paths.changes_anything else None
    dvs = dvs if dvs and dvs.changes_anything else None
    if not paths and not dvs:
        return column, 0, missing

    files_rewritten = 0
    new_chunks = []
    for chunk_number, chunk in enumerate(chunks):
        replaced: dict[int, pa.Array] = {}
        if paths:
            # Rows with no visible path keep their raw value: under a null action it may be a
            # placeholder that a non-nullable `path` field needs to be written again.
            replaced[path_index] = pc.coalesce(paths.targets_of(chunk_number), chunk.field(path_index))
            files_rewritten += paths.changed_rows(chunk_number).true_count
        if dvs:
            replaced[dv_fields[0]], count = _rewrite_deletion_vectors(chunk, chunk_number, dv_fields, dvs)
            files_rewritten += count
        new_chunks.append(_with_children(chunk, replaced))
    return pa.chunked_array(new_chunks, type=action_type), files_rewritten, missing


def _path_rewrite(
    chunks: list[pa.StructArray], action_type: pa.StructType, path_index: int, resolver: PathResolver
) -> _ValueRewrite:
    # struct_field nulls the rows where the action itself is null: those are other actions' rows.
    visible = [pc.struct_field(chunk, [path_index]) for chunk in chunks]
    return _value_rewrite(visible, action_type.field(path_index).type, resolver.resolve_many)


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


def _deletion_vector_rewrite(
    chunks: list[pa.StructArray], dv_fields: tuple[int, int, int], resolver: PathResolver
) -> _ValueRewrite:
    visible = [_relative_deletion_vectors(chunk, dv_fields) for chunk in chunks]
    value_type = chunks[0].type.field(dv_fields[0]).type.field(dv_fields[2]).type if chunks else pa.string()
    return _value_rewrite(visible, value_type, lambda values: [resolver.resolve_deletion_vector(v) for v in values])


def _rewrite_deletion_vectors(
    chunk: pa.StructArray, chunk_number: int, dv_fields: tuple[int, int, int], dvs: _ValueRewrite
) -> tuple[pa.StructArray, int]:
    """The chunk's deletionVector child with resolved `u` descriptors turned into `p` ones."""
    dv_index, storage_index, path_index = dv_fields
    deletion_vectors: pa.StructArray = chunk.field(dv_index)
    rewritten = dvs.changed_rows(chunk_number)
    storage_type = deletion_vectors.field(storage_index)
    replaced = {
        storage_index: pc.if_else(rewritten, pa.scalar(_ABSOLUTE_DV, storage_type.type), storage_type),
        path_index: pc.if_else(rewritten, dvs.targets_of(chunk_number), deletion_vectors.field(path_index)),
    }
    return _with_children(deletion_vectors, replaced), rewritten.true_count


def _with_children(struct: pa.StructArray, replaced: dict[int, pa.Array]) -> pa.StructArray:
    """`struct` with some children swapped, its type and null mask unchanged."""
    children = [replaced.get(index, struct.field(index)) for index in range(struct.type.num_fields)]
    mask = struct.is_null() if struct.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(struct.type), mask=mask)


# ------------------------------------------------------------- V2 checkpoint sidecar sizes


def resize_sidecars(checkpoint, sizes: dict[str, int]):
    """A V2 checkpoint's `sidecar` actions carry each sidecar's size, which readers trust: the
    rewritten sidecars are larger, so their sizes are updated (PROTOCOL.md#sidecar-file-information)."""
    if "sidecar" not in checkpoint.column_names:
        return checkpoint
    index = checkpoint.column_names.index("sidecar")
    chunks = []
    for chunk in checkpoint.column(index).chunks:
        paths = chunk.field("path").to_pylist()
        names = [f.name for f in chunk.type]
        old_sizes = chunk.field("sizeInBytes")
        new_sizes = pa.array([sizes.get(posixpath.basename(unquote(p)), old) if p is not None else old
                              for p, old in zip(paths, old_sizes.to_pylist())], type=old_sizes.type)
        children = [new_sizes if n == "sizeInBytes" else chunk.field(n) for n in names]
        chunks.append(pa.StructArray.from_arrays(children, fields=list(chunk.type), mask=chunk.is_null()))
    column = pa.chunked_array(chunks, type=checkpoint.schema.field(index).type)
    return checkpoint.set_column(index, checkpoint.schema.field(index), column)


def resize_sidecars_json(raw: bytes, sizes: dict[str, int]) -> bytes:
    lines = raw.split(b"\n")
    for i, line in enumerate(lines):
        if line.startswith(b'{"sidecar"'):
            action = json.loads(line)
            name = posixpath.basename(unquote(action["sidecar"]["path"]))
            if name in sizes:
                action["sidecar"]["sizeInBytes"] = sizes[name]
                lines[i] = json.dumps(action, separators=(",", ":"), ensure_ascii=False).encode()
    return b"\n".join(lines)
