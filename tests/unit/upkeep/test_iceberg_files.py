"""Prune's collection of the Iceberg files exports share: a file goes once no export's table names
it, found so by two collections a grace apart; a file an export names meanwhile stays."""

from __future__ import annotations

import json

import pytest

from exporter.config import Config
from exporter.storage.layout import MANIFEST, export_location, iceberg_files_location
from exporter.upkeep.iceberg_files import CANDIDATES, collect_iceberg_files
from exporter.upkeep.retention import iceberg_grace_seconds, prune
from tests.fakes import lake_of
from tests.unit.export.test_iceberg_exports import export, live_data_files, namespace

pytestmark = pytest.mark.unit


def files_of(store, location: str) -> list[str]:
    return store.list_keys(iceberg_files_location(location))


def parent_and_child(lakefs, events, config: Config):
    """Two commits exported with their Iceberg tables, the second's derived from the first's: the
    store, both export locations and the second's outcome."""
    first = events.append(1).commit()
    export(lakefs, "main", first, events)
    second = events.append(2).commit()
    derived = export(lakefs, "main", second, events)
    return (namespace(lakefs), export_location(config, "main", first, "events"),
            export_location(config, "main", second, "events"), derived)


def test_an_exports_iceberg_files_outlive_it_while_a_later_export_names_them_and_go_after(lakefs, events, redis_url):
    config = Config(iceberg={"enabled": True}, redis_url=redis_url)
    store, parent, child, derived = parent_and_child(lakefs, events, config)
    parents_files = files_of(store, parent)
    stray = iceberg_files_location(child) + "metadata/123-m9.avro"  # a write killed before it cleaned up
    store.put(stray, b"Obj")
    written = max(modified for _, _, modified in store.list_objects(""))  # the fake store's clock
    grace = iceberg_grace_seconds(config)
    policy = config.retention.model_copy(update={"keep_last": 1, "keep_hours": 0})

    plan = prune(lake_of(config, lakefs), "repo", policy, now=written + grace + 1)

    assert plan.deleted == [store.uri(parent.rstrip("/").rsplit("/", 1)[0] + "/")]  # its commit folder
    assert not store.exists(parent + MANIFEST) and files_of(store, parent) == parents_files  # named by the child
    assert (plan.iceberg_files_deleted, plan.iceberg_files_unnamed) == (0, 1) and store.exists(stray)

    again = prune(lake_of(config, lakefs), "repo", policy, now=written + 2 * grace + 2)

    assert again.iceberg_files_deleted == 1 and not store.exists(stray)
    assert files_of(store, parent) == parents_files
    metadata = json.loads(store.get_uri(derived.iceberg["metadata_location"]))
    for version, count in (("0", 1), ("1", 2)):
        assert len(live_data_files(store, metadata, derived.iceberg["snapshot_ids"][version])) == count

    # the child pruned too (a newer head): now nothing names the parent's files or its own
    third = events.append(3).commit()
    export(lakefs, "main", third, events, config=Config(iceberg={"enabled": False}))
    later = max(modified for _, _, modified in store.list_objects("")) + 3 * grace
    assert prune(lake_of(config, lakefs), "repo", policy, now=later).iceberg_files_unnamed == \
        len(parents_files) + len(files_of(store, child))
    assert prune(lake_of(config, lakefs), "repo", policy, now=later + grace).iceberg_files_deleted > 0
    assert files_of(store, parent) == files_of(store, child) == []


def test_a_file_an_export_names_after_a_collection_found_it_unnamed_stays(lakefs, events, redis_url):
    """The race: an export derives its table from one prune removes. The first collection runs
    while the deriving export's table is not written yet (its record hidden here, as in flight): the
    parent's files are unnamed. Once the table is written, the second collection finds them named."""
    config = Config(iceberg={"enabled": True}, redis_url=redis_url)
    store, parent, child, derived = parent_and_child(lakefs, events, config)
    parents_files = files_of(store, parent)
    written = max(modified for _, _, modified in store.list_objects(""))
    grace = iceberg_grace_seconds(config)
    in_flight = store.get(child + MANIFEST)
    store.delete([child + MANIFEST])
    store.delete([parent + MANIFEST])  # the parent pruned

    first_run = collect_iceberg_files(store, config, written + grace + 1, grace)

    assert first_run.deleted == [] and first_run.candidates >= len(parents_files)
    store.put(child + MANIFEST, in_flight)  # the deriving export's table is written: it names them

    second_run = collect_iceberg_files(store, config, written + 2 * grace + 2, grace)

    assert second_run.deleted == [] and files_of(store, parent) == parents_files
    assert not store.exists(iceberg_files_location(parent).rsplit("/", 4)[0] + "/events/" + CANDIDATES)
    metadata = json.loads(store.get_uri(derived.iceberg["metadata_location"]))
    assert len(live_data_files(store, metadata, derived.iceberg["snapshot_ids"]["0"])) == 1
