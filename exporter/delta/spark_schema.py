"""An Arrow schema as a Spark `StructType` JSON document, the form of `_last_checkpoint`'s
`checkpointSchema` (PROTOCOL.md#last-checkpoint-file)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

_PRIMITIVES = [
    (pa.types.is_string, "string"), (pa.types.is_large_string, "string"), (pa.types.is_boolean, "boolean"),
    (pa.types.is_int8, "byte"), (pa.types.is_int16, "short"), (pa.types.is_int32, "integer"),
    (pa.types.is_int64, "long"), (pa.types.is_float32, "float"), (pa.types.is_float64, "double"),
    (pa.types.is_binary, "binary"), (pa.types.is_large_binary, "binary"), (pa.types.is_date32, "date"),
]


def spark_schema(parquet_file: pq.ParquetFile) -> dict[str, Any]:
    """The Spark schema of a parquet file. INT96 columns are Spark `timestamp`s: Arrow reads them
    without a time zone, which would otherwise say `timestamp_ntz`."""
    schema = parquet_file.schema
    int96 = {schema.column(i).path for i in range(len(schema)) if schema.column(i).physical_type == "INT96"}
    return {"type": "struct", "fields": [_field(f, f.name, int96) for f in parquet_file.schema_arrow]}


def _field(field: pa.Field, path: str, int96: set[str]) -> dict[str, Any]:
    return {"name": field.name, "type": _type(field.type, path, int96), "nullable": field.nullable, "metadata": {}}


def _type(data_type: pa.DataType, path: str, int96: set[str]) -> Any:
    for test, name in _PRIMITIVES:
        if test(data_type):
            return name
    if pa.types.is_timestamp(data_type):
        return "timestamp" if data_type.tz is not None or path in int96 else "timestamp_ntz"
    if pa.types.is_decimal(data_type):
        return f"decimal({data_type.precision},{data_type.scale})"
    if pa.types.is_struct(data_type):
        return {"type": "struct", "fields": [_field(data_type.field(i), f"{path}.{data_type.field(i).name}", int96)
                                             for i in range(data_type.num_fields)]}
    if pa.types.is_map(data_type):
        return {"type": "map", "keyType": _type(data_type.key_type, f"{path}.key_value.key", int96),
                "valueType": _type(data_type.item_type, f"{path}.key_value.value", int96),
                "valueContainsNull": data_type.item_field.nullable}
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return {"type": "array", "elementType": _type(data_type.value_type, f"{path}.list.element", int96),
                "containsNull": data_type.value_field.nullable}
    raise ValueError(f"no Spark type for Arrow type {data_type}")
