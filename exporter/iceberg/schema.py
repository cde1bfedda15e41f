"""A Delta schema (PROTOCOL.md#schema-serialization-format) as an Iceberg schema (spec.md#schemas):
field ids, types, nullability, and the name mapping readers use for files without field ids.

Field ids: under column mapping (`name` or `id`) a struct field is its `delta.columnMapping.id`,
which the data files carry (PROTOCOL.md#column-mapping); list elements and map keys/values take
`delta.columnMapping.nested.ids` when the table has them (IcebergCompatV2). Every other id is
assigned here and kept across versions by the field's identity, so a column keeps its id. The name
mapping (`schema.name-mapping.default`) names each id as the data files name the column: its
physical name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.delta.columns import physical_name
from exporter.errors import IcebergUnsupported

NAME_MAPPING = "schema.name-mapping.default"  # spec.md#column-projection: name mapping property
_MAPPING_MODE = "delta.columnMapping.mode"
_MAPPING_ID = "delta.columnMapping.id"
_NESTED_IDS = "delta.columnMapping.nested.ids"
_MAX_COLUMN_ID = "delta.columnMapping.maxColumnId"
_TYPE_CHANGES = "delta.typeChanges"
_COLLATIONS = "__COLLATIONS"  # string columns compared by a collation: their stats are not byte order
# Under column mapping Delta allocates the next struct field id as its maxColumnId + 1: ids this module
# assigns (elements, keys, values without nested ids) live far above, so they never meet.
_ASSIGNED_BASE = 1 << 30

_PRIMITIVES = {
    "byte": "int", "short": "int", "integer": "int", "long": "long", "float": "float", "double": "double",
    "boolean": "boolean", "string": "string", "binary": "binary", "date": "date",
    "timestamp": "timestamptz",  # Delta `timestamp` is an instant, stored adjusted to UTC
    "timestamp_ntz": "timestamp",
}
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
# spec.md#schema-evolution: the type promotions a reader applies to older files
_PROMOTIONS = {("int", "long"), ("float", "double")}
_FEATURE_OF_TYPE = {"variant": "variantType", "void": "none (a NullType column)", "null": "none (a NullType column)"}

# Columns Delta Spark's change data feed writes into data files beside the table's (the change type,
# null there, and its CDC partition flag, false), without field ids: no table column, so each is
# named in the name mapping with an id no field has (just below spec.md#reserved-field-ids), which
# readers projecting by field id leave out; PyIceberg refuses a file column the mapping does not name.
_CDF_FILE_COLUMNS = {"_change_type": 2**31 - 1 - 201, "__is_cdc": 2**31 - 1 - 202}

FieldKey = tuple  # a field's identity across versions: its id under column mapping, else its path of names


@dataclass(frozen=True)
class Column:
    """A top-level column of the data files: what partition values and stats are keyed by."""

    name: str
    physical_name: str
    field_id: int
    delta_type: Any  # the Delta type: a string for primitives, a dict for struct/array/map
    ordered_like_bytes: bool = True  # False for collated strings: their min/max are not byte order


@dataclass
class TableSchema:
    fields: list[dict]  # the Iceberg struct's fields
    columns: list[Column]
    name_mapping: list[dict]
    field_ids: dict[FieldKey, int]  # every field's id by identity, for the next version's schema
    last_column_id: int

    def document(self, schema_id: int) -> dict:
        return {"type": "struct", "schema-id": schema_id, "fields": self.fields}

    def column(self, name: str) -> Column:
        """The top-level column by logical name (as `partitionColumns` names it)."""
        for column in self.columns:
            if column.name == name:
                return column
        raise IcebergUnsupported(f"partition column {name!r} is not a column of the table schema")


@dataclass
class _Ids:
    mapped: bool
    known: dict[FieldKey, int]
    next_id: int
    used: dict[FieldKey, int] = field(default_factory=dict)

    def of(self, key: FieldKey, given: int | None = None) -> int:
        if given is None:
            given = self.known.get(key)
        if given is None:
            given, self.next_id = self.next_id, self.next_id + 1
        self.used[key] = given
        return given


def iceberg_schema(metadata: Mapping[str, Any], previous: Mapping[FieldKey, int] | None = None,
                   last_column_id: int = 0) -> TableSchema:
    """The Iceberg schema of a Delta `metaData` action; `previous` is the former version's
    `field_ids` (ids stay with their fields), `last_column_id` the highest id ever assigned."""
    delta_schema = _parse(metadata.get("schemaString"))
    configuration = metadata.get("configuration") or {}
    mapped = configuration.get(_MAPPING_MODE) in ("name", "id")
    known = dict(previous or {})
    floor = max([last_column_id, *known.values()], default=0)
    if mapped:  # assigned ids start above every id Delta has handed out or will soon hand out
        floor = max(floor, _ASSIGNED_BASE - 1, int(configuration.get(_MAX_COLUMN_ID) or 0))
    ids = _Ids(mapped, known, floor + 1)
    fields, mapping = _struct_fields(delta_schema.get("fields") or [], (), ids, "")
    named = {name for entry in mapping for name in entry["names"]}
    mapping += [{"field-id": field_id, "names": [name]} for name, field_id in _CDF_FILE_COLUMNS.items()
                if name not in named]
    columns = [Column(name=f["name"], physical_name=physical_name(f), field_id=iceberg["id"], delta_type=f["type"],
                      ordered_like_bytes=_COLLATIONS not in (f.get("metadata") or {}))
               for f, iceberg in zip(delta_schema.get("fields") or [], fields)]
    return TableSchema(fields, columns, mapping, ids.used, max([floor, *ids.used.values()]))


def name_mapping_json(schema: TableSchema, previous: str | None = None) -> str:
    """The table's name mapping: the schema's, and every field of the `previous` mapping (its JSON)
    the schema no longer has, so the data files of older snapshots (a dropped column, a branch moved
    back past one) still resolve by name. A name the schema gives another field is the schema's."""
    return json.dumps(_merged(schema.name_mapping, json.loads(previous) if previous else []), separators=(",", ":"))


def _merged(current: list[dict], previous: list[dict]) -> list[dict]:
    by_id = {_mapped(entry): entry for entry in current}
    names = {name for entry in current for name in entry["names"]}
    merged = []
    for entry in current:
        earlier = next((e for e in previous if _mapped(e) == _mapped(entry)), None)
        if earlier is not None and (entry.get("fields") or earlier.get("fields")):
            entry = {**entry, "fields": _merged(entry.get("fields") or [], earlier.get("fields") or [])}
        merged.append(entry)
    for entry in previous:
        kept = [name for name in entry.get("names", []) if name not in names]
        if _mapped(entry) not in by_id and kept:
            merged.append({**entry, "names": kept})
    return merged


def _mapped(entry: dict) -> int | tuple[str, ...]:
    """What names a mapping entry across versions: its field id, or, for a map's repeated group
    (which has none: `_type`), its names."""
    return entry["field-id"] if "field-id" in entry else tuple(entry.get("names", ()))


def field_ids_of(fields: list[dict], mapped: bool) -> dict[FieldKey, int]:
    """`TableSchema.field_ids` read back from an Iceberg schema this module wrote (an append
    continues a table): struct fields by identity, elements/keys/values under their parent."""
    known: dict[FieldKey, int] = {}

    def visit(iceberg_type: Any, key: FieldKey) -> None:
        if not isinstance(iceberg_type, dict):
            return
        if iceberg_type["type"] == "struct":
            for child in iceberg_type["fields"]:
                child_key = _struct_field_key(key, child["name"], child["id"] if mapped else None)
                known[child_key] = child["id"]
                visit(child["type"], child_key)
        elif iceberg_type["type"] == "list":
            known[key + ("element",)] = iceberg_type["element-id"]
            visit(iceberg_type["element"], key + ("element",))
        elif iceberg_type["type"] == "map":
            for part in ("key", "value"):
                known[key + (part,)] = iceberg_type[f"{part}-id"]
                visit(iceberg_type[part], key + (part,))

    visit({"type": "struct", "fields": fields}, ())
    return known


def _struct_field_key(parent: FieldKey, name: str, mapping_id: int | None) -> FieldKey:
    """A struct field's identity: its column-mapping id (a rename keeps it), else its path of names."""
    return ("id", mapping_id) if mapping_id is not None else parent + (name,)


def _parse(schema_string: Any) -> dict:
    try:
        schema = json.loads(schema_string or "")
    except ValueError as error:
        raise IcebergUnsupported(f"metaData.schemaString is not valid JSON ({error})") from error
    if not isinstance(schema, dict) or schema.get("type") != "struct":
        raise IcebergUnsupported("metaData.schemaString is not a struct type")
    return schema


def _struct_fields(delta_fields: list[dict], parent: FieldKey, ids: _Ids, path: str) -> tuple[list[dict], list[dict]]:
    fields, mapping = [], []
    for delta_field in delta_fields:
        name = delta_field["name"]
        column = f"{path}.{name}" if path else name
        metadata = delta_field.get("metadata") or {}
        given = metadata.get(_MAPPING_ID) if ids.mapped else None
        if ids.mapped and given is None:
            raise IcebergUnsupported(f"column {column!r} has no {_MAPPING_ID} though the table uses column mapping")
        key = _struct_field_key(parent, name, given)
        field_id = ids.of(key, given)
        nested = {**(metadata.get(_NESTED_IDS) or {})} if ids.mapped else {}
        iceberg_type, children = _type(delta_field["type"], _At(key, column, physical_name(delta_field)),
                                       _Within(ids, nested, metadata.get(_TYPE_CHANGES) or []))
        iceberg_field = {"id": field_id, "name": name, "required": not delta_field.get("nullable", True),
                         "type": iceberg_type}
        if isinstance(metadata.get("comment"), str):
            iceberg_field["doc"] = metadata["comment"]
        fields.append(iceberg_field)
        # data files name a column by its physical name (the logical one without column mapping)
        entry = {"field-id": field_id, "names": [physical_name(delta_field)]}
        if children:
            entry["fields"] = children
        mapping.append(entry)
    return fields, mapping


@dataclass(frozen=True)
class _At:
    """Where a type is within a struct field: its field key, its column name (for messages), its path
    among the field's nested ids (`_NESTED_IDS`) and below the field (type changes name it)."""

    key: FieldKey
    column: str
    nested_path: str
    field_path: str = ""

    def child(self, part: str) -> _At:
        return _At(self.key + (part,), f"{self.column}.{part}", f"{self.nested_path}.{part}",
                   _join(self.field_path, part))


@dataclass(frozen=True)
class _Within:
    """What holds for every type within one struct field: the ids, its nested ids, its type changes."""

    ids: _Ids
    nested: dict
    type_changes: list


def _type(delta_type: Any, at: _At, within: _Within) -> tuple[Any, list[dict]]:
    """(Iceberg type, name-mapping children) of a Delta type."""
    ids, column = within.ids, at.column
    if isinstance(delta_type, str):
        return _primitive(delta_type, column, within.type_changes, at.field_path), []
    kind = delta_type.get("type")
    if kind == "struct":
        fields, mapping = _struct_fields(delta_type.get("fields") or [], at.key, ids, column)
        return {"type": "struct", "fields": fields}, mapping
    if kind in ("array", "map") and ids.mapped and not within.nested:
        # The data files carry ids on the struct fields but none inside the array or map (Spark and
        # delta-rs alike), and no Iceberg metadata makes DuckDB 1.4 read those children: its iceberg
        # scan maps by field id only (duckdb-iceberg `IcebergMultiFileReader::Bind`), applies the
        # name mapping only to a file column without an id and never below one (`ApplyFieldMapping`
        # returns at once), and DuckDB's `FieldIdMapper` skips children without an id, so every
        # element, key and value reads as null. PyIceberg (which falls back to the name mapping for
        # the whole file) would read them; one reader reading nulls is reason enough to refuse.
        raise IcebergUnsupported(
            f"column {column!r} is an {kind} under column mapping without {_NESTED_IDS} (written by Delta's "
            "icebergCompatV2 feature): Iceberg readers would read its elements as null")

    def child_id(part: str) -> int:  # each child's id before any of their types' (a map's value id follows its key's)
        return ids.of(at.child(part).key, within.nested.get(at.child(part).nested_path))

    if kind == "array":
        element_id = child_id("element")
        element, children = _type(delta_type["elementType"], at.child("element"), within)
        return ({"type": "list", "element-id": element_id, "element": element,
                 "element-required": not delta_type.get("containsNull", True)},
                [_mapping(element_id, "element", children)])
    if kind == "map":
        key_id, value_id = child_id("key"), child_id("value")
        key_type, key_children = _type(delta_type["keyType"], at.child("key"), within)
        value_type, value_children = _type(delta_type["valueType"], at.child("value"), within)
        entries = [_mapping(key_id, "key", key_children), _mapping(value_id, "value", value_children)]
        # Readers that map the parquet groups themselves (DuckDB) look for the map's repeated group:
        # `key_value` in the parquet spec, `entries` as Arrow writers (delta-rs) name it; it has no id.
        return ({"type": "map", "key-id": key_id, "key": key_type, "value-id": value_id, "value": value_type,
                 "value-required": not delta_type.get("valueContainsNull", True)},
                [*entries, {"names": ["key_value", "entries"], "fields": entries}])
    raise IcebergUnsupported(f"column {column!r} has the Delta type {json.dumps(delta_type)[:100]}, "
                             "which has no Iceberg equivalent")


def _primitive(delta_type: str, column: str, type_changes: list, field_path: str) -> str:
    iceberg_type = iceberg_primitive(delta_type, column)
    # Type widening (PROTOCOL.md#type-widening): older files hold the former type; an Iceberg reader
    # promotes only what spec.md#schema-evolution allows.
    for change in type_changes:
        if (change.get("fieldPath") or "") != field_path:
            continue
        before = iceberg_primitive(str(change.get("fromType")), column)
        if before != iceberg_type and not _promotable(before, iceberg_type):
            raise IcebergUnsupported(
                f"column {column!r} was widened from {change.get('fromType')} to {change.get('toType')} "
                "(the Delta typeWidening feature): Iceberg readers cannot promote older files of that type")
    return iceberg_type


def iceberg_primitive(delta_type: str, column: str) -> str:
    """The Iceberg type of a Delta primitive type; IcebergUnsupported naming the column otherwise."""
    if delta_type in _PRIMITIVES:
        return _PRIMITIVES[delta_type]
    if match := _DECIMAL.fullmatch(delta_type.strip()):
        precision, scale = int(match.group(1)), int(match.group(2))
        if precision > 38:
            raise IcebergUnsupported(f"column {column!r} is {delta_type}: Iceberg decimals hold 38 digits at most")
        return f"decimal({precision}, {scale})"
    feature = _FEATURE_OF_TYPE.get(delta_type.split("(")[0].strip().lower())
    reason = f" (Delta feature: {feature})" if feature else ""
    raise IcebergUnsupported(f"column {column!r} has the Delta type {delta_type!r}{reason}, "
                             "which Iceberg format version 2 cannot represent")


def decimal_of(iceberg_type: str) -> tuple[int, int] | None:
    """(precision, scale) of an Iceberg decimal type name; None for any other type."""
    match = _DECIMAL.fullmatch(iceberg_type)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _promotable(before: str, after: str) -> bool:
    if (before, after) in _PROMOTIONS:
        return True
    old, new = decimal_of(before), decimal_of(after)
    return old is not None and new is not None and old[1] == new[1] and new[0] >= old[0]


def _mapping(field_id: int, name: str, children: list[dict]) -> dict:
    entry: dict[str, Any] = {"field-id": field_id, "names": [name]}
    if children:
        entry["fields"] = children
    return entry


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part
