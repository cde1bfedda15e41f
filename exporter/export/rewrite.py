"""Rewriting the paths of file actions (`add`, `remove`, `cdc`) to absolute physical URIs.

Everything else passes through untouched: readers must ignore unknown fields, so the export keeps
them (PROTOCOL.md#protocol-evolution). In JSON, only the replaced string values change, spliced into
the source's bytes; parquet checkpoints keep every column chunk but the rewritten ones.
"""

import io
import itertools
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc

from exporter.delta.actions import parse_action_line
from exporter.delta.deletion_vectors import ABSOLUTE, RELATIVE, file_of
from exporter.delta.paths import is_absolute
from exporter.errors import CorruptLog
from exporter.export.json_splice import splice_json
from exporter.export.resolve import PathResolver
from exporter.parquet.splice import BytesSource, ParquetSource, splice_leaves_to

FILE_ACTIONS = ("add", "remove", "cdc")
# Only a missing `add` (or its deletion vector) breaks the snapshot; a vacuumed `remove`/`cdc` keeps its path.
_REQUIRED_ACTION = "add"


@dataclass
class RewriteResult:
    content: bytes
    files_rewritten: int  # data-file paths plus deletion-vector references replaced
    missing: list[str] = field(default_factory=list)  # add paths / deletion-vector files with no object
    changed: bool = True  # False: nothing to rewrite, the source's bytes are the export's


# ---------------------------------------------------------------- JSON commits, JSON checkpoints


def rewrite_commit(file_name: str, raw: bytes, resolver: PathResolver,
                   sidecar_sizes: dict[str, int] | None = None) -> RewriteResult:
    """Rewrite a newline-delimited JSON commit, V2 JSON checkpoint or JSON sidecar.

    Only the replaced string values change: every other byte of a line (numbers as written, key
    order, spacing, unknown fields, duplicate keys) is the source's, spliced around the new values.
    """
    files_rewritten = 0
    missing: list[str] = []
    lines = raw.split(b"\n")  # the empty last element keeps a trailing newline
    for line_number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        action = parse_action_line(file_name, line_number, line)
        replacements: dict[tuple[str, ...], Any] = {}
        try:
            for kind in FILE_ACTIONS:
                if isinstance(file_action := action.get(kind), dict):
                    replacements.update(_rewrite_file_action(kind, file_action, resolver, missing))
            if sidecar_sizes is not None and isinstance(sidecar := action.get("sidecar"), dict):
                replacements.update(_sidecar_update(sidecar, sidecar_sizes))
        except CorruptLog as error:
            raise CorruptLog(f"{file_name} line {line_number}: {error}") from error
        if replacements:  # untouched lines stay byte-identical
            lines[line_number - 1] = splice_json(line, replacements)
            files_rewritten += sum(1 for path in replacements if path[-1] in ("path", "pathOrInlineDv") and path[0] != "sidecar")
    return RewriteResult(b"\n".join(lines), files_rewritten, list(dict.fromkeys(missing)))


def _rewrite_file_action(kind: str, file_action: dict[str, Any], resolver: PathResolver,
                         missing: list[str]) -> dict[tuple[str, ...], Any]:
    """The values to replace in one file action: {(kind, field...): new value}."""
    replacements: dict[tuple[str, ...], Any] = {}
    path = file_action.get("path")
    if isinstance(path, str):
        uri = resolver.resolve(path)
        if uri is None and kind == _REQUIRED_ACTION:
            missing.append(path)
        elif uri is not None and uri != path:
            replacements[(kind, "path")] = uri
    deletion_vector = file_action.get("deletionVector")
    storage_type = deletion_vector.get("storageType") if isinstance(deletion_vector, dict) else None
    if storage_type in (RELATIVE, ABSOLUTE):
        path_or_inline_dv = deletion_vector.get("pathOrInlineDv")
        if not isinstance(path_or_inline_dv, str):
            raise CorruptLog(f"{kind} {path!r}: deletion vector of storageType {storage_type!r} has no pathOrInlineDv")
        uri = resolver.resolve_deletion_vector(storage_type, path_or_inline_dv)
        if uri is None and kind == _REQUIRED_ACTION:
            missing.append(file_of(storage_type, path_or_inline_dv))
        elif uri is not None and uri != path_or_inline_dv:
            # offset, sizeInBytes, cardinality and unknown keys stay as written
            replacements[(kind, "deletionVector", "storageType")] = ABSOLUTE
            replacements[(kind, "deletionVector", "pathOrInlineDv")] = uri
    return replacements


def _sidecar_update(sidecar: dict[str, Any], sizes: dict[str, int]) -> dict[tuple[str, ...], Any]:
    """A V2 checkpoint's `sidecar` action names the export's own rewritten sidecar: its size, and
    a bare file name when the source gave an absolute path (PROTOCOL.md#sidecar-file-information)."""
    path = sidecar.get("path")
    if not isinstance(path, str):
        return {}
    name = sidecar_file_name(path)
    replacements: dict[tuple[str, ...], Any] = {}
    if name in sizes and sidecar.get("sizeInBytes") != sizes[name]:
        replacements[("sidecar", "sizeInBytes")] = sizes[name]
    if is_absolute(path):
        replacements[("sidecar", "path")] = quote(name)
    return replacements


def sidecar_file_name(sidecar_path: str) -> str:
    return posixpath.basename(unquote(sidecar_path))


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


def _value_rewrite(visible: list[pa.Array], value_type: pa.DataType,
                   resolve: Callable[[pa.Array], pa.Array]) -> _ValueRewrite:
    """Resolve the distinct non-null values of `visible` (one array per chunk) once each."""
    # One dictionary over all chunks: each distinct path is resolved once, whatever chunk it is in.
    encoded = pc.dictionary_encode(pa.concat_arrays(visible) if visible else pa.array([], value_type))
    sources = encoded.dictionary
    uris = resolve(sources).cast(value_type)
    targets = pc.coalesce(uris, sources)
    offsets = itertools.accumulate((len(chunk) for chunk in visible), initial=0)
    return _ValueRewrite(
        indices=[encoded.indices.slice(offset, len(chunk)) for offset, chunk in zip(offsets, visible)],
        targets=targets,
        changed=pc.fill_null(pc.not_equal(targets, sources), False),
        missing=sources.filter(pc.and_(pc.is_null(uris), pc.is_valid(sources))).to_pylist(),
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
        missing += [file_of(*_typed(value)) for value in dvs.missing] if dvs else []
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
    return _value_rewrite(visible, action_type.field(path_index).type, resolver.resolve_array)


def _deletion_vector_fields(action_type: pa.StructType) -> tuple[int, int, int] | None:
    """(deletionVector, storageType, pathOrInlineDv) child indexes, when the column has them."""
    dv_index = action_type.get_field_index("deletionVector")
    if dv_index < 0 or not pa.types.is_struct(action_type.field(dv_index).type):
        return None
    dv_type = action_type.field(dv_index).type
    storage_index = dv_type.get_field_index("storageType")
    path_index = dv_type.get_field_index("pathOrInlineDv")
    return (dv_index, storage_index, path_index) if storage_index >= 0 and path_index >= 0 else None


# Joins a stored deletion vector's storageType and pathOrInlineDv into one value to resolve: the
# value alone cannot tell them apart (Z85 has `/` and `:`, so a `u` id can look like a URI).
_TYPE_SEPARATOR = "\x1f"


def _stored_deletion_vectors(chunk: pa.StructArray, dv_fields: tuple[int, int, int]) -> pa.Array:
    """`<storageType>\x1f<pathOrInlineDv>` of visible deletion vectors stored in files (`u`, `p`);
    null on every other row."""
    dv_index, storage_index, path_index = dv_fields
    storage_type = pc.struct_field(chunk, [dv_index, storage_index])
    path_or_inline_dv = pc.struct_field(chunk, [dv_index, path_index])
    stored = pc.is_in(storage_type, pa.array([RELATIVE, ABSOLUTE], storage_type.type))
    typed = pc.binary_join_element_wise(storage_type.cast(pa.string()), path_or_inline_dv.cast(pa.string()),
                                        _TYPE_SEPARATOR)
    return pc.if_else(stored, typed, pa.scalar(None, pa.string()))


def _deletion_vector_rewrite(
    chunks: list[pa.StructArray], dv_fields: tuple[int, int, int], resolver: PathResolver
) -> _ValueRewrite:
    visible = [_stored_deletion_vectors(chunk, dv_fields) for chunk in chunks]
    return _value_rewrite(visible, pa.string(), lambda values: pa.array(
        _resolve_deletion_vectors(values.to_pylist(), resolver), pa.string()))


def _typed(value: str) -> tuple[str, str]:
    """(storageType, pathOrInlineDv) of a `_stored_deletion_vectors` value."""
    storage_type, _, path_or_inline_dv = value.partition(_TYPE_SEPARATOR)
    return storage_type, path_or_inline_dv


def _resolve_deletion_vectors(values: list[str], resolver: PathResolver) -> list[str | None]:
    """Each distinct stored descriptor's URI: the `u` ones in one lookup, `p` ones as paths."""
    typed = [_typed(v) for v in values]
    relative = [dv for storage_type, dv in typed if storage_type == RELATIVE]
    absolute = [dv for storage_type, dv in typed if storage_type == ABSOLUTE]
    uris = {(RELATIVE, dv): uri for dv, uri in zip(relative, resolver.resolve_deletion_vectors(relative))}
    uris.update({(ABSOLUTE, dv): uri for dv, uri in zip(absolute, resolver.resolve_many(absolute))})
    # an absolute path that stays as it is answers with the value itself: unchanged, not rewritten
    return [value if uris[key] == key[1] else uris[key] for value, key in zip(values, typed)]


def _rewrite_deletion_vectors(
    chunk: pa.StructArray, chunk_number: int, dv_fields: tuple[int, int, int], dvs: _ValueRewrite
) -> tuple[pa.StructArray, int]:
    """The chunk's deletionVector child with resolved `u` descriptors turned into `p` ones."""
    dv_index, storage_index, path_index = dv_fields
    deletion_vectors: pa.StructArray = chunk.field(dv_index)
    rewritten = dvs.changed_rows(chunk_number)
    storage_type = deletion_vectors.field(storage_index)
    replaced = {
        storage_index: pc.if_else(rewritten, pa.scalar(ABSOLUTE, storage_type.type), storage_type),
        path_index: pc.if_else(rewritten, dvs.targets_of(chunk_number).cast(deletion_vectors.field(path_index).type),
                               deletion_vectors.field(path_index)),
    }
    return _with_children(deletion_vectors, replaced), rewritten.true_count


def _with_children(struct: pa.StructArray, replaced: dict[int, pa.Array]) -> pa.StructArray:
    """`struct` with some children swapped, its type and null mask unchanged."""
    children = [replaced.get(index, struct.field(index)) for index in range(struct.type.num_fields)]
    mask = struct.is_null() if struct.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(struct.type), mask=mask)


# ------------------------------------------------------------- whole checkpoint files

# The leaves a checkpoint rewrite touches; every other column chunk is copied byte for byte.
CHECKPOINT_LEAVES = [f"{kind}.{leaf}" for kind in FILE_ACTIONS
                     for leaf in ("path", "deletionVector.storageType", "deletionVector.pathOrInlineDv")]
_SIDECAR_LEAVES = ["sidecar.path", "sidecar.sizeInBytes"]
_ROWS_PER_PASS = 262_144


def rewrite_checkpoint_file(file_name: str, raw: bytes, resolver: PathResolver,
                            sidecar_sizes: dict[str, int] | None = None) -> RewriteResult:
    """`rewrite_checkpoint_to` in memory: a file with nothing to rewrite comes back byte-identical."""
    sink = io.BytesIO()
    result = rewrite_checkpoint_to(file_name, BytesSource(raw), resolver, sink, sidecar_sizes)
    result.content = sink.getvalue() if result.changed else raw
    return result


def rewrite_checkpoint_to(file_name: str, source: ParquetSource, resolver: PathResolver, sink: BinaryIO,
                          sidecar_sizes: dict[str, int] | None = None) -> RewriteResult:
    """Rewrite a parquet checkpoint, checkpoint part or sidecar into `sink`, one row group at a
    time, keeping its exact physical schema.

    Only the column chunks of the path leaves (and of a V2 checkpoint's `sidecar` sizes) are
    re-encoded; see `parquet_splice`. When `changed` is False nothing needed rewriting: the source
    itself is the export's file (what `sink` received is not byte-identical to it).
    """
    files_rewritten = 0
    missing: list[str] = []

    def rewrite_row_group(group: pa.Table) -> pa.Table | None:
        nonlocal files_rewritten
        # Row groups are resolved up to _ROWS_PER_PASS rows together, a big one in slices: what one
        # resolution holds (its hash table, the addresses) stays bounded, and each resolution costs
        # one pass over the listing (a checkpoint in random path order: all of it). A checkpoint of
        # 1,000,000 adds in row groups of 65,536 was 16 passes of 0.15 s over a 1,000,000-file
        # listing, now 4.
        pieces = [rewrite_checkpoint(group.slice(start, _ROWS_PER_PASS), resolver)
                  for start in range(0, max(group.num_rows, 1), _ROWS_PER_PASS)]
        table = pa.concat_tables([piece for piece, _, _ in pieces]) if len(pieces) > 1 else pieces[0][0]
        count = sum(piece_count for _, piece_count, _ in pieces)
        files_rewritten += count
        missing.extend(path for _, _, lost in pieces for path in lost)
        table, resized = _resize_sidecars(table, sidecar_sizes) if sidecar_sizes is not None else (table, False)
        return table if count or resized else None

    leaves = CHECKPOINT_LEAVES + (_SIDECAR_LEAVES if sidecar_sizes is not None else [])
    changed = splice_leaves_to(source, file_name, leaves, rewrite_row_group, sink, rows_at_once=_ROWS_PER_PASS)
    return RewriteResult(b"", files_rewritten, list(dict.fromkeys(missing)), changed=changed)


def _resize_sidecars(checkpoint: pa.Table, sizes: dict[str, int]) -> tuple[pa.Table, bool]:
    """The `sidecar` column with each sidecar's size (and name) updated as in `_sidecar_update`."""
    if "sidecar" not in checkpoint.column_names:
        return checkpoint, False
    index = checkpoint.column_names.index("sidecar")
    sidecar_type: pa.StructType = checkpoint.schema.field(index).type
    rows = checkpoint.column(index).to_pylist()
    updates = [_sidecar_update(row, sizes) if row else {} for row in rows]
    if not any(updates):
        return checkpoint, False
    new_rows = [None if row is None else {**row, **{path[-1]: value for path, value in update.items()}}
                for row, update in zip(rows, updates)]
    column = pa.array(new_rows, type=sidecar_type)
    return checkpoint.set_column(index, checkpoint.schema.field(index), column), True
