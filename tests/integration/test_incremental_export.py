"""A commit whose parent's export is complete is exported from it: the same bytes as a cold export,
for the cost of the change. Real lakeFS, MinIO and Spark."""

from __future__ import annotations

import pytest

from tests.integration.deltatables import (add_descriptor, assert_export_reads_like_source, delta_rs_rows, export_one,
                                           read_version, rows, table_uri)
from tests.fakes import lake_of

pytestmark = pytest.mark.integration


def log_files(s3, location: str) -> dict[str, bytes]:
    """Every file of an export's Delta log, by name (its Iceberg metadata names its own location and
    snapshot times: `test_iceberg_exports.py` reads it; the manifest names its ref and timings)."""
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "_delta_log/")
    files = {item["Key"][len(prefix):]: s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
             for item in listed.get("Contents", [])}
    assert files, f"no Delta log under {location}"
    return files


def test_an_incremental_export_is_byte_for_byte_a_cold_one(spark, lakefs, config, repository, s3):
    uri = table_uri(repository, "main", "tables/grow")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, note STRING) USING delta "
              "TBLPROPERTIES ('delta.checkpointInterval' = '3', 'delta.enableDeletionVectors' = 'true')")
    for i in range(1, 5):
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES ({i}, 'n{i}'), ({i + 100}, 'm{i}')")
    add_descriptor(lakefs, repository, "grow", "tables/grow")
    parent = lakefs.commit_branch(repository, "main", "first four inserts")
    first = export_one(config, lakefs, repository, "main", parent, "grow")
    assert first.ok and not first.incremental, first.cold_reason
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id = 2")  # version 5: a deletion vector on an old file
    child = lakefs.commit_branch(repository, "main", "a delete")

    incremental = export_one(config, lakefs, repository, "main", child, "grow")
    cold = export_one(config, lakefs, repository, "cold", child, "grow")  # no parent export under this ref

    assert incremental.ok and incremental.incremental, incremental.cold_reason
    assert cold.ok and not cold.incremental and "no complete export" in cold.cold_reason
    assert incremental.lakefs_calls <= 20, incremental.lakefs_calls
    assert log_files(s3, incremental.location) == log_files(s3, cold.location)
    assert_export_reads_like_source(spark, repository, child, "tables/grow", incremental)
    assert delta_rs_rows(incremental) == rows(read_version(spark, incremental.location))


def test_a_new_checkpoint_or_a_removed_file_exports_cold(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/churn")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT) USING delta TBLPROPERTIES ('delta.checkpointInterval' = '3')")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (1)")
    add_descriptor(lakefs, repository, "churn", "tables/churn")
    first = lakefs.commit_branch(repository, "main", "one insert")
    assert export_one(config, lakefs, repository, "main", first, "churn").ok
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (2)")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (3)")  # version 3: a checkpoint
    second = lakefs.commit_branch(repository, "main", "a checkpoint")

    checkpointed = export_one(config, lakefs, repository, "main", second, "churn")

    assert checkpointed.ok and not checkpointed.incremental
    assert "checkpoint" in checkpointed.cold_reason, checkpointed.cold_reason
    stray = next(e.path for e in lakefs.list_objects(repository, "main", "tables/churn/") if e.path.endswith(".crc"))
    lakefs.delete_object(repository, "main", stray)
    third = lakefs.commit_branch(repository, "main", "a file removed")

    removed = export_one(config, lakefs, repository, "main", third, "churn")

    assert removed.ok and not removed.incremental and "was removed" in removed.cold_reason, removed.cold_reason
    assert rows(read_version(spark, removed.location)) == [(1,), (2,), (3,)]


def test_a_tag_on_an_exported_commit_copies_the_export(spark, lakefs, config, repository, s3):
    from exporter.export.commit import export_table, find_table
    from exporter.export.job import ExportAt

    uri = table_uri(repository, "main", "tables/release")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT) USING delta TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    for i in range(3):
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES ({i})")
    add_descriptor(lakefs, repository, "release", "tables/release")
    commit_id = lakefs.commit_branch(repository, "main", "release candidate")
    branch = export_one(config, lakefs, repository, "main", commit_id, "release")
    lakefs.create_tag(repository, "v1", commit_id)
    table = find_table(lakefs, repository, commit_id, "release")

    tagged = export_table(lake_of(config, lakefs), ExportAt(repository, "v1", commit_id), table,
                          copy_from=("feature", "main"))

    assert tagged.ok and tagged.incremental, tagged
    assert tagged.location.endswith(f"/exported/v1/{commit_id}/release/")
    assert log_files(s3, tagged.location) == log_files(s3, branch.location)
    assert rows(read_version(spark, tagged.location)) == [(0,), (1,), (2,)]
