"""A user exports Delta tables this project did not write: delta-rs of other versions, Spark with other settings.

Each table is written to a local directory by its writer, uploaded to lakeFS as it is (every file,
byte for byte, through the S3 gateway), committed and exported. Spark then reads the export like
it reads the local directory, at every version from the export's checkpoint to the head, and
delta-rs (DataFusion's QueryBuilder) reads the export like it reads the local directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.deltatables import add_descriptor, delta_rs_rows, export_one, spark_settings
from tests.integration.writers import (DELTALAKE_WRITERS, WriterEnvironmentError, assert_checkpoint_schema_kept,
                                       assert_commits_differ_only_in_paths, assert_export_reads_like_local,
                                       local_delta_rs_rows, local_uri, spark_rows, upload_directory,
                                       write_with_deltalake)

pytestmark = pytest.mark.integration

AWKWARD_PARTS = {"a b", "50%", "x+y", "ünï çødé", None}


@pytest.fixture(scope="module")
def gateway(stack_env):
    """boto3 to lakeFS's S3 gateway: `<repository>/<branch>/<path>`."""
    import boto3

    return boto3.client("s3", endpoint_url=stack_env["LAKEFS_DELTA_LAKEFS_ENDPOINT"], region_name="us-east-1",
                        aws_access_key_id=stack_env["LAKEFS_DELTA_LAKEFS_ACCESS_KEY_ID"],
                        aws_secret_access_key=stack_env["LAKEFS_DELTA_LAKEFS_SECRET_ACCESS_KEY"])


def upload_and_export(lakefs, config, gateway, repository: str, local_dir: Path, name: str):
    upload_directory(gateway, repository, "main", local_dir, f"tables/{name}")
    add_descriptor(lakefs, repository, name, f"tables/{name}")
    commit_id = lakefs.commit_branch(repository, "main", f"{name}, uploaded as written")
    return export_one(config, lakefs, repository, "main", commit_id, name)


def assert_delta_rs_reads_export_like_local(local_dir: Path, outcome) -> None:
    for version in range(outcome.checkpoint_version or 0, outcome.head_version + 1):
        assert delta_rs_rows(outcome, version) == local_delta_rs_rows(local_dir, version), f"version {version} differs"
    assert delta_rs_rows(outcome) == local_delta_rs_rows(local_dir)


# ------------------------------------------------------------------------------ delta-rs


@pytest.mark.parametrize("version", list(DELTALAKE_WRITERS))
def test_table_written_by_delta_rs(version, spark, lakefs, config, repository, gateway, s3, tmp_path):
    """Appends, an overwrite, deletes, a checkpoint and commits after it; awkward partition values."""
    local_dir = tmp_path / "table"
    try:
        written = write_with_deltalake(version, local_dir)
    except WriterEnvironmentError as error:
        pytest.fail(f"deltalake {version} writer: {error}", pytrace=False)
    assert written["deltalake"] == version and "delete" in written["done"], written

    outcome = upload_and_export(lakefs, config, gateway, repository, local_dir, "rs")

    assert outcome.ok, outcome.error
    assert (outcome.checkpoint_version, outcome.head_version) == (written["checkpoint_version"],
                                                                  written["head_version"])
    latest = assert_export_reads_like_local(spark, local_dir, outcome)
    assert {row[1] for row in latest} == AWKWARD_PARTS - {"x+y"}  # that partition was deleted after the checkpoint
    assert_delta_rs_reads_export_like_local(local_dir, outcome)
    assert_commits_differ_only_in_paths(s3, local_dir, outcome)
    assert_checkpoint_schema_kept(s3, local_dir, outcome)


# ------------------------------------------------------------------------------ Spark, other settings


def test_spark_in_commit_timestamps(spark, lakefs, config, repository, gateway, s3, tmp_path):
    """With in-commit timestamps a version's time is in its commitInfo: the export keeps history's times."""
    local_dir = tmp_path / "ict"
    uri = local_uri(local_dir)
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, note STRING) USING delta TBLPROPERTIES "
              "('delta.enableInCommitTimestamps' = 'true', 'delta.checkpointInterval' = '3')")
    for i in range(1, 5):
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES ({i}, 'n{i}')")
    spark.sql(f"UPDATE delta.`{uri}` SET note = 'updated' WHERE id = 2")
    assert b'"inCommitTimestamp"' in (local_dir / "_delta_log" / f"{5:020d}.json").read_bytes()

    outcome = upload_and_export(lakefs, config, gateway, repository, local_dir, "ict")

    assert outcome.ok, outcome.error
    assert (outcome.checkpoint_version, outcome.head_version) == (3, 5)
    assert_export_reads_like_local(spark, local_dir, outcome)

    def history(location: str) -> list[tuple]:
        frame = spark.sql(f"DESCRIBE HISTORY delta.`{location}`").where(f"version >= {outcome.checkpoint_version}")
        return sorted((r.version, r.timestamp, r.operation) for r in frame.collect())

    exported_history = history(outcome.location)
    assert exported_history == history(uri)  # the export's files are new objects: only ICT keeps the times
    version, timestamp, _ = exported_history[1]
    at = spark.read.format("delta").option("timestampAsOf", timestamp.isoformat(sep=" ")).load(outcome.location)
    assert sorted((tuple(r) for r in at.collect()), key=repr) == spark_rows(spark, uri, version)
    assert_delta_rs_reads_export_like_local(local_dir, outcome)
    assert_commits_differ_only_in_paths(s3, local_dir, outcome)
    assert_checkpoint_schema_kept(s3, local_dir, outcome)


def test_spark_v2_checkpoint_with_deletion_vectors(spark, lakefs, config, repository, gateway, s3, tmp_path):
    """A V2 checkpoint (top-level file and sidecar) of a table with deletion vectors, and a DELETE after it."""
    local_dir = tmp_path / "v2dv"
    uri = local_uri(local_dir)
    spark.sql(f"CREATE TABLE delta.`{uri}` (id BIGINT, note STRING) USING delta TBLPROPERTIES "
              "('delta.checkpointPolicy' = 'v2', 'delta.enableDeletionVectors' = 'true', "
              "'delta.checkpointInterval' = '3')")
    spark.sql(f"INSERT INTO delta.`{uri}` SELECT id, concat('n', id) FROM range(0, 50)")
    spark.sql(f"INSERT INTO delta.`{uri}` SELECT id, concat('m', id) FROM range(50, 100)")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id % 7 = 0")  # version 3: the checkpoint
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id % 5 = 0")  # after it: more deletion vectors
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (1000, 'late')")
    log = [p.relative_to(local_dir / "_delta_log").as_posix() for p in (local_dir / "_delta_log").rglob("*")]
    assert any(n.startswith(f"{3:020d}.checkpoint.") and n.count(".") == 3 for n in log), log  # UUID-named: V2
    assert any(n.startswith("_sidecars/0") for n in log), log
    assert any(p.name.startswith("deletion_vector_") for p in local_dir.iterdir())

    outcome = upload_and_export(lakefs, config, gateway, repository, local_dir, "v2dv")

    assert outcome.ok, outcome.error
    assert (outcome.checkpoint_version, outcome.head_version) == (3, 5)
    latest = assert_export_reads_like_local(spark, local_dir, outcome)
    assert len(latest) == 100 - 15 - 20 + 3 + 1
    assert_delta_rs_reads_export_like_local(local_dir, outcome)
    assert_commits_differ_only_in_paths(s3, local_dir, outcome)
    assert_checkpoint_schema_kept(s3, local_dir, outcome)


def test_spark_int96_timestamps_with_struct_stats(spark, lakefs, config, repository, gateway, s3, tmp_path):
    """Data files and the checkpoint's stats_parsed hold INT96 timestamps; reads filter on them.

    With writeStatsAsJson off the checkpoint has no JSON stats, so Spark reads stats_parsed for
    data skipping (with JSON stats present it never reads stats_parsed at all).
    """
    local_dir = tmp_path / "int96"
    uri = local_uri(local_dir)
    with spark_settings(spark, {"spark.sql.parquet.outputTimestampType": "INT96"}):
        spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, at TIMESTAMP, at_ntz TIMESTAMP_NTZ) USING delta TBLPROPERTIES "
                  "('delta.checkpoint.writeStatsAsStruct' = 'true', 'delta.checkpoint.writeStatsAsJson' = 'false', "
                  "'delta.checkpointInterval' = '3')")
        for day in range(1, 6):
            spark.sql(f"INSERT INTO delta.`{uri}` VALUES ({day}, TIMESTAMP'2024-01-0{day} 10:00:00.123456', "
                      f"TIMESTAMP_NTZ'2024-01-0{day} 10:00:00')")

    outcome = upload_and_export(lakefs, config, gateway, repository, local_dir, "int96")

    assert outcome.ok, outcome.error
    assert (outcome.checkpoint_version, outcome.head_version) == (3, 5)
    later = "at > TIMESTAMP'2024-01-03 00:00:00'"
    latest_later = assert_export_reads_like_local(spark, local_dir, outcome, where=later)
    assert [row[0] for row in latest_later] == [3, 4, 5]
    assert spark_rows(spark, outcome.location) == spark_rows(spark, uri)
    assert_delta_rs_reads_export_like_local(local_dir, outcome)
    assert_commits_differ_only_in_paths(s3, local_dir, outcome)
    assert_checkpoint_schema_kept(s3, local_dir, outcome)
