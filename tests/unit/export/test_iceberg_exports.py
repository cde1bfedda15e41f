"""Exports with `iceberg.enabled`: each complete export (cold, incremental, a tag's copy) has its own
Iceberg table at its location. The export's manifest records it pending; it is written after the
export is complete (`export_iceberg`, a task of its own in workers), and the manifest then names its
metadata.json and the snapshot of each Delta version; a table Iceberg cannot represent is still
exported as Delta, with the reason; discarding an export removes the metadata.json first."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exporter.config import Config
from exporter.errors import PathOutsideRepository, ServiceUnavailable
from exporter.export.commit import export_iceberg, export_table, exports_in_store
from exporter.export.job import ExportAt
from exporter.export.manifest import PENDING
from exporter.export.log_writer import ExportOutcome, discard_export
from exporter.upkeep.retention import prune
from exporter.iceberg.manifests import read_manifest, read_manifest_list
from exporter.iceberg.table import DELTA_VERSION
from exporter.storage.layout import MANIFEST, commit_root, export_location, iceberg_files_location, \
    iceberg_table_files
from tests.fakes import FakeLakeFS, MemoryStore
from tests.unit.source_tables import SourceTable
from tests.fakes import lake_of

pytestmark = pytest.mark.unit

ON, OFF = Config(iceberg={"enabled": True}), Config(iceberg={"enabled": False})
SAME = Config(iceberg={"enabled": True, "same_task": True})  # a light Iceberg table written in the export's call


def namespace(lakefs: FakeLakeFS) -> MemoryStore:
    return lakefs.store.at(lakefs.storage_namespace("repo"))


def export(lakefs: FakeLakeFS, ref: str, commit_id: str, table: SourceTable, config: Config = ON,
           **options) -> ExportOutcome:
    """The export, then its Iceberg table, as a worker writes them (`outcome.iceberg`: its record)."""
    outcome = export_table(lake_of(config, lakefs), ExportAt("repo", ref, commit_id), table.descriptor, **options)
    assert outcome.ok, outcome.error
    if config.iceberg.enabled:
        assert outcome.iceberg == PENDING, outcome.iceberg
        outcome.iceberg = export_iceberg(lake_of(config, lakefs), "repo", ref, commit_id, table.descriptor.name)
    return outcome


def manifest(lakefs: FakeLakeFS, location: str) -> dict:
    return json.loads(namespace(lakefs).get(location + MANIFEST))


def iceberg_files(store: MemoryStore, location: str) -> list[str]:
    """The Iceberg table's files: its metadata files at the export's location, the rest in its own folder
    of the table's Iceberg files."""
    return [key for at in (location, iceberg_files_location(location)) for key in store.list_keys(at)
            if key.startswith((at + "metadata/", at + "data/"))]


def test_with_the_switch_off_an_export_is_delta_only_and_its_manifest_as_before(lakefs, events):
    commit = events.append(1, 2).commit()

    outcome = export(lakefs, "main", commit, events, config=OFF)

    location = export_location(OFF, "main", commit, "events")
    assert outcome.iceberg is None
    assert iceberg_files(namespace(lakefs), location) == []
    assert "iceberg" not in manifest(lakefs, location)


def test_an_export_is_complete_before_its_iceberg_table_which_is_written_after_and_named_in_its_manifest(
        lakefs, events):
    commit = events.append(1, 2).append(3).commit()
    store = namespace(lakefs)
    written_before = len(store.written)
    location = export_location(ON, "main", commit, "events")

    delta = export_table(lake_of(ON, lakefs), ExportAt("repo", "main", commit), events.descriptor)

    assert delta.ok and delta.iceberg == PENDING == manifest(lakefs, location)["iceberg"]
    assert iceberg_files(store, location) == []
    assert exports_in_store(lake_of(ON, lakefs), "repo", commit)["main"]["events"]["iceberg"] == PENDING
    again = export_table(lake_of(ON, lakefs), ExportAt("repo", "main", commit), events.descriptor)
    assert again.skipped and again.iceberg == PENDING  # an event delivered again: the task is queued again

    outcome = export(lakefs, "main", commit, events)  # the worker's task

    record = manifest(lakefs, location)["iceberg"]
    assert record == outcome.iceberg
    assert record["state"] == "written"
    assert record["metadata_location"] == store.uri(location + "metadata/v1.metadata.json")
    metadata = json.loads(store.get(location + "metadata/v1.metadata.json"))
    assert {s["summary"][DELTA_VERSION]: s["snapshot-id"] for s in metadata["snapshots"]} == \
        {version: snapshot_id for version, snapshot_id in record["snapshot_ids"].items()} and \
        sorted(record["snapshot_ids"]) == ["0", "1"]
    written = store.written[written_before:]
    log, iceberg = [k for k in written if "/_delta_log/" in k], [k for k in written if k in iceberg_files(store, location)]
    # the Delta log, its manifest (the export is complete), the Iceberg table, the manifest naming it
    assert written == [*log, location + MANIFEST, *iceberg, location + MANIFEST]
    assert iceberg[-1] == location + "metadata/v1.metadata.json"
    assert export_iceberg(lake_of(ON, lakefs), "repo", "main", commit, "events") == record  # written once
    assert store.written[written_before:] == written
    # the table names the export's data files: the objects' physical addresses
    head = next(s for s in metadata["snapshots"] if s["snapshot-id"] == metadata["current-snapshot-id"])
    data_files = [entry["data_file"]["file_path"]
                  for listed in read_manifest_list(store.get_uri(head["manifest-list"]))
                  for entry in read_manifest(store.get_uri(listed["manifest_path"]))]
    assert sorted(data_files) == sorted(lakefs.physical_address("repo", commit, path) for path in events.data_files())
    assert exports_in_store(lake_of(ON, lakefs), "repo", commit)["main"]["events"]["iceberg"] == record


def test_incremental_and_copied_exports_write_their_own_metadata_file_and_only_the_new_versions_files(lakefs, events):
    first = events.append(1).commit()
    export(lakefs, "main", first, events)
    second = events.append(2).commit()
    incremental = export(lakefs, "main", second, events)
    lakefs.create_tag("repo", "v1", second)
    copied = export(lakefs, "v1", second, events, copy_from=("main",))

    store = namespace(lakefs)
    assert incremental.incremental and copied.incremental
    written_by = {0: export_location(ON, "main", first, "events"), 1: export_location(ON, "main", second, "events")}
    for ref, outcome in (("main", incremental), ("v1", copied)):
        location = export_location(ON, ref, second, "events")
        assert outcome.iceberg == manifest(lakefs, location)["iceberg"]
        assert outcome.iceberg["metadata_location"] == store.uri(location + "metadata/v1.metadata.json")
        assert sorted(outcome.iceberg["snapshot_ids"]) == ["0", "1"]
        metadata = json.loads(store.get(location + "metadata/v1.metadata.json"))
        assert metadata["location"] == store.uri(iceberg_table_files(location)).rstrip("/")  # all it names but itself
        for snapshot in metadata["snapshots"]:  # each version's files where the export that wrote it put them
            own = store.uri(iceberg_files_location(written_by[int(snapshot["summary"][DELTA_VERSION])]))
            named = [snapshot["manifest-list"], *(m["manifest_path"] for m in read_manifest_list(
                store.get_uri(snapshot["manifest-list"])) if m["added_snapshot_id"] == snapshot["snapshot-id"])]
            assert all(uri.startswith(own) for uri in named), (ref, named)
    # the tag's copy wrote its metadata file and nothing else
    assert iceberg_files(store, export_location(ON, "v1", second, "events")) == \
        [export_location(ON, "v1", second, "events") + "metadata/v1.metadata.json"]
    # the same Delta versions are the same snapshots in every export of the table
    assert incremental.iceberg["snapshot_ids"] == copied.iceberg["snapshot_ids"]


def test_an_incremental_exports_iceberg_table_reads_only_the_new_commits_of_the_log(lakefs, events):
    """The Delta metaData at the parent table's head is in its properties: the versions it has are
    not read again (a storm's tables have no checkpoint: each export would read its whole log). Nor
    is the log listed: the export's manifest names its files."""
    first = events.append(1).append(2).append(3).commit()  # versions 0-2
    export(lakefs, "main", first, events)
    second = events.append(4).commit()  # version 3
    store = namespace(lakefs)
    before, listed_before = len(store.reads), len(store.listings)

    incremental = export(lakefs, "main", second, events)

    log = store.uri(export_location(ON, "main", second, "events") + "_delta_log/")
    assert incremental.incremental and sorted(map(int, incremental.iceberg["snapshot_ids"])) == [0, 1, 2, 3]
    assert [uri.removeprefix(log) for uri in store.reads[before:] if uri.startswith(log)] == [f"{3:020d}.json"]
    assert [relative for relative, *_ in store.listings[listed_before:] if "_delta_log/" in relative] == []


def test_with_same_task_a_small_tables_iceberg_table_is_written_in_the_same_call_right_after_its_export(
        lakefs, events):
    """`iceberg.same_task`, a cold export of at most LIGHT_COLD_PATHS paths: the same files in the
    same order as the export and its task write them, in one call."""
    commit = events.append(1, 2).append(3).commit()
    store = namespace(lakefs)
    written_before = len(store.written)
    location = export_location(SAME, "main", commit, "events")

    outcome = export_table(lake_of(SAME, lakefs), ExportAt("repo", "main", commit), events.descriptor)

    assert outcome.ok and outcome.iceberg == manifest(lakefs, location)["iceberg"]
    assert outcome.iceberg["state"] == "written" and sorted(outcome.iceberg["snapshot_ids"]) == ["0", "1"]
    written = store.written[written_before:]
    log, iceberg = [k for k in written if "/_delta_log/" in k], [k for k in written if k in iceberg_files(store, location)]
    assert written == [*log, location + MANIFEST, *iceberg, location + MANIFEST]
    assert iceberg[-1] == location + "metadata/v1.metadata.json"


def test_with_same_task_an_incremental_exports_iceberg_table_reads_nothing_of_its_log_or_manifests_back(
        lakefs, events):
    """`iceberg.same_task`: the export continues the parent's Iceberg table at once; the new commit
    and both exports' manifests are what the export just wrote or read: none is read back."""
    first = events.append(1).append(2).append(3).commit()  # versions 0-2
    export(lakefs, "main", first, events)
    second = events.append(4).commit()  # version 3
    store = namespace(lakefs)
    before = len(store.reads)

    outcome = export_table(lake_of(SAME, lakefs), ExportAt("repo", "main", second), events.descriptor)

    read = store.reads[before:]
    location = export_location(SAME, "main", second, "events")
    assert outcome.incremental and sorted(map(int, outcome.iceberg["snapshot_ids"])) == [0, 1, 2, 3]
    assert outcome.iceberg == manifest(lakefs, location)["iceberg"]
    assert [uri for uri in read if uri.startswith(store.uri(location))] == [store.uri(location + MANIFEST)]  # exists?
    assert read.count(store.uri(export_location(SAME, "main", first, "events") + MANIFEST)) == 1  # built on: once


def test_an_iceberg_step_a_store_error_stops_in_the_exports_call_is_left_pending_for_its_task(
        lakefs, events, monkeypatch):
    """`iceberg.same_task`: the export stands when its Iceberg step meets an error a retry may fix;
    the record says pending with why, and the task after (`export_iceberg`) writes the table."""
    first = events.append(1).append(2).append(3).commit()
    export(lakefs, "main", first, events)
    second = events.append(4).commit()
    location = export_location(SAME, "main", second, "events")
    put = MemoryStore.put

    def refused(self, relative, body, content_type="application/octet-stream"):
        if relative.startswith(location + "metadata/"):
            raise ServiceUnavailable("the store answered 503 to a put")
        return put(self, relative, body, content_type)

    with monkeypatch.context() as patched:
        patched.setattr(MemoryStore, "put", refused)
        outcome = export_table(lake_of(SAME, lakefs), ExportAt("repo", "main", second), events.descriptor)

    assert outcome.ok and outcome.incremental
    assert outcome.iceberg["state"] == "pending" and "503" in outcome.iceberg["reason"]
    assert manifest(lakefs, location)["iceberg"] == PENDING
    record = export_iceberg(lake_of(SAME, lakefs), "repo", "main", second, "events")
    assert record["state"] == "written" and sorted(map(int, record["snapshot_ids"])) == [0, 1, 2, 3]


def test_a_table_iceberg_cannot_represent_is_exported_as_delta_with_the_reason(lakefs, events):
    """A NullType column (`void`) has no Iceberg type: the export completes, its record says why,
    and nothing Iceberg is left behind."""
    data = events.folder / "part-0.parquet"
    events.folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64())}), data)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                           {"name": "nothing", "type": "void", "nullable": True, "metadata": {}}]}
    actions = [{"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
               {"metaData": {"id": "t", "format": {"provider": "parquet", "options": {}}, "schemaString": json.dumps(schema),
                             "partitionColumns": [], "configuration": {}, "createdTime": 0}},
               {"add": {"path": data.name, "partitionValues": {}, "size": data.stat().st_size, "modificationTime": 0,
                        "dataChange": True, "stats": json.dumps({"numRecords": 2})}}]
    (events.folder / "_delta_log").mkdir()
    (events.folder / "_delta_log" / "00000000000000000000.json").write_text("\n".join(map(json.dumps, actions)) + "\n")
    commit = events.commit()

    outcome = export(lakefs, "main", commit, events)

    location = export_location(ON, "main", commit, "events")
    assert outcome.iceberg["state"] == "refused" and "'nothing'" in outcome.iceberg["reason"]
    assert manifest(lakefs, location)["iceberg"] == outcome.iceberg
    assert iceberg_files(namespace(lakefs), location) == []
    assert namespace(lakefs).exists(location + "_delta_log/00000000000000000000.json")


def test_a_log_the_iceberg_writer_did_not_foresee_keeps_its_delta_export(lakefs, events, monkeypatch, caplog):
    """A bug in the Iceberg writer (here a TypeError from its manifests) never costs the Delta
    export: it completes, the record says `failed` with the error, nothing Iceberg is left, and the
    log says so in one line (the trace only at debug level: `lakefs-delta export` printed it whole)."""
    import logging

    import exporter.iceberg.manifest_set as manifest_set

    caplog.set_level(logging.INFO, logger="lakefs_delta.exporter")

    def broken(*args, **kwargs):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'")

    monkeypatch.setattr(manifest_set, "write_manifest", broken)
    commit = events.append(1).append(2).commit()

    outcome = export(lakefs, "main", commit, events)

    location = export_location(ON, "main", commit, "events")
    assert outcome.ok and outcome.iceberg["state"] == "failed", outcome
    assert outcome.iceberg["reason"].startswith("the Iceberg writer failed on this log: TypeError: unsupported")
    assert manifest(lakefs, location)["iceberg"] == outcome.iceberg
    assert iceberg_files(namespace(lakefs), location) == []
    [warning] = [r for r in caplog.records if "not written" in r.getMessage()]
    assert warning.exc_info is None and "TypeError: unsupported" in warning.getMessage()


def test_discarding_an_export_removes_its_iceberg_metadata_json_first(lakefs, events):
    commit = events.append(1).append(2).commit()
    export(lakefs, "main", commit, events)
    store = namespace(lakefs)
    location = export_location(ON, "main", commit, "events")
    deletes_before = len(store.deleted)

    discard_export(store, location)

    batches = [batch for batch in store.deleted[deletes_before:] if batch]
    assert batches[0] == [location + "metadata/v1.metadata.json"]
    assert location + MANIFEST in batches[1]
    assert store.list_keys(location) == []


def test_prune_deletes_an_exports_iceberg_table_with_it(lakefs, events, redis_url):
    old = events.append(1).commit()
    export(lakefs, "main", old, events)
    events.append(2).commit()
    config = Config(iceberg={"enabled": True}, redis_url=redis_url)
    store = namespace(lakefs)
    location = export_location(ON, "main", old, "events")
    deletes_before = len(store.deleted)

    plan = prune(lake_of(config, lakefs), "repo", config.retention.model_copy(update={"keep_last": 1, "keep_hours": 0}))

    assert plan.deleted == [store.uri(commit_root(ON, "main", old))]
    assert store.list_keys(location) == []
    assert [batch for batch in store.deleted[deletes_before:] if batch][0] == [location + "metadata/v0.metadata.json"]


def live_data_files(store: MemoryStore, metadata: dict, snapshot_id: int) -> list[str]:
    """The data files a snapshot of the table reads: every manifest of its list read from the store."""
    snapshot = next(s for s in metadata["snapshots"] if s["snapshot-id"] == snapshot_id)
    return sorted(entry["data_file"]["file_path"]
                  for listed in read_manifest_list(store.get_uri(snapshot["manifest-list"]))
                  for entry in read_manifest(store.get_uri(listed["manifest_path"])) if entry["status"] != 2)


def test_an_incremental_exports_table_names_its_parents_files_and_reads_every_version_once_the_parent_is_pruned(
        lakefs, events):
    first = events.append(1).append(2).commit()
    export(lakefs, "main", first, events)
    store = namespace(lakefs)
    parent = export_location(ON, "main", first, "events")
    parent_files = {key: store.get(key) for key in iceberg_files(store, parent) if not key.endswith(".metadata.json")}
    second = events.append(3).commit()

    outcome = export(lakefs, "main", second, events)
    discard_export(store, parent)  # prune removes the parent's export; its Iceberg files stay while named

    location = export_location(ON, "main", second, "events")
    assert outcome.incremental and sorted(outcome.iceberg["snapshot_ids"]) == ["0", "1", "2"]
    metadata = json.loads(store.get(location + "metadata/v2.metadata.json"))
    files = [lakefs.physical_address("repo", second, path) for path in events.data_files()]
    for version, count in (("0", 1), ("1", 2), ("2", 3)):  # time travel: each version's files
        live = live_data_files(store, metadata, outcome.iceberg["snapshot_ids"][version])
        assert len(live) == count and set(live) <= set(files), version
    # the parent's files are named where they are, as they were, not written again
    named = {s["manifest-list"] for s in metadata["snapshots"]}
    assert {store.uri(key) for key in parent_files if "/snap-" in key} <= named
    assert all(store.get(key) == body for key, body in parent_files.items())
    assert metadata["metadata-log"] == [] and store.uri(parent) not in json.dumps(metadata)


def test_an_incremental_export_whose_parent_has_no_iceberg_table_writes_its_own_fresh(lakefs, events):
    first = events.append(1).commit()
    export(lakefs, "main", first, events, config=OFF)
    second = events.append(2).commit()

    outcome = export(lakefs, "main", second, events)

    store = namespace(lakefs)
    location = export_location(ON, "main", second, "events")
    metadata = json.loads(store.get(location + "metadata/v1.metadata.json"))
    assert outcome.incremental and outcome.iceberg["state"] == "written"
    assert len(live_data_files(store, metadata, outcome.iceberg["snapshot_ids"]["1"])) == 2


def test_an_incremental_export_whose_parents_table_cannot_be_copied_writes_its_own_fresh(lakefs, events):
    """The parent's table unreadable (its current manifest list gone): the derivation stops, what it
    wrote is removed, and the table is written from the log."""
    first = events.append(1).append(2).commit()
    parent_record = export(lakefs, "main", first, events).iceberg
    store = namespace(lakefs)
    parent = export_location(ON, "main", first, "events")
    head = parent_record["snapshot_ids"]["1"]
    store.delete([key for key in iceberg_files(store, parent) if key.endswith(f"/snap-{head}.avro")])
    second = events.append(3).commit()

    outcome = export(lakefs, "main", second, events)

    location = export_location(ON, "main", second, "events")
    metadata = json.loads(store.get(location + "metadata/v2.metadata.json"))
    assert outcome.incremental and outcome.iceberg["state"] == "written"
    for version, count in (("0", 1), ("1", 2), ("2", 3)):
        assert len(live_data_files(store, metadata, outcome.iceberg["snapshot_ids"][version])) == count
    assert [key for key in iceberg_files(store, location) if key.endswith(".metadata.json")] == \
        [location + "metadata/v2.metadata.json"]


@pytest.mark.parametrize("read", ["footer", "deletion vector"])
@pytest.mark.parametrize("whose, where", [("other", "s3://lake/repo-other"), ("nested", "s3://lake/repo/nested-x")])
def test_the_iceberg_table_reads_no_object_of_another_repository_a_log_names(lakefs, events, tmp_path, read, whose,
                                                                             where):
    """The export keeps an absolute path as it is, never reading it; its Iceberg table would read the
    file's footer (no row count in its stats) or its deletion vector into a delete file of this
    repository's: refused unread, the record's reason naming the path and the namespace only."""
    lakefs.create_repository(whose, where)
    secret = SourceTable(lakefs, whose, "salaries", tmp_path / whose)
    secret.append(1_000_001, 1_000_002).commit()
    address = lakefs.physical_address(whose, "main", secret.data_files()[0])
    events.append(1, 2).commit()
    own = events.data_files()[0].removeprefix("tables/events/")
    add = {"path": address, "size": 500} if read == "footer" else {
        "path": own, "size": 500, "stats": json.dumps({"numRecords": 2}),
        "deletionVector": {"storageType": "p", "pathOrInlineDv": address, "offset": 1, "sizeInBytes": 34, "cardinality": 1}}
    action = {"add": {"partitionValues": {}, "modificationTime": 1, "dataChange": True, **add}}
    commit = events.commit(extra={f"tables/events/_delta_log/{1:020d}.json": (json.dumps(action) + "\n").encode()})

    outcome = export(lakefs, "main", commit, events)

    assert outcome.iceberg == {"state": "failed", "reason": str(PathOutsideRepository(address, "s3://lake/repo/"))}
    store = namespace(lakefs)
    assert address not in store.reads + [uri for uri, _, _ in store.range_reads]
    assert iceberg_files(store, export_location(ON, "main", commit, "events")) == []
