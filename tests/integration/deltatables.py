"""Helpers shared by integration tests: Delta tables written by Spark into lakeFS, exported, compared."""

from __future__ import annotations

import os
from contextlib import contextmanager

from exporter.export.log_writer import ExportOutcome
from exporter.export.commit import export_commit
from exporter.export.job import ExportAt
from exporter.storage.layout import MANIFEST
from tests.fakes import lake_of


def table_uri(repository: str, ref: str, path: str) -> str:
    return f"s3a://{repository}/{ref}/{path}"


def add_descriptor(lakefs, repository: str, name: str, path: str, branch: str = "main") -> None:
    lakefs.upload_object(repository, branch, f"_lakefs_tables/{name}.yaml",
                         f"name: {name}\ntype: delta\npath: {path}\n".encode())


@contextmanager
def spark_settings(spark, settings: dict[str, str]):
    """Spark settings for a block, each put back as it was after it (the session is shared by a process's tests)."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield spark
    finally:
        for key, value in previous.items():
            spark.conf.set(key, value) if value is not None else spark.conf.unset(key)


# Spark's code generation, back on for a block: the suite runs interpreted (scripts/test.sh), which
# suits its queries of tens to hundreds of rows, but writing millions of rows so took 26-28 s of the
# JVM's CPU for 6,000,000 rows where compiled took 6.2-6.5 s (2 runs each)
COMPILED = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}


def rows(frame) -> list[tuple]:
    """Rows in a stable order, for comparing two reads of the same table."""
    return sorted((tuple(row) for row in frame.collect()), key=repr)


def read_version(spark, location: str, version: int | None = None):
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(location)


def export_one(config, lakefs, repository: str, ref: str, commit_id: str, name: str) -> ExportOutcome:
    outcomes = export_commit(lake_of(config, lakefs), ExportAt(repository, ref, commit_id), tables=[name])
    assert len(outcomes) == 1, outcomes
    return outcomes[0]


def assert_export_reads_like_source(spark, repository: str, commit_id: str, path: str, outcome: ExportOutcome) -> None:
    """Spark reads the export (S3A straight to MinIO) like the source through lakeFS, version by version."""
    assert outcome.ok, outcome.error
    source = table_uri(repository, commit_id, path)
    first = outcome.checkpoint_version if outcome.checkpoint_version is not None else 0
    for version in range(first, outcome.head_version + 1):
        assert rows(read_version(spark, outcome.location, version)) == rows(read_version(spark, source, version)), \
            f"version {version} differs"
    assert rows(read_version(spark, outcome.location)) == rows(read_version(spark, source))


def manifest_exists(s3, outcome: ExportOutcome) -> bool:
    bucket, _, key = outcome.location.removeprefix("s3://").partition("/")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=key + MANIFEST)
    return listed.get("KeyCount", 0) > 0


def delta_rs_rows(outcome: ExportOutcome | str, version: int | None = None) -> list[tuple]:
    """delta-rs reads the export (or the table at a location) through DataFusion's QueryBuilder
    (see the README's reader table)."""
    from deltalake import DeltaTable, QueryBuilder

    options = {
        "AWS_ENDPOINT_URL": os.environ["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"],
        "AWS_ACCESS_KEY_ID": os.environ["LAKEFS_DELTA_OBJECT_STORE_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": os.environ["LAKEFS_DELTA_OBJECT_STORE_SECRET_ACCESS_KEY"],
        "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true", "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
    }
    location = outcome if isinstance(outcome, str) else outcome.location
    table = DeltaTable(location, storage_options=options, version=version)
    import pyarrow as pa

    result = pa.table(QueryBuilder().register("t", table).execute("select * from t").read_all())
    return sorted((tuple(row.values()) for row in result.to_pylist()), key=repr)
