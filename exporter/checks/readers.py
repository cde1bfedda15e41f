"""Which Delta tables each named consumer can read: its reader protocol version and reader features
(PROTOCOL.md#table-features). A change that brings a table feature a declared consumer cannot read
blocks the merge, naming both, before the consumer's dashboard learns of it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Consumer:
    max_reader_version: int  # the highest minReaderVersion it reads (2: column mapping without features)
    features: frozenset[str]  # the reader features it reads when minReaderVersion is 3
    source: str  # where this was read


# Read from each consumer's source (2026-11-29); where a source left it open, the feature is taken as
# unreadable: a gate that blocks wrongly is corrected in a line, one that passes wrongly breaks a reader.
CONSUMERS: dict[str, Consumer] = {
    # delta-spark 3.3.x, the last line for Spark 3.5 (delta-io/delta v3.3.2 TableFeature.scala): type
    # widening reads only byte -> short -> int there (TypeWideningShims), variant is not Spark 3.5's
    "spark-3.5": Consumer(3, frozenset({"columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint",
                                        "vacuumProtocolCheck"}),
                          "delta-io/delta v3.3.2 spark/.../TableFeature.scala"),
    # deltalake 1.6's DeltaTable read into pyarrow or pandas (python/deltalake/table.py
    # SUPPORTED_READER_FEATURES; reader version 2 refused): its DataFusion QueryBuilder reads more
    "delta-rs": Consumer(3, frozenset({"timestampNtz", "variantType", "variantType-preview"}),
                         "delta-io/delta-rs python-v1.6.3 python/deltalake/table.py"),
    # DuckDB 1.4.3+'s delta extension on delta-kernel-rs 0.17.1 (SUPPORTED_READER_FEATURES); its
    # variant support through DuckDB's types is not settled: variant blocks
    "duckdb": Consumer(3, frozenset({"columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint",
                                     "vacuumProtocolCheck", "typeWidening", "typeWidening-preview"}),
                       "delta-kernel-rs v0.17.1 kernel/src/table_features/mod.rs (duckdb-delta for DuckDB 1.4.3+)"),
    # a Delta Sharing client of the protocol's default responseFormat=parquet: the reference server
    # refuses column mapping and deletion vectors there (SnapshotChecker.scala) and serves the rest as
    # reader version 1, so a feature whose data a parquet reader would misread blocks too
    "delta-sharing": Consumer(3, frozenset({"timestampNtz", "v2Checkpoint", "vacuumProtocolCheck"}),
                              "delta-io/delta-sharing v1.4.1 PROTOCOL.md (responseFormat) and SnapshotChecker.scala"),
    # this service's Iceberg view (exporter/iceberg): variant has no Iceberg v2 type; a widened column's
    # older files read only where Iceberg promotes (int to long, float to double): type widening blocks
    "iceberg": Consumer(3, frozenset({"columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint",
                                      "vacuumProtocolCheck"}), "exporter/iceberg/schema.py"),
}


def needed(protocol: dict) -> tuple[int, frozenset[str]]:
    """(minReaderVersion, reader features) a protocol action asks of a reader; version 2 is column mapping."""
    version = int(protocol.get("minReaderVersion") or 1)
    features = set(protocol.get("readerFeatures") or [])
    if version == 2:
        features.add("columnMapping")
    return version, frozenset(features)


def unreadable(before: dict, after: dict, consumers: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    """(consumer, what it cannot read) for each consumer the change leaves unable to read the table:
    the reader features (or reader version) `after` asks that `before` did not."""
    (old_version, old_features), (new_version, new_features) = needed(before), needed(after)
    found = []
    for name in consumers:
        consumer = CONSUMERS[name]
        missing = sorted(f for f in new_features - old_features if f not in consumer.features)
        if new_version > max(old_version, consumer.max_reader_version):
            missing.insert(0, f"reader version {new_version}")
        if missing:
            found.append((name, missing))
    return found
