"""The row diff reads an absolute log path only inside the repository's storage namespace: a log
that names another repository's data file or deletion vector (a sibling namespace, one nested in
this one's, `_lakefs/`) is refused before anything is read, in words that say nothing of the object."""

from __future__ import annotations

import json

import pytest

from exporter.config import Config
from exporter.diff.rows.compute import RowDiffQuery, compute_row_diff
from exporter.errors import PathOutsideRepository
from exporter.storage.layout import export_location
from tests.fakes import FakeLakeFS
from tests.unit.source_tables import SourceTable
from tests.fakes import lake_of

pytestmark = pytest.mark.unit

CONFIG = Config(row_diff={"spark": {"master": ""}})


@pytest.fixture
def secrets(lakefs, tmp_path) -> dict[str, str]:
    """Physical addresses of data files of other repositories: one whose namespace shares this
    one's prefix (`repo-other`), one nested in this one's, and one that does not exist."""
    lakefs.create_repository("other", "s3://lake/repo-other")
    lakefs.create_repository("nested", "s3://lake/repo/nested-x")
    found = {}
    for repository in ("other", "nested"):
        table = SourceTable(lakefs, repository, "salaries", tmp_path / repository)
        table.append(1_000_001, 1_000_002).commit()
        found[repository] = lakefs.physical_address(repository, "main", table.data_files()[0])
    found["missing"] = "s3://lake/repo-other/data/nothing-here"
    found["export"] = "s3://lake/repo/" + export_location(CONFIG, "main", "a" * 64, "payroll") + "part-0.parquet"
    return found


def hostile_commit(events: SourceTable, version: int, add: dict) -> str:
    """A commit of the table's log whose one add action is `add` (with stats: the diff plans from them)."""
    action = {"add": {"partitionValues": {}, "size": 500, "modificationTime": 1, "dataChange": True,
                      "stats": json.dumps({"numRecords": 2}), **add}}
    return events.commit(extra={f"tables/events/_delta_log/{version:020d}.json": (json.dumps(action) + "\n").encode()})


def reads(lakefs: FakeLakeFS) -> list[str]:
    store = lakefs.store.at("s3://lake/repo")
    return store.reads + [uri for uri, _, _ in store.range_reads]


@pytest.mark.parametrize("whose", ["other", "nested", "missing", "export"])
def test_a_data_file_of_another_repository_is_refused_unread(lakefs, events, secrets, whose):
    first = events.append(1, 2).commit()
    second = hostile_commit(events, 1, {"path": secrets[whose]})

    with pytest.raises(PathOutsideRepository) as refused:
        compute_row_diff(lake_of(CONFIG, lakefs), RowDiffQuery("repo", first, second, "tables/events"))

    # the path and the namespace, and nothing else: the same words whether the object exists or not
    assert str(refused.value) == str(PathOutsideRepository(secrets[whose], "s3://lake/repo/"))
    assert secrets[whose] not in reads(lakefs)


@pytest.mark.parametrize("whose", ["other", "nested"])
def test_a_deletion_vector_of_another_repository_is_refused_unread(lakefs, events, secrets, whose):
    first = events.append(1, 2).commit()
    own = events.data_files()[0].removeprefix("tables/events/")
    second = hostile_commit(events, 1, {"path": own, "deletionVector": {
        "storageType": "p", "pathOrInlineDv": secrets[whose], "offset": 1, "sizeInBytes": 34, "cardinality": 1}})

    with pytest.raises(PathOutsideRepository) as refused:
        compute_row_diff(lake_of(CONFIG, lakefs), RowDiffQuery("repo", first, second, "tables/events"))

    assert str(refused.value) == str(PathOutsideRepository(secrets[whose], "s3://lake/repo/"))
    assert secrets[whose] not in reads(lakefs)


def test_an_absolute_path_to_the_repositorys_own_data_file_is_read(lakefs, events, secrets):
    first = events.append(1, 2).commit()
    path = events.data_files()[0]
    own, size = lakefs.physical_address("repo", first, path), len(lakefs.get_object("repo", first, path))
    second = hostile_commit(events, 1, {"path": own.replace("s3://", "s3a://"), "size": size})

    answer = compute_row_diff(lake_of(CONFIG, lakefs), RowDiffQuery("repo", first, second, "tables/events"))

    assert answer["counts"] == {"added": 2, "removed": 0, "updated": 0}
