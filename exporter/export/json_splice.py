"""Editing one JSON value in a line of JSON text and keeping every other byte: numbers such as `1.10`
and `1e400`, big integers, duplicate keys and spacing survive as the writer wrote them.
"""

import json
import re
from typing import Any

from exporter.errors import CorruptLog

# Splicing new values into a JSON line: each object's members are found with the C scanner of
# `json` (one value at a time), so the bytes between them are never touched.
_DECODER = json.JSONDecoder()
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def splice_json(line: bytes, replacements: dict[tuple[str, ...], Any]) -> bytes:
    """`line` with the value at each key path replaced by the JSON encoding of its new value.

    With duplicate keys, the last one is replaced: the one `json.loads` (and so this exporter) reads.
    """
    text = line.decode("utf-8")
    spans = sorted(((*_value_span(text, path), value) for path, value in replacements.items()), reverse=True)
    for start, end, value in spans:
        text = text[:start] + json.dumps(value) + text[end:]
    return text.encode("utf-8")


def add_member(line: bytes, key_path: tuple[str, ...], name: str, value: Any) -> bytes:
    """`line` with `"name": value` added last to the object at `key_path`; every other byte kept."""
    text = line.decode("utf-8")
    start, end = _value_span(text, key_path)
    if text[start:start + 1] != "{":
        raise CorruptLog(f"expected a JSON object at {'.'.join(key_path)!r}")
    empty = not text[start + 1:end - 1].strip()
    member = ("" if empty else ",") + json.dumps(name) + ":" + json.dumps(value, separators=(",", ":"))
    return (text[:end - 1] + member + text[end - 1:]).encode("utf-8")


def _value_span(text: str, key_path: tuple[str, ...]) -> tuple[int, int]:
    start = _WHITESPACE.match(text, 0).end()
    end = len(text)
    for key in key_path:
        if text[start:start + 1] != "{":
            raise CorruptLog(f"expected a JSON object holding {'.'.join(key_path)!r}")
        spans = [(value_start, value_end) for name, value_start, value_end in _members(text, start) if name == key]
        if not spans:
            raise CorruptLog(f"no {'.'.join(key_path)!r} in the action")
        start, end = spans[-1]
    return start, end


def _members(text: str, start: int) -> list[tuple[str, int, int]]:
    """(key, value start, value end) of each member of the object at text[start] == '{'."""
    members = []
    position = _WHITESPACE.match(text, start + 1).end()
    if text[position:position + 1] == "}":
        return members
    while True:
        key, position = _DECODER.raw_decode(text, position)
        position = _WHITESPACE.match(text, position).end()
        if text[position:position + 1] != ":":
            raise CorruptLog("malformed JSON object")
        value_start = _WHITESPACE.match(text, position + 1).end()
        _, value_end = _DECODER.raw_decode(text, value_start)
        members.append((key, value_start, value_end))
        position = _WHITESPACE.match(text, value_end).end()
        separator = text[position:position + 1]
        position = _WHITESPACE.match(text, position + 1).end()
        if separator == "}":
            return members
        if separator != ",":
            raise CorruptLog("malformed JSON object")
