"""A user exports Delta tables written by Spark through lakeFS, then reads them from the export only.

Each test writes a table through lakeFS's S3 gateway, commits, exports, and compares Spark's read of
the export (S3A straight to MinIO, by absolute physical paths) with Spark's read of the source at
the same commit, at every version from the checkpoint to the head. delta-rs reads the export too.
"""

from __future__ import annotations

import math
import uuid

import pytest

from tests.integration.deltatables import (add_descriptor, assert_export_reads_like_source, delta_rs_rows, export_one,
                                           manifest_exists, read_version, rows, spark_settings, table_uri)

pytestmark = pytest.mark.integration


def sql(spark, statement: str) -> None:
    spark.sql(statement)


def create(spark, uri: str, columns: str, properties: dict[str, str] | None = None, partitioned_by: str = "") -> None:
    props = ", ".join(f"'{k}' = '{v}'" for k, v in (properties or {}).items())
    sql(spark, f"CREATE TABLE delta.`{uri}` ({columns}) USING delta"
               + (f" PARTITIONED BY ({partitioned_by})" if partitioned_by else "")
               + (f" TBLPROPERTIES ({props})" if props else ""))


def log_names(lakefs, repository: str, ref: str, path: str) -> list[str]:
    return [e.path.rsplit("_delta_log/", 1)[1] for e in lakefs.list_objects(repository, ref, f"{path}/_delta_log/")]


def test_table_without_checkpoint_exports_every_version(spark, lakefs, config, repository, s3):
    uri = table_uri(repository, "main", "tables/plain")
    create(spark, uri, "id INT, item STRING")
    sql(spark, f"INSERT INTO delta.`{uri}` VALUES (1, 'coffee'), (2, 'tea')")
    sql(spark, f"INSERT INTO delta.`{uri}` VALUES (3, 'cake')")
    sql(spark, f"UPDATE delta.`{uri}` SET item = 'green tea' WHERE id = 2")
    add_descriptor(lakefs, repository, "plain", "tables/plain")
    commit_id = lakefs.commit_branch(repository, "main", "plain table")

    outcome = export_one(config, lakefs, repository, "main", commit_id, "plain")

    assert outcome.checkpoint_version is None and outcome.head_version == 3
    assert outcome.location.endswith(f"/_lakefs/exported/main/{commit_id}/plain/")
    assert_export_reads_like_source(spark, repository, commit_id, "tables/plain", outcome)
    assert delta_rs_rows(outcome) == rows(read_version(spark, outcome.location))
    assert delta_rs_rows(outcome, version=1) == rows(read_version(spark, outcome.location, 1))
    assert manifest_exists(s3, outcome)


def test_checkpoint_after_log_cleanup_keeps_original_version_numbers(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/cleaned")
    create(spark, uri, "id INT, item STRING", {"delta.checkpointInterval": "3"})
    for i in range(1, 6):
        sql(spark, f"INSERT INTO delta.`{uri}` VALUES ({i}, 'item {i}')")
    for version in range(0, 3):  # log cleanup: the JSON commits before the checkpoint at 3 are gone
        lakefs.delete_object(repository, "main", f"tables/cleaned/_delta_log/{version:020d}.json")
    add_descriptor(lakefs, repository, "cleaned", "tables/cleaned")
    commit_id = lakefs.commit_branch(repository, "main", "cleaned table")

    outcome = export_one(config, lakefs, repository, "main", commit_id, "cleaned")

    assert (outcome.checkpoint_version, outcome.head_version) == (3, 5)
    assert_export_reads_like_source(spark, repository, commit_id, "tables/cleaned", outcome)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{outcome.location}`").select("version").collect()
    assert sorted(r.version for r in history) == [3, 4, 5]  # 3.json kept: history keeps its commitInfo
    assert delta_rs_rows(outcome) == rows(read_version(spark, outcome.location))


def test_multipart_checkpoint(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/multipart")
    with spark_settings(spark, {"spark.databricks.delta.checkpoint.partSize": "2"}):
        create(spark, uri, "id INT, item STRING", {"delta.checkpointInterval": "4"})
        for i in range(1, 7):
            sql(spark, f"INSERT INTO delta.`{uri}` VALUES ({i}, 'item {i}')")
    assert any(".checkpoint.0000000001." in n for n in log_names(lakefs, repository, "main", "tables/multipart"))
    add_descriptor(lakefs, repository, "multipart", "tables/multipart")
    commit_id = lakefs.commit_branch(repository, "main", "multipart table")

    outcome = export_one(config, lakefs, repository, "main", commit_id, "multipart")

    assert (outcome.checkpoint_version, outcome.head_version) == (4, 6)
    assert_export_reads_like_source(spark, repository, commit_id, "tables/multipart", outcome)
    assert delta_rs_rows(outcome) == rows(read_version(spark, outcome.location))


def test_v2_checkpoint_with_sidecars(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/v2")
    with spark_settings(spark, {"spark.databricks.delta.checkpoint.partSize": "2"}):  # v2 checkpoints split into sidecars
        create(spark, uri, "id INT, item STRING", {"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "4"})
        for i in range(1, 7):
            sql(spark, f"INSERT INTO delta.`{uri}` VALUES ({i}, 'item {i}')")
    names = log_names(lakefs, repository, "main", "tables/v2")
    assert any(n.startswith("_sidecars/") for n in names), names
    add_descriptor(lakefs, repository, "v2", "tables/v2")
    commit_id = lakefs.commit_branch(repository, "main", "v2 table")

    outcome = export_one(config, lakefs, repository, "main", commit_id, "v2")

    assert (outcome.checkpoint_version, outcome.head_version) == (4, 6)
    assert_export_reads_like_source(spark, repository, commit_id, "tables/v2", outcome)
    assert delta_rs_rows(outcome) == rows(read_version(spark, outcome.location))


def test_deletion_vectors_and_column_mapping(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/features")
    create(spark, uri, "id INT, `amount eur` DOUBLE, note STRING",
           {"delta.enableDeletionVectors": "true", "delta.columnMapping.mode": "name", "delta.checkpointInterval": "4"})
    values = ", ".join(f"({i}, {i * 1.5}, 'n{i}')" for i in range(1, 41))
    sql(spark, f"INSERT INTO delta.`{uri}` VALUES {values}")
    sql(spark, f"DELETE FROM delta.`{uri}` WHERE id % 5 = 0")
    sql(spark, f"UPDATE delta.`{uri}` SET note = 'updated' WHERE id < 4")
    sql(spark, f"INSERT INTO delta.`{uri}` VALUES (100, 1.0, 'late')")
    sql(spark, f"DELETE FROM delta.`{uri}` WHERE id = 7")
    assert any("checkpoint" in n for n in log_names(lakefs, repository, "main", "tables/features"))
    add_descriptor(lakefs, repository, "features", "tables/features")
    commit_id = lakefs.commit_branch(repository, "main", "features table")
    assert any("deletion_vector_" in e.path for e in lakefs.list_objects(repository, commit_id, "tables/features/"))

    outcome = export_one(config, lakefs, repository, "main", commit_id, "features")

    assert_export_reads_like_source(spark, repository, commit_id, "tables/features", outcome)
    assert len(rows(read_version(spark, outcome.location))) == 40 - 8 + 1 - 1
    assert delta_rs_rows(outcome) == rows(read_version(spark, outcome.location))


def test_change_data_feed_files(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/cdf")
    create(spark, uri, "id INT, note STRING", {"delta.enableChangeDataFeed": "true"})
    sql(spark, f"INSERT INTO delta.`{uri}` VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    sql(spark, f"UPDATE delta.`{uri}` SET note = 'B' WHERE id = 2")
    sql(spark, f"MERGE INTO delta.`{uri}` t USING (SELECT 3 AS id, 'C' AS note) s ON t.id = s.id "
               "WHEN MATCHED THEN UPDATE SET note = s.note")
    add_descriptor(lakefs, repository, "cdf", "tables/cdf")
    commit_id = lakefs.commit_branch(repository, "main", "cdf table")
    assert any("_change_data/" in e.path for e in lakefs.list_objects(repository, commit_id, "tables/cdf/"))

    outcome = export_one(config, lakefs, repository, "main", commit_id, "cdf")

    assert_export_reads_like_source(spark, repository, commit_id, "tables/cdf", outcome)
    changes = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 2)
    # _commit_timestamp is the commit file's modification time unless in-commit timestamps are on,
    # and the export's files are new objects: compare everything else
    exported = changes.load(outcome.location).drop("_commit_timestamp")
    source = changes.load(table_uri(repository, commit_id, "tables/cdf")).drop("_commit_timestamp")
    assert rows(exported) == rows(source)
    assert exported.filter("_change_type = 'update_preimage'").count() == 2


def test_awkward_partition_values(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/awkward")
    create(spark, uri, "id INT, part STRING", partitioned_by="part")
    frame = spark.createDataFrame([(1, "a b"), (2, "50%"), (3, "ünï çødé"), (4, None), (5, "x+y"), (6, "q?#")],
                                  "id INT, part STRING")
    frame.write.format("delta").mode("append").save(uri)
    sql(spark, f"DELETE FROM delta.`{uri}` WHERE id = 5")
    add_descriptor(lakefs, repository, "awkward", "tables/awkward")
    commit_id = lakefs.commit_branch(repository, "main", "awkward partitions")

    outcome = export_one(config, lakefs, repository, "main", commit_id, "awkward")

    assert_export_reads_like_source(spark, repository, commit_id, "tables/awkward", outcome)
    assert {r.part for r in read_version(spark, outcome.location).collect()} == {"a b", "50%", "ünï çødé", None, "q?#"}
    assert delta_rs_rows(outcome) == rows(read_version(spark, outcome.location))


def test_vacuumed_file_referenced_by_a_remove_keeps_its_path(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/vacuumed")
    create(spark, uri, "id INT")
    sql(spark, f"INSERT INTO delta.`{uri}` VALUES (1), (2)")
    first_files = {e.path for e in lakefs.list_objects(repository, "main", "tables/vacuumed/") if e.path.endswith(".parquet")}
    spark.createDataFrame([(3,)], "id INT").write.format("delta").mode("overwrite").save(uri)
    for path in first_files:  # what VACUUM does to files only a `remove` still names
        lakefs.delete_object(repository, "main", path)
    add_descriptor(lakefs, repository, "vacuumed", "tables/vacuumed")
    commit_id = lakefs.commit_branch(repository, "main", "vacuumed")

    outcome = export_one(config, lakefs, repository, "main", commit_id, "vacuumed")

    assert outcome.ok, outcome.error
    assert rows(read_version(spark, outcome.location)) == [(3,)]


def test_missing_add_file_fails_the_export_naming_it(spark, lakefs, config, repository, s3):
    uri = table_uri(repository, "main", "tables/broken")
    create(spark, uri, "id INT")
    sql(spark, f"INSERT INTO delta.`{uri}` VALUES (1), (2)")
    lost = next(e.path for e in lakefs.list_objects(repository, "main", "tables/broken/") if e.path.endswith(".parquet"))
    lakefs.delete_object(repository, "main", lost)
    add_descriptor(lakefs, repository, "broken", "tables/broken")
    commit_id = lakefs.commit_branch(repository, "main", "lost a data file")

    outcome = export_one(config, lakefs, repository, "main", commit_id, "broken")

    assert not outcome.ok and outcome.permanent
    assert lost.removeprefix("tables/broken/") in outcome.error
    assert not manifest_exists(s3, outcome)


def test_listing_cost_is_one_call_per_thousand_files(lakefs, config, repository):
    """A synthetic table of 2,500 data files: the export lists them in pages of 1000, never stats each."""
    from bench.synthetic import import_objects

    files = 2500
    names = [f"part-{i:05d}-{uuid.uuid4().hex[:8]}.parquet" for i in range(files)]
    import_objects(lakefs, repository, "main", "tables/wide/", names)  # one lakeFS import, not 2,500 PUTs
    protocol = '{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}'
    metadata = ('{"metaData":{"id":"wide","format":{"provider":"parquet","options":{}},'
                '"schemaString":"{\\"type\\":\\"struct\\",\\"fields\\":[]}","partitionColumns":[],"configuration":{}}}')
    adds = "\n".join(f'{{"add":{{"path":"{n}","partitionValues":{{}},"size":1,"modificationTime":0,"dataChange":true}}}}'
                     for n in names)
    lakefs.upload_object(repository, "main", "tables/wide/_delta_log/00000000000000000000.json",
                         f'{{"commitInfo":{{"operation":"WRITE"}}}}\n{protocol}\n{metadata}\n{adds}\n'.encode())
    add_descriptor(lakefs, repository, "wide", "tables/wide")
    commit_id = lakefs.commit_branch(repository, "main", "wide table")

    outcome = export_one(config, lakefs, repository, "main", commit_id, "wide")

    assert outcome.ok, outcome.error
    assert outcome.files_rewritten == files
    pages = math.ceil((files + 1) / 1000)
    # + the repository, + the parent commit (is there an export to build on?), + the first page
    # that tells a big table from a small one, + `_delta_log/` listed apart
    assert outcome.lakefs_calls <= pages + 4, outcome.lakefs_calls


def test_export_command_prints_each_table_and_fails_when_one_fails(lakefs, repository, capsys):
    from lakefs_delta.cli import main as cli

    protocol = '{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}'
    metadata = ('{"metaData":{"id":"x","format":{"provider":"parquet","options":{}},'
                '"schemaString":"{\\"type\\":\\"struct\\",\\"fields\\":[]}","partitionColumns":[],"configuration":{}}}')
    for name, data_file in (("good", "part-1.parquet"), ("lost", "part-gone.parquet")):
        if name == "good":
            lakefs.upload_object(repository, "main", f"tables/{name}/{data_file}", b"x")
        add = f'{{"add":{{"path":"{data_file}","partitionValues":{{}},"size":1,"modificationTime":0,"dataChange":true}}}}'
        lakefs.upload_object(repository, "main", f"tables/{name}/_delta_log/00000000000000000000.json",
                             f'{{"commitInfo":{{"operation":"WRITE"}}}}\n{protocol}\n{metadata}\n{add}\n'.encode())
        add_descriptor(lakefs, repository, name, f"tables/{name}")
    lakefs.commit_branch(repository, "main", "two tables")

    assert cli(["export", "--repo", repository, "--ref", "main"]) == 1
    printed, steps = capsys.readouterr()
    # off a terminal, a line per finished step on stderr (a bar per step on one)
    assert "export tables/good: log written 1/1 files" in steps and "tables exported 2/2 tables" in steps, steps
    assert "OK      good -> s3://" in printed and "/_lakefs/exported/main/" in printed
    assert "FAILED  lost (tables/lost)" in printed and "part-gone.parquet" in printed
    assert cli(["export", "--repo", repository, "--ref", "main", "--table", "good"]) == 0
    assert "EXISTS  good" in capsys.readouterr().out  # a second export of the same commit is a no-op
