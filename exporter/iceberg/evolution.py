"""An Iceberg table's schemas, partition specs and properties as the Delta log's metaData actions
evolve them (Iceberg's schema and partition evolution): a column keeps its field id from version to
version, a schema or spec seen before is reused by its id, a new one is added."""

from __future__ import annotations

import json

from exporter.delta.actions import check_protocol
from exporter.errors import CorruptLog
from exporter.iceberg.columns import PartitionColumn
from exporter.iceberg.manifests import PATH_HASHES, PartitionField
from exporter.iceberg.schema import NAME_MAPPING, TableSchema, field_ids_of, iceberg_primitive, iceberg_schema, \
    name_mapping_json
from exporter.iceberg.stats import stats_columns
from exporter.iceberg.values import partition_value

# the Delta metaData action at the table's head, kept so an append needs not replay the log to find it
DELTA_METADATA = "lakefs-delta.delta-metadata"
_FIRST_PARTITION_ID = 1000  # spec.md#partition-specs: partition field ids start above 999


class Evolution:
    def __init__(self) -> None:
        self.table_id = ""  # the Delta table's id (metaData.id): snapshot ids derive from it
        self.schemas: list[dict] = []
        self.schema: TableSchema | None = None
        self.schema_id = 0
        self.field_ids: dict | None = {}  # None: read from `previous_fields` once the column mapping mode is known
        self.previous_fields: list[dict] = []  # an appended table's current schema
        self.last_column_id = 0
        self.specs: list[dict] = []
        self.spec_fields: dict[int, list[PartitionField]] = {}
        self.spec_id = 0
        self.last_partition_id = _FIRST_PARTITION_ID - 1
        self.properties: dict[str, str] = {}
        self.columns: list = []  # the columns file stats are kept for (`stats.stats_columns`)

    def use(self, metadata: dict, protocol: dict | None) -> None:
        """A Delta metaData action: the schema and partition spec from this version on."""
        check_protocol([{"metaData": metadata}, *([{"protocol": protocol}] if protocol else [])])
        self.table_id = metadata.get("id") or self.table_id
        mapped = (metadata.get("configuration") or {}).get("delta.columnMapping.mode") in ("name", "id")
        if self.field_ids is None:  # an appended table: its fields keep the ids they have
            self.field_ids = field_ids_of(self.previous_fields, mapped)
        schema = iceberg_schema(metadata, self.field_ids, self.last_column_id)
        self.field_ids = {**self.field_ids, **schema.field_ids}
        self.last_column_id = max(self.last_column_id, schema.last_column_id)
        self.schema = schema
        self.schema_id = self._schema_id(schema)
        partition_columns = list(metadata.get("partitionColumns") or [])
        self.spec_id = self._spec_id([schema.column(name) for name in partition_columns])
        self.columns = stats_columns(schema.columns, partition_columns)
        self.properties[NAME_MAPPING] = name_mapping_json(schema, self.properties.get(NAME_MAPPING))
        self.properties[PATH_HASHES] = "true"
        self.properties[DELTA_METADATA] = json.dumps(metadata, separators=(",", ":"))

    def kept_metadata(self) -> dict | None:
        """The Delta metaData action a resumed table was written with (None: an older table, without it)."""
        kept = self.properties.get(DELTA_METADATA)
        return json.loads(kept) if kept else None

    def resume(self, metadata: dict) -> None:
        """Continue from an Iceberg table's metadata: its schemas, specs and properties."""
        self.schemas = metadata["schemas"]
        current = next(s for s in self.schemas if s["schema-id"] == metadata["current-schema-id"])
        self.previous_fields, self.field_ids = current["fields"], None
        self.last_column_id = metadata["last-column-id"]
        self.specs = metadata["partition-specs"]
        self.last_partition_id = metadata["last-partition-id"]
        types = {f["id"]: f["type"] for s in self.schemas for f in s["fields"]}
        self.spec_fields = {spec["spec-id"]: [PartitionField(f["name"], f["field-id"], f["source-id"],
                                                             types[f["source-id"]]) for f in spec["fields"]]
                            for spec in self.specs}
        self.properties = dict(metadata.get("properties") or {})

    def document(self) -> dict:
        """Its part of the table's metadata file."""
        return {"last-column-id": self.last_column_id, "current-schema-id": self.schema_id, "schemas": self.schemas,
                "default-spec-id": self.spec_id, "partition-specs": self.specs,
                "last-partition-id": self.last_partition_id, "properties": self.properties}

    def schema_document(self) -> dict:
        """The current schema, as the metadata file has it."""
        return next(s for s in self.schemas if s["schema-id"] == self.schema_id)

    def partition(self, add: dict) -> dict:
        """An add's partition tuple under the current spec."""
        values = add.get("partitionValues") or {}
        partition = {}
        for partition_field in self.spec_fields[self.spec_id]:
            column = self.schema.column(partition_field.name)
            partition[partition_field.name] = partition_value(values.get(column.physical_name),
                                                              partition_field.iceberg_type, column.name)
        return partition

    def partition_columns(self) -> list[PartitionColumn]:
        """The current spec's fields with the columns they read (`columns.manifest_entries`)."""
        return [PartitionColumn(f, self.schema.column(f.name).physical_name, self.schema.column(f.name).name)
                for f in self.spec_fields[self.spec_id]]

    def _schema_id(self, schema: TableSchema) -> int:
        for document in self.schemas:
            if document["fields"] == schema.fields:
                return document["schema-id"]
        schema_id = max((d["schema-id"] for d in self.schemas), default=-1) + 1
        self.schemas.append(schema.document(schema_id))
        return schema_id

    def _spec_id(self, columns: list) -> int:
        sources = [column.field_id for column in columns]
        for spec in self.specs:
            if [f["source-id"] for f in spec["fields"]] == sources:
                return spec["spec-id"]
        known = {f["source-id"]: f["field-id"] for spec in self.specs for f in spec["fields"]}
        fields = []
        for column in columns:
            if column.field_id not in known:
                self.last_partition_id += 1
                known[column.field_id] = self.last_partition_id
            if not isinstance(column.delta_type, str):
                raise CorruptLog(f"partition column {column.name!r} is not of a primitive type")
            fields.append(PartitionField(column.name, known[column.field_id], column.field_id,
                                         iceberg_primitive(column.delta_type, column.name)))
        spec_id = max((s["spec-id"] for s in self.specs), default=-1) + 1
        self.specs.append({"spec-id": spec_id, "fields": [f.document() for f in fields]})
        self.spec_fields[spec_id] = fields
        return spec_id
