"""Commit times as Delta's readers take them: a time not after the previous version's becomes that
one + 1 ms, so times increase with the version even when file modification times go backwards."""

from __future__ import annotations

import pytest

from exporter.delta.actions import after, increasing
from tests.fakes import lake_of

pytestmark = pytest.mark.unit


def test_commit_times_increase_with_the_version_as_delta_readers_make_them():
    assert after(None, 500) == 500
    assert after(100, 101) == 101
    assert after(102, 101) == 103 and after(102, 102) == 103
    # version 5's file was written before version 4's, and version 6 a year earlier still (a copy)
    assert increasing({6: 1_000, 3: 100_000, 4: 102_000, 5: 101_000}) == {3: 100_000, 4: 102_000, 5: 102_001,
                                                                           6: 102_002}
    assert increasing({}) == {}


def test_the_versions_before_the_first_read_count_by_their_file_times():
    """A checkpoint at version 3 whose file is 14 s older than version 2's: Delta's readers give
    version 3 version 2's time + 1 ms, though the export reads nothing before version 3."""
    from exporter.delta.actions import commit_times

    file_times = {0: 1_000, 1: 2_000, 2: 30_000, 3: 16_000, 4: 17_000}
    assert commit_times({3: 16_000, 4: 17_000}, file_times) == {3: 30_001, 4: 30_002}
    assert commit_times({3: 40_000, 4: 41_000}, file_times) == {3: 40_000, 4: 41_000}  # in-commit times: kept
    assert commit_times({}, file_times) == {}


def test_an_export_starting_at_a_checkpoint_records_the_commit_times_delta_gives_its_versions(lakefs, tmp_path):
    """The export reads from the checkpoint on; its manifest's source times are those Delta's readers
    compute over the whole log (Iceberg snapshot times and sharing's follow the manifest)."""
    import dataclasses
    import json

    from exporter.config import Config
    from exporter.export.commit import export_table
    from exporter.export.job import ExportAt
    from exporter.storage.layout import MANIFEST, export_location
    from tests.unit.source_tables import SourceTable

    events = SourceTable(lakefs, "repo", "events", tmp_path / "events")
    for n in range(3):
        events.append(n).commit()
    head = events.append(3).checkpoint().commit()  # version 3 and its checkpoint
    tree = lakefs._repositories["repo"].trees[head]
    times = {f"tables/events/_delta_log/{v:020d}.json": t for v, t in ((0, 1_000), (1, 2_000), (2, 30_000), (3, 16_000))}
    for path, seconds in times.items():  # version 2's file written 14 s after version 3's (a copy, clock skew)
        tree[path] = dataclasses.replace(tree[path], mtime=seconds)

    config = Config(iceberg={"enabled": False})
    outcome = export_table(lake_of(config, lakefs), ExportAt("repo", "main", head), events.descriptor)
    assert outcome.ok and outcome.checkpoint_version == 3, outcome.error
    manifest = json.loads(lakefs.store.at("s3://lake/repo").get(export_location(config, "main", head, "events") + MANIFEST))
    assert manifest["source_timestamps_ms"]["3"] == 30_000_001  # not 16_000_000: version 2's time + 1 ms
