"""Deletion vectors (PROTOCOL.md#deletion-vector-format): which rows of a data file are deleted.

A descriptor names a RoaringBitmapArray: inline (`i`, Z85 text in the log) or stored in a file
(`u` relative to the table, `p` absolute) at `offset`, framed as a big-endian size, the bitmap and
a CRC-32. The bitmap array is a little-endian magic number, a count of 32-bit bitmaps and each
one's key (the high 32 bits of the row index) followed by a portable Roaring bitmap.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyroaring import BitMap

from exporter.errors import CorruptLog, UnsupportedTable

MAGIC = 1681511377
INLINE, RELATIVE, ABSOLUTE = "i", "u", "p"  # PROTOCOL.md#deletion-vector-descriptor-schema storageType
STORED = (RELATIVE, ABSOLUTE)  # in a file, not in the log
# ZeroMQ Z85 (https://rfc.zeromq.org/spec/32/), the base85 of deletion vector descriptors.
_Z85_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {char: value for value, char in enumerate(_Z85_ALPHABET)}
_Z85_UUID_LENGTH = 20


def unique_id(descriptor: Mapping[str, Any] | None) -> str:
    """PROTOCOL.md#deletion-vector-descriptor-schema uniqueId; "" for a file without one. A logical
    file is (path, unique id): the same path with another vector is another file."""
    if not descriptor:
        return ""
    offset = descriptor.get("offset")
    suffix = "" if offset is None else f"@{offset}"
    return f"{descriptor.get('storageType', '')}{descriptor.get('pathOrInlineDv', '')}{suffix}"


def unique_ids(descriptors: pa.ChunkedArray) -> list[str]:
    """`unique_id` of a checkpoint's `add.deletionVector` column, in Arrow kernels."""
    names = {dv_field.name for dv_field in descriptors.type}
    storage = pc.struct_field(descriptors, "storageType")
    location = pc.struct_field(descriptors, "pathOrInlineDv")
    suffix = pa.scalar("")
    if "offset" in names:
        offset = pc.cast(pc.struct_field(descriptors, "offset"), pa.string())
        suffix = pc.fill_null(pc.binary_join_element_wise("@", offset, ""), "")
    return pc.fill_null(pc.binary_join_element_wise(storage, location, suffix, ""), "").to_pylist()


def file_of(storage_type: str, path_or_inline_dv: str) -> str:
    """The file a stored (`u`, `p`) deletion vector lives in: relative to the table, or absolute."""
    return path_or_inline_dv if storage_type == ABSOLUTE else relative_path(path_or_inline_dv)


def stored_file(descriptor: Mapping[str, Any] | None) -> str | None:
    """`file_of` a descriptor; None for an inline vector or none."""
    if descriptor and descriptor.get("storageType") in STORED:
        return file_of(descriptor["storageType"], descriptor["pathOrInlineDv"])
    return None


def relative_path(path_or_inline_dv: str) -> str:
    """The file, relative to the table root, of a deletion vector with storageType `u`.

    PROTOCOL.md#deletion-vector-descriptor-schema: `<random prefix><20-char Z85 UUID>` lives at
    `<random prefix>/deletion_vector_<uuid>.bin`.
    """
    if len(path_or_inline_dv) < _Z85_UUID_LENGTH:
        raise CorruptLog(
            f"deletion vector pathOrInlineDv {path_or_inline_dv!r} is shorter than a "
            f"{_Z85_UUID_LENGTH}-character Z85 UUID"
        )
    prefix = path_or_inline_dv[:-_Z85_UUID_LENGTH]
    dv_uuid = uuid.UUID(bytes=_z85_decode(path_or_inline_dv[-_Z85_UUID_LENGTH:], path_or_inline_dv))
    file_name = f"deletion_vector_{dv_uuid}.bin"
    return f"{prefix}/{file_name}" if prefix else file_name


def _z85_decode(encoded: str, descriptor: str) -> bytes:
    """Z85 to bytes: each 5 characters are one big-endian 32-bit word.

    Two writers' rules for a length that is not a multiple of 4 are read:
    - Delta's Base85Codec pads the bytes with zeros, and its decoder keeps a word's low 32 bits
      (`putInt(sum.toInt)`); the log's `sizeInBytes` then cuts the padding off.
    - The z85 crate (delta-rs, delta-kernel-rs) writes a last group of k `#` and 5 - k characters
      holding the 4 - k tail bytes (`decode_tail`). No full word starts with `#` (84 * 85^4 > 2^32 - 1),
      so such a last group is always a tail.
    """
    if len(encoded) % 5:
        raise CorruptLog(f"deletion vector {descriptor!r}: Z85 text length {len(encoded)} is not a multiple of 5")
    decoded = bytearray()
    for start in range(0, len(encoded), 5):
        group = encoded[start : start + 5]
        padding = len(group) - len(group.lstrip("#")) if start == len(encoded) - 5 else 0
        word = 0
        for char in group[padding:]:
            digit = _Z85_VALUE.get(char)
            if digit is None:
                raise CorruptLog(f"deletion vector {descriptor!r}: {char!r} is not a Z85 character")
            word = word * 85 + digit
        if padding >= 4 or (padding and word >= 256 ** (4 - padding)):
            raise CorruptLog(f"deletion vector {descriptor!r}: Z85 tail {group!r} holds more than {4 - padding} bytes")
        decoded += (word & 0xFFFFFFFF).to_bytes(4 - padding, "big")
    return bytes(decoded)


def deleted_rows(descriptor: Mapping[str, Any] | None, read_range: Callable[[str, int, int], bytes]) -> BitMap:
    """The row indexes a deletion vector deletes (empty without one). `read_range(file, start, end)`
    reads bytes of a stored vector's file: `file` is the `u` path relative to the table, or the
    `p` absolute path."""
    if not descriptor:
        return BitMap()
    storage, value = descriptor.get("storageType"), descriptor.get("pathOrInlineDv", "")
    size = int(descriptor.get("sizeInBytes") or 0)
    if storage == INLINE:
        payload = _z85_decode(value, value)[:size]
    elif storage in STORED:
        file = file_of(storage, value)
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
