"""The merge gates' key and column rules (`exporter.checks.rows`) on tables delta-rs wrote: what a
change writes, held against itself and, only where the files' statistics could hold a clash,
against the rows the table keeps."""

from __future__ import annotations

import json

import deltalake
import pyarrow as pa
import pytest

from exporter.checks.rows import RowFinding, row_findings
from exporter.checks.rules import ColumnRule, TableChecks
from exporter.config import Config
from exporter.diff.rows.read import Reader
from tests.fakes import lake_of

pytestmark = pytest.mark.unit

KEYS = TableChecks(keys=("id",))
STATUS = TableChecks(columns={"status": ColumnRule(not_null=True, accepted=("new", "paid"))})


def write(events, ids, status=None, part=None, mode="append"):
    columns = {"id": pa.array(ids, pa.int64()),
               "status": pa.array(status or ["new"] * len(ids), pa.string())}
    if part is not None:
        columns["part"] = pa.array([part] * len(ids), pa.string())
    deltalake.write_deltalake(str(events.folder), pa.table(columns), mode=mode,
                              partition_by=["part"] if part is not None else None)
    return events


def findings(lakefs, before, after, checks, config=None) -> list[RowFinding]:
    return row_findings(lake_of(config or Config(), lakefs), "repo", before, after, "tables/events", checks)


def test_new_unique_keys_pass_and_a_key_written_twice_or_already_there_or_null_is_found(lakefs, events):
    base = write(events, [1, 2, 3]).commit()
    assert findings(lakefs, base, write(events, [4, 5]).commit(), KEYS) == []

    again = write(events, [7, 7, 8, 3], ["paid", "new", "new", "lost"]).commit()
    assert findings(lakefs, base, again, KEYS) == [  # each with the written rows of the keys it names
        RowFinding("keys", "1 key(s) written more than once by the change: id=7 (2 rows)",
                   ({"id": 7, "status": "new"}, {"id": 7, "status": "paid"})),
        RowFinding("keys", "1 key(s) the change writes are already in the table: id=3",
                   ({"id": 3, "status": "lost"},))]
    null = write(events, [None, 9]).commit()
    assert findings(lakefs, again, null, KEYS) == [RowFinding("keys", "1 added or updated row(s) with a null key (id)",
                                                              ({"id": None, "status": "new"},))]


def test_a_finding_carries_at_most_ten_of_its_rows_in_the_order_of_their_json(lakefs, events):
    from exporter.checks.rows import ROWS_SHOWN

    base = write(events, [1]).commit()
    change = write(events, [None] * 12 + [5, 5], [f"s{n:02}" for n in range(14)]).commit()
    null_keys, repeated = findings(lakefs, base, change, KEYS)
    assert null_keys.found == "12 added or updated row(s) with a null key (id)"
    assert len(null_keys.rows) == ROWS_SHOWN == 10
    assert [row["status"] for row in null_keys.rows] == [f"s{n:02}" for n in range(10)]
    assert repeated.rows == ({"id": 5, "status": "s12"}, {"id": 5, "status": "s13"})


def test_only_kept_files_whose_statistics_could_hold_a_written_key_are_read_and_only_their_keys(
        lakefs, events, monkeypatch):
    for start in (0, 100, 200):
        write(events, list(range(start, start + 100, 2)))  # even keys: the second file's statistics say 100..198
    base = events.commit()
    change = write(events, [121, 299]).commit()
    read = []
    rows = Reader.rows
    monkeypatch.setattr(Reader, "rows", lambda self, commit, add, columns=None:
                        read.append((add["path"], columns)) or rows(self, commit, add, columns))

    assert findings(lakefs, base, change, KEYS) == []
    kept = [(path, columns) for path, columns in read if columns is not None]
    assert len(kept) == 1 and kept[0][1] == ["id"]  # of three kept files, only the one whose range holds 121
    assert len(read) == 2  # and the written file, whole


def test_a_partition_key_reads_only_the_partitions_written(lakefs, events, monkeypatch):
    for part in ("a", "b", "c"):
        write(events, [1, 2], part=part)
    base = events.commit()
    change = write(events, [2], part="b").commit()
    read = []
    rows = Reader.rows
    monkeypatch.setattr(Reader, "rows", lambda self, commit, add, columns=None:
                        read.append(add["path"]) or rows(self, commit, add, columns))

    assert findings(lakefs, base, change, TableChecks(keys=("part", "id"))) == [
        RowFinding("keys", "1 key(s) the change writes are already in the table: part=b, id=2",
                   ({"id": 2, "part": "b", "status": "new"},))]
    assert all("part=b" in path for path in read)


def test_column_rules_hold_the_added_and_updated_rows_only(lakefs, events):
    base = write(events, [1, 2, 3], ["new", "lost", "paid"]).commit()  # 'lost' is there already
    assert findings(lakefs, base, write(events, [4], ["paid"]).commit(), STATUS) == []

    rewrite = deltalake.DeltaTable(str(events.folder))
    rewrite.delete("id = 1")  # a copy-on-write rewrite: rows 2 and 3, 'lost' among them, are written again
    assert findings(lakefs, base, events.commit(), STATUS) == []

    bad = write(events, [5, 6, 7], ["lost", None, "lost"]).commit()
    assert findings(lakefs, base, bad, STATUS) == [  # 'lost' of the rewritten row 2 is not among them
        RowFinding("columns", "1 added or updated row(s) with `status` null", ({"id": 6, "status": None},)),
        RowFinding("columns", "2 added or updated row(s) with `status` not one of new, paid: 'lost' (2)",
                   ({"id": 5, "status": "lost"}, {"id": 7, "status": "lost"}))]


def test_accepted_values_are_compared_in_the_column_type(lakefs, events):
    base = write(events, [1]).commit()
    change = write(events, [2, 3]).commit()
    assert findings(lakefs, base, change, TableChecks(columns={"id": ColumnRule(accepted=(1, 2))})) == [
        RowFinding("columns", "1 added or updated row(s) with `id` not one of 1, 2: 3 (1)", ({"id": 3, "status": "new"},))]
    assert findings(lakefs, base, change, TableChecks(columns={"id": ColumnRule(accepted=("2", "3"))})) == []


def test_a_column_not_in_the_schema_and_more_rows_than_the_limits_are_findings_not_passes(lakefs, events):
    base = write(events, [1]).commit()
    change = write(events, list(range(10, 30))).commit()
    assert findings(lakefs, base, change, TableChecks(keys=("order_id",))) == [
        RowFinding("keys", "column `order_id` is not in the table's schema")]
    limited = Config(row_diff={"max_rows": 5, "spark": {"master": ""}})  # no Spark job to run past the limits
    assert findings(lakefs, base, change, KEYS, limited) == [
        RowFinding("keys", "the changed rows could not be checked: 20 changed rows to read: more than "
                           "row_diff.max_rows (5)")]
    limited = Config(row_diff={"max_memory_mib": 1, "spark": {"master": ""}})
    big = write(events, list(range(100, 100_000))).commit()
    [refused] = findings(lakefs, base, big, KEYS, limited)  # counted while reading: past the memory bound
    assert refused.found.startswith("the changed rows could not be checked: ") and \
        "more than row_diff.max_memory_mib (1)" in refused.found


def test_the_spark_jobs_kept_files_are_those_whose_range_meets_a_written_files(lakefs, events):
    """Past the worker's limits the written keys are not read in the worker: the kept files the job
    reads are told by the written files' statistics instead (their ranges, merged)."""
    from exporter.checks.rows import _written_ranges
    from exporter.diff.rows.compute import RowDiffQuery, plan_row_diff

    for start in (0, 100, 200, 300):
        write(events, list(range(start, start + 50)))  # kept: 0..49, 100..149, 200..249, 300..349
    base = events.commit()
    write(events, [120, 130])  # written: 120..130
    write(events, [260, 299])  # and 260..299
    change = events.commit()
    lake = lake_of(Config(), lakefs)
    plan, _ = plan_row_diff(lake, lake.store("repo"), RowDiffQuery("repo", base, change, "tables/events"))
    could_hold = _written_ranges(plan, "id")
    kept = [add for add in plan.right.files.files(whole=True) if add["path"] not in plan.right_paths]

    assert sorted(json.loads(add["stats"])["minValues"]["id"] for add in kept if could_hold(add)) == [100]
    assert could_hold({"path": "no-stats.parquet"})  # a file without statistics could hold anything


def test_accepted_values_reach_the_spark_job_as_its_values_look():
    from exporter.checks.rows import _as_json

    assert _as_json(("new", 1), "string") == ['["new"]', '["1"]']
    assert _as_json((1, "2", "x"), "long") == ["[1]", "[2]"]  # 'x' can never be a long
    assert _as_json((1.5, 2), "double") == ["[1.5]", "[2.0]"]


def test_a_partition_left_without_a_file_is_found_and_one_rewritten_is_not(lakefs, events):
    write(events, [1, 2], part="a")
    base = write(events, [3], part="b").commit()
    checks = TableChecks(emptied_partitions_at_most=0)
    deltalake.DeltaTable(str(events.folder)).delete("part = 'b'")
    emptied = events.commit()
    assert findings(lakefs, base, emptied, checks) == [
        RowFinding("rows", "1 partition(s) left without a file: part=b: more than 0")]
    assert findings(lakefs, base, emptied, TableChecks(emptied_partitions_at_most=1)) == []
    deltalake.DeltaTable(str(events.folder)).delete("id = 1")  # part=a is rewritten, and keeps a row
    assert findings(lakefs, emptied, events.commit(), checks) == []
