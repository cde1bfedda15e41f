"""Branch tables: one Delta table per branch at a location that never changes, following the
branch's commits. Real lakeFS, MinIO and Spark (batch and Structured Streaming)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter

import httpx
import pytest

from exporter.config import RetentionConfig
from exporter.errors import ServiceUnavailable
from exporter.branch_tables.log import SYNC_OPERATION
from exporter.branch_tables.table import append_commit, branch_table_versions
from exporter.upkeep.catch_up import catch_up
from exporter.upkeep.retention import prune, verify
from exporter.lakefs.installer import action_files, install_actions
from exporter.state.status import StatusStore
from exporter.storage.layout import STATE
from exporter.storage.objectstore import ObjectStore
from lakefs_delta.client import wait_for_exports
from tests.integration.deltatables import add_descriptor, delta_rs_rows, export_one, read_version, rows, table_uri
from tests.integration.test_webhooks import GOOD, WEBHOOK, api, token
from tests.fakes import lake_of

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def config(config):
    """The session's config, keeping branch tables on `main`: this module appends from library calls,
    with no action installed to name the branch (`append_commit` refuses a branch nobody named)."""
    return config.model_copy(update={"branch_tables": ("main",)})


def commit_and_append(config, lakefs, repository: str, name: str, message: str, append: bool = True) -> str:
    commit_id = lakefs.commit_branch(repository, "main", message)
    outcome = export_one(config, lakefs, repository, "main", commit_id, name)
    assert outcome.ok, outcome.error
    if append:
        appended = append_commit(lake_of(config, lakefs), repository, "main", commit_id, name)
        assert not appended.skipped, appended.skipped
    return commit_id


class Stream:
    """A Structured Streaming query over a table, run with trigger availableNow into a parquet sink,
    restarted from its own checkpoint each time: what a scheduled incremental job does."""

    def __init__(self, spark, location: str, folder):
        self.spark, self.location = spark, location
        self.sink, self.checkpoint = f"file://{folder}/sink", f"file://{folder}/checkpoint"
        self.seen: Counter = Counter()

    def new_rows(self, **options: str) -> Counter:
        reader = self.spark.readStream.format("delta")
        for key, value in options.items():
            reader = reader.option(key, value)
        query = (reader.load(self.location).writeStream.format("parquet").option("path", self.sink)
                 .option("checkpointLocation", self.checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        everything = Counter(tuple(row) for row in self.spark.read.parquet(self.sink).collect())
        new, self.seen = everything - self.seen, everything
        return new


def branch_log_versions(s3, location: str) -> list[int]:
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    keys = [item["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "_delta_log/")
            for item in page.get("Contents", [])]
    return sorted(int(key.rsplit("/", 1)[1][:20]) for key in keys if key.endswith(".json") and "/_delta_log/0" in key)


def branch_commit(s3, location: str, version: int) -> list[dict]:
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    raw = s3.get_object(Bucket=bucket, Key=f"{prefix}_delta_log/{version:020d}.json")["Body"].read()
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def assert_versions_read_like_their_commits(spark, repository: str, path: str, versions: dict) -> None:
    """Each lakeFS commit the mapping names reads, at its branch-table version, as the source at that commit."""
    for entry in versions["commits"]:
        assert rows(read_version(spark, versions["location"], entry["version"])) == \
            rows(read_version(spark, table_uri(repository, entry["commit_id"], path))), entry


def test_a_branch_table_follows_the_branch_and_streams_what_each_commit_added(spark, lakefs, config, repository, s3,
                                                                              tmp_path):
    uri = table_uri(repository, "main", "tables/orders")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, note STRING) USING delta "
              "TBLPROPERTIES ('delta.checkpointInterval' = '3')")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (1, 'a'), (2, 'b')")
    add_descriptor(lakefs, repository, "orders", "tables/orders")
    first = commit_and_append(config, lakefs, repository, "orders", "create + insert: versions 0-1")
    location = branch_table_versions(lake_of(config, lakefs), repository, "main", "orders")["location"]
    assert location.endswith("/_lakefs/exported/main/latest/orders/")
    stream = Stream(spark, location, tmp_path)
    assert stream.new_rows() == Counter({(1, "a"): 1, (2, "b"): 1})

    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (3, 'c')")
    second = commit_and_append(config, lakefs, repository, "orders", "version 2")
    assert stream.new_rows() == Counter({(3, "c"): 1})

    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (4, 'd')")  # version 3: a checkpoint
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id = 1")  # version 4
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (5, 'e')")  # version 5
    commit_and_append(config, lakefs, repository, "orders", "versions 3-5")
    # a DELETE rewrites files: a plain stream refuses it, skipChangeCommits reads on past it
    assert stream.new_rows(skipChangeCommits="true") == Counter({(4, "d"): 1, (5, "e"): 1})

    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (6, 'f')")  # version 6: a checkpoint
    late = commit_and_append(config, lakefs, repository, "orders", "version 6", append=False)
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (7, 'g')")  # version 7
    last = commit_and_append(config, lakefs, repository, "orders", "version 7")  # its export starts at checkpoint 6
    assert stream.new_rows(skipChangeCommits="true") == Counter({(6, "f"): 1, (7, "g"): 1})

    again = append_commit(lake_of(config, lakefs), repository, "main", last, "orders")
    older = append_commit(lake_of(config, lakefs), repository, "main", late, "orders")
    assert again.skipped and older.skipped and "older" in older.skipped
    assert branch_log_versions(s3, location) == list(range(8)), "every version, no gaps"
    for version in range(8):  # the same table as the source, version by version
        assert rows(read_version(spark, location, version)) == \
            rows(read_version(spark, table_uri(repository, last, "tables/orders"), version)), version
    assert delta_rs_rows(location) == rows(read_version(spark, location))
    assert delta_rs_rows(location, 4) == rows(read_version(spark, location, 4))
    versions = branch_table_versions(lake_of(config, lakefs), repository, "main", "orders")
    # `late` was never appended on its own: the append of `last` maps it too, to the version that reads as it
    assert [e["commit_id"] for e in versions["commits"]] == [first, second, versions["commits"][2]["commit_id"], late, last]
    assert versions["head_version"] == 7 and versions["offset"] == 0
    assert_versions_read_like_their_commits(spark, repository, "tables/orders", versions)
    info = branch_commit(s3, location, 7)[0]["commitInfo"]
    assert info["lakeFS"] == {"repository": repository, "commit": last, "sourceVersion": 7}
    assert info["operation"] == "WRITE"  # the source's commit, with one member added


def test_a_revert_appends_one_synthetic_version_and_later_commits_follow_it(spark, lakefs, config, repository, s3,
                                                                            tmp_path):
    uri = table_uri(repository, "main", "tables/ledger")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, amount DOUBLE) USING delta")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (1, 1.0), (2, 2.0)")
    add_descriptor(lakefs, repository, "ledger", "tables/ledger")
    commit_and_append(config, lakefs, repository, "ledger", "versions 0-1")
    location = branch_table_versions(lake_of(config, lakefs), repository, "main", "ledger")["location"]
    stream = Stream(spark, location, tmp_path)
    stream.new_rows()
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (3, 3.0)")
    commit_and_append(config, lakefs, repository, "ledger", "version 2")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (4, 4.0)")
    fourth = commit_and_append(config, lakefs, repository, "ledger", "version 3")
    spark.sql(f"UPDATE delta.`{uri}` SET amount = 10.0 WHERE id = 1")
    fifth = commit_and_append(config, lakefs, repository, "ledger", "version 4")
    assert stream.new_rows(skipChangeCommits="true") == Counter({(3, 3.0): 1, (4, 4.0): 1})

    first_revert = lakefs.revert(repository, "main", fifth)
    reverted = lakefs.revert(repository, "main", fourth)  # the table is back at version 2, as of `third`
    for commit_id in (first_revert, reverted):
        assert export_one(config, lakefs, repository, "main", commit_id, "ledger").ok
    synced = append_commit(lake_of(config, lakefs), repository, "main", reverted, "ledger")
    late = append_commit(lake_of(config, lakefs), repository, "main", first_revert, "ledger")

    assert synced.appended == [5] and "moved back from version 4 to 2" in synced.synthetic
    assert late.skipped and branch_log_versions(s3, location) == list(range(6))
    assert rows(read_version(spark, location)) == rows(read_version(spark, table_uri(repository, reverted,
                                                                                     "tables/ledger")))
    assert delta_rs_rows(location) == rows(read_version(spark, location))  # delta-rs reads the synthetic version too
    actions = branch_commit(s3, location, 5)
    info = actions[0]["commitInfo"]
    assert info["operation"] == SYNC_OPERATION and info["operationParameters"]["lakeFSCommit"] == reverted
    assert {next(iter(a)) for a in actions[1:]} == {"add", "remove"}
    for version in range(5):  # the branch table's history stays as its readers saw it
        assert rows(read_version(spark, location, version)) == \
            rows(read_version(spark, table_uri(repository, fifth, "tables/ledger"), version)), version

    # A stream without options stops at the synthetic version, naming the option to use.
    with pytest.raises(Exception, match="skipChangeCommits"):
        stream.new_rows()
    assert stream.new_rows(skipChangeCommits="true") == Counter()  # the synthetic version is a change commit

    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (9, 9.0)")  # the source's new version 3 is branch version 6
    after = commit_and_append(config, lakefs, repository, "ledger", "version 3, again")
    assert stream.new_rows(skipChangeCommits="true") == Counter({(9, 9.0): 1})
    versions = branch_table_versions(lake_of(config, lakefs), repository, "main", "ledger")
    assert (versions["head_version"], versions["offset"], versions["commits"][-1]["commit_id"]) == (6, 3, after)
    assert_versions_read_like_their_commits(spark, repository, "tables/ledger", versions)
    assert branch_commit(s3, location, 6)[0]["commitInfo"]["lakeFS"]["sourceVersion"] == 3


def branch_table_objects(s3, location: str) -> dict[str, str]:
    """Every object of a branch table and its ETag: what a reader could see change."""
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    return {item["Key"]: item["ETag"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for item in page.get("Contents", [])}


def appends_done(service: str) -> float:
    text = httpx.get(service + "/metrics", timeout=10).text
    found = re.search(r'lakefs_delta_tasks_total\{outcome="succeeded",task="append_branch_table"\} ([0-9.e+]+)', text)
    return float(found.group(1)) if found else 0.0


def test_five_quick_commits_through_the_action_append_every_version_once(service, lakefs, spark, config, repository, s3):
    install_actions(lakefs, repository, "main", action_files(WEBHOOK, ["main"], {"events": "tables/events"}, ["main"]))
    uri = table_uri(repository, "main", "tables/events")
    spark.createDataFrame([(0, "open")], "id INT, kind STRING").write.format("delta").save(uri)
    commits = [lakefs.commit_branch(repository, "main", "version 0")]
    for i in range(1, 6):  # one insert per commit, committed as fast as Spark writes
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES ({i}, 'k{i}')")
        commits.append(lakefs.commit_branch(repository, "main", f"version {i}"))
    for commit_id in commits:
        assert wait_for_exports(service, token(), repository, commit_id, "main", {"events"}, 120)["events"]["state"] == "done"
    path = f"/repositories/{repository}/branches/main/tables/events/versions"
    deadline = time.monotonic() + 60
    while (answer := api(service, path)).status_code != 200 or answer.json()["last_commit"] != commits[-1]:
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.5)
    versions = answer.json()
    location = versions["location"]
    assert versions["head_version"] == 5 and versions["offset"] == 0
    assert branch_log_versions(s3, location) == list(range(6)), "all versions, in order, no gaps"
    assert [branch_commit(s3, location, v)[0]["commitInfo"]["lakeFS"]["sourceVersion"] for v in range(6)] == list(range(6))
    assert rows(read_version(spark, location)) == rows(read_version(spark, table_uri(repository, commits[-1], "tables/events")))
    assert_versions_read_like_their_commits(spark, repository, "tables/events", versions)
    one = api(service, f"{path}?commit={commits[-1]}").json()["commits"]
    assert [(e["commit_id"], e["version"]) for e in one] == [(commits[-1], 5)]
    assert api(service, f"/repositories/{repository}/branches/main/tables/nope/versions").status_code == 404

    before, appended = branch_table_objects(s3, location), appends_done(service)
    for commit_id in commits:  # every event delivered again
        event = {**GOOD, "repository_id": repository, "branch_id": "main", "commit_id": commit_id}
        assert httpx.post(WEBHOOK + "?branch_tables=main", json=event, headers={"X-Webhook-Token": token()},
                          timeout=30).status_code == 202
    deadline = time.monotonic() + 60
    while appends_done(service) < appended + len(commits):
        assert time.monotonic() < deadline, "the appends of the delivered-again events did not run"
        time.sleep(0.5)
    assert branch_table_objects(s3, location) == before, "nothing changed"
    cli = subprocess.run([sys.executable, "-m", "lakefs_delta.cli", "versions", "--repo", repository, "--branch", "main",
                          "--table", "events"], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert f"{commits[-1]}        5       5" in cli.stdout


def test_prune_keeps_what_the_policy_says_and_verify_finds_a_deleted_file(spark, lakefs, config, repository, s3):
    uri = table_uri(repository, "main", "tables/kept")
    spark.createDataFrame([(1, "a"), (2, "b")], "id INT, note STRING").write.format("delta").save(uri)
    add_descriptor(lakefs, repository, "kept", "tables/kept")
    commits = []
    for i in range(30):  # 30 exported commits; after the first, only a note changes beside the table
        if i:
            lakefs.upload_object(repository, "main", f"notes/{i}.txt", b"note")
        commits.append(lakefs.commit_branch(repository, "main", f"commit {i}"))
        assert export_one(config, lakefs, repository, "main", commits[-1], "kept").ok
        if i == 19:
            time.sleep(2)
            cutoff = time.time()
            time.sleep(2)
    lakefs.create_tag(repository, "v1", commits[3])
    assert export_one(config, lakefs, repository, "v1", commits[3], "kept").ok
    assert append_commit(lake_of(config, lakefs), repository, "main", commits[-1], "kept").appended == [0]
    root = f"s3://{os.environ['LAKEFS_DELTA_STACK_BUCKET']}/{repository}/_lakefs/exported/"
    policy = RetentionConfig(keep_last=5, keep_hours=1)  # evaluated an hour after `cutoff`
    expected = [f"{root}main/{c}/" for c in commits[:20]]

    dry = prune(lake_of(config, lakefs), repository, policy, dry_run=True, now=cutoff + 3600)
    assert sorted(dry.deleted) == sorted(expected)
    assert all(export_exists(s3, location) for location in expected), "a dry run deletes nothing"
    assert dry.kept[f"{root}v1/{commits[3]}/"] == "a tag's export"
    assert "newest 5" in dry.kept[f"{root}main/{commits[29]}/"]
    assert "less than 1 hours" in dry.kept[f"{root}main/{commits[20]}/"]

    done = prune(lake_of(config, lakefs), repository, policy, now=cutoff + 3600)
    assert sorted(done.deleted) == sorted(expected) and done.objects_deleted > 20
    assert not any(export_exists(s3, location) for location in expected)
    assert all(export_exists(s3, f"{root}main/{c}/") for c in commits[20:])
    assert export_exists(s3, f"{root}v1/{commits[3]}/")
    assert export_exists(s3, f"{root}main/latest/kept/"), "branch tables are never pruned"

    cli = subprocess.run([sys.executable, "-m", "lakefs_delta.cli", "prune", "--repo", repository, "--keep-last", "2",
                          "--keep-hours", "0", "--dry-run"], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    assert sorted(line.split()[-1] for line in cli.stdout.splitlines() if line.startswith("would delete")) == \
        sorted(f"{root}main/{c}/" for c in commits[20:28])
    assert f"prune {repository} main: exports decided 10/10 exports" in cli.stderr, cli.stderr  # 30 - 20 pruned above

    assert verify(lake_of(config, lakefs), repository, "main", "kept", commits[-1]).ok
    data_files = replay_live_paths(s3, f"{root}main/{commits[-1]}/kept/")
    data_file = data_files[0]
    bucket, _, key = data_file.removeprefix("s3://").partition("/")
    s3.delete_object(Bucket=bucket, Key=key)  # behind the export's back (as lakeFS GC would)
    found = verify(lake_of(config, lakefs), repository, "main", "kept", commits[-1])
    assert not found.ok and found.missing == [data_file] and found.files_checked == len(data_files)
    cli = subprocess.run([sys.executable, "-m", "lakefs_delta.cli", "verify", "--repo", repository, "--ref", "main",
                          "--table", "kept"], capture_output=True, text=True, timeout=60)  # the branch table
    assert cli.returncode == 1 and f"missing {data_file}" in cli.stdout, cli.stdout + cli.stderr
    assert f"verify {root}main/latest/kept/: files checked " in cli.stderr, cli.stderr


def export_exists(s3, location: str) -> bool:
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    return s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1).get("KeyCount", 0) > 0


def replay_live_paths(s3, location: str) -> list[str]:
    """The add paths of a small export's first commit, read straight from MinIO."""
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    raw = s3.get_object(Bucket=bucket, Key=f"{prefix}_delta_log/{0:020d}.json")["Body"].read()
    return [json.loads(line)["add"]["path"] for line in raw.splitlines() if b'"add"' in line]


def test_an_append_interrupted_before_its_state_is_redone_without_duplicates(spark, lakefs, config, repository, s3,
                                                                             monkeypatch):
    uri = table_uri(repository, "main", "tables/crash")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT) USING delta")
    add_descriptor(lakefs, repository, "crash", "tables/crash")
    commit_and_append(config, lakefs, repository, "crash", "version 0")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (1)")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (2)")
    second = commit_and_append(config, lakefs, repository, "crash", "versions 1-2", append=False)
    put = ObjectStore.put

    def dies_at_the_state(store, relative, body, *args):
        if relative.endswith(STATE):
            raise ServiceUnavailable("injected: the worker died before recording the append")
        return put(store, relative, body, *args)

    monkeypatch.setattr(ObjectStore, "put", dies_at_the_state)
    with pytest.raises(ServiceUnavailable):
        append_commit(lake_of(config, lakefs), repository, "main", second, "crash")
    monkeypatch.undo()
    location = branch_table_versions(lake_of(config, lakefs), repository, "main", "crash")["location"]
    assert branch_log_versions(s3, location) == [0, 1, 2]  # written, but not recorded
    assert branch_table_versions(lake_of(config, lakefs), repository, "main", "crash")["head_version"] == 0
    following = config.model_copy(update={"catch_up": config.catch_up.model_copy(update={"branches": ("main",)}),
                                           "branch_tables": ("main",)})
    plan = catch_up(lake_of(following, lakefs), StatusStore(config.redis), [repository])
    assert plan.appends == [(repository, "main", second, "crash")] and not plan.queued  # catch-up sees it lag

    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (3)")
    third = commit_and_append(config, lakefs, repository, "crash", "version 3")  # the next event redoes it
    assert branch_log_versions(s3, location) == [0, 1, 2, 3]
    versions = branch_table_versions(lake_of(config, lakefs), repository, "main", "crash")
    assert versions["head_version"] == 3
    assert [(e["commit_id"], e["appended"]) for e in versions["commits"][1:]] == [(second, [1, 2]), (third, [3, 3])]
    assert rows(read_version(spark, location)) == rows(read_version(spark, table_uri(repository, third, "tables/crash")))


def test_deletion_vectors_v2_checkpoints_and_in_commit_timestamps_survive_a_divergence(spark, lakefs, config,
                                                                                       repository, s3):
    uri = table_uri(repository, "main", "tables/dv")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, note STRING) USING delta TBLPROPERTIES ("
              "'delta.enableDeletionVectors' = 'true', 'delta.checkpointPolicy' = 'v2', "
              "'delta.enableInCommitTimestamps' = 'true', 'delta.checkpointInterval' = '2')")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    add_descriptor(lakefs, repository, "dv", "tables/dv")
    kept = commit_and_append(config, lakefs, repository, "dv", "versions 0-1")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id = 2")  # version 2: a deletion vector, and a V2 checkpoint
    deleted = commit_and_append(config, lakefs, repository, "dv", "version 2")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (4, 'd')")
    last = commit_and_append(config, lakefs, repository, "dv", "version 3")
    location = branch_table_versions(lake_of(config, lakefs), repository, "main", "dv")["location"]
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    listed = [item["Key"] for item in s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "_delta_log/")["Contents"]]
    assert any(re.search(r"/0{19}2\.checkpoint\.[0-9a-f-]{36}\.(json|parquet)$", key) for key in listed), listed
    assert any("deletionVector" in action.get("add", {}) for action in branch_commit(s3, location, 2))

    lakefs.revert(repository, "main", last)
    reverted = lakefs.revert(repository, "main", deleted)  # back to version 1: no deletion vector
    assert export_one(config, lakefs, repository, "main", reverted, "dv").ok
    synced = append_commit(lake_of(config, lakefs), repository, "main", reverted, "dv")

    assert synced.appended == [4] and synced.synthetic
    source = table_uri(repository, reverted, "tables/dv")
    assert rows(read_version(spark, location)) == rows(read_version(spark, source)) == [(1, "a"), (2, "b"), (3, "c")]
    assert delta_rs_rows(location) == rows(read_version(spark, location))
    assert rows(read_version(spark, location, 3)) == rows(read_version(spark, table_uri(repository, last, "tables/dv")))
    timestamps = [branch_commit(s3, location, v)[0]["commitInfo"]["inCommitTimestamp"] for v in (3, 4)]
    assert timestamps[0] < timestamps[1], "in-commit timestamps keep increasing"
    assert branch_table_versions(lake_of(config, lakefs), repository, "main", "dv")["commits"][0]["commit_id"] == kept


def test_log_retention_removes_expired_commits_and_every_retained_version_still_reads(spark, lakefs, config,
                                                                                      repository, s3):
    """A branch table keeps Delta's log retention (`delta.logRetentionDuration`, default 30 days): after a
    checkpoint, the log files below the newest checkpoint that old are removed, as Delta writers remove
    theirs. Run here at a clock 30 days after checkpoint 6 was written and before checkpoint 9 was:
    versions 0..5 go, and every version from 6 on reads in Spark exactly as the source at that
    version; an expired version is refused, as on any Delta table."""
    from exporter.delta.live_files import LiveFiles
    from exporter.branch_tables.table import expire_log
    from exporter.branch_tables.state import read_state
    from exporter.export.readback import read_exported_log
    from exporter.storage.layout import branch_table_location

    uri = table_uri(repository, "main", "tables/kept")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT) USING delta TBLPROPERTIES ('delta.checkpointInterval' = '3')")
    add_descriptor(lakefs, repository, "kept", "tables/kept")
    commit_and_append(config, lakefs, repository, "kept", "version 0")
    for value in range(1, 10):  # versions 1..9; the source writes checkpoints at 3, 6 and 9
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES ({value})")
        commit_and_append(config, lakefs, repository, "kept", f"version {value}")
        time.sleep(0.5)
    store = ObjectStore(config, lakefs.storage_namespace(repository))
    target = branch_table_location(config, "main", "kept")
    written = {name.rsplit("/", 1)[-1]: at for name, _, at in store.list_objects(target + "_delta_log/")}
    assert branch_log_versions(s3, store.uri(target)) == list(range(10))  # 30 days have not passed: all kept

    log = read_exported_log(store, target)
    clock = written[f"{6:020d}.checkpoint.parquet"] + 30 * 86400 + 0.25
    removed = expire_log(store, target, read_state(store, target), LiveFiles(log).metadata, 9, now=clock)

    versions = branch_table_versions(lake_of(config, lakefs), repository, "main", "kept")
    location = versions["location"]
    below = [name for name in written if name[:20].isdigit() and int(name[:20]) < 6]  # commits 0..5, checkpoint 3
    assert removed == len(below) >= 7 and branch_log_versions(s3, location) == [6, 7, 8, 9]
    assert versions["first_version"] == 6 and [e["version"] for e in versions["commits"]] == [6, 7, 8, 9]
    for version in range(6, 10):
        assert rows(read_version(spark, location, version)) == rows(read_version(spark, uri, version)), version
    with pytest.raises(Exception, match="(?i)version"):
        read_version(spark, location, 2).collect()
