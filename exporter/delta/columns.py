"""Which column of one version of a Delta table is which column of another: a column's identity.

With column mapping (mode `name` or `id`) on both sides a column is its `delta.columnMapping.id`,
which a rename keeps (PROTOCOL.md#column-mapping); otherwise it is its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
_COLUMN_MAPPING_ID = "delta.columnMapping.id"
_COLUMN_MAPPING_PHYSICAL_NAME = "delta.columnMapping.physicalName"


def matched_by_id(left_configuration: Mapping[str, str] | None, right_configuration: Mapping[str, str] | None) -> bool:
    """Whether columns are matched by column-mapping id: mapping on in both sides' `metaData.configuration`."""
    return _column_mapped(left_configuration) and _column_mapped(right_configuration)


def physical_name(schema_field: Mapping[str, Any]) -> str:
    """The column's name in the data files (and in `partitionValues`): its physical name under column
    mapping, else its name."""
    return (schema_field.get("metadata") or {}).get(_COLUMN_MAPPING_PHYSICAL_NAME, schema_field["name"])


def paired_fields(left_fields: list[Mapping], right_fields: list[Mapping],
                  by_id: bool) -> list[tuple[Mapping | None, Mapping | None]]:
    """Each right field with the left field that is the same column (None: only on the right), in the
    right's order, then the left fields no right field is (None on the right), in the left's order."""
    left_by_identity = {_identity(left_field, by_id): left_field for left_field in left_fields}
    pairs = [(left_by_identity.pop(_identity(right_field, by_id), None), right_field) for right_field in right_fields]
    return pairs + [(left_field, None) for left_field in left_by_identity.values()]


def _column_mapped(configuration: Mapping[str, str] | None) -> bool:
    return configuration is not None and configuration.get(_COLUMN_MAPPING_MODE) in ("name", "id")


def _identity(schema_field: Mapping[str, Any], by_id: bool) -> tuple[str, Any]:
    column_id = (schema_field.get("metadata") or {}).get(_COLUMN_MAPPING_ID) if by_id else None
    return ("id", column_id) if column_id is not None else ("name", schema_field.get("name"))
