"""Choosing the checkpoint and commits to export from a `_delta_log` listing; reading actions."""

import pytest

from exporter.delta.actions import check_protocol, parse_actions
from exporter.delta.log import Checkpoint, LogListing, select_segment
from exporter.errors import CorruptLog, TableNotFound, UnsupportedTable

pytestmark = pytest.mark.unit


def commit(version: int) -> str:
    return f"{version:020d}.json"


def listing(*names: str) -> LogListing:
    return LogListing.from_names((name, 100) for name in names)


def commits(first: int, last: int) -> list[str]:
    return [commit(version) for version in range(first, last + 1)]


def test_newest_classic_checkpoint_and_the_commits_after_it() -> None:
    segment = select_segment(
        listing(*commits(0, 12), f"{5:020d}.checkpoint.parquet", f"{10:020d}.checkpoint.parquet", "_last_checkpoint")
    )
    assert segment.checkpoint == Checkpoint(10, "classic", [f"{10:020d}.checkpoint.parquet"])
    assert segment.commits == [(11, commit(11)), (12, commit(12))]
    assert segment.checkpoint_commit == commit(10)
    assert segment.head_version == 12


def test_without_a_checkpoint_every_commit_from_zero_is_exported() -> None:
    segment = select_segment(listing(*commits(0, 2)))
    assert segment.checkpoint is None
    assert segment.commits == [(0, commit(0)), (1, commit(1)), (2, commit(2))]
    assert segment.checkpoint_commit is None
    assert segment.head_version == 2


def test_multipart_checkpoint_parts_come_in_part_order() -> None:
    parts = [f"{10:020d}.checkpoint.{part:010d}.{3:010d}.parquet" for part in (3, 1, 2)]
    segment = select_segment(listing(*commits(8, 11), *parts))
    assert segment.checkpoint == Checkpoint(10, "multipart", sorted(parts))


def test_multipart_checkpoint_with_a_missing_part_yields_to_an_older_complete_one() -> None:
    incomplete = [f"{10:020d}.checkpoint.{part:010d}.{3:010d}.parquet" for part in (1, 3)]
    segment = select_segment(listing(*commits(4, 11), f"{5:020d}.checkpoint.parquet", *incomplete))
    assert segment.checkpoint == Checkpoint(5, "classic", [f"{5:020d}.checkpoint.parquet"])
    assert [version for version, _ in segment.commits] == list(range(6, 12))


def test_v2_uuid_named_checkpoint_and_its_sidecars_are_found() -> None:
    v2 = f"{10:020d}.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json"
    # Delta Spark names sidecars like this, not by a bare UUID.
    sidecar = f"_sidecars/{10:020d}.checkpoint.{1:010d}.{1:010d}.dff7658d-beae-41c1-aeb6-44e0cb0b082e.parquet"
    log = listing(*commits(10, 11), v2, sidecar, "_sidecars/016ae953-37a9-438e-8683-9a9a4a79a395.parquet")
    segment = select_segment(log)
    assert segment.checkpoint == Checkpoint(10, "v2", [v2])
    assert log.sidecar(sidecar.removeprefix("_sidecars/")) == sidecar
    assert log.sidecar("016ae953-37a9-438e-8683-9a9a4a79a395.parquet") is not None
    assert log.sidecar("gone.parquet") is None


def test_v2_parquet_checkpoint_is_found() -> None:
    v2 = f"{20:020d}.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.parquet"
    assert select_segment(listing(*commits(19, 21), v2)).checkpoint == Checkpoint(20, "v2", [v2])


def test_classic_is_preferred_over_v2_at_the_same_version() -> None:
    v2 = f"{10:020d}.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.parquet"
    classic = f"{10:020d}.checkpoint.parquet"
    assert select_segment(listing(*commits(10, 10), v2, classic)).checkpoint.kind == "classic"


@pytest.mark.parametrize("hint", [5, 20, None])
def test_a_stale_last_checkpoint_hint_is_ignored(hint: int | None) -> None:
    names = [*commits(3, 12), f"{5:020d}.checkpoint.parquet", f"{10:020d}.checkpoint.parquet"]
    segment = select_segment(listing(*names), last_checkpoint_hint=hint)
    assert segment.checkpoint.version == 10
    assert segment.head_version == 12


def test_a_checkpoint_newer_than_every_commit_is_the_head() -> None:
    segment = select_segment(listing(*commits(0, 9), f"{10:020d}.checkpoint.parquet"))
    assert (segment.checkpoint.version, segment.head_version, segment.commits) == (10, 10, [])
    assert segment.checkpoint_commit is None


def test_files_that_are_not_commits_or_checkpoints_are_ignored() -> None:
    segment = select_segment(
        listing(
            *commits(0, 2),
            f"{2:020d}.crc",
            f"{0:020d}.{2:020d}.compacted.json",
            f".{3:020d}.json.3f2a.tmp",
            f"{3:020d}.json.tmp",
            f"_staged_commits/{3:020d}.7d17ac10-5cc3-401b-bd1a-9c82dd2ea032.json",
            f"_commits/{3:020d}.7d17ac10-5cc3-401b-bd1a-9c82dd2ea032.json",
            f"{3:020d}.checkpoint.parquet.crc",
            "_last_checkpoint",
        )
    )
    assert segment.head_version == 2
    assert segment.checkpoint is None


def test_a_gap_after_the_checkpoint_names_the_missing_versions() -> None:
    names = [*commits(10, 20), f"{10:020d}.checkpoint.parquet"]
    names.remove(commit(13))
    names.remove(commit(14))
    names.remove(commit(17))
    with pytest.raises(CorruptLog, match=r"missing commit\(s\) 13-14, 17 between checkpoint 10 and head version 20"):
        select_segment(listing(*names))


def test_a_gap_before_the_checkpoint_does_not_matter() -> None:
    segment = select_segment(listing(commit(0), *commits(9, 11), f"{10:020d}.checkpoint.parquet"))
    assert segment.commits == [(11, commit(11))]


def test_without_a_checkpoint_commit_zero_must_exist() -> None:
    with pytest.raises(CorruptLog, match=r"missing commit\(s\) 0-4 between version 0 .*no complete checkpoint"):
        select_segment(listing(*commits(5, 7)))


def test_a_log_with_no_commit_and_no_checkpoint_is_corrupt() -> None:
    with pytest.raises(CorruptLog, match="no commit"):
        select_segment(listing("_last_checkpoint", f"{1:020d}.crc"))


def test_no_delta_log_entries_means_no_table() -> None:
    with pytest.raises(TableNotFound):
        select_segment(listing())


def test_parse_actions_reads_newline_delimited_json_and_skips_blank_lines() -> None:
    raw = b'{"commitInfo":{"n":12345678901234567890123}}\n\n{"add":{"path":"a"}}\r\n'
    assert parse_actions("00000000000000000001.json", raw) == [
        {"commitInfo": {"n": 12345678901234567890123}},
        {"add": {"path": "a"}},
    ]


def test_an_unparsable_line_names_the_file_and_line() -> None:
    raw = b'{"commitInfo":{}}\n\n{"add":{"path":\n'
    with pytest.raises(CorruptLog, match=r"00000000000000000007\.json line 3: not valid JSON"):
        parse_actions("00000000000000000007.json", raw)


def test_a_line_that_is_not_an_object_is_corrupt() -> None:
    with pytest.raises(CorruptLog, match=r"x\.json line 2: an action must be a JSON object"):
        parse_actions("x.json", b'{"txn":{}}\n[1,2]\n')


def protocol(reader: int = 3, writer: int = 7, readers: list[str] | None = None, writers: list[str] | None = None):
    action: dict = {"minReaderVersion": reader, "minWriterVersion": writer}
    if readers is not None:
        action["readerFeatures"] = readers
    if writers is not None:
        action["writerFeatures"] = writers
    return {"protocol": action}


def test_known_features_are_accepted() -> None:
    check_protocol(
        [
            {"commitInfo": {}},
            protocol(1, 2),
            protocol(
                readers=["columnMapping", "deletionVectors", "timestampNtz", "v2Checkpoint", "variantType"],
                writers=["columnMapping", "deletionVectors", "rowTracking", "domainMetadata", "futureWriterOnly"],
            ),
            {"metaData": {"configuration": {"delta.enableDeletionVectors": "true"}}},
        ]
    )


@pytest.mark.parametrize(
    "action",
    [
        protocol(readers=["catalogManaged"], writers=["catalogManaged"]),
        protocol(readers=["catalogOwned-preview"], writers=["catalogOwned-preview"]),
        protocol(2, 7, writers=["coordinatedCommits-preview"]),
    ],
)
def test_catalog_managed_tables_are_refused(action: dict) -> None:
    feature = r"(catalogManaged|catalogOwned-preview|coordinatedCommits-preview)"
    with pytest.raises(UnsupportedTable, match=feature + ".*catalog"):
        check_protocol([action])


def test_a_commit_coordinator_table_property_is_refused() -> None:
    metadata = {"metaData": {"configuration": {"delta.coordinatedCommits.commitCoordinator-preview": "dynamodb"}}}
    with pytest.raises(UnsupportedTable, match="delta.coordinatedCommits.commitCoordinator-preview"):
        check_protocol([metadata])


def test_an_unknown_reader_feature_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedTable, match="reader feature 'teleportation'"):
        check_protocol([protocol(readers=["deletionVectors", "teleportation"], writers=["deletionVectors"])])


def test_a_reader_version_above_three_is_refused() -> None:
    with pytest.raises(UnsupportedTable, match="minReaderVersion 4"):
        check_protocol([protocol(reader=4)])
