"""The stack is real: lakeFS stores objects in MinIO, Spark writes Delta through the gateway,
a Celery worker consumes from Redis."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_committed_object_is_readable_straight_from_minio(lakefs, repository, s3):
    lakefs.upload_object(repository, "main", "raw/hello.txt", b"hello from lakeFS")
    commit_id = lakefs.commit_branch(repository, "main", "add hello")

    entries = list(lakefs.list_objects(repository, commit_id, "raw/"))

    assert [entry.path for entry in entries] == ["raw/hello.txt"]
    bucket, _, key = entries[0].physical_address.removeprefix("s3://").partition("/")
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"hello from lakeFS"


def test_spark_writes_delta_through_gateway_and_reads_it_back_at_the_commit(spark, lakefs, repository):
    rows = [(1, "2024-01-01", "coffee"), (2, "2024-01-01", "tea"), (3, "2024-01-02", "cake")]
    frame = spark.createDataFrame(rows, "id INT, day STRING, item STRING")
    frame.write.format("delta").partitionBy("day").save(f"s3a://{repository}/main/tables/t")
    commit_id = lakefs.commit_branch(repository, "main", "write t")
    spark.createDataFrame([(4, "2024-01-03", "later")], frame.schema).write.format("delta").mode("append") \
        .save(f"s3a://{repository}/main/tables/t")  # uncommitted: must not show at the commit

    read_back = spark.read.format("delta").load(f"s3a://{repository}/{commit_id}/tables/t")

    assert sorted(tuple(r) for r in read_back.select("id", "day", "item").collect()) == sorted(rows)


def test_celery_worker_runs_a_task_through_redis(celery_worker, config):
    from workers.app import configure
    from workers.tasks import ping

    configure(config)
    assert ping.delay("redis").get(timeout=60) == "pong: redis"
