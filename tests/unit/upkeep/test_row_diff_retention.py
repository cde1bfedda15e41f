"""Rows files of row diffs belong to the retention of what they describe: prune removes one with the
last export of its right-hand commit, keeps those of exported commits and branch heads; verify names
the ones no export accounts for."""

from __future__ import annotations

import pytest

from exporter.config import Config
from exporter.export.commit import export_table
from exporter.export.job import ExportAt
from exporter.upkeep.retention import orphan_row_diffs, prune, verify
from exporter.storage.layout import row_diff_location
from tests.fakes import lake_of

pytestmark = pytest.mark.unit


def test_prune_removes_the_rows_files_of_the_exports_it_removes_and_verify_names_orphans(lakefs, events, redis_url):
    config = Config(iceberg={"enabled": False}, redis_url=redis_url)
    old = events.append(1).commit()
    assert export_table(lake_of(config, lakefs), ExportAt("repo", "main", old), events.descriptor).ok
    middle = events.append(2).commit()  # never exported, not a head
    head = events.append(3).commit()
    assert export_table(lake_of(config, lakefs), ExportAt("repo", "main", head), events.descriptor).ok
    store = lakefs.store.at(lakefs.storage_namespace("repo"))
    rows = {name: row_diff_location(config, left, right, "tables/events", "-")
            for name, left, right in (("old", None, old), ("middle", old, middle), ("head", middle, head))}
    for location in rows.values():
        store.put(location, b"PAR1")

    assert orphan_row_diffs(lake_of(config, lakefs), "repo") == [store.uri(rows["middle"])]
    assert verify(lake_of(config, lakefs), "repo", "main", "events",
                  head).orphan_row_diffs == [store.uri(rows["middle"])]

    dry = prune(lake_of(config, lakefs), "repo",
                config.retention.model_copy(update={"keep_last": 1, "keep_hours": 0}), dry_run=True)
    assert sorted(dry.row_diffs_deleted) == sorted(store.uri(rows[n]) for n in ("old", "middle"))
    assert all(store.exists(location) for location in rows.values())  # a dry run deletes nothing

    plan = prune(lake_of(config, lakefs), "repo", config.retention.model_copy(update={"keep_last": 1, "keep_hours": 0}))
    assert sorted(plan.row_diffs_deleted) == sorted(store.uri(rows[n]) for n in ("old", "middle"))
    assert [n for n, location in rows.items() if store.exists(location)] == ["head"]
    assert orphan_row_diffs(lake_of(config, lakefs), "repo") == []


def test_a_young_rows_file_stays_whatever_it_compares(lakefs, events, redis_url):
    config = Config(iceberg={"enabled": False}, redis_url=redis_url)
    first = events.append(1).commit()
    events.append(2).commit()
    store = lakefs.store.at(lakefs.storage_namespace("repo"))
    location = row_diff_location(config, None, first, "tables/events", "id")
    store.put(location, b"PAR1")
    written = max(modified for _, _, modified in store.list_objects(""))  # the fake store's clock
    policy = config.retention.model_copy(update={"keep_last": 1, "keep_hours": 1})
    assert prune(lake_of(config, lakefs), "repo", policy,
                 now=written + 60).row_diffs_deleted == [] and store.exists(location)
    assert prune(lake_of(config, lakefs), "repo", policy, now=written + 3601).row_diffs_deleted == [store.uri(location)]
