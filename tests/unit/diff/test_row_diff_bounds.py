"""The row diff bounded by rows: counted from the files' stats before reading and while reading,
refused naming the count; its rows a Parquet file the API pages from, never in the answer. And the
column-wise comparison against a plain multiset one, on tables with duplicates and nulls."""

from __future__ import annotations

import collections
import json

import deltalake
import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import given, settings

from exporter.config import Config
from exporter.diff.rows.compute import RowDiffQuery, RowDiffTooLarge, compute_row_diff
from exporter.diff.rows.compare import changes, unmatched
from exporter.diff.rows.file import rows_page
from tests.fakes import lake_of

pytestmark = pytest.mark.unit


def limited(**row_diff) -> Config:
    """Limits set as given, and no Spark job (whatever the environment configures: a diff above them is refused)."""
    return Config(row_diff={**row_diff, "spark": {"master": ""}})


def test_rows_are_stored_as_parquet_and_the_answer_holds_counts_and_where(lakefs, events):
    first = events.append(1, 2).commit()
    second = events.append(*range(3, 2503)).commit()

    answer = compute_row_diff(lake_of(limited(), lakefs), RowDiffQuery("repo", first, second, "tables/events"))

    assert answer["counts"] == {"added": 2500, "removed": 0, "updated": 0} and "rows" not in answer
    assert len(json.dumps(answer)) < 2000  # the answer cached in Redis: no rows in it
    page, total = rows_page(lakefs.store.at(lakefs.storage_namespace("repo")), answer["rows_location"], 1999, 3)
    assert total == 2500 and [(r["id"], r["change"], r["values"]) for r in page] == \
        [(1999, "added", {"id": 2002}), (2000, "added", {"id": 2003}), (2001, "added", {"id": 2004})]


def test_nothing_changed_stores_no_rows(lakefs, events):
    first = events.append(1).commit()
    answer = compute_row_diff(lake_of(limited(), lakefs), RowDiffQuery("repo", first, first, "tables/events"))
    assert answer["counts"] == {"added": 0, "removed": 0, "updated": 0} and answer["rows_location"] is None


def test_more_rows_than_max_rows_is_refused_before_reading_naming_the_count(lakefs, events, monkeypatch):
    first = events.append(1).commit()
    second = events.append(*range(10, 20)).commit()
    read = []
    with monkeypatch.context() as patched:
        patched.setattr("exporter.diff.rows.read.Reader.rows", lambda self, *a: read.append(a) or pa.table({}))
        with pytest.raises(RowDiffTooLarge, match=r"1 file\(s\) holding 10 rows to read: more than row_diff.max_rows \(9\)"):
            compute_row_diff(lake_of(limited(max_rows=9), lakefs), RowDiffQuery("repo", first, second, "tables/events"))
    assert read == []  # counted from the stats: no data file read
    query = RowDiffQuery("repo", first, second, "tables/events")
    assert compute_row_diff(lake_of(limited(max_rows=10), lakefs), query)["counts"]["added"] == 10


def test_files_without_stats_are_counted_while_reading(lakefs, events, monkeypatch):
    first = events.append(1).commit()
    second = events.append(*range(10, 20)).append(*range(20, 30)).commit()
    monkeypatch.setattr("exporter.diff.rows.compute.num_records", lambda stats: None)  # as a writer without stats

    with pytest.raises(RowDiffTooLarge, match=r"more than row_diff.max_rows \(15\) rows read"):
        compute_row_diff(lake_of(limited(max_rows=15), lakefs), RowDiffQuery("repo", first, second, "tables/events"))
    big = events.append(*range(100, 200_000)).commit()
    with pytest.raises(RowDiffTooLarge, match="more than row_diff.max_memory_mib"):
        compute_row_diff(lake_of(limited(max_memory_mib=1), lakefs), RowDiffQuery("repo", first, big, "tables/events"))


# ---------------------------------------------------------------- against a plain multiset diff


def plain(removed: list[tuple], added: list[tuple], key: int | None) -> tuple[list, list, list]:
    """exceptAll both ways, then the n-th removed row of a key paired with its n-th added row."""
    left, right = collections.Counter(removed), collections.Counter(added)
    gone = [r for r in removed if left[r] > right[r] and not _take(left, right, r)]
    new = [r for r in added if right[r] > left[r] and not _take(right, left, r)]
    if key is None:
        return gone, new, []
    by_key: dict = collections.defaultdict(list)
    for index, row in enumerate(gone):
        by_key[row[key]].append(index)
    pairs, paired = [], set()
    for row in new:
        if by_key[row[key]]:
            before = by_key[row[key]].pop(0)
            paired.add(before)
            pairs.append((gone[before], row))
    after = {id(a) for _, a in pairs}
    return [r for i, r in enumerate(gone) if i not in paired], [r for r in new if id(r) not in after], pairs


def _take(mine: collections.Counter, theirs: collections.Counter, row: tuple) -> bool:
    """Whether this occurrence of `row` cancels: the first `theirs[row]` occurrences do."""
    mine[row] -= 1
    return mine[row] < theirs[row]


ROWS = st.lists(st.tuples(st.sampled_from([1, 2, 3, None]), st.sampled_from(["a", "b", None])), max_size=12)


@settings(max_examples=300, deadline=None)
@given(ROWS, ROWS, st.sampled_from([None, 0, 1]))
def test_the_columnwise_diff_is_the_plain_multiset_diff(removed, added, key):
    def table(rows):
        return pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "v": pa.array([r[1] for r in rows], pa.string()),
                         "__partition": pa.array([""] * len(rows), pa.string())})

    left, right = table(removed), table(added)
    kept_left, kept_right = unmatched(left, right, ["id", "v"])
    changed = changes(left.take(kept_left), right.take(kept_right), [] if key is None else [["id", "v"][key]])
    rows = [row for batch in changed.batches(size=5) for row in batch]

    def values(change):
        return [tuple(json.loads(r["values"]).values()) for r in rows if r["change"] == change]

    gone, new, pairs = plain([tuple(r) for r in removed], [tuple(r) for r in added], key)
    assert values("removed") == gone and values("added") == new
    assert [(tuple(json.loads(r["before"]).values()), tuple(json.loads(r["values"]).values()))
            for r in rows if r["change"] == "updated"] == pairs
    assert [r["id"] for r in rows] == list(range(len(rows)))
    assert changed.counts["total"] == {"removed": len(gone), "added": len(new), "updated": len(pairs)}


def test_text_read_as_views_from_a_rewritten_file_diffs_with_text_read_plainly(lakefs, events):
    """delta-rs's rewrites (a delete) write files whose text reads back as Arrow string views:
    rows of those and of plainly read files must concatenate (this failed with 'string vs string_view')."""
    deltalake.write_deltalake(str(events.folder), pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                                                            "note": pa.array(["a", "b", "c"])}), mode="append")
    first = events.commit()
    deltalake.DeltaTable(str(events.folder)).delete("id = 1")
    deltalake.write_deltalake(str(events.folder), pa.table({"id": pa.array([4], pa.int64()),
                                                            "note": pa.array(["d"])}), mode="append")
    second = events.commit()

    answer = compute_row_diff(lake_of(limited(), lakefs), RowDiffQuery("repo", first, second, "tables/events"))

    assert answer["counts"] == {"added": 1, "removed": 1, "updated": 0}
