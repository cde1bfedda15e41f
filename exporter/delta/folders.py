"""The folders a table's files live in: every folder, relative to the table root, that holds a file
its log names (add, remove and cdc files, deletion vectors stored beside the table).

A prefix policy can refuse part of a table (a partition's folder, `region=eu/`); what hands out a
table's files or rows must ask about each folder they come from, and these are those folders.
Only relative paths name objects of the table (PROTOCOL.md#add-file-and-remove-file); an absolute
path names an object by its address, outside the repository's paths, and has no folder here.
Checkpoints are read column by column, one row group at a time, distinct folders kept, so memory
follows the folders, not the files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from exporter.delta.deletion_vectors import RELATIVE, relative_path
from exporter.delta.paths import absolute_column, is_absolute, log_path_to_key
from exporter.delta.replay import checkpoint_row_groups
from exporter.parquet.splice import ParquetSource

FILE_ACTIONS = ("add", "remove", "cdc")
_VECTOR_FIELDS = ("storageType", "pathOrInlineDv")
_COLUMNS = [f"{kind}.path" for kind in FILE_ACTIONS] + \
    [f"{kind}.deletionVector.{name}" for kind in ("add", "remove") for name in _VECTOR_FIELDS]
_FOLDER = r"^(?P<folder>.*)/[^/]*$"  # everything before a path's last `/`


def file_folders(checkpoint: Iterable[tuple[str, ParquetSource]], actions: Iterable[Mapping[str, Any]]) -> set[str]:
    """The folders (relative to the table root, "" for the root itself, never ending in `/`) of the
    files the checkpoint's parquet parts and the `actions` (JSON checkpoint parts, commits) name."""
    folders: set[str] = set()
    for name, source in checkpoint:
        for row_group in checkpoint_row_groups(name, source, _COLUMNS):
            for kind in row_group.column_names:
                column = row_group.column(kind)
                column = column.filter(column.is_valid())
                if not len(column):
                    continue
                fields = {child.name for child in column.type}
                if "path" in fields:
                    folders |= _path_folders(pc.struct_field(column, "path"))
                if "deletionVector" in fields:
                    folders |= _vector_folders(pc.struct_field(column, "deletionVector"))
    for action in actions:
        for kind in FILE_ACTIONS:
            file_action = action.get(kind)
            if not isinstance(file_action, Mapping):
                continue
            path = file_action.get("path")
            if isinstance(path, str) and path and not is_absolute(path):
                folders.add(folder_of(log_path_to_key(path)))
            vector = file_action.get("deletionVector")
            if isinstance(vector, Mapping) and vector.get("storageType") == RELATIVE:
                folders.add(folder_of(relative_path(str(vector.get("pathOrInlineDv", "")))))
    return folders


def folder_of(key: str) -> str:
    """The folder of a table-relative object key ("" at the root)."""
    return key.rpartition("/")[0]


def _path_folders(paths: pa.ChunkedArray) -> set[str]:
    """The folders of a column of log paths, absolute ones left out: computed on the column; a path
    with an escape is decoded one by one (its last `/` may be encoded)."""
    paths = paths.filter(pc.fill_null(pc.invert(absolute_column(paths)), False))
    escaped = pc.fill_null(pc.match_substring(paths, "%"), False)
    plain = paths.filter(pc.invert(escaped))
    found = pc.struct_field(pc.extract_regex(plain, _FOLDER), "folder")
    folders = {folder or "" for folder in pc.unique(pc.fill_null(found, "")).to_pylist()}
    folders |= {folder_of(log_path_to_key(path)) for path in pc.unique(paths.filter(escaped)).to_pylist()}
    return folders


def _vector_folders(vectors: pa.ChunkedArray) -> set[str]:
    """The folders of a column of deletion-vector descriptors stored beside the table (`u`)."""
    if {child.name for child in vectors.type} < set(_VECTOR_FIELDS):
        return set()
    stored = pc.fill_null(pc.equal(pc.struct_field(vectors, "storageType"), RELATIVE), False)
    locations = pc.unique(pc.struct_field(vectors, "pathOrInlineDv").filter(stored)).to_pylist()
    return {folder_of(relative_path(location)) for location in locations if location is not None}
