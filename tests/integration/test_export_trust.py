"""A reader of an export gets exactly the table at that commit, or an error.

Real lakeFS, MinIO and Spark: tables are written by Spark through lakeFS's gateway, exported, and
read back from the export with Spark and delta-rs (QueryBuilder) only.
"""

from __future__ import annotations

import datetime
import json
import re
import threading
import time

import pytest

from exporter.config import IcebergConfig
from exporter.errors import ExporterError, ServiceUnavailable
from exporter.export.commit import export_iceberg, export_table, find_table
from exporter.export.job import ExportAt
from exporter.export.manifest import PENDING
from exporter.storage.objectstore import ObjectStore
from exporter.storage.layout import MANIFEST
from tests.integration.deltatables import (add_descriptor, assert_export_reads_like_source, delta_rs_rows, export_one,
                                           read_version, rows, spark_settings, table_uri)
from tests.fakes import lake_of

pytestmark = pytest.mark.integration


def create(spark, uri: str, columns: str, properties: dict[str, str]) -> None:
    props = ", ".join(f"'{k}' = '{v}'" for k, v in properties.items())
    spark.sql(f"CREATE TABLE delta.`{uri}` ({columns}) USING delta TBLPROPERTIES ({props})")


def location_keys(s3, location: str) -> list[str]:
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    from urllib.parse import unquote

    listed = s3.list_objects_v2(Bucket=bucket, Prefix=unquote(prefix))
    return [item["Key"] for item in listed.get("Contents", [])]


# ---------------------------------------------------------------- exact checkpoint types


def test_int96_checkpoint_with_parsed_stats_reads_back_with_a_timestamp_filter(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/int96")
    with spark_settings(spark, {"spark.sql.parquet.outputTimestampType": "INT96"}):
        create(spark, uri, "id INT, at TIMESTAMP, local_at TIMESTAMP_NTZ, amount DECIMAL(12,2), big DECIMAL(30,4), day DATE",
               {"delta.checkpoint.writeStatsAsStruct": "true", "delta.checkpointInterval": "3"})
        for i in range(1, 6):
            spark.sql(f"INSERT INTO delta.`{uri}` VALUES ({i}, TIMESTAMP'2024-0{i}-01 10:00:00', "
                      f"TIMESTAMP_NTZ'2024-0{i}-01 10:00:00', {i}.25, 123456789012345678901234.{i}, DATE'2024-0{i}-02')")
    add_descriptor(lakefs, repository, "int96", "tables/int96")
    commit_id = lakefs.commit_branch(repository, "main", "int96 table")

    outcome = export_one(config, lakefs, repository, "main", commit_id, "int96")

    assert outcome.checkpoint_version == 3, outcome
    assert_export_reads_like_source(spark, repository, commit_id, "tables/int96", outcome)
    source = table_uri(repository, commit_id, "tables/int96")
    for condition in ("at > TIMESTAMP'2024-03-15 00:00:00'", "local_at < TIMESTAMP_NTZ'2024-02-15 00:00:00'",
                      "amount >= 4.25"):
        exported = rows(read_version(spark, outcome.location).where(condition))
        assert exported == rows(read_version(spark, source).where(condition)) and exported, condition
    for version in [*range(outcome.checkpoint_version, outcome.head_version + 1), None]:
        naive = [tuple(v.astimezone(datetime.timezone.utc).replace(tzinfo=None) if isinstance(v, datetime.datetime)
                       else v for v in row)  # Spark gives session-local naive times (UTC here)
                 for row in delta_rs_rows(outcome, version=version)]
        assert naive == rows(read_version(spark, source, version)), version


def test_multipart_checkpoint_keeps_the_sources_last_checkpoint_fields(spark, lakefs, config, repository, s3):
    uri = table_uri(repository, "main", "tables/parts")
    with spark_settings(spark, {"spark.databricks.delta.checkpoint.partSize": "1"}):
        create(spark, uri, "id INT, item STRING", {"delta.checkpointInterval": "4"})
        for i in range(1, 6):
            spark.sql(f"INSERT INTO delta.`{uri}` VALUES ({i}, 'item {i}')")
    add_descriptor(lakefs, repository, "parts", "tables/parts")
    commit_id = lakefs.commit_branch(repository, "main", "multi-part checkpoint")
    source_last = json.loads(lakefs.get_object(repository, commit_id, "tables/parts/_delta_log/_last_checkpoint"))
    assert source_last.get("parts", 0) > 1 and "checkpointSchema" in source_last, source_last

    outcome = export_one(config, lakefs, repository, "main", commit_id, "parts")

    assert_export_reads_like_source(spark, repository, commit_id, "tables/parts", outcome)
    bucket, _, prefix = outcome.location.removeprefix("s3://").partition("/")
    log = prefix + "_delta_log/"
    exported_last = json.loads(s3.get_object(Bucket=bucket, Key=log + "_last_checkpoint")["Body"].read())
    assert "checksum" not in exported_last
    kept = {k: v for k, v in source_last.items() if k not in ("checksum", "sizeInBytes")}
    assert {k: v for k, v in exported_last.items() if k != "sizeInBytes"} == kept
    parts = [k for k in location_keys(s3, outcome.location) if ".checkpoint." in k]
    assert exported_last["sizeInBytes"] == sum(s3.head_object(Bucket=bucket, Key=k)["ContentLength"] for k in parts)
    assert delta_rs_rows(outcome) == rows(read_version(spark, outcome.location))


# ---------------------------------------------------------------- no path back into lakeFS


def test_shallow_clone_through_the_gateway_is_refused_at_a_branch_and_pinned_at_a_commit(
        spark, lakefs, config, repository, s3):
    source = table_uri(repository, "main", "tables/origin")
    create(spark, source, "id INT, note STRING", {"delta.checkpointInterval": "10"})
    spark.sql(f"INSERT INTO delta.`{source}` VALUES (1, 'a'), (2, 'b')")
    origin_commit = lakefs.commit_branch(repository, "main", "origin")
    for name, ref in (("by_branch", "main"), ("by_commit", origin_commit)):
        spark.sql(f"CREATE TABLE delta.`{table_uri(repository, 'main', 'tables/' + name)}` "
                  f"SHALLOW CLONE delta.`{table_uri(repository, ref, 'tables/origin')}`")
        add_descriptor(lakefs, repository, name, f"tables/{name}")
    commit_id = lakefs.commit_branch(repository, "main", "two shallow clones")

    refused = export_one(config, lakefs, repository, "main", commit_id, "by_branch")
    pinned = export_one(config, lakefs, repository, "main", commit_id, "by_commit")

    assert not refused.ok and refused.permanent
    assert f"s3a://{repository}/main/tables/origin/" in refused.error and "not a commit id" in refused.error
    assert location_keys(s3, refused.location) == []  # nothing left behind
    assert pinned.ok, pinned.error
    assert_export_reads_like_source(spark, repository, commit_id, "tables/by_commit", pinned)
    bucket = pinned.location.removeprefix("s3://").partition("/")[0]
    paths = [action[kind]["path"] for k in location_keys(s3, pinned.location) if k.endswith(".json") and "_delta_log" in k
             for line in s3.get_object(Bucket=bucket, Key=k)["Body"].read().splitlines() if line.strip()
             for action in [json.loads(line)] for kind in ("add", "remove") if kind in action]
    assert paths and all(p.startswith(f"s3://{bucket}/{repository}/data/") for p in paths), paths  # physical only
    assert delta_rs_rows(pinned) == [(1, "a"), (2, "b")]


# ---------------------------------------------------------------- a valid URI for any ref


def test_a_tag_with_uri_characters_gets_a_valid_location(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/tagged")
    create(spark, uri, "id INT", {"delta.checkpointInterval": "10"})
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (1), (2)")
    add_descriptor(lakefs, repository, "tagged", "tables/tagged")
    commit_id = lakefs.commit_branch(repository, "main", "tagged")
    tag = "v1#2%3+4~é&x=y"
    lakefs.create_tag(repository, tag, commit_id)

    outcome = export_one(config, lakefs, repository, tag, commit_id, "tagged")

    assert outcome.ok, outcome.error
    assert f"/exported/v1~232~253~2B4~7E~C3~A9~26x~3Dy/{commit_id}/tagged/" in outcome.location
    assert rows(read_version(spark, outcome.location)) == [(1,), (2,)]
    assert delta_rs_rows(outcome) == [(1,), (2,)]


# ---------------------------------------------------------------- fail-closed writes


class FailingWrites:
    """Makes the object-store writer fail at its k-th write (1-based), recording the keys written."""

    def __init__(self, monkeypatch, fail_at: int | None = None, error: ExporterError | None = None):
        self.fail_at, self.error = fail_at, error or ServiceUnavailable("injected: object store answered 503")
        self.keys: list[str] = []
        self.lock = threading.Lock()
        original = ObjectStore.put

        def put(store, relative, body, content_type="application/octet-stream"):
            with self.lock:
                number = len(self.keys) + 1
                self.keys.append(relative)
            if number == self.fail_at:
                raise self.error
            return original(store, relative, body, content_type)

        monkeypatch.setattr(ObjectStore, "put", put)


def change_rows(feed) -> list[tuple]:
    """A change data feed's rows without `_commit_timestamp` (an export's commit times are its own)."""
    return rows(feed.drop("_commit_timestamp"))


def changes(spark, location: str, start: int):
    return spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start).load(location)


def head_commit_time(s3, outcome) -> str:
    """The export's head commit time as Delta Spark takes it without in-commit timestamps: the log's
    commit files' modification times, each made later than the previous version's (+ 1 ms) where it
    is not; a moment before any table when the head's file was not written."""
    bucket, _, prefix = outcome.location.removeprefix("s3://").partition("/")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}_delta_log/").get("Contents", [])
    times = {int(name[:20]): item["LastModified"] for item in listed
             if re.fullmatch(r"\d{20}\.json", name := item["Key"].rsplit("/", 1)[-1])}
    if outcome.head_version not in times:
        return "2000-01-01 00:00:00"
    previous = None
    for version in sorted(times):
        previous = times[version] if previous is None or times[version] > previous \
            else previous + datetime.timedelta(milliseconds=1)
    return previous.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def reads(spark, outcome, versions: list[int], s3=None) -> dict[str, object]:
    """Each way a reader can open the export, with what it read or the exception it raised."""
    attempts = {"spark latest": lambda: rows(read_version(spark, outcome.location)),
                "delta-rs latest": lambda: delta_rs_rows(outcome)}
    if s3 is not None:  # time travel by time, and the change data feed from the oldest version
        attempts["spark timestampAsOf head"] = lambda: rows(spark.read.format("delta").option(
            "timestampAsOf", head_commit_time(s3, outcome)).load(outcome.location))
        attempts["spark changes"] = lambda: change_rows(changes(spark, outcome.location, versions[0]))
    for version in versions:
        attempts[f"spark versionAsOf {version}"] = lambda v=version: rows(read_version(spark, outcome.location, v))
        attempts[f"delta-rs version {version}"] = lambda v=version: delta_rs_rows(outcome, version=v)
    answers = {}
    for name, attempt in attempts.items():
        try:
            answers[name] = attempt()
        except Exception as exc:  # Spark (Py4J) and delta-rs raise their own types
            answers[name] = exc
    return answers


def source_reads(spark, repository: str, commit_id: str, path: str, versions: list[int]) -> dict[str, object]:
    source = table_uri(repository, commit_id, path)
    answers = {"spark latest": rows(read_version(spark, source)), "delta-rs latest": rows(read_version(spark, source))}
    for version in versions:
        answers[f"spark versionAsOf {version}"] = rows(read_version(spark, source, version))
        answers[f"delta-rs version {version}"] = answers[f"spark versionAsOf {version}"]
    answers["spark timestampAsOf head"] = answers["spark latest"]
    answers["spark changes"] = change_rows(changes(spark, source, versions[0]))
    return answers


def manifest_of(s3, outcome) -> dict:
    bucket, _, prefix = outcome.location.removeprefix("s3://").partition("/")
    return json.loads(s3.get_object(Bucket=bucket, Key=prefix + MANIFEST)["Body"].read())


def iceberg_tables(s3, outcome) -> list[str]:
    """The `metadata.json` files under an export: what an Iceberg reader can be pointed at."""
    return [f"s3://{outcome.location.removeprefix('s3://').partition('/')[0]}/{key}"
            for key in location_keys(s3, outcome.location) if key.endswith(".metadata.json")]


@pytest.mark.parametrize("layout", ["checkpoint", "no checkpoint"])
def test_an_export_failing_at_any_write_is_unreadable_until_a_retry_completes_it(
        spark, lakefs, config, repository, s3, monkeypatch, layout):
    uri = table_uri(repository, "main", "tables/faults")
    create(spark, uri, "id INT, note STRING", {"delta.checkpointInterval": "3" if layout == "checkpoint" else "100",
                                               "delta.enableDeletionVectors": "true",
                                               "delta.enableChangeDataFeed": "true"})
    for i in range(1, 4):
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES ({i}, 'n{i}'), ({i + 10}, 'm{i}')")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id = 2")
    if layout == "checkpoint":
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES (99, 'late')")
    add_descriptor(lakefs, repository, "faults", "tables/faults")
    commit_id = lakefs.commit_branch(repository, "main", f"faults ({layout})")
    table = find_table(lakefs, repository, commit_id, "faults")

    config = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})  # its writes fail in turn too
    counting = FailingWrites(monkeypatch)
    probe = export_table(lake_of(config, lakefs), ExportAt(repository, "probe", commit_id), table)
    assert probe.ok and probe.iceberg == PENDING, (probe.error, probe.iceberg)
    delta_writes = len(counting.keys)  # the export's; then its Iceberg table's (the worker's next task)
    probe.iceberg = export_iceberg(lake_of(config, lakefs), repository, "probe", commit_id, "faults")
    assert probe.iceberg["state"] == "written", probe.iceberg
    first = probe.checkpoint_version or 0
    versions = sorted({first, probe.head_version})
    expected = source_reads(spark, repository, commit_id, "tables/faults", versions)
    assert reads(spark, probe, versions, s3) == expected
    assert any(change[-2] == "delete" for change in expected["spark changes"]), "the feed covers the DELETE"
    # the probe's writes; `counting` stays under the next patch until the first undo, and the writes
    # that run beside a failing one (the commits before `0.json` go together) would count there too
    written = list(counting.keys)
    log_keys = [k.rsplit("/_delta_log/", 1)[-1] for k in written]
    start = max(i for i, k in enumerate(log_keys) if ".checkpoint." in k or k == f"{0:020d}.json"
                and layout == "no checkpoint")
    # the export's manifest last of its writes, after the log's start; the Iceberg table's metadata.json, then the manifest naming it
    assert log_keys[delta_writes - 1].endswith(MANIFEST) and start < delta_writes - 1, log_keys
    assert written[-2].endswith(".metadata.json") and written[-1].endswith(MANIFEST), written[delta_writes:]

    for fail_at in range(1, len(written) + 1):
        FailingWrites(monkeypatch, fail_at)
        ref = f"fault-{fail_at}"
        failed = export_table(lake_of(config, lakefs), ExportAt(repository, ref, commit_id), table)
        if fail_at > delta_writes:  # the export is complete: a write of its Iceberg table, or of the manifest naming it
            assert failed.ok and failed.iceberg == PENDING, (failed.error, failed.iceberg)
            with pytest.raises(ExporterError, match="injected") as error:
                export_iceberg(lake_of(config, lakefs), repository, ref, commit_id, "faults")
            assert not error.value.permanent  # the task retries it
            assert delta_rs_rows(failed) == expected["delta-rs latest"], fail_at
            assert manifest_of(s3, failed)["iceberg"] == PENDING  # what the catalog and the status say: no table yet
            if fail_at < len(written):
                assert iceberg_tables(s3, failed) == [], f"write {fail_at} ({written[fail_at - 1]}) failed, " \
                                                         "yet an Iceberg reader finds a metadata.json"
            monkeypatch.undo()
            retried = export_iceberg(lake_of(config, lakefs), repository, ref, commit_id, "faults")
            assert retried["state"] == "written" and manifest_of(s3, failed)["iceberg"] == retried, retried
            assert iceberg_tables(s3, failed) == [retried["metadata_location"]]
            assert delta_rs_rows(failed) == expected["delta-rs latest"]
            continue
        assert not failed.ok and not failed.permanent and "injected" in failed.error
        answers = reads(spark, failed, versions, s3)
        if fail_at - 1 <= start:  # the file that starts the log was not written: no reader sees a table
            unexpected = {name: answer for name, answer in answers.items() if not isinstance(answer, Exception)}
            assert not unexpected, f"write {fail_at} ({log_keys[fail_at - 1]}) failed, yet these read: {unexpected}"
        else:
            assert answers == expected, \
                f"write {fail_at} ({log_keys[fail_at - 1]}) failed after the table was complete"
        monkeypatch.undo()
        retried = export_table(lake_of(config, lakefs), ExportAt(repository, ref, commit_id), table)
        assert retried.ok, retried.error
        assert reads(spark, retried, versions, s3) == expected

    for fail_at in (2, delta_writes):  # a permanent failure before and after the table is complete
        FailingWrites(monkeypatch, fail_at, ExporterError("injected: object store refused put: AccessDenied"))
        failed = export_table(lake_of(config, lakefs), ExportAt(repository, f"denied-{fail_at}", commit_id), table)
        monkeypatch.undo()
        assert not failed.ok and failed.permanent
        assert location_keys(s3, failed.location) == [], f"a permanent failure at write {fail_at} left objects"


# ---------------------------------------------------------------- a delivery that gives up, prune


def test_a_delivery_giving_up_and_prune_never_empty_an_export_another_delivery_is_writing(
        spark, lakefs, config, repository, monkeypatch):
    """Delivery A is held inside `write_log` (the object store blocks on the head commit's put once
    the checkpoint's commit and version 4, written together with it, are there; the checkpoint is
    not). Meanwhile delivery B runs out of retries (the task's `on_failure`) and prune runs with
    nothing kept by age or count. A then completes: every version is there."""
    from exporter.config import RetentionConfig
    from exporter.upkeep.retention import prune
    from exporter.state.status import StatusStore
    from workers import tasks
    from workers.app import configure

    configure(config)
    uri = table_uri(repository, "main", "tables/held")
    create(spark, uri, "id INT", {"delta.checkpointInterval": "3"})
    for value in range(1, 6):  # versions 1..5; a checkpoint at 3
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES ({value})")
    add_descriptor(lakefs, repository, "held", "tables/held")
    commit_id = lakefs.commit_branch(repository, "main", "versions 0-5")

    entered, release = threading.Event(), threading.Event()
    put = ObjectStore.put

    def held_at_the_head(store, relative, body, *args):
        if relative.endswith(f"_delta_log/{5:020d}.json") and "/exported/" in relative:
            log = relative.removesuffix(f"{5:020d}.json")
            deadline = time.monotonic() + 120  # the others are written at once with it: prune must see them
            while not all(store.exists(f"{log}{version:020d}.json") for version in (3, 4)):
                assert time.monotonic() < deadline, "versions 3 and 4 were never written"
                time.sleep(0.01)
            entered.set()
            assert release.wait(120), "never released"
        return put(store, relative, body, *args)

    monkeypatch.setattr(ObjectStore, "put", held_at_the_head)
    arguments = (repository, "main", commit_id, "held", "tables/held")
    first: dict = {}
    delivery = threading.Thread(target=lambda: first.update(tasks.export_table.apply(arguments).get()))
    delivery.start()
    try:
        assert entered.wait(120), "the first delivery never reached the head commit"
        tasks.export_table.on_failure(ServiceUnavailable("injected: the second delivery's retries ran out"),
                                      "second-delivery", arguments, {}, None)
        pruned = prune(lake_of(config, lakefs), repository, RetentionConfig(keep_last=0, keep_hours=0))
    finally:
        release.set()
        delivery.join(120)
    assert first.get("ok") is True, first
    location = first["location"]
    source = table_uri(repository, commit_id, "tables/held")
    for version in (3, 4, 5):  # the checkpoint's version and every later commit
        assert rows(read_version(spark, location, version)) == rows(read_version(spark, source, version)), version
    assert delta_rs_rows(location) == rows(read_version(spark, source))
    record = StatusStore(config.redis).record(repository, "main", commit_id, "held")
    assert record["state"] == "done", record
    commit_folder = location.removesuffix("held/")
    assert pruned.kept.get(commit_folder) == "being exported now: held", pruned
    assert commit_folder not in pruned.deleted
