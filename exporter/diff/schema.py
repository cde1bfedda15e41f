"""Column changes between two schemas of a Delta table: added, dropped, renamed, retyped, nested."""

import json
from collections.abc import Mapping
from typing import Any

from exporter.delta.columns import matched_by_id, paired_fields
from exporter.delta.replay import TableState


def schema_changes(left: TableState | None, right: TableState | None) -> list[dict]:
    """Column changes from left's schema to right's, nested struct fields as dotted paths.

    Fields are matched by their identity (`exporter.delta.columns`: the column-mapping id when both sides
    are column-mapped, so a rename is a rename; otherwise the name). Array elements and map
    keys/values are followed as `column.element`, `column.key`, `column.value`.
    """
    by_id = matched_by_id(left.properties if left else None, right.properties if right else None)
    left_fields = (left.schema if left else {}).get("fields") or []
    right_fields = (right.schema if right else {}).get("fields") or []
    return _field_changes(left_fields, right_fields, "", "", by_id)


def _field_changes(left_fields: list, right_fields: list, left_prefix: str, right_prefix: str, by_id: bool) -> list:
    changes: list[dict] = []
    for left_field, right_field in paired_fields(left_fields, right_fields, by_id):
        if right_field is None:
            changes.append(
                _change("removed", _join(left_prefix, left_field["name"]), _type_name(left_field["type"]), None)
            )
            continue
        right_path = _join(right_prefix, right_field["name"])
        if left_field is None:
            changes.append(_change("added", right_path, None, _type_name(right_field["type"])))
            continue
        left_path = _join(left_prefix, left_field["name"])
        if left_field["name"] != right_field["name"]:
            changes.append(_change("renamed", right_path, left_path, right_path))
        if bool(left_field.get("nullable", True)) != bool(right_field.get("nullable", True)):
            changes.append(
                _change("nullability_changed", right_path, left_field.get("nullable"), right_field.get("nullable"))
            )
        changes.extend(_type_changes(left_field["type"], right_field["type"], left_path, right_path, by_id))
    return changes


def _type_changes(left_type: Any, right_type: Any, left_path: str, right_path: str, by_id: bool) -> list[dict]:
    left_kind, right_kind = _kind(left_type), _kind(right_type)
    if left_kind == right_kind == "struct":
        left_fields, right_fields = left_type.get("fields") or [], right_type.get("fields") or []
        return _field_changes(left_fields, right_fields, left_path, right_path, by_id)
    if left_kind == right_kind == "array":
        return _nested_changes(left_type, right_type, left_path, right_path, by_id, _ARRAY_ELEMENT)
    if left_kind == right_kind == "map":
        key_changes = _type_changes(
            left_type["keyType"], right_type["keyType"], f"{left_path}.key", f"{right_path}.key", by_id
        )
        return key_changes + _nested_changes(left_type, right_type, left_path, right_path, by_id, _MAP_VALUE)
    if _type_name(left_type) != _type_name(right_type):
        return [_change("type_changed", right_path, _type_name(left_type), _type_name(right_type))]
    return []


# (path part, type key, nullability key) of what an array or a map holds (PROTOCOL.md#schema-serialization-format)
_ARRAY_ELEMENT = ("element", "elementType", "containsNull")
_MAP_VALUE = ("value", "valueType", "valueContainsNull")


def _nested_changes(
    left_type: Mapping, right_type: Mapping, left_path: str, right_path: str, by_id: bool, names: tuple[str, str, str]
) -> list[dict]:
    """Changes inside an array element or a map value: `column.element` / `column.value`."""
    part, type_key, nullable_key = names
    changes = []
    left_nullable, right_nullable = left_type.get(nullable_key, True), right_type.get(nullable_key, True)
    if bool(left_nullable) != bool(right_nullable):
        changes.append(_change("nullability_changed", f"{right_path}.{part}", left_nullable, right_nullable))
    changes.extend(
        _type_changes(left_type[type_key], right_type[type_key], f"{left_path}.{part}", f"{right_path}.{part}", by_id)
    )
    return changes


def _kind(data_type: Any) -> str:
    return data_type.get("type", "") if isinstance(data_type, Mapping) else "primitive"


def _type_name(data_type: Any) -> str:
    """A primitive's own name; `struct`, `array<...>`, `map<...,...>` for nested types."""
    if isinstance(data_type, str):
        return data_type
    kind = _kind(data_type)
    if kind == "array":
        return f"array<{_type_name(data_type.get('elementType'))}>"
    if kind == "map":
        return f"map<{_type_name(data_type.get('keyType'))},{_type_name(data_type.get('valueType'))}>"
    if kind == "struct":
        return "struct"  # its fields are compared one by one
    return json.dumps(data_type, sort_keys=True)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _change(change: str, column: str, left: Any, right: Any) -> dict:
    return {"change": change, "column": column, "left": left, "right": right}


# ---------------------------------------------------------------- paging
