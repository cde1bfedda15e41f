"""Branch tables with `iceberg.enabled`: each append adds a snapshot per new version (a synthetic
one too) to the branch table's own Iceberg table, written after the Delta log and before the
state, which names its metadata.json and each version's snapshot; a checkpoint past the Iceberg
table's head, the log retention and a table Iceberg cannot represent each leave a table that
reads the branch table's files, or none, with the reason."""

from __future__ import annotations

import json

import pytest

from exporter.config import Config
from exporter.delta.live_files import LiveFiles
from exporter.errors import PathOutsideRepository
from exporter.branch_tables.append import AppendOutcome
from exporter.branch_tables.table import append_commit, branch_table_versions
from exporter.branch_tables.state import read_state
from exporter.export.commit import export_table
from exporter.export.job import ExportAt
from exporter.export.readback import read_exported_log
from exporter.iceberg.manifests import DELETED, read_manifest, read_manifest_list
from exporter.storage.layout import STATE, branch_table_location
from tests.fakes import FakeLakeFS, MemoryStore
from tests.unit.source_tables import SourceTable
from tests.fakes import lake_of

pytestmark = pytest.mark.unit

ON = Config(branch_tables=("main",), iceberg={"enabled": True})
OFF = Config(branch_tables=("main",), iceberg={"enabled": False})
TARGET = branch_table_location(ON, "main", "events")


def namespace(lakefs: FakeLakeFS) -> MemoryStore:
    return lakefs.store.at(lakefs.storage_namespace("repo"))


def commit_and_append(lakefs: FakeLakeFS, table: SourceTable, config: Config = ON, **commit) -> AppendOutcome:
    commit_id = table.commit(**commit)
    assert export_table(lake_of(config, lakefs), ExportAt("repo", "main", commit_id), table.descriptor).ok
    outcome = append_commit(lake_of(config, lakefs), "repo", "main", commit_id, table.descriptor.name)
    assert not outcome.skipped, outcome.skipped
    return outcome


def snapshot_files(store: MemoryStore, metadata_location: str, snapshot_id: int | None = None) -> list[str]:
    """The data files an Iceberg reader reads at a snapshot (the current one by default)."""
    metadata = json.loads(store.get_uri(metadata_location))
    wanted = snapshot_id or metadata["current-snapshot-id"]
    snapshot = next(s for s in metadata["snapshots"] if s["snapshot-id"] == wanted)
    return sorted(entry["data_file"]["file_path"] for listed in read_manifest_list(store.get_uri(snapshot["manifest-list"]))
                  for entry in read_manifest(store.get_uri(listed["manifest_path"])) if entry["status"] != DELETED)


def delta_files(store: MemoryStore) -> list[str]:
    """The data files a Delta reader reads at the branch table's head."""
    return sorted(add["path"] for add in LiveFiles(read_exported_log(store, TARGET)).files())


def test_each_append_adds_the_new_versions_snapshots_written_before_the_state(lakefs, events):
    store = namespace(lakefs)
    first = commit_and_append(lakefs, events.append(1, 2))
    first_files = delta_files(store)
    written_before = len(store.written)

    second = commit_and_append(lakefs, events.append(3).append(4))

    record = second.iceberg
    assert record["state"] == "written" and sorted(map(int, record["snapshot_ids"])) == [0, 1, 2]
    assert record["metadata_location"] == store.uri(TARGET + "metadata/v2.metadata.json")
    assert record["snapshot_ids"]["0"] == first.iceberg["snapshot_ids"]["0"]  # appended: earlier snapshots kept
    assert read_state(store, TARGET)["iceberg"] == record
    assert branch_table_versions(lake_of(ON, lakefs), "repo", "main", "events")["iceberg"] == record
    assert snapshot_files(store, record["metadata_location"]) == delta_files(store)
    assert snapshot_files(store, record["metadata_location"], record["snapshot_ids"]["0"]) == first_files
    written = [key for key in store.written[written_before:] if key.startswith(TARGET)]
    log = [k for k in written if k.startswith(TARGET + "_delta_log/")]
    iceberg = [k for k in written if k.startswith((TARGET + "metadata/", TARGET + "data/"))]
    assert written == [*log, *iceberg, TARGET + STATE]  # Delta versions, Iceberg table, then the state
    assert iceberg[-1] == TARGET + "metadata/v2.metadata.json"
    metadata = json.loads(store.get(TARGET + "metadata/v2.metadata.json"))
    assert [entry["metadata-file"] for entry in metadata["metadata-log"]] == [first.iceberg["metadata_location"]]


def test_an_append_past_a_checkpoint_continues_from_a_checkpoint_the_iceberg_table_has(lakefs, events):
    """The branch table's newest checkpoint (3) is past the Iceberg table's head (1): the commits
    in between are still in the log, so the table is appended to, not written anew."""
    store = namespace(lakefs)
    first = commit_and_append(lakefs, events.append(1).append(2))
    appended = commit_and_append(lakefs, events.append(3).append(4).checkpoint().append(5))

    record = appended.iceberg
    assert appended.checkpoint == 3 and record["state"] == "written" and "rewritten" not in record
    assert sorted(map(int, record["snapshot_ids"])) == [0, 1, 2, 3, 4]
    assert {v: record["snapshot_ids"][v] for v in first.iceberg["snapshot_ids"]} == first.iceberg["snapshot_ids"]
    assert snapshot_files(store, record["metadata_location"]) == delta_files(store)


def test_a_synthetic_version_is_a_snapshot_reading_the_source_after_the_divergence(lakefs, events):
    store = namespace(lakefs)
    commit_and_append(lakefs, events.append(1))
    before = commit_and_append(lakefs, events.append(2).append(3))  # versions 1, 2
    files_at_2 = delta_files(store)
    log = f"{events.descriptor.prefix}_delta_log/"
    gone = [f"_delta_log/{v:020d}.json" for v in (1, 2)]  # the source's head moves back to version 0

    synced = commit_and_append(lakefs, events, leave_out=gone, extra={log + f"{v:020d}.json": None for v in (1, 2)})

    record = synced.iceberg
    assert synced.appended == [3] and "moved back" in synced.synthetic
    assert sorted(map(int, record["snapshot_ids"])) == [0, 1, 2, 3]
    assert {v: record["snapshot_ids"][v] for v in "012"} == before.iceberg["snapshot_ids"]
    assert len(snapshot_files(store, record["metadata_location"])) == 1  # the source's one file at version 0
    assert snapshot_files(store, record["metadata_location"]) == delta_files(store)
    assert snapshot_files(store, record["metadata_location"], record["snapshot_ids"]["2"]) == files_at_2


def test_with_the_log_expired_past_its_head_the_iceberg_table_is_written_anew_and_says_so(lakefs, events):
    """Iceberg was off for a few appends, then the log retention removed the commits after the
    Iceberg table's head: turned on again, the next append writes it anew from the newest checkpoint."""
    store = namespace(lakefs)
    first = commit_and_append(lakefs, events.append(1))
    off = commit_and_append(lakefs, events.append(2).append(3).checkpoint(), config=OFF)
    assert read_state(store, TARGET)["iceberg"] == first.iceberg  # off: left where it was
    assert off.checkpoint == 2 and off.expired == 2  # the store's clock is old: versions 0, 1 expired

    rewritten = commit_and_append(lakefs, events.append(4))

    record = rewritten.iceberg
    assert record["state"] == "written" and "written anew from the newest checkpoint" in record["rewritten"]
    assert sorted(map(int, record["snapshot_ids"])) == [2, 3]
    assert snapshot_files(store, record["metadata_location"]) == delta_files(store)
    assert not store.exists(TARGET + "metadata/v0.metadata.json")  # the old table's files went first


def test_the_snapshots_of_versions_the_log_retention_removed_expire_with_the_files_only_they_named(lakefs, events):
    """The log retention removes versions 0 and 1 after the checkpoint at 2 (the store's clock is
    old); the next append expires their snapshots, and deletes their manifest lists, the manifests
    no kept snapshot names and the metadata file whose head was 0, after its own metadata file."""
    store = namespace(lakefs)
    first = commit_and_append(lakefs, events.append(1).append(2))  # versions 0, 1
    files_at = {1: delta_files(store)}
    expiring = commit_and_append(lakefs, events.append(3).checkpoint().append(4))  # versions 2, 3
    files_at[3] = delta_files(store)
    assert expiring.checkpoint == 2 and expiring.expired == 2 and read_state(store, TARGET)["first_version"] == 2
    assert sorted(map(int, expiring.iceberg["snapshot_ids"])) == [0, 1, 2, 3]  # expired at the next append
    before = json.loads(store.get_uri(expiring.iceberg["metadata_location"]))
    old_lists = [s["manifest-list"] for s in before["snapshots"] if s["summary"]["delta.version"] in ("0", "1")]

    appended = commit_and_append(lakefs, events.append(5))  # version 4

    record = appended.iceberg
    assert record["state"] == "written" and "rewritten" not in record
    assert sorted(map(int, record["snapshot_ids"])) == [2, 3, 4]
    assert {v: record["snapshot_ids"][v] for v in "23"} == {v: expiring.iceberg["snapshot_ids"][v] for v in "23"}
    metadata = json.loads(store.get_uri(record["metadata_location"]))
    assert [s["summary"]["delta.version"] for s in metadata["snapshots"]] == ["2", "3", "4"]
    assert {e["snapshot-id"] for e in metadata["snapshot-log"]} == {s["snapshot-id"] for s in metadata["snapshots"]}
    assert [e["metadata-file"] for e in metadata["metadata-log"]] == [expiring.iceberg["metadata_location"]]
    assert not store.exists(first.iceberg["metadata_location"].removeprefix(store.uri("")))  # its head, 1, expired
    assert all(not store.exists(uri.removeprefix(store.uri(""))) for uri in old_lists)
    assert snapshot_files(store, record["metadata_location"]) == delta_files(store)
    assert snapshot_files(store, record["metadata_location"], record["snapshot_ids"]["3"]) == files_at[3]
    named = {s["manifest-list"] for s in metadata["snapshots"]} | {
        m["manifest_path"] for s in metadata["snapshots"] for m in read_manifest_list(store.get_uri(s["manifest-list"]))}
    left = {store.uri(k) for k in store.list_keys(TARGET + "metadata/") if k.endswith(".avro")}
    assert left == named  # every manifest and list a kept snapshot names is there, and no other


def test_a_table_iceberg_cannot_represent_still_appends_as_delta_with_the_reason(lakefs, events):
    import pyarrow as pa
    import pyarrow.parquet as pq

    events.folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64())}), events.folder / "part-0.parquet")
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                           {"name": "nothing", "type": "void", "nullable": True, "metadata": {}}]}
    actions = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
               {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}},
                             "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {},
                             "createdTime": 0}},
               {"add": {"path": "part-0.parquet", "partitionValues": {}, "dataChange": True, "modificationTime": 0,
                        "size": (events.folder / "part-0.parquet").stat().st_size,
                        "stats": json.dumps({"numRecords": 2})}}]
    (events.folder / "_delta_log").mkdir()
    (events.folder / "_delta_log" / f"{0:020d}.json").write_text("\n".join(map(json.dumps, actions)) + "\n")

    outcome = commit_and_append(lakefs, events)

    store = namespace(lakefs)
    assert outcome.appended == [0] and outcome.iceberg["state"] == "refused"
    assert "'nothing'" in outcome.iceberg["reason"]
    assert read_state(store, TARGET)["iceberg"] == outcome.iceberg
    assert [k for k in store.list_keys(TARGET) if k.startswith((TARGET + "metadata/", TARGET + "data/"))] == []
    assert len(delta_files(store)) == 1


def test_a_branch_tables_iceberg_table_reads_no_file_of_a_repository_nested_in_this_ones(lakefs, events, tmp_path):
    """A log naming, by absolute path, a data file of a repository whose namespace lies inside this
    one's (no row count in its stats: the Iceberg table would read its footer) is appended as Delta;
    its Iceberg table is refused unread, the reason naming the path and the namespace only."""
    lakefs.create_repository("nested", "s3://lake/repo/nested-x")
    secret = SourceTable(lakefs, "nested", "salaries", tmp_path / "nested")
    secret.append(1_000_001).commit()
    address = lakefs.physical_address("nested", "main", secret.data_files()[0])
    events.append(1, 2)
    action = {"add": {"path": address, "partitionValues": {}, "size": 500, "modificationTime": 1, "dataChange": True}}

    outcome = commit_and_append(lakefs, events, extra={
        f"tables/events/_delta_log/{1:020d}.json": (json.dumps(action) + "\n").encode()})

    assert outcome.iceberg == {"state": "failed", "reason": str(PathOutsideRepository(address, "s3://lake/repo/"))}
    store = namespace(lakefs)
    assert address in delta_files(store)  # the Delta branch table keeps the path as it is, unread
    assert address not in store.reads + [uri for uri, _, _ in store.range_reads]
