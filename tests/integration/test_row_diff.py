"""Which rows changed between two refs: Spark-written tables in lakeFS, the row diff read from the
differing files only, checked against hand-computed rows and against Spark's full-scan `exceptAll`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import date

import httpx
import pytest

from devtools.procs import jvms_below
from examples.bank_pipeline import ingest, retention_and_column_remover
from exporter.config import RowDiffConfig
from exporter.errors import ExporterError
from exporter.storage.objectstore import ObjectStore
from exporter.diff.rows.compute import RowDiffCache, RowDiffQuery, compute_row_diff
from exporter.diff.rows.file import rows_page
from tests.fakes import lake_of
from tests.integration.deltatables import COMPILED, spark_settings, table_uri
from tests.integration.test_webhooks import api

pytestmark = pytest.mark.integration


def row_diff(config, lakefs, repository: str, left: str, right: str, path: str, key: tuple[str, ...] = ()) -> dict:
    """The row diff with its rows read back from its rows file (`rows`)."""
    query = RowDiffQuery(repository, lakefs.commit(repository, left).id, lakefs.commit(repository, right).id, path, key)
    return with_rows(config, lakefs, repository, compute_row_diff(lake_of(config, lakefs), query))


def with_rows(config, lakefs, repository: str, diff: dict) -> dict:
    """`diff` with every row of its rows file, read page by page as the API reads them."""
    assert "rows" not in diff  # the answer holds counts and the rows' location, never the rows
    rows, start = [], 0
    while diff["rows_location"]:
        page, total = rows_page(ObjectStore(config, lakefs.storage_namespace(repository)), diff["rows_location"],
                                start, 1000)
        rows, start = rows + page, start + len(page)
        if start >= total:
            break
    return {**diff, "rows": rows}


def changed(diff: dict, change: str, columns: list[str]) -> Counter:
    return Counter(tuple(row["values"].get(c) for c in columns) for row in diff["rows"] if row["change"] == change)


def full_scan(spark, repository: str, left: str, right: str, path: str, columns: list[str],
              renamed: dict[str, str] | None = None) -> tuple[Counter, Counter]:
    """The naive way: read both sides whole and `exceptAll` both ways (what table-diff tools do);
    `renamed` (old name -> new) renames the left side's columns first."""
    before = spark.read.format("delta").load(table_uri(repository, left, path)) \
        .withColumnsRenamed(renamed or {}).select(*columns)
    after = spark.read.format("delta").load(table_uri(repository, right, path)).select(*columns)
    return (Counter(tuple(r) for r in before.exceptAll(after).collect()),
            Counter(tuple(r) for r in after.exceptAll(before).collect()))


def removed_and_added(rows: list[dict], columns: list[str]) -> tuple[Counter, Counter]:
    """The rows a diff takes out and puts in, an update counting as both (its before and its values)."""
    def values(row: dict) -> tuple:
        return tuple(row.get(c) for c in columns)

    removed = Counter(values(r["values"]) for r in rows if r["change"] == "removed")
    removed.update(values(r["before"]) for r in rows if r["change"] == "updated")
    return removed, Counter(values(r["values"]) for r in rows if r["change"] in ("added", "updated"))


def test_a_delete_with_deletion_vectors_lists_exactly_the_removed_rows(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/dv")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, v STRING) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.createDataFrame([(i, f"v{i}") for i in range(20)], "id INT, v STRING").coalesce(1) \
        .write.format("delta").mode("append").save(uri)
    before = lakefs.commit_branch(repository, "main", "20 rows in one file")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id IN (3, 7, 11)")
    after = lakefs.commit_branch(repository, "main", "a delete: a deletion vector, no file rewritten")

    diff = row_diff(config, lakefs, repository, before, after, "tables/dv")

    assert diff["counts"] == {"added": 0, "removed": 3, "updated": 0}
    assert changed(diff, "removed", ["id", "v"]) == Counter({(3, "v3"): 1, (7, "v7"): 1, (11, "v11"): 1})
    assert diff["files"]["added"] == diff["files"]["removed"] == []
    assert [(f["rows_deleted"], f["rows_restored"]) for f in diff["files"]["deletion_vector_changed"]] == [(3, 0)]
    assert full_scan(spark, repository, before, after, "tables/dv", ["id", "v"]) == \
        (changed(diff, "removed", ["id", "v"]), Counter())


def test_a_copy_on_write_update_is_three_updates_with_a_key_and_three_pairs_without(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/cow")
    spark.createDataFrame([(i, f"v{i}") for i in range(10)], "id INT, v STRING").coalesce(1) \
        .write.format("delta").save(uri)
    before = lakefs.commit_branch(repository, "main", "10 rows")
    spark.sql(f"UPDATE delta.`{uri}` SET v = concat(v, '!') WHERE id IN (1, 2, 3)")  # rewrites the file
    after = lakefs.commit_branch(repository, "main", "update 3 rows")

    plain = row_diff(config, lakefs, repository, before, after, "tables/cow")
    keyed = row_diff(config, lakefs, repository, before, after, "tables/cow", key=("id",))

    assert plain["counts"] == {"added": 3, "removed": 3, "updated": 0}
    assert changed(plain, "removed", ["id", "v"]) == Counter({(1, "v1"): 1, (2, "v2"): 1, (3, "v3"): 1})
    assert changed(plain, "added", ["id", "v"]) == Counter({(1, "v1!"): 1, (2, "v2!"): 1, (3, "v3!"): 1})
    assert (len(plain["files"]["removed"]), len(plain["files"]["added"])) == (1, 1)
    assert keyed["counts"] == {"added": 0, "removed": 0, "updated": 3}
    assert sorted((r["before"]["v"], r["values"]["v"]) for r in keyed["rows"]) == \
        [("v1", "v1!"), ("v2", "v2!"), ("v3", "v3!")]
    assert full_scan(spark, repository, before, after, "tables/cow", ["id", "v"]) == \
        (changed(plain, "removed", ["id", "v"]), changed(plain, "added", ["id", "v"]))


def test_optimize_and_an_identical_overwrite_change_files_but_no_rows(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/compact")
    for start in (0, 10, 20):
        spark.createDataFrame([(i, float(i) / 3) for i in range(start, start + 10)], "id INT, x DOUBLE") \
            .coalesce(1).write.format("delta").mode("append").save(uri)
    small_files = lakefs.commit_branch(repository, "main", "three files")
    spark.sql(f"OPTIMIZE delta.`{uri}`")
    optimized = lakefs.commit_branch(repository, "main", "optimize")
    spark.read.format("delta").load(uri).localCheckpoint().write.format("delta").mode("overwrite").save(uri)
    overwritten = lakefs.commit_branch(repository, "main", "overwrite with the same rows")

    compacted = row_diff(config, lakefs, repository, small_files, optimized, "tables/compact")
    rewritten = row_diff(config, lakefs, repository, optimized, overwritten, "tables/compact")

    assert compacted["counts"] == rewritten["counts"] == {"added": 0, "removed": 0, "updated": 0}
    assert compacted["rows"] == rewritten["rows"] == []
    assert (len(compacted["files"]["removed"]), len(compacted["files"]["added"])) == (3, 1)
    assert sum(f["rows"] for f in compacted["files"]["added"]) == 30
    assert rewritten["files"]["removed"] and rewritten["files"]["added"]


def test_a_partitioned_table_counts_changes_per_partition(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/days")
    rows = [(i, day) for day in ("d1", "d2", "d3") for i in range(3)]
    spark.createDataFrame(rows, "id INT, day STRING").write.format("delta").partitionBy("day").save(uri)
    before = lakefs.commit_branch(repository, "main", "three partitions")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (7, 'd2'), (8, 'd2')")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE day = 'd3' AND id = 0")  # copy-on-write in d3 only
    after = lakefs.commit_branch(repository, "main", "two rows into d2, one out of d3")

    diff = row_diff(config, lakefs, repository, before, after, "tables/days")

    assert diff["counts"] == {"added": 2, "removed": 1, "updated": 0}
    assert diff["partitions"] == {"day=d2": {"added": 2, "removed": 0, "updated": 0},
                                  "day=d3": {"added": 0, "removed": 1, "updated": 0}}
    assert changed(diff, "removed", ["id", "day"]) == Counter({(0, "d3"): 1})
    assert {f["partition"]["day"] for f in diff["files"]["added"] + diff["files"]["removed"]} == {"d2", "d3"}


def test_jennys_branch_shows_the_deleted_day_the_duplicates_and_the_dropped_columns(spark, lakefs, config, repository,
                                                                                      service):
    ingest(spark, lakefs, repository, "main", date(2026, 3, 1), 4)  # 4 days x 40 rows
    lakefs.create_branch(repository, "exp1", "main")
    retention_and_column_remover(spark, lakefs, repository, "exp1", date(2026, 3, 2))

    diff = row_diff(config, lakefs, repository, "main", "exp1", "tables/transactions")

    common = ["txn_id", "date", "amount", "account"]
    assert diff["columns"]["matched_on"] == common
    assert set(diff["columns"]["left"]) - set(diff["columns"]["right"]) == {"description", "merchant"}
    # the DELETE removed the 40 rows of March 1st; the planted bug added each of the 120 kept rows once more
    assert diff["counts"] == {"added": 120, "removed": 40, "updated": 0}
    removed = [r for r in diff["rows"] if r["change"] == "removed"]
    assert {r["values"]["date"] for r in removed} == {"2026-03-01"} and all("merchant" in r["values"] for r in removed)
    added = [r for r in diff["rows"] if r["change"] == "added"]
    assert all("merchant" not in r["values"] for r in added)  # a dropped column is absent
    assert len({r["values"]["txn_id"] for r in added}) == 120 and diff["partitions"]["date=2026-03-01"]["removed"] == 40
    assert full_scan(spark, repository, "main", "exp1", "tables/transactions", common) == \
        (changed(diff, "removed", common), changed(diff, "added", common))

    # the API pages the same answer; the CLI prints it
    path = f"/repositories/{repository}/otf/refs/main/diff/exp1/rows?table_path=tables/transactions&amount=100"
    first = api(service, path).json()
    second = api(service, path + f"&after={first['pagination']['next_offset']}").json()
    assert first["counts"] == diff["counts"] and first["pagination"]["has_more"]
    assert [r["id"] for r in first["rows"] + second["rows"]] == list(range(160))
    assert api(service, path + "&key=nope").status_code == 400
    assert httpx.get(service + path, timeout=10).status_code == 401
    printed = subprocess.run([sys.executable, "-m", "lakefs_delta.cli", "diff", "--repo", repository, "main..exp1",
                              "--table", "tables/transactions", "--rows", "--limit", "3"],
                             capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    assert "rows added 120, removed 40" in printed.stdout and "... 157 more" in printed.stdout

    # the overview of the two refs: the transactions table changed, accounts did not
    answer = api(service, f"/repositories/{repository}/otf/refs/main/diff/exp1/tables")
    assert answer.status_code == 200, answer.text
    assert [(t["path"], t["diff_type"], t["rows"]["difference"], t["schema_changed"]) for t in answer.json()["tables"]] \
        == [("tables/transactions", "changed", 80, True)]


def test_a_diff_over_the_size_limit_is_refused_with_the_reason(spark, lakefs, config, repository):
    uri = table_uri(repository, "main", "tables/big")
    spark.createDataFrame([(i,) for i in range(100)], "id INT").write.format("delta").save(uri)
    before = lakefs.commit_branch(repository, "main", "first")
    spark.createDataFrame([(i,) for i in range(100)], "id INT").write.format("delta").mode("append").save(uri)
    after = lakefs.commit_branch(repository, "main", "second")
    small = config.model_copy(update={"row_diff": RowDiffConfig(max_bytes=10)})  # no Spark job
    with pytest.raises(ExporterError, match="bytes to read: more than 10"):
        compute_row_diff(lake_of(small, lakefs), RowDiffQuery(repository, before, after, "tables/big"))


def test_a_diff_above_the_in_process_limit_runs_as_a_spark_job_with_the_same_answer(spark, lakefs, config, repository,
                                                                                     service):
    ingest(spark, lakefs, repository, "main", date(2026, 3, 1), 4)
    lakefs.create_branch(repository, "exp1", "main")
    retention_and_column_remover(spark, lakefs, repository, "exp1", date(2026, 3, 2))
    left, right = lakefs.commit(repository, "main").id, lakefs.commit(repository, "exp1").id
    in_process = with_rows(config, lakefs, repository,
                           compute_row_diff(lake_of(config, lakefs),
                                            RowDiffQuery(repository, left, right, "tables/transactions",
                                                                         ("txn_id",))))
    progress: list[dict] = []
    # all above it; this job resolves `row_diff.spark.packages` with Ivy (the stack's other jobs are
    # given the jars themselves, `row_diff.spark.jars`)
    limited = config.model_copy(update={"row_diff": config.row_diff.model_copy(update={
        "max_bytes": 0, "spark": config.row_diff.spark.model_copy(update={"jars": ""})})})

    job = compute_row_diff(lake_of(limited, lakefs), RowDiffQuery(repository, left, right, "tables/transactions",
                                                         ("txn_id",)), progress=progress.append)

    assert (in_process["engine"], job["engine"]) == ("in-process", "spark") and "rows" not in job
    assert job["counts"] == in_process["counts"] == {"added": 120, "removed": 40, "updated": 0}
    assert job["partitions"] == in_process["partitions"] and job["columns"] == in_process["columns"]
    assert sorted(job["files"]["removed"], key=str) == sorted(in_process["files"]["removed"], key=str)
    assert sorted(job["files"]["added"], key=str) == sorted(in_process["files"]["added"], key=str)
    store = ObjectStore(config, lakefs.storage_namespace(repository))
    first, total = rows_page(store, job["rows_location"], 0, 100)
    rest, _ = rows_page(store, job["rows_location"], 100, 100)
    assert [r["id"] for r in first + rest] == list(range(160)) and total == 160

    def as_multiset(rows: list[dict]) -> Counter:
        return Counter((r["change"], json.dumps(r["values"], sort_keys=True)) for r in rows)

    assert as_multiset(first + rest) == as_multiset(in_process["rows"])
    assert progress[0] == {"engine": "spark", "phase": "starting"} and progress[-1]["engine"] == "spark"
    done = [p["tasks_done"] for p in progress if "tasks_done" in p]  # counted over every Spark job the diff ran
    assert done and done == sorted(done) and done[-1] > 0, progress

    # the API pages a job's answer from its Parquet rows (the answer cached as the worker caches it)
    RowDiffCache(config.redis, 600).put(job, repository, left, right, "tables/transactions", "txn_id")
    path = f"/repositories/{repository}/otf/refs/main/diff/exp1/rows?table_path=tables/transactions&key=txn_id"
    answer = api(service, path + "&amount=150&after=9").json()
    assert answer["engine"] == "spark" and [r["id"] for r in answer["rows"]] == list(range(10, 160))
    assert answer["pagination"]["has_more"] is False and answer["counts"] == job["counts"]


def renamed_on_a_branch(spark, lakefs, repository: str, path: str, columns: str, rows: list[tuple], changes: list[str],
                        partitioned_by: str = "", properties: dict | None = None) -> tuple[str, str]:
    """A column-mapped table with deletion vectors on main, `changes` (SQL on `{table}`) committed on a
    branch; the two commit ids."""
    uri = table_uri(repository, "main", path)
    properties = {"delta.columnMapping.mode": "name", "delta.enableDeletionVectors": "true", **(properties or {})}
    spark.sql(f"CREATE TABLE delta.`{uri}` ({columns}) USING delta {partitioned_by} TBLPROPERTIES ("
              + ", ".join(f"'{name}' = '{value}'" for name, value in properties.items()) + ")")
    spark.createDataFrame(rows, columns).coalesce(1).write.format("delta").mode("append").save(uri)
    left = lakefs.commit_branch(repository, "main", f"{len(rows)} rows")
    lakefs.create_branch(repository, "renames", "main")
    for change in changes:
        spark.sql(change.format(table=f"delta.`{table_uri(repository, 'renames', path)}`"))
    return left, lakefs.commit_branch(repository, "renames", "a column renamed, values changed")


def in_process_and_as_spark_job(config, lakefs, repository: str, left: str, right: str, path: str,
                                key: tuple[str, ...]) -> tuple[dict, dict, list[dict]]:
    """The row diff computed in the process and by the Spark job (everything is above a 0-byte limit),
    and the job's rows."""
    query = RowDiffQuery(repository, left, right, path, key)
    in_process = with_rows(config, lakefs, repository, compute_row_diff(lake_of(config, lakefs), query))
    above = config.model_copy(update={"row_diff": config.row_diff.model_copy(update={"max_bytes": 0})})
    job = compute_row_diff(lake_of(above, lakefs), query)
    assert (in_process["engine"], job["engine"]) == ("in-process", "spark")
    job_rows, _ = rows_page(ObjectStore(config, lakefs.storage_namespace(repository)), job["rows_location"], 0, 100)
    return in_process, job, job_rows


def test_a_value_changed_in_a_renamed_column_is_an_update_under_its_new_name(spark, lakefs, config, repository):
    rows = [(i, i * 10 + 0.5, f"n{i}") for i in range(10)]
    left, right = renamed_on_a_branch(spark, lakefs, repository, "tables/renamed", "id INT, amount DOUBLE, note STRING",
                                      rows, ["ALTER TABLE {table} RENAME COLUMN amount TO total",
                                             "UPDATE {table} SET total = 130.5 WHERE id = 3",
                                             "UPDATE {table} SET note = 'five' WHERE id = 5"])

    in_process, job, job_rows = in_process_and_as_spark_job(config, lakefs, repository, left, right, "tables/renamed",
                                                            ("id",))

    columns = ["id", "total", "note"]
    spark_removed_and_added = full_scan(spark, repository, left, right, "tables/renamed", columns, {"amount": "total"})
    for diff, changed_rows in ((in_process, in_process["rows"]), (job, job_rows)):
        assert diff["counts"] == {"added": 0, "removed": 0, "updated": 2}, diff["engine"]
        assert diff["columns"] == {"left": columns, "right": columns, "matched_on": columns,
                                   "renamed": [{"from": "amount", "to": "total"}]}
        assert sorted(((r["before"], r["values"]) for r in changed_rows), key=lambda pair: pair[1]["id"]) == [
            ({"id": 3, "total": 30.5, "note": "n3"}, {"id": 3, "total": 130.5, "note": "n3"}),
            ({"id": 5, "total": 50.5, "note": "n5"}, {"id": 5, "total": 50.5, "note": "five"})]
        assert removed_and_added(changed_rows, columns) == spark_removed_and_added


def test_a_renamed_and_widened_column_is_compared_by_value(spark, lakefs, config, repository):
    rows = [(i, i * 10, f"n{i}", "d1" if i < 5 else "d2") for i in range(10)]
    left, right = renamed_on_a_branch(spark, lakefs, repository, "tables/widened",
                                      "id INT, qty INT, note STRING, day STRING", rows,
                                      ["ALTER TABLE {table} RENAME COLUMN qty TO quantity",
                                       "ALTER TABLE {table} ALTER COLUMN quantity TYPE BIGINT",
                                       "UPDATE {table} SET quantity = 5000000000 WHERE id = 3"],
                                      partitioned_by="PARTITIONED BY (day)",
                                      properties={"delta.enableTypeWidening": "true"})

    in_process, job, job_rows = in_process_and_as_spark_job(config, lakefs, repository, left, right, "tables/widened",
                                                            ("id",))

    columns = ["id", "quantity", "note", "day"]
    spark_removed_and_added = full_scan(spark, repository, left, right, "tables/widened", columns, {"qty": "quantity"})
    for diff, changed_rows in ((in_process, in_process["rows"]), (job, job_rows)):
        assert diff["counts"] == {"added": 0, "removed": 0, "updated": 1}, diff["engine"]
        assert diff["partitions"] == {"day=d1": {"added": 0, "removed": 0, "updated": 1}}
        assert diff["columns"]["matched_on"] == columns
        assert diff["columns"]["renamed"] == [{"from": "qty", "to": "quantity"}]
        assert [(r["before"], r["values"]) for r in changed_rows] == [
            ({"id": 3, "quantity": 30, "note": "n3", "day": "d1"},
             {"id": 3, "quantity": 5000000000, "note": "n3", "day": "d1"})]
        assert removed_and_added(changed_rows, columns) == spark_removed_and_added


# In its own process, as the worker runs it: the cached row diff, the peak RSS, the bytes Redis holds for it
_MEASURED_ROW_DIFF = """
import json, resource, sys
from exporter.config import load_config
from exporter.diff.rows.compute import RowDiffCache, RowDiffQuery, cached_row_diff
from exporter.lakefs.lake import Lake
repository, left, right, path = sys.argv[1:]
config = load_config()
cache = RowDiffCache(config.redis, 600)
diff, _ = cached_row_diff(Lake.connect(config), cache, RowDiffQuery(repository, left, right, path))
print(json.dumps({"diff": diff, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "redis_bytes": cache.redis.strlen(cache.key(repository, left, right, path, "-"))}))
"""


def test_a_table_rewritten_whole_is_diffed_within_its_row_bound_or_refused_naming_the_rows(spark, lakefs, config,
                                                                                            repository, service):
    uri = table_uri(repository, "main", "tables/narrow")
    with spark_settings(spark, COMPILED):
        spark.range(0, 1_000_000, numPartitions=8).write.format("delta").save(uri)
    first = lakefs.commit_branch(repository, "main", "1,000,000 rows")
    with spark_settings(spark, COMPILED):
        spark.range(500_000, 1_500_000, numPartitions=8).write.format("delta").mode("overwrite").save(uri)
    rewritten = lakefs.commit_branch(repository, "main", "rewritten whole: half the rows kept, half replaced")

    # 2,000,000 rows read (every file differs), the default bound: computed in process
    measured = subprocess.run([sys.executable, "-c", _MEASURED_ROW_DIFF, repository, first, rewritten, "tables/narrow"],
                              capture_output=True, text=True, timeout=600)
    assert measured.returncode == 0, measured.stderr[-3000:]
    found = json.loads(measured.stdout.splitlines()[-1])
    diff = found["diff"]
    print(f"row diff of 2,000,000 rows read: peak RSS {found['peak_rss_mib']:.0f} MiB, Redis {found['redis_bytes']:,} "
          f"bytes, {diff['computed_seconds']:.1f} s")
    assert diff["counts"] == {"added": 500_000, "removed": 500_000, "updated": 0} and diff["engine"] == "in-process"
    assert found["peak_rss_mib"] < 1536 and found["redis_bytes"] < 2**20
    path = f"/repositories/{repository}/otf/refs/{first}/diff/{rewritten}/rows?table_path=tables/narrow&amount=3"
    page = api(service, path + "&after=499998").json()  # from the rows file: the row groups of this page only
    assert [(r["id"], r["change"]) for r in page["rows"]] == [(499_999, "removed"), (500_000, "added"), (500_001, "added")]
    removed, *added = [r["values"]["id"] for r in page["rows"]]
    assert removed < 500_000 and all(1_000_000 <= i < 1_500_000 for i in added) and page["pagination"]["has_more"]

    # 5,000,000 rows more, and no Spark job configured: refused before a data file is read, naming the rows
    with spark_settings(spark, COMPILED):
        spark.range(0, 5_000_000, numPartitions=8).write.format("delta").mode("overwrite").save(uri)
    bigger = lakefs.commit_branch(repository, "main", "5,000,000 rows")
    without_spark = config.model_copy(update={"row_diff": config.row_diff.model_copy(
        update={"spark": config.row_diff.spark.model_copy(update={"master": ""})})})
    with pytest.raises(ExporterError, match=r"16 file\(s\) holding 6,000,000 rows to read: more than row_diff.max_rows "
                                            r"\(2,000,000\)"):
        compute_row_diff(lake_of(without_spark, lakefs), RowDiffQuery(repository, rewritten, bigger, "tables/narrow"))


def test_the_page_shows_changed_rows_as_a_grid_with_each_updated_cell_before_and_after(spark, lakefs, repository,
                                                                                      service):
    """Issue 41: a column per table column; an updated row (by the key the URL names) shows before →
    after in the cells that changed, marked, and its other cells plain; removed and added rows are
    coloured; "More rows" reaches every page of a 3-page answer (3 rows a page)."""
    from devtools import stack
    from lakefs_delta.client import sign_in_link
    from tests.integration.browser import open_rows_grid

    uri = table_uri(repository, "main", "tables/grid")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, name STRING, amount DOUBLE) USING delta")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES " + ", ".join(f"({i}, 'n{i}', {i}.5)" for i in range(1, 11)))
    lakefs.commit_branch(repository, "main", "ten rows")
    lakefs.create_branch(repository, "edit", "main")
    edit = f"delta.`{table_uri(repository, 'edit', 'tables/grid')}`"
    spark.sql(f"UPDATE {edit} SET amount = amount + 100 WHERE id <= 2")
    spark.sql(f"UPDATE {edit} SET name = NULL WHERE id = 3")
    spark.sql(f"DELETE FROM {edit} WHERE id >= 9")
    spark.sql(f"INSERT INTO {edit} VALUES (11, 'eleven', 11.5), (12, NULL, 12.5), (13, 'n13', 13.5)")
    lakefs.commit_branch(repository, "edit", "edits")

    state = stack.load_state()
    link = sign_in_link(service, state.lakefs_access_key_id, state.lakefs_secret_access_key,
                        {"repository": repository, "left": "main", "right": "edit", "table_path": "tables/grid",
                         "key": "id", "page_size": "3"})
    seen = open_rows_grid(link, "row-diff-grid.png")

    assert seen.header == ["change", "partition", "id", "name", "amount"]
    assert seen.pages == "8 rows shown, 3 pages"
    by_id = {row[2]: (row, kind) for row, kind in zip(seen.rows, seen.classes)}
    assert sorted(by_id, key=int) == ["1", "2", "3", "9", "10", "11", "12", "13"]
    assert [by_id[i][1] for i in ("1", "2", "3")] == ["updated"] * 3
    assert [by_id[i][1] for i in ("9", "10")] == ["removed"] * 2 and by_id["9"][0][3:] == ["n9", "9.5"]
    assert [by_id[i][1] for i in ("11", "12", "13")] == ["added"] * 3 and by_id["12"][0][3] == "null"
    marked = {(seen.rows[i][2], column, before, after) for i, column, before, after in seen.changed}
    assert marked == {("1", "amount", "1.5", "101.5"), ("2", "amount", "2.5", "102.5"), ("3", "name", "n3", "null")}
    assert by_id["1"][0][3] == "n1"  # an unchanged cell of an updated row: its value alone


def test_a_row_diff_on_a_standalone_cluster_runs_on_its_worker_with_the_rows_of_except_all(spark, lakefs, config,
                                                                                        repository):
    """Issue 50: `row_diff.spark.master=spark://...` (Spark's own standalone master and one worker,
    devtools.stack.spark_cluster): the job's executors run on the worker (their logs are under its
    work folder, one application more), and the rows equal Spark's `exceptAll` both ways."""
    from devtools import stack

    master = stack.spark_cluster()
    uri = table_uri(repository, "main", "tables/wide")
    spark.range(0, 20_000, numPartitions=4).selectExpr("id", "concat('v', id) AS v").write.format("delta").save(uri)
    first = lakefs.commit_branch(repository, "main", "20,000 rows")
    spark.range(10_000, 30_000, numPartitions=4).selectExpr("id", "concat('w', id) AS v") \
        .write.format("delta").mode("overwrite").save(uri)
    second = lakefs.commit_branch(repository, "main", "every row changed or replaced")
    on_cluster = config.model_copy(update={"row_diff": config.row_diff.model_copy(update={
        "max_bytes": 0, "spark": config.row_diff.spark.model_copy(update={"master": master})})})
    work = stack.STACK_DIR / "spark-work"
    before = set(work.glob("app-*"))

    diff = row_diff(on_cluster, lakefs, repository, first, second, "tables/wide", ("id",))

    assert diff["engine"] == "spark" and diff["counts"] == {"added": 10_000, "removed": 10_000, "updated": 10_000}
    applications = set(work.glob("app-*")) - before
    assert len(applications) == 1, applications  # the job's, its executors on the worker
    assert any(executor.joinpath("stderr").exists() for executor in next(iter(applications)).iterdir())
    assert removed_and_added(diff["rows"], ["id", "v"]) == full_scan(spark, repository, first, second, "tables/wide",
                                                                     ["id", "v"])


def test_a_row_diff_whose_jvm_is_killed_at_each_run_fails_for_good_after_its_attempts(spark, lakefs, config,
                                                                                    repository):
    """Issue 50: the job's JVM killed as each run starts reading (what the OOM killer or a lost node
    does): it runs again from nothing `row_diff.spark.attempts` (2) times in all, then the diff fails
    for good with the reason (the API's 422), never looping."""
    uri = table_uri(repository, "main", "tables/killed")
    spark.range(0, 1000, numPartitions=2).write.format("delta").save(uri)
    first = lakefs.commit_branch(repository, "main", "1,000 rows")
    spark.range(500, 1500, numPartitions=2).write.format("delta").mode("overwrite").save(uri)
    second = lakefs.commit_branch(repository, "main", "rewritten")
    as_job = config.model_copy(update={"row_diff": config.row_diff.model_copy(update={"max_bytes": 0})})
    killed: list[int] = []

    def kill_the_jvm(seen: dict) -> None:
        if seen.get("phase") == "reading":
            for pid in job_jvms():
                if pid not in killed:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

    with pytest.raises(ExporterError, match=r"died 2 time\(s\) \(row_diff.spark.attempts: 2\), each run from nothing") \
            as failed:
        compute_row_diff(lake_of(as_job, lakefs), RowDiffQuery(repository, first, second, "tables/killed"),
                         progress=kill_the_jvm)
    assert failed.value.permanent and len(killed) == 2, killed


def job_jvms() -> list[int]:
    """The JVMs of this test process's running row-diff jobs: java processes below a `python -m
    exporter.diff.rows.spark` it started (another test process's jobs are not this test's to kill)."""
    return jvms_below(lambda pid, command: b"exporter.diff.rows.spark" in command, within=os.getpid())


def test_a_merge_gates_row_rules_past_the_workers_limits_run_as_a_spark_job_with_the_same_findings(
        spark, lakefs, config, repository):
    """Issue 53: key and column rules over more changed rows than the worker reads
    (`row_diff.max_rows`) run as the row diff's Spark job, and find what the worker finds."""
    from exporter.checks.rows import row_findings
    from exporter.checks.rules import ColumnRule, TableChecks

    uri = table_uri(repository, "main", "tables/gated")
    spark.range(0, 300, 1, 3).selectExpr("id", "IF(id = 11, 'old', IF(id % 2 = 0, 'new', 'paid')) AS status") \
        .write.format("delta").save(uri)  # three files of contiguous ids; one row's value no rule accepts now
    left = lakefs.commit_branch(repository, "main", "300 rows")
    lakefs.create_branch(repository, "gated", "main")
    gated = table_uri(repository, "gated", "tables/gated")
    spark.createDataFrame([(150, "new"), (400, "paid"), (400, "new"), (401, None), (402, "lost"), (403, "lost"),
                           (None, "new")], "id LONG, status STRING").coalesce(1) \
        .write.format("delta").mode("append").save(gated)
    right = lakefs.commit_branch(repository, "gated", "rows appended")
    checks = TableChecks(keys=("id",), columns={"status": ColumnRule(not_null=True, accepted=("new", "paid"))})
    above = config.model_copy(update={"row_diff": config.row_diff.model_copy(update={"max_rows": 0})})

    def in_process_and_job(commit: str) -> list:
        """The rules' findings for the change from `left` to `commit`: in the worker, then as the job."""
        return [row_findings(lake_of(settings, lakefs), repository, left, commit, "tables/gated", checks)
                for settings in (config, above)]

    in_process, job = in_process_and_job(right)

    assert [(f.rule, f.found) for f in in_process] == [
        ("keys", "1 added or updated row(s) with a null key (id)"),
        ("keys", "1 key(s) written more than once by the change: id=400 (2 rows)"),
        ("keys", "1 key(s) the change writes are already in the table: id=150"),
        ("columns", "1 added or updated row(s) with `status` null"),
        ("columns", "2 added or updated row(s) with `status` not one of new, paid: 'lost' (2)")]
    assert [f.rows for f in in_process] == [  # the rows each is about, shown on the diff page
        ({"id": None, "status": "new"},), ({"id": 400, "status": "new"}, {"id": 400, "status": "paid"}),
        ({"id": 150, "status": "new"},), ({"id": 401, "status": None},),
        ({"id": 402, "status": "lost"}, {"id": 403, "status": "lost"})]
    assert job == in_process  # the job reads the appended rows again for them: it found some

    # an update rewrites a file: its 99 unchanged rows, removed and added again, cancel (id 11's 'old'
    # among them: not checked); the changed one is (the job's path with removed rows to match)
    spark.sql(f"UPDATE delta.`{gated}` SET id = 401, status = 'lost' WHERE id = 10")
    in_process, job = in_process_and_job(lakefs.commit_branch(repository, "gated", "a row updated"))
    assert [(f.rule, f.found) for f in in_process] == [
        ("keys", "1 added or updated row(s) with a null key (id)"),
        ("keys", "2 key(s) written more than once by the change: id=400 (2 rows), id=401 (2 rows)"),
        ("keys", "1 key(s) the change writes are already in the table: id=150"),
        ("columns", "1 added or updated row(s) with `status` null"),
        ("columns", "3 added or updated row(s) with `status` not one of new, paid: 'lost' (3)")]
    assert [f.rows for f in in_process][1:] == [  # of the rewritten file's rows only the updated one
        ({"id": 400, "status": "new"}, {"id": 400, "status": "paid"}, {"id": 401, "status": "lost"},
         {"id": 401, "status": None}),
        ({"id": 150, "status": "new"},), ({"id": 401, "status": None},),
        ({"id": 401, "status": "lost"}, {"id": 402, "status": "lost"}, {"id": 403, "status": "lost"})]
    assert job == in_process
