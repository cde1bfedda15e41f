"""Incremental export: a commit whose table only gained objects since its first parent reuses the
parent's complete export (the same bytes a cold export writes, one lakeFS stat per new path);
anything else exports cold, saying why. A tag on an exported commit copies that export."""

from __future__ import annotations

import dataclasses
import json

import pytest

import exporter
from exporter.config import Config
from exporter.errors import LockLost, MissingDataFiles
from exporter.export import incremental
from exporter.export.commit import export_table
from exporter.export.job import ExportAt
from exporter.export.incremental import ColdExportNeeded, export_incrementally
from exporter.export.job import ExportJob
from exporter.export.log_writer import ExportOutcome
from exporter.storage.layout import MANIFEST, export_location
from tests.fakes import FakeLakeFS, MemoryStore
from tests.unit.source_tables import SourceTable
from tests.fakes import lake_of

pytestmark = pytest.mark.unit

CONFIG = Config(iceberg={"enabled": False})  # the Delta log's files and requests; the Iceberg face: test_iceberg_exports.py


def namespace(lakefs: FakeLakeFS) -> MemoryStore:
    return lakefs.store.at(lakefs.storage_namespace("repo"))


def exported(lakefs: FakeLakeFS, ref: str, commit_id: str, table: str = "events") -> dict[str, bytes]:
    """The export's files by name under its folder."""
    location = export_location(CONFIG, ref, commit_id, table)
    return {name[len(location):]: raw for name, raw in namespace(lakefs).objects.items() if name.startswith(location)}


def manifest(lakefs: FakeLakeFS, ref: str, commit_id: str, table: str = "events") -> dict:
    return json.loads(exported(lakefs, ref, commit_id, table)[MANIFEST])


def export(lakefs: FakeLakeFS, ref: str, commit_id: str, table: SourceTable, **options) -> ExportOutcome:
    """Exported, and its manifest names every file of its log with its size, as written (what its
    Iceberg step reads instead of listing the log), whichever way it was written."""
    outcome = export_table(lake_of(CONFIG, lakefs), ExportAt("repo", ref, commit_id), table.descriptor, **options)
    assert outcome.ok, outcome.error
    asked = len(lakefs.requests)
    written = {name.removeprefix("_delta_log/"): len(raw) for name, raw in exported(lakefs, ref, commit_id, table.descriptor.name).items()
               if name.startswith("_delta_log/")}
    assert written and manifest(lakefs, ref, commit_id, table.descriptor.name)["log_files"] == written
    del lakefs.requests[asked:]  # this check's own lookups are not the export's
    return outcome


def test_a_commit_that_only_gained_files_copies_the_parents_export_and_writes_what_a_cold_export_writes(
        lakefs, events):
    first = events.append(1, 2).append(3).commit()
    cold_first = export(lakefs, "main", first, events)
    second = events.append(4).commit()
    calls_before = len(lakefs.requests)

    outcome = export(lakefs, "main", second, events)

    assert not cold_first.incremental
    assert cold_first.cold_reason == "the parent commit has no complete export under this ref"
    assert outcome.incremental and outcome.cold_reason == ""
    assert (outcome.head_version, outcome.versions, outcome.files_rewritten) == (2, 1, 1)
    assert manifest(lakefs, "main", second)["derived_from"] == namespace(lakefs).uri(
        export_location(CONFIG, "main", first, "events"))
    # lakeFS was asked for the log's listing and one stat per path of the new commit: no listing of the data
    requests = lakefs.requests[calls_before:]
    assert [r for r in requests if r[0] == "list_objects"] == [("list_objects", "repo", second, "tables/events/_delta_log/")]
    assert [r[3] for r in requests if r[0] == "physical_address"] == [events.data_files()[-1]]

    cold = export(lakefs, "cold", second, events)  # no parent's export under this ref: cold
    assert not cold.incremental
    incremental_files, cold_files = exported(lakefs, "main", second), exported(lakefs, "cold", second)
    assert incremental_files.keys() == cold_files.keys()
    assert {n: raw for n, raw in incremental_files.items() if n != MANIFEST} == \
        {n: raw for n, raw in cold_files.items() if n != MANIFEST}
    kept = ("versions", "head_version", "checkpoint_version", "source_timestamps_ms", "table_path")
    assert {k: manifest(lakefs, "main", second)[k] for k in kept} == {k: manifest(lakefs, "cold", second)[k] for k in kept}


def test_the_changes_handed_over_by_the_task_that_chose_the_tables_are_not_asked_again(lakefs, events):
    """`export_commit` found the commit's parent and its changes choosing the tables: each table's
    export takes them from its message (`known`), and asks lakeFS for neither; its export is the
    same. Changes that are not only additions still export cold."""
    from exporter.lakefs.descriptors import commit_changes, known_changes

    first = events.append(1).commit()
    export(lakefs, "main", first, events)
    second = events.append(2).commit()
    parent = lakefs.commit("repo", second).parents[0]
    commit_changes(lakefs, "repo", parent, second)  # as `changed_tables` read it in the choosing process
    known = known_changes(lakefs, "repo", second, events.descriptor)
    assert known is not None and known.parent == parent
    assert sorted(c["path"] for c in known.changes) == sorted(
        ["tables/events/_delta_log/00000000000000000001.json", events.data_files()[-1]])
    calls_before = len(lakefs.requests)

    outcome = export(lakefs, "main", second, events, known=known)

    assert outcome.incremental
    assert not [r for r in lakefs.requests[calls_before:] if r[0] in ("commit", "diff")]
    assert exported(lakefs, "main", second).keys() == exported(lakefs, "main", first).keys() | {
        "_delta_log/00000000000000000001.json"}
    overwritten = dataclasses.replace(known, changes=(*known.changes, {"path": events.data_files()[0],
                                                                       "type": "changed"}))
    store = namespace(lakefs)
    with pytest.raises(ColdExportNeeded, match="was changed since the parent"):
        export_incrementally(ExportJob(CONFIG, lakefs, store, "repo", "main", second, events.descriptor,
                                       known=overwritten))


def test_each_added_path_resolves_to_the_objects_physical_address(lakefs, events):
    first = events.append(1).commit()
    export(lakefs, "main", first, events)
    second = events.append(2).commit()

    export(lakefs, "main", second, events)

    new_commit = exported(lakefs, "main", second)["_delta_log/00000000000000000001.json"]
    adds = [json.loads(line)["add"]["path"] for line in new_commit.splitlines() if b'"add"' in line]
    assert adds == [lakefs.physical_address("repo", second, events.data_files()[-1])]


@pytest.mark.parametrize("change, reason", [
    ("remove", "tables/events/{file} was removed since the parent"),
    ("overwrite", "tables/events/{file} was changed since the parent"),
    ("last_checkpoint", "the table gained a _last_checkpoint since the parent"),
    ("checkpoint", "a new checkpoint (version 1) since the parent"),
])
def test_anything_but_new_objects_exports_cold_saying_why(lakefs, events, change, reason):
    first = events.append(1).commit()
    export(lakefs, "main", first, events)
    events.append(2)
    data_file = events.data_files()[0]
    if change == "remove":  # a vacuum after a delete, say: the file's object is gone
        second = events.commit(extra={data_file: None})
    elif change == "overwrite":
        second = events.commit(extra={data_file: b"other bytes"})
    elif change == "last_checkpoint":
        second = events.checkpoint().commit()
    else:  # a checkpoint whose writer left `_last_checkpoint` as it was
        second = events.checkpoint().commit(leave_out=["_delta_log/_last_checkpoint"])

    outcome = export_table(lake_of(CONFIG, lakefs), ExportAt("repo", "main", second), events.descriptor)

    assert not outcome.incremental
    assert outcome.cold_reason == reason.format(file=data_file.removeprefix("tables/events/"))
    if change in ("last_checkpoint", "checkpoint"):
        assert outcome.ok and outcome.checkpoint_version == 1
        assert "_delta_log/00000000000000000001.checkpoint.parquet" in exported(lakefs, "main", second)


def test_an_export_after_a_checkpoint_copies_it_and_its_manifest_names_each_file_with_its_size(lakefs, events):
    first = events.append(1).append(2).checkpoint().commit()
    export(lakefs, "main", first, events)  # cold, its checkpoint rewritten (`export` checks the sizes named)
    second = events.append(3).commit()

    outcome = export(lakefs, "main", second, events)

    assert outcome.incremental and outcome.checkpoint_version == 1
    assert set(manifest(lakefs, "main", second)["log_files"]) == {
        "00000000000000000001.checkpoint.parquet", "_last_checkpoint", "00000000000000000001.json",
        "00000000000000000002.json"}


def test_a_parent_exported_by_another_exporter_version_or_at_another_path_is_not_reused(lakefs, events, monkeypatch):
    first = events.append(1).commit()
    export(lakefs, "main", first, events)
    second = events.append(2).commit()
    moved = dataclasses.replace(events.descriptor, path="tables/events-v2")
    assert export_incrementally_reason(lakefs, second, moved) == \
        "the parent's export cannot be built on: it is of another table path ('tables/events')"

    monkeypatch.setattr(exporter, "__version__", "9.9.9")
    outcome = export(lakefs, "main", second, events)
    assert not outcome.incremental
    assert outcome.cold_reason == ("the parent's export cannot be built on: it was exported by exporter "
                                   f"{manifest(lakefs, 'main', first)['exporter_version']}")
    assert manifest(lakefs, "main", second)["exporter_version"] == "9.9.9"


def export_incrementally_reason(lakefs: FakeLakeFS, commit_id: str, table) -> str:
    """Why `export_incrementally` refuses (it writes nothing then)."""
    store = namespace(lakefs)
    before = dict(store.objects)
    with pytest.raises(ColdExportNeeded) as refused:
        export_incrementally(ExportJob(CONFIG, lakefs, store, "repo", "main", commit_id, table))
    assert store.objects == before
    return str(refused.value)


def test_a_commit_without_a_parent_exports_cold(lakefs, events):
    initial = lakefs.log("repo", "main")[-1].id
    assert export_incrementally_reason(lakefs, initial, events.descriptor) == "the commit has no parent"


def test_new_commits_naming_more_files_than_are_worth_a_stat_each_export_cold(lakefs, events, monkeypatch):
    monkeypatch.setattr(incremental, "MAX_STATS", 2)
    first = events.append(1).commit()
    export(lakefs, "main", first, events)
    second = events.append(2).append(3).append(4).commit()  # three new files

    outcome = export(lakefs, "main", second, events)

    assert not outcome.incremental and outcome.cold_reason == "the new commits name more than 2 files"
    assert outcome.head_version == 3


def test_a_new_commit_whose_file_is_missing_fails_and_leaves_nothing(lakefs, events):
    first = events.append(1).commit()
    export(lakefs, "main", first, events)
    events.append(2)
    new_file = next(p for p in events.folder.glob("*.parquet")
                    if f"tables/events/{p.name}" not in events.data_files())
    second = events.commit(leave_out=[new_file.name])  # the commit names a file lakeFS does not hold

    outcome = export_table(lake_of(CONFIG, lakefs), ExportAt("repo", "main", second), events.descriptor)

    assert not outcome.ok and outcome.permanent
    assert outcome.error == str(MissingDataFiles("events", [new_file.name]))
    assert exported(lakefs, "main", second) == {}
    assert exported(lakefs, "main", first)  # the parent's export is untouched


def test_a_tag_on_an_exported_commit_copies_its_export(lakefs, events):
    first = events.append(1).commit()
    export(lakefs, "main", first, events)
    lakefs.create_tag("repo", "v1.0+rc", first)
    calls_before = len(lakefs.requests)

    outcome = export(lakefs, "v1.0+rc", first, events, copy_from=("elsewhere", "main"))
    requests = lakefs.requests[calls_before:]

    assert outcome.incremental and outcome.head_version == 0
    tagged = manifest(lakefs, "v1.0+rc", first)
    assert tagged["ref"] == "v1.0+rc" and tagged["location"] == outcome.location
    assert tagged["derived_from"] == namespace(lakefs).uri(export_location(CONFIG, "main", first, "events"))
    assert {n: raw for n, raw in exported(lakefs, "v1.0+rc", first).items() if n != MANIFEST} == \
        {n: raw for n, raw in exported(lakefs, "main", first).items() if n != MANIFEST}
    assert [r[0] for r in requests] == ["storage_namespace"]  # nothing read through lakeFS


@pytest.mark.parametrize("ref, copy_from", [("v1", ("main",)), ("main", ())])
def test_an_export_copied_from_one_that_prune_removes_meanwhile_is_exported_cold(lakefs, events, monkeypatch, ref,
                                                                                 copy_from):
    """Prune holds the source export's lock, not this one's: the source may vanish mid-copy (a tag
    copying a branch's export, a commit copying its parent's). That is a cold export, not a failure."""
    from exporter.export.log_writer import discard_export

    first = events.append(1).commit()
    export(lakefs, "main", first, events)
    commit = first
    if ref == "main":
        commit = events.append(2).commit()  # only gained files: copies the parent's export
    else:
        lakefs.create_tag("repo", ref, first)
    store = namespace(lakefs)
    copy, pruned = store.copy, []

    def copy_while_pruned(source: str, target: str) -> None:
        if not pruned:  # prune removes the source export just before the first copy
            pruned.append(discard_export(store, export_location(CONFIG, "main", first, "events")))
        copy(source, target)

    monkeypatch.setattr(store, "copy", copy_while_pruned)
    outcome = export(lakefs, ref, commit, events, copy_from=copy_from)

    assert pruned and outcome.ok, outcome.error
    assert not outcome.incremental and outcome.cold_reason  # exported cold
    assert manifest(lakefs, ref, commit)["head_version"] == (0 if ref == "v1" else 1)
    assert manifest(lakefs, ref, commit).get("derived_from") is None


def test_an_existing_export_is_not_written_again(lakefs, events):
    first = events.append(1).commit()
    export(lakefs, "main", first, events)
    written = list(namespace(lakefs).written)

    outcome = export(lakefs, "main", first, events)

    assert outcome.skipped and namespace(lakefs).written == written


@pytest.mark.parametrize("cold", [True, False])
def test_an_export_whose_lock_was_lost_stops_before_the_table_exists(lakefs, events, cold):
    first = events.append(1).commit()
    if not cold:
        export(lakefs, "main", first, events)
    second = events.append(2).commit()

    def lost() -> None:
        raise LockLost("the lock 'x' expired and is no longer this worker's: stopped before writing")

    outcome = export_table(lake_of(CONFIG, lakefs), ExportAt("repo", "main", second), events.descriptor,
                           still_held=lost)

    assert not outcome.ok and not outcome.permanent and "expired" in outcome.error
    written = exported(lakefs, "main", second)
    assert MANIFEST not in written and "_delta_log/00000000000000000000.json" not in written  # no table to read
    assert (outcome.cold_reason != "") is cold  # stopped in the cold export, or in the incremental one
