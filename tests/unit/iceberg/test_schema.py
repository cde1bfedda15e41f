"""Delta types as Iceberg types, and the Delta columns Iceberg cannot hold refused by name."""

from __future__ import annotations

import json

import pytest

from exporter.errors import IcebergUnsupported
from exporter.iceberg.schema import iceberg_schema

pytestmark = pytest.mark.unit


def schema_of(*fields: dict, configuration: dict | None = None):
    return iceberg_schema({"schemaString": json.dumps({"type": "struct", "fields": list(fields)}),
                           "configuration": configuration or {}})


def column(name: str, delta_type, nullable: bool = True, metadata: dict | None = None) -> dict:
    return {"name": name, "type": delta_type, "nullable": nullable, "metadata": metadata or {}}


def test_types_map_one_to_one():
    primitives = ["byte", "short", "integer", "long", "float", "double", "boolean", "string", "binary", "date",
                  "timestamp", "timestamp_ntz", "decimal(38, 10)"]
    schema = schema_of(*[column(f"c{i}", t, nullable=i % 2 == 0) for i, t in enumerate(primitives)],
                       column("s", {"type": "struct", "fields": [column("x", "long")]}),
                       column("a", {"type": "array", "elementType": "string", "containsNull": False}),
                       column("m", {"type": "map", "keyType": "string", "valueType": "date",
                                    "valueContainsNull": True}))
    assert [(f["type"], f["required"]) for f in schema.fields[:13]] == [
        ("int", False), ("int", True), ("int", False), ("long", True), ("float", False), ("double", True),
        ("boolean", False), ("string", True), ("binary", False), ("date", True), ("timestamptz", False),
        ("timestamp", True), ("decimal(38, 10)", False)]
    struct, array, mapping = schema.fields[13:]
    assert struct["type"] == {"type": "struct", "fields": [{"id": 15, "name": "x", "required": False, "type": "long"}]}
    assert array["type"] == {"type": "list", "element-id": 17, "element": "string", "element-required": True}
    assert mapping["type"] == {"type": "map", "key-id": 19, "key": "string", "value-id": 20, "value": "date",
                               "value-required": False}
    assert schema.last_column_id == 20


@pytest.mark.parametrize("delta_type, feature", [("variant", "variantType"), ("void", "NullType"),
                                                 ("interval", None), ("geometry(OGC:CRS84)", None)])
def test_types_iceberg_cannot_hold_are_refused_naming_the_column(delta_type, feature):
    name = delta_type.split("(")[0]
    with pytest.raises(IcebergUnsupported, match=rf"column 'payload\.{name}' has the Delta type") as refused:
        schema_of(column("id", "long"), column("payload", {"type": "struct", "fields": [column(name, delta_type)]}))
    if feature:
        assert feature in str(refused.value)


def test_widening_iceberg_cannot_promote_is_refused():
    widened = {"delta.typeChanges": [{"fromType": "integer", "toType": "long"}]}
    assert schema_of(column("n", "long", metadata=widened)).fields[0]["type"] == "long"
    rescaled = {"delta.typeChanges": [{"fromType": "decimal(6, 2)", "toType": "decimal(10, 4)"}]}
    with pytest.raises(IcebergUnsupported, match=r"column 'd' was widened from decimal\(6, 2\) to decimal\(10, 4\)"):
        schema_of(column("d", "decimal(10, 4)", metadata=rescaled))


def test_column_mapping_ids_and_physical_names_and_ids_kept_across_versions():
    mapped = {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "7"}
    first = schema_of(column("renamed", "long", metadata={"delta.columnMapping.id": 7,
                                                          "delta.columnMapping.physicalName": "col-x"}),
                      configuration=mapped)
    assert first.fields[0]["id"] == 7 and first.name_mapping[0] == {"field-id": 7, "names": ["col-x"]}
    plain = schema_of(column("a", "long"), column("b", "string"))
    later = iceberg_schema({"schemaString": json.dumps({"type": "struct", "fields": [
        column("new", "date"), column("b", "string"), column("a", "long")]})}, plain.field_ids, plain.last_column_id)
    assert [(f["name"], f["id"]) for f in later.fields] == [("new", 3), ("b", 2), ("a", 1)]


def test_the_name_mapping_keeps_every_field_older_snapshots_files_use():
    """A version whose schema has no `extra` (dropped, or a branch moved back past it): files of older
    snapshots still hold `extra`, and a reader resolves their columns by the table's name mapping."""
    from exporter.iceberg.schema import name_mapping_json

    nested = {"type": "struct", "fields": [column("a", "long"), column("gone", "string")]}
    before = schema_of(column("id", "long"), column("extra", "string"), column("s", nested))
    after = iceberg_schema({"schemaString": json.dumps({"type": "struct", "fields": [
        column("id", "long"), column("s", {"type": "struct", "fields": [column("a", "long")]})]})}, before.field_ids,
        before.last_column_id)
    mapping = json.loads(name_mapping_json(after, name_mapping_json(before)))
    by_name = {entry["names"][0]: entry for entry in mapping}
    assert set(by_name) >= {"id", "extra", "s"}
    assert by_name["extra"]["field-id"] == before.column("extra").field_id
    assert {f["names"][0] for f in by_name["s"]["fields"]} == {"a", "gone"}
    assert json.loads(name_mapping_json(after)) == after.name_mapping  # a table's first schema: its own


def test_a_widening_inside_a_struct_a_map_and_an_array_is_written_and_its_mapping_merges_with_the_previous():
    """Issue 50: delta-io's golden table `type-widening-nested` (its schemas: integer widened to long
    in a struct field, a map's key and value, an array's element) crashed the Iceberg step with
    KeyError 'field-id': a map's mapping holds its repeated group, which has no id. Each widening is
    one Iceberg promotes (int to long): written, the ids kept; the mappings merge."""
    from exporter.iceberg.schema import name_mapping_json

    def widened(to: str, changes: bool) -> list[dict]:
        def typed(path: str | None) -> dict:
            change = {"toType": "long", "fromType": "integer", "tableVersion": 2, **({"fieldPath": path} if path else {})}
            return {"delta.typeChanges": [change]} if changes else {}
        return [column("struct", {"type": "struct", "fields": [column("a", to, metadata=typed(None))]}),
                column("map", {"type": "map", "keyType": to, "valueType": to, "valueContainsNull": True},
                       metadata={"delta.typeChanges": typed("key")["delta.typeChanges"] +
                                 typed("value")["delta.typeChanges"]} if changes else None),
                column("array", {"type": "array", "elementType": to, "containsNull": True}, metadata=typed("element"))]

    before = schema_of(*widened("integer", False))
    after = iceberg_schema({"schemaString": json.dumps({"type": "struct", "fields": widened("long", True)})},
                           before.field_ids, before.last_column_id)
    assert after.field_ids == before.field_ids
    assert [f["type"] for f in after.fields] == [
        {"type": "struct", "fields": [{"id": 2, "name": "a", "required": False, "type": "long"}]},
        {"type": "map", "key-id": 4, "key": "long", "value-id": 5, "value": "long", "value-required": False},
        {"type": "list", "element-id": 7, "element": "long", "element-required": False}]
    mapping = json.loads(name_mapping_json(after, name_mapping_json(before)))
    assert mapping[1]["fields"] == after.name_mapping[1]["fields"]  # the map's key, value and repeated group, once
    with pytest.raises(IcebergUnsupported, match="widened from integer to double"):  # one Iceberg cannot promote
        schema_of(column("map", {"type": "map", "keyType": "string", "valueType": "double"}, metadata={
            "delta.typeChanges": [{"toType": "double", "fromType": "integer", "fieldPath": "value"}]}))
