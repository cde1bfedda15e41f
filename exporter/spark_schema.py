"""An Arrow schema as a Spark `StructType` JSON document, the form of `_last_checkpoint`'s
`checkpointSchema` (PROTOCOL.md#last-checkpoint-file)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

_PRIMITIVES = [
    (pa.types.is_string, "string"), (pa.types.is_large_string, "string"), (pa.types.is_boolean, "boolean"),
    (pa.types.is_int8, "byte"), (pa.types.is_int16, "short"), (pa.types.is_int32, "integer"),
    (pa.types.is_int64, "long"), (pa.types.is_float32, "float"), (pa.types.is_float64, "double"),
    (pa.types.is_binary, "binary"), (pa.types.is_large_binary, "binary"), (pa.types.is_date32, "date"),
]


def spark_schema(schema: pa.Schema) -> dict[str, Any]:
    return {"type": "struct", "fields": [_field(f) for f in schema]}


def _field(field: pa.Field) -> dict[str, Any]:
    return {"name": field.name, "type": _type(field.type), "nullable": field.nullable, "metadata": {}}


def _type(data_type: pa.DataType) -> Any:
    for test, name in _PRIMITIVES:
        if test(data_type):
            return name
    if pa.types.is_timestamp(data_type):
        return "timestamp" if data_type.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(data_type):
        return f"decimal({data_type.precision},{data_type.scale})"
    if pa.types.is_struct(data_type):
        return {"type": "struct", "fields": [_field(data_type.field(i)) for i in range(data_type.num_fields)]}
    if pa.types.is_map(data_type):
        return {"type": "map", "keyType": _type(data_type.key_type), "valueType": _type(data_type.item_type),
                "valueContainsNull": data_type.item_field.nullable}
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return {"type": "array", "elementType": _type(data_type.value_type),
                "containsNull": data_type.value_field.nullable}
    raise ValueError(f"no Spark type for Arrow type {data_type}")
