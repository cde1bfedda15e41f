"""JSON text of Arrow columns, a batch at a time: each value as `json`'s compact encoder writes it
(`ensure_ascii`, as `lines._COMPACT` does) once `_plain` has read it back, so an answer line built
from columns is the bytes of the line built from its dict. Strings are escaped column-wide (`\\`
and `"` replaced; a value with a control or non-ASCII character escaped by `json` itself), maps
are objects, structs objects without their null fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.delta.live_files import _DERIVED, _MAPS
from exporter.storage.presign import string_bytes

_string = json.encoder.encode_basestring_ascii
_PLAIN = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')  # the bytes `_string` writes as they are
_NULL = pa.scalar(None, pa.string())


class NotColumnar(Exception):
    """A column this module cannot write as `json` would (a float, a list, a map with a key twice,
    ...): the caller encodes those rows' dicts instead."""


def join(*parts: pa.Array | str) -> pa.Array:
    """The parts end to end (columns and constants), null where a column is."""
    return pc.binary_join_element_wise(*parts, "")


def strings(column: pa.Array) -> pa.Array:
    """Each string as a JSON string (quoted, escaped as `_string` escapes it); null stays null."""
    column = column.cast(pa.string())
    special = string_bytes(column).translate(None, _PLAIN)
    text = column
    if b"\\" in special:
        text = pc.replace_substring(text, "\\", "\\\\")
    if b'"' in special:
        text = pc.replace_substring(text, '"', '\\"')
    if special.translate(None, b'"\\'):  # control characters or non-ASCII: `json`'s escapes, value by value
        rare = pc.fill_null(pc.match_substring_regex(column, r"[^\x20-\x7e]"), False)
        escaped = [_string(value)[1:-1] for value in column.filter(rare).to_pylist()]
        text = pc.replace_with_mask(text, rare, pa.array(escaped, pa.string()))
    return join('"', text, '"')


def values(column: pa.Array, name: str) -> pa.Array:
    """Each value of the field `name` as JSON text (null where null)."""
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return strings(column)
    if pa.types.is_integer(kind):
        return pc.cast(column, pa.string())
    if pa.types.is_boolean(kind):
        return pc.if_else(column, "true", "false")
    if pa.types.is_null(kind):
        return pa.nulls(len(column), pa.string())
    if pa.types.is_map(kind) and name in _MAPS:  # `_plain` makes these objects; other maps stay lists
        return map_objects(column)
    if pa.types.is_struct(kind):
        return objects(column)
    raise NotColumnar(f"field {name!r} of type {kind}")


def objects(column: pa.StructArray, replaced: Mapping[str, pa.Array] | None = None) -> pa.Array:
    """Each struct as a JSON object of its fields in order, null fields left out (`_plain`); the
    JSON text of a field in `replaced` instead of its own. Null where the struct is null."""
    replaced = replaced or {}
    pieces: list[pa.Array | str] = []  # of one join: a field always there as its name and its column
    cut = False
    for index, field in enumerate(column.type):
        if field.name in _DERIVED:
            continue
        text = replaced[field.name] if field.name in replaced else values(column.field(index), field.name)
        if not pieces:  # a first field every row has needs no comma to cut after the join
            cut = text.null_count > 0
        name = ("," if pieces or cut else "") + _string(field.name) + ":"
        pieces += [join(name, text)] if text.null_count else [name, text]
    if not pieces:
        return pa.repeat(pa.scalar("{}"), len(column))
    if cut:
        joined = pc.binary_join_element_wise(*pieces, "", null_handling="replace", null_replacement="")
        text = join("{", pc.utf8_slice_codeunits(joined, 1), "}")
    else:
        text = pc.binary_join_element_wise("{", *pieces, "}", "", null_handling="replace", null_replacement="")
    return pc.if_else(column.is_valid(), text, _NULL) if column.null_count else text


def map_objects(column: pa.MapArray) -> pa.Array:
    """Each map as a JSON object, its entries in order (`dict(entries)`); null where null."""
    kind = column.type
    if not (pa.types.is_map(kind) and pa.types.is_string(kind.key_type) and pa.types.is_string(kind.item_type)):
        raise NotColumnar(f"a map of {column.type}")
    offsets = column.offsets.to_numpy()
    start, end = int(offsets[0]), int(offsets[-1])
    keys = column.keys.slice(start, end - start)
    entries = join(strings(keys), ":", pc.fill_null(strings(column.items.slice(start, end - start)), "null"))
    rebased = pa.array(offsets - start, pa.int32())
    mask = column.is_null() if column.null_count else None
    if len(column) and int(np.max(np.diff(offsets))) > 1:
        _no_key_twice(pa.ListArray.from_arrays(rebased, keys))
    return join("{", pc.binary_join(pa.ListArray.from_arrays(rebased, entries, mask=mask), ","), "}")


def _no_key_twice(keys: pa.ListArray) -> None:
    """`dict(entries)` keeps one value of a key: a map naming one twice is encoded from its dict.
    Maps of a table name the same keys row after row: each distinct list is checked once."""
    for names in pc.unique(pc.binary_join(keys, "\0")).to_pylist():
        if names is not None and len(set(names.split("\0"))) != names.count("\0") + 1:
            raise NotColumnar("a map with a key twice")
