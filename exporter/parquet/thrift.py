"""Thrift's compact protocol, generically: enough to read and rewrite a Parquet footer.

Parquet's `FileMetaData` is a compact-protocol Thrift struct (parquet-format `parquet.thrift`). A
struct is decoded to its fields in order, with their wire types, so that fields this module does not
know (newer parquet-format versions) are written back exactly as they came.
Spec: https://github.com/apache/thrift/blob/master/doc/specs/thrift-compact-protocol.md
"""

from __future__ import annotations

import struct as _struct
from dataclasses import dataclass, field
from typing import Any

from exporter.errors import CorruptLog

BOOL_TRUE, BOOL_FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT, UUID = range(1, 14)
_INTEGERS = (I16, I32, I64)


@dataclass
class ThriftList:
    element_type: int
    items: list[Any]


@dataclass
class ThriftMap:
    key_type: int
    value_type: int
    items: list[tuple[Any, Any]]


@dataclass
class ThriftStruct:
    """Fields in wire order: (field id, wire type, value). Booleans carry BOOL_TRUE as their type."""

    fields: list[tuple[int, int, Any]] = field(default_factory=list)

    def get(self, field_id: int, default: Any = None) -> Any:
        for fid, _, value in self.fields:
            if fid == field_id:
                return value
        return default

    def set(self, field_id: int, wire_type: int, value: Any) -> None:
        """Replace the field's value in place, or add it keeping ids ascending."""
        for index, (fid, _, _) in enumerate(self.fields):
            if fid == field_id:
                self.fields[index] = (field_id, wire_type, value)
                return
        self.fields.append((field_id, wire_type, value))
        self.fields.sort(key=lambda f: f[0])

    def drop(self, *field_ids: int) -> None:
        self.fields = [f for f in self.fields if f[0] not in field_ids]


# ------------------------------------------------------------------------------------ decoding


class _Reader:
    def __init__(self, buffer: bytes):
        self.buffer = memoryview(buffer)
        self.position = 0

    def byte(self) -> int:
        if self.position >= len(self.buffer):
            raise CorruptLog("parquet footer ends inside a Thrift value")
        value = self.buffer[self.position]
        self.position += 1
        return value

    def varint(self) -> int:
        shift = result = 0
        while True:
            byte = self.byte()
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise CorruptLog("parquet footer holds a varint longer than 10 bytes")

    def zigzag(self) -> int:
        value = self.varint()
        return (value >> 1) ^ -(value & 1)

    def raw(self, length: int) -> bytes:
        if length < 0 or self.position + length > len(self.buffer):
            raise CorruptLog("parquet footer ends inside a Thrift binary value")
        value = bytes(self.buffer[self.position:self.position + length])
        self.position += length
        return value

    def value(self, wire_type: int) -> Any:
        if wire_type in (BOOL_TRUE, BOOL_FALSE):
            return self.byte() == BOOL_TRUE  # inside a collection: one byte per value
        if wire_type == BYTE:
            byte = self.byte()
            return byte - 256 if byte > 127 else byte
        if wire_type in _INTEGERS:
            return self.zigzag()
        if wire_type == DOUBLE:
            return _struct.unpack("<d", self.raw(8))[0]
        if wire_type == BINARY:
            return self.raw(self.varint())
        if wire_type == UUID:
            return self.raw(16)
        if wire_type in (LIST, SET):
            header = self.byte()
            size, element_type = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            return ThriftList(element_type, [self.value(element_type) for _ in range(size)])
        if wire_type == MAP:
            size = self.varint()
            if size == 0:
                return ThriftMap(0, 0, [])
            types = self.byte()
            key_type, value_type = types >> 4, types & 0x0F
            return ThriftMap(key_type, value_type, [(self.value(key_type), self.value(value_type)) for _ in range(size)])
        if wire_type == STRUCT:
            return self.struct()
        raise CorruptLog(f"parquet footer holds an unknown Thrift type {wire_type}")

    def struct(self) -> ThriftStruct:
        decoded = ThriftStruct()
        last_id = 0
        while True:
            header = self.byte()
            if header == 0:  # STOP
                return decoded
            delta, wire_type = header >> 4, header & 0x0F
            field_id = last_id + delta if delta else self.zigzag()
            if wire_type in (BOOL_TRUE, BOOL_FALSE):
                value = wire_type == BOOL_TRUE
            else:
                value = self.value(wire_type)
            decoded.fields.append((field_id, wire_type, value))
            last_id = field_id


def decode_struct(buffer: bytes) -> ThriftStruct:
    return _Reader(buffer).struct()


# ------------------------------------------------------------------------------------ encoding


def _varint(value: int, out: bytearray) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _zigzag(value: int, out: bytearray) -> None:
    _varint((value << 1) ^ (value >> 63), out)


def _encode_value(wire_type: int, value: Any, out: bytearray) -> None:
    if wire_type in (BOOL_TRUE, BOOL_FALSE):
        out.append(BOOL_TRUE if value else BOOL_FALSE)
    elif wire_type == BYTE:
        out.append(value & 0xFF)
    elif wire_type in _INTEGERS:
        _zigzag(value, out)
    elif wire_type == DOUBLE:
        out += _struct.pack("<d", value)
    elif wire_type == BINARY:
        _varint(len(value), out)
        out += value
    elif wire_type == UUID:
        out += value
    elif wire_type in (LIST, SET):
        size = len(value.items)
        if size < 15:
            out.append((size << 4) | value.element_type)
        else:
            out.append(0xF0 | value.element_type)
            _varint(size, out)
        for item in value.items:
            _encode_value(value.element_type, item, out)
    elif wire_type == MAP:
        _varint(len(value.items), out)
        if value.items:
            out.append((value.key_type << 4) | value.value_type)
            for key, item in value.items:
                _encode_value(value.key_type, key, out)
                _encode_value(value.value_type, item, out)
    elif wire_type == STRUCT:
        _encode_struct(value, out)
    else:
        raise ValueError(f"unknown Thrift type {wire_type}")


def _encode_struct(value: ThriftStruct, out: bytearray) -> None:
    last_id = 0
    for field_id, wire_type, item in value.fields:
        header_type = (BOOL_TRUE if item else BOOL_FALSE) if wire_type in (BOOL_TRUE, BOOL_FALSE) else wire_type
        delta = field_id - last_id
        if 0 < delta <= 15:
            out.append((delta << 4) | header_type)
        else:
            out.append(header_type)
            _zigzag(field_id, out)
        if wire_type not in (BOOL_TRUE, BOOL_FALSE):
            _encode_value(wire_type, item, out)
        last_id = field_id
    out.append(0)


def encode_struct(value: ThriftStruct) -> bytes:
    out = bytearray()
    _encode_struct(value, out)
    return bytes(out)
