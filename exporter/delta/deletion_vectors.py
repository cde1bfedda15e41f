"""Deletion vectors (PROTOCOL.md#deletion-vector-format): which rows of a data file are deleted.

A descriptor names a RoaringBitmapArray: inline (`i`, Z85 text in the log) or stored in a file
(`u` relative to the table, `p` absolute) at `offset`, framed as a big-endian size, the bitmap and
a CRC-32. The bitmap array is a little-endian magic number, a count of 32-bit bitmaps and each
one's key (the high 32 bits of the row index) followed by a portable Roaring bitmap.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from pyroaring import BitMap

from exporter.delta.paths import _z85_decode, deletion_vector_relative_path
from exporter.errors import CorruptLog, UnsupportedTable

MAGIC = 1681511377


def deleted_rows(descriptor: Mapping[str, Any] | None, read_range: Callable[[str, int, int], bytes]) -> BitMap:
    """The row indexes a deletion vector deletes (empty without one). `read_range(file, start, end)`
    reads bytes of a stored vector's file: `file` is the `u` path relative to the table, or the
    `p` absolute path."""
    if not descriptor:
        return BitMap()
    storage, value = descriptor.get("storageType"), descriptor.get("pathOrInlineDv", "")
    size = int(descriptor.get("sizeInBytes") or 0)
    if storage == "i":
        payload = _z85_decode(value, value)[:size]
    elif storage in ("u", "p"):
        file = deletion_vector_relative_path(value) if storage == "u" else value
        offset = int(descriptor.get("offset") or 1)
        framed = read_range(file, offset, offset + 4 + size)
        (stored_size,) = struct.unpack(">i", framed[:4])
        if stored_size != size:
            raise CorruptLog(f"deletion vector in {file} at {offset}: {stored_size} bytes where the log says {size}")
        payload = framed[4:]
    else:
        raise CorruptLog(f"deletion vector storage type {storage!r} is not i, u or p")
    return parse_bitmap_array(payload, value)


def parse_bitmap_array(payload: bytes, where: str) -> BitMap:
    if len(payload) < 12 or struct.unpack("<i", payload[:4])[0] != MAGIC:
        raise CorruptLog(f"deletion vector {where!r}: not a RoaringBitmapArray (bad magic number)")
    (count,) = struct.unpack("<q", payload[4:12])
    if count == 0:
        return BitMap()
    (key,) = struct.unpack("<i", payload[12:16])
    if count > 1 or key != 0:  # row indexes past 2^32 in one data file
        raise UnsupportedTable(f"deletion vector {where!r} deletes rows past index 2^32 in one file")
    try:
        return BitMap.deserialize(payload[16:])
    except Exception as exc:  # pyroaring raises ValueError and others for a broken bitmap
        raise CorruptLog(f"deletion vector {where!r}: not a portable Roaring bitmap: {exc}") from None
