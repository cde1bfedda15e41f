"""Branch tables and retention: the pure rules (annotation, locations, patterns, policy)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
import yaml

from exporter.config import Config, RetentionConfig
from exporter.delta.live_files import _keys, _plain
from exporter.delta.replay import file_key
from exporter.errors import ExporterError
from exporter.errors import LockLost
from exporter.branch_tables.log import annotated, remove_of
from exporter.branch_tables.table import append_commit, branch_table_versions, follows
from exporter.branch_tables.state import read_state
from exporter.export.commit import export_iceberg, export_table
from exporter.export.job import ExportAt
from exporter.catalog.iceberg import IcebergCatalog
from exporter.upkeep.retention import HOUR, within_policy
from exporter.lakefs.descriptors import TableDescriptor
from exporter.lakefs.installer import branch_table_patterns, render_action
from exporter.storage.layout import branch_table_location
from tests.fakes import FakeLakeFS
from tests.unit.source_tables import SourceTable
from tests.fakes import lake_of

pytestmark = pytest.mark.unit

COMMIT = "c" * 64


def test_the_annotation_adds_one_member_to_commit_info_and_keeps_every_other_byte():
    raw = (b'{"commitInfo": {"timestamp": 1, "operationMetrics": {"x": 1.10}, "big": 12345678901234567890}}\n'
           b'{"add":{"path":"s3://b/k","size":1e400,"dataChange":true}}\n')
    written = annotated(raw, "repo", COMMIT, 7)
    first, rest = written.split(b"\n", 1)
    assert rest == raw.split(b"\n", 1)[1]  # the add line is byte-identical
    assert first == (b'{"commitInfo": {"timestamp": 1, "operationMetrics": {"x": 1.10}, "big": 12345678901234567890,'
                     b'"lakeFS":{"repository":"repo","commit":"' + COMMIT.encode() + b'","sourceVersion":7}}}')
    assert json.loads(first)["commitInfo"]["lakeFS"]["sourceVersion"] == 7


def test_the_annotation_of_an_empty_commit_info_and_of_a_commit_without_one():
    assert json.loads(annotated(b'{"commitInfo":{ }}', "r", COMMIT, 0))["commitInfo"] == \
        {"lakeFS": {"repository": "r", "commit": COMMIT, "sourceVersion": 0}}
    no_info = b'{"add":{"path":"a","size":1}}\n'
    assert annotated(no_info, "r", COMMIT, 0) == no_info  # nothing to annotate: the mapping has it


def test_a_branch_table_lives_at_one_location_per_branch_and_table():
    config = Config()
    assert branch_table_location(config, "main", "orders") == "_lakefs/exported/main/latest/orders/"
    assert branch_table_location(config, "feature/x", "a b") == "_lakefs/exported/feature~2Fx/latest/a~20b/"


def test_branch_patterns_match_like_lakefs_action_branches():
    assert follows("main", ["main"]) and follows("feature-1", ["main", "feature-*"])
    assert not follows("mainline", ["main"]) and not follows("main", [])


def test_install_actions_puts_branch_table_patterns_in_the_webhook_query():
    action = yaml.safe_load(render_action("http://h/webhooks/lakefs", ["main", "dev-*"], ["main", "dev-*"]))
    assert action["hooks"][0]["properties"]["query_params"] == {"branch_tables": "main,dev-*"}
    assert branch_table_patterns(action) == ["main", "dev-*"]
    assert branch_table_patterns(yaml.safe_load(render_action("http://h", ["main"]))) == []
    with pytest.raises(ExporterError, match="cannot hold"):
        render_action("http://h", ["main"], ["a,b"])


def test_retention_keeps_the_newest_commits_and_the_young_ones():
    policy = RetentionConfig(keep_last=3, keep_hours=24)
    assert within_policy(0, 100 * HOUR, policy) and within_policy(2, 100 * HOUR, policy)
    assert not within_policy(3, 100 * HOUR, policy)
    assert within_policy(50, 23 * HOUR, policy)
    assert not within_policy(0, 100 * HOUR, RetentionConfig(keep_last=0, keep_hours=1))


def test_checkpoint_rows_read_back_as_the_actions_json_would_hold():
    row = {"add": {"path": "s3://b/k", "partitionValues": [("date", "2026-01-01"), ("hour", None)], "size": 3,
                   "tags": [], "deletionVector": None, "stats_parsed": {"numRecords": 3}, "baseRowId": None}}
    assert _plain(row) == {"add": {"path": "s3://b/k", "partitionValues": {"date": "2026-01-01", "hour": None},
                                   "size": 3, "tags": {}}}
    metadata = {"metaData": {"id": "i", "format": {"provider": "parquet", "options": []},
                             "configuration": [("delta.enableInCommitTimestamps", "true")], "partitionColumns": []}}
    assert _plain(metadata)["metaData"] == {"id": "i", "format": {"provider": "parquet", "options": {}},
                                            "configuration": {"delta.enableInCommitTimestamps": "true"},
                                            "partitionColumns": []}


def test_the_synthetic_remove_of_a_live_file_keeps_what_readers_match_on():
    add = {"path": "s3://b/k", "size": 9, "partitionValues": {"d": "1"}, "stats": "{}", "dataChange": False,
           "deletionVector": {"storageType": "p", "pathOrInlineDv": "s3://b/dv", "offset": 1, "sizeInBytes": 4,
                              "cardinality": 2}}
    remove = remove_of(add, 1000)
    assert remove == {"path": "s3://b/k", "deletionTimestamp": 1000, "dataChange": True, "extendedFileMetadata": True,
                      "deletionVector": add["deletionVector"], "partitionValues": {"d": "1"}, "size": 9}


def test_checkpoint_keys_are_the_logical_files_reconciliation_matches_on():
    adds = [{"path": "s3://b/a", "deletionVector": None},
            {"path": "s3://b/b", "deletionVector": {"storageType": "p", "pathOrInlineDv": "s3://b/dv", "offset": 4}},
            {"path": "s3://b/c", "deletionVector": {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@(", "offset": None}}]
    keys = _keys(pa.array(adds))
    assert keys.to_pylist() == ["\0".join(file_key(add, "add")) for add in adds]
    assert _keys(pa.array([{"path": "s3://b/x"}])).to_pylist() == ["s3://b/x\0"]


def branch_line(names: list[str], repository: str = "r") -> tuple[FakeLakeFS, dict[str, str]]:
    """`main` with one commit per name, oldest first; {name: commit id}."""
    lakefs = FakeLakeFS()
    lakefs.create_repository(repository, f"s3://bucket/{repository}")
    return lakefs, {name: lakefs.commit_files(repository, "main", {f"{name}.txt": name.encode()}, name)
                    for name in names}


def test_an_append_is_placed_on_the_branch_first_parent_line_or_refused():
    from exporter.errors import BranchTableRefused
    from exporter.branch_tables.table import _place_on_branch

    branch, c = branch_line(["c1", "c2", "c3", "c4", "c5"])
    branch.create_branch("r", "feature", c["c2"])
    c["feat1"] = branch.commit_files("r", "feature", {"feat1.txt": b"f"}, "feat1")
    assert _place_on_branch(branch, "r", "main", c["c3"], c["c3"]) == ("same", [])
    assert _place_on_branch(branch, "r", "main", c["c5"], c["c2"]) == ("newer", [c["c3"], c["c4"]])  # between, oldest first
    assert _place_on_branch(branch, "r", "main", c["c3"], c["c2"]) == ("newer", [])
    assert _place_on_branch(branch, "r", "main", c["c1"], c["c3"]) == ("older", [])  # a late event
    assert _place_on_branch(branch, "r", "main", c["c4"], None) == ("newer", [])  # the first append
    with pytest.raises(BranchTableRefused, match="not on the first-parent line of branch 'main'"):
        _place_on_branch(branch, "r", "main", c["feat1"], c["c3"])  # another branch's commit
    with pytest.raises(BranchTableRefused):
        _place_on_branch(branch, "r", "main", c["feat1"], None)
    reset, n = branch_line(["c1", "c2", "c3"])  # the followed commit c3 is off the line after a reset
    reset.reset_branch("r", "main", n["c1"])
    n["n1"], n["n2"] = (reset.commit_files("r", "main", {f"{name}.txt": b"n"}, name) for name in ("n1", "n2"))
    assert _place_on_branch(reset, "r", "main", n["n2"], n["c3"]) == ("newer", [])


def test_each_commit_an_append_covers_brings_the_versions_after_the_previous_ones_head():
    from exporter.branch_tables.append import _ranges

    assert _ranges(7, [("a", 9), ("b", 10), ("c", 12)]) == [(8, 9), (10, 10), (11, 12)]
    assert _ranges(7, [("c", 7)]) == [(8, 7)]  # nothing new: recorded without a range


def test_an_append_that_lost_its_lock_stops_before_the_state_its_readers_follow(lakefs, events):
    """The state file is the append's commit point: a worker whose lock expired (paused past its
    TTL, say) must not write it over the append another worker now makes."""
    from exporter.errors import LockLost
    from exporter.branch_tables.table import append_commit
    from exporter.branch_tables.state import read_state
    from exporter.export.commit import export_table

    config = Config(branch_tables=("main",))
    first = events.append(1, 2).commit()
    assert export_table(lake_of(config, lakefs), ExportAt("repo", "main", first), events.descriptor).ok
    assert append_commit(lake_of(config, lakefs), "repo", "main", first, "events").appended == [0]
    second = events.append(3).commit()
    assert export_table(lake_of(config, lakefs), ExportAt("repo", "main", second), events.descriptor).ok

    def lost() -> None:
        raise LockLost("the lock 'branch-table:repo:main:events' expired and is no longer this worker's")

    with pytest.raises(LockLost):
        append_commit(lake_of(config, lakefs), "repo", "main", second, "events", still_held=lost)
    store = lakefs.store.at("s3://lake/repo")
    assert read_state(store, branch_table_location(config, "main", "events"))["last_commit"] == first
    target = branch_table_location(config, "main", "events")
    written = store.get(target + "_delta_log/" + f"{1:020d}.json")
    again = append_commit(lake_of(config, lakefs), "repo", "main", second, "events")  # the holder's append
    # version 1 a reader may have read stays as written: the append goes on from it, with nothing left to add
    assert again.appended == [] and again.head_version == 1
    assert store.get(target + "_delta_log/" + f"{1:020d}.json") == written
    state = read_state(store, target)
    assert state["last_commit"] == second
    assert [(c["commit_id"], c["version"], c["appended"]) for c in state["commits"]] == [(first, 0, [0, 0]),
                                                                                      (second, 1, [1, 1])]


def test_versions_an_interrupted_append_wrote_are_never_taken_back(lakefs, events, monkeypatch):
    """Issue 38 item 6: an append interrupted after writing version 1 of two (the worker killed); a
    reader may have read version 1. The source then moves back to version 0: the next append keeps
    version 1 as written and brings the table to the source's state with a synthetic version 2
    (before: version 1 was deleted, and a synthetic version 1 written in its place)."""
    from exporter.branch_tables.table import append_commit
    from exporter.branch_tables.state import read_state
    from exporter.export.commit import export_table

    config = Config(branch_tables=("main",))
    first = events.append(1, 2).commit()
    assert export_table(lake_of(config, lakefs), ExportAt("repo", "main", first), events.descriptor).ok
    assert append_commit(lake_of(config, lakefs), "repo", "main", first, "events").appended == [0]
    second = events.append(3).append(4).commit()
    assert export_table(lake_of(config, lakefs), ExportAt("repo", "main", second), events.descriptor).ok
    store = lakefs.store.at("s3://lake/repo")
    target = branch_table_location(config, "main", "events")
    put = type(store).put

    def killed_after_version_1(self, key: str, *args, **kwargs):
        if key == target + "_delta_log/" + f"{2:020d}.json":
            raise SystemExit("the worker is killed")
        return put(self, key, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(type(store), "put", killed_after_version_1)
        with pytest.raises(SystemExit):
            append_commit(lake_of(config, lakefs), "repo", "main", second, "events")
    seen = store.get(target + "_delta_log/" + f"{1:020d}.json")  # what a reader could read meanwhile
    assert read_state(store, target)["head_version"] == 0

    log = f"{events.descriptor.prefix}_delta_log/"
    gone = [f"_delta_log/{v:020d}.json" for v in (1, 2)]  # the source's head moves back to version 0
    third = events.commit(leave_out=gone, extra={log + f"{v:020d}.json": None for v in (1, 2)})
    assert export_table(lake_of(config, lakefs), ExportAt("repo", "main", third), events.descriptor).ok
    outcome = append_commit(lake_of(config, lakefs), "repo", "main", third, "events")

    assert store.get(target + "_delta_log/" + f"{1:020d}.json") == seen
    assert outcome.synthetic and outcome.appended == [2], outcome
    state = read_state(store, target)
    assert (state["head_version"], state["commits"][1]["commit_id"], state["commits"][1]["interrupted"]) == \
        (2, second, True)


def test_log_retention_removes_expired_files_below_the_newest_checkpoint_that_is_as_old():
    from exporter.delta.log_retention import expired_log_files, interval_seconds, log_retention_seconds

    files = [(f"{v:020d}.json", 10, 1000.0 + v) for v in range(30)]
    files += [(f"{v:020d}.crc", 10, 1000.0 + v) for v in range(30)]
    files += [(f"{v:020d}.checkpoint.parquet", 10, 1000.5 + v) for v in (10, 20)]
    files += [("_last_checkpoint", 10, 1020.5), ("_sidecars/s.parquet", 10, 1.0)]

    start, expired = expired_log_files(files, cutoff=1015.5)  # checkpoint 10 is that old, 20 is not

    assert start == 10
    assert sorted(expired) == sorted([f"{v:020d}.{kind}" for v in range(10) for kind in ("json", "crc")])
    assert expired_log_files(files, cutoff=1005.0) == (None, [])  # no checkpoint old enough: nothing goes
    assert interval_seconds("interval 1 day 12 hours") == 36 * 3600 and interval_seconds("2 weeks") == 14 * 86400
    assert log_retention_seconds({}) == 30 * 86400
    assert log_retention_seconds({"delta.enableExpiredLogCleanup": "false"}) is None
    with pytest.raises(ExporterError, match="not an interval"):
        log_retention_seconds({"delta.logRetentionDuration": "a month"})


def test_a_branch_tables_log_retention_writes_its_state_then_removes_the_files(lakefs):
    from exporter.branch_tables.table import expire_log
    from exporter.branch_tables.state import read_state

    store = lakefs.store.at("s3://lake/repo")
    target = "_lakefs/exported/main/latest/events/"
    for v in range(25):
        store.put(f"{target}_delta_log/{v:020d}.json", b"{}")
    for v in (10, 20):
        store.put(f"{target}_delta_log/{v:020d}.checkpoint.parquet", b"x")
    state = {"first_version": 0, "head_version": 24,
             "commits": [{"commit_id": f"c{v}", "version": v} for v in (0, 9, 10, 15, 24)]}
    store.put(target + "_lakefs_branch_table.json", b"{}")
    retention = {"configuration": {"delta.logRetentionDuration": "interval 1 hour"}}
    assert expire_log(store, target, state, retention, 20, now=1_700_000_000.0) == 0  # the store's clock: nothing old
    removed = expire_log(store, target, state, retention, 20, now=1_800_000_000.0)

    left = [name.rsplit("/", 1)[-1] for name, _, _ in store.list_objects(target + "_delta_log/")]
    assert removed == 21  # versions 0..19 and checkpoint 10, below checkpoint 20
    assert left[0] == f"{20:020d}.checkpoint.parquet" and len(left) == 6  # checkpoint 20, versions 20..24
    saved = read_state(store, target)
    assert saved["first_version"] == 20 and [c["version"] for c in saved["commits"]] == [24]


def re_pointed(table: SourceTable, path: str) -> SourceTable:
    """The table's descriptor names `path`: its next commit puts the table's files there too."""
    table.descriptor = TableDescriptor(table.descriptor.name, path, table.descriptor.descriptor)
    return table


def exported_and_appended(config: Config, lakefs: FakeLakeFS, table: SourceTable) -> str:
    commit_id = table.commit()
    exported = export_table(lake_of(config, lakefs), ExportAt("repo", "main", commit_id), table.descriptor)
    assert exported.ok, exported.error
    outcome = append_commit(lake_of(config, lakefs), "repo", "main", commit_id, table.descriptor.name)
    assert outcome.appended and not outcome.skipped
    return commit_id


def test_a_branch_table_names_every_path_its_versions_were_read_from_to_each_reader(lakefs, events):
    """Issue 37, item 1: `_lakefs_tables/events.yaml` re-pointed from `tables/events` to
    `restricted/events`; the branch table's later versions are read from there, its earlier ones
    from `tables/events`. Its state, `/versions` and the Iceberg catalog's table name both paths:
    a reader must be allowed each."""
    config = Config(branch_tables=("main",), iceberg={"enabled": True})
    exported_and_appended(config, lakefs, events.append(1, 2))
    assert branch_table_versions(lake_of(config, lakefs), "repo", "main", "events")["table_paths"] == ["tables/events"]

    second = exported_and_appended(config, lakefs, re_pointed(events, "restricted/events").append(3))

    versions = branch_table_versions(lake_of(config, lakefs), "repo", "main", "events")
    assert versions["table_paths"] == ["tables/events", "restricted/events"]
    assert versions["table_path"] == "restricted/events" and versions["head_version"] == 1
    catalog = IcebergCatalog(lake_of(config, lakefs))
    table = catalog.table("repo", "main", second, "events")
    assert table.branch_table and table.table_paths == ("tables/events", "restricted/events")
    assert table.table_path == "restricted/events"
    lakefs.create_branch("repo", "feature", second)  # no branch table there: the export of one commit, one path
    assert export_table(lake_of(config, lakefs), ExportAt("repo", "feature", second), events.descriptor).ok
    assert export_iceberg(lake_of(config, lakefs), "repo", "feature", second, "events")["state"] == "written"
    assert catalog.table("repo", "feature", second, "events").table_paths == ("restricted/events",)

    exported_and_appended(config, lakefs, re_pointed(events, "tables/events").append(4))  # back: each path once
    state = read_state(lakefs.store.at("s3://lake/repo"), branch_table_location(config, "main", "events"))
    assert state["table_paths"] == ["restricted/events", "tables/events"] and state["head_version"] == 2


def test_a_state_written_before_table_paths_reads_as_its_one_path_and_grows_on_a_re_pointed_append(lakefs, events):
    config = Config(branch_tables=("main",))
    exported_and_appended(config, lakefs, events.append(1))
    store, target = lakefs.store.at("s3://lake/repo"), branch_table_location(config, "main", "events")
    old = json.loads(store.get(target + "_lakefs_branch_table.json"))
    del old["table_paths"]  # as the code before it wrote it
    store.put(target + "_lakefs_branch_table.json", json.dumps(old).encode())
    assert branch_table_versions(lake_of(config, lakefs), "repo", "main", "events")["table_paths"] == ["tables/events"]

    exported_and_appended(config, lakefs, re_pointed(events, "restricted/events").append(2))

    assert branch_table_versions(lake_of(config, lakefs), "repo", "main", "events")["table_paths"] == [
        "tables/events", "restricted/events"]


def test_an_append_from_a_re_pointed_path_names_it_before_writing_a_version_read_from_it(lakefs, events):
    """An append interrupted after its versions, before its state, leaves them in the log until the
    next append drops them: the state names their path already."""
    config = Config(branch_tables=("main",))
    exported_and_appended(config, lakefs, events.append(1))
    calls = []

    def lost_after_the_first_check() -> None:
        calls.append(1)
        if len(calls) > 1:
            raise LockLost("the lock expired")

    second = re_pointed(events, "restricted/events").append(2).commit()
    assert export_table(lake_of(config, lakefs), ExportAt("repo", "main", second), events.descriptor).ok
    with pytest.raises(LockLost):
        append_commit(lake_of(config, lakefs), "repo", "main", second, "events", still_held=lost_after_the_first_check)

    versions = branch_table_versions(lake_of(config, lakefs), "repo", "main", "events")
    assert versions["head_version"] == 0 and versions["last_commit"] != second  # the append did not happen...
    assert lakefs.store.at("s3://lake/repo").exists(
        branch_table_location(config, "main", "events") + "_delta_log/00000000000000000001.json")  # ...but wrote 1
    assert versions["table_paths"] == ["tables/events", "restricted/events"]


def test_what_an_interrupted_append_left_is_listed_once_and_what_follows_a_gap_goes(lakefs):
    from exporter.branch_tables.log import interrupted_versions

    store = lakefs.store.at("s3://lake/repo")
    target = "_lakefs/exported/main/latest/events/"
    for v in (0, 1, 2, 3, 5, 6):  # head 1; 2 and 3 follow it; 5 and 6 lie past the gap at 4
        marker = {"repository": "repo", "commit": f"c{v}", "sourceVersion": v}
        store.put(f"{target}_delta_log/{v:020d}.json", json.dumps({"commitInfo": {"lakeFS": marker}}).encode())
    store.listings.clear()

    found = interrupted_versions(store, target, 1)

    assert (found.versions, found.source_version, found.commit_id) == ([2, 3], 3, "c3")
    assert len(store.listings) == 1, store.listings
    left = [name.rsplit("/", 1)[-1] for name, _, _ in store.list_objects(target + "_delta_log/")]
    assert left == [f"{v:020d}.json" for v in range(4)]
