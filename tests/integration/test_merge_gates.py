"""Merge gates on the real stack: lakeFS runs the `delta-checks` action (`install-actions --checks`)
before each merge into main and each commit on it; the service answers from each changed table's
declared rules, and lakeFS refuses what it blocks, keeping the report with the hook run."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import time

import deltalake
import httpx
import pyarrow as pa
import pytest

from exporter.errors import ExporterError
from exporter.lakefs.installer import action_files, install_actions
from tests.conftest import SERVICE_PORT
from tests.integration.test_one_grant import upload_folder
from tests.integration.test_webhooks import api

pytestmark = pytest.mark.integration

WEBHOOK = f"http://127.0.0.1:{SERVICE_PORT}/webhooks/lakefs"
SCHEMA = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}},
                                       {"name": "amount", "type": "double", "nullable": True, "metadata": {}},
                                       {"name": "note", "type": "string", "nullable": True, "metadata": {}}]}
RULES = "checks:\n  schema: true\n  rows:\n    removed_at_most: 5%\n  readers: [delta-sharing, duckdb]\n"


def metadata(schema: dict) -> dict:
    return {"metaData": {"id": "8d1e3f0c-0000-4000-8000-000000000001", "format": {"provider": "parquet", "options": {}},
                         "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {},
                         "createdTime": 1700000000000}}


def add(name: str, rows: int = 100) -> dict:
    return {"add": {"path": name, "partitionValues": {}, "size": 1, "modificationTime": 0, "dataChange": True,
                    "stats": json.dumps({"numRecords": rows})}}


def remove(name: str) -> dict:
    return {"remove": {"path": name, "deletionTimestamp": 1700000000000, "dataChange": True}}


def write_version(lakefs, repository: str, branch: str, version: int, operation: str, *actions: dict) -> None:
    lines = [{"commitInfo": {"operation": operation, "timestamp": 1700000000000 + version}}, *actions]
    lakefs.upload_object(repository, branch, f"tables/events/_delta_log/{version:020d}.json",
                         "".join(json.dumps(a) + "\n" for a in lines).encode())


def blocked(lakefs, repository: str, merge) -> str:
    """lakeFS refuses the operation; the report the gate answered, as lakeFS kept it with the hook run."""
    with pytest.raises(ExporterError, match="412") as refused:
        merge()
    runs = [r for r in lakefs.branch_runs(repository, "main") if r["event_type"] in ("pre-merge", "pre-commit")]
    run = max(runs, key=lambda r: r["start_time"])
    assert run["status"] == "failed", run
    hook = lakefs.hook_runs(repository, run["run_id"])[0]
    return refused.value.args[0] + "\n" + lakefs.hook_output(repository, run["run_id"], hook["hook_run_id"])


@pytest.fixture
def gated(lakefs, repository, service) -> str:
    """main holds a 1,000-row table (10 files of 100 rows) whose descriptor declares rules, and the
    `delta-checks` action gates merges into main and commits on it."""
    write_version(lakefs, repository, "main", 0, "CREATE TABLE", {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
                  metadata(SCHEMA), *[add(f"part-{i}.parquet") for i in range(10)])
    lakefs.upload_object(repository, "main", "_lakefs_tables/events.yaml",
                         f"name: events\ntype: delta\npath: tables/events\n{RULES}".encode())
    lakefs.commit_branch(repository, "main", "a table with rules")
    install_actions(lakefs, repository, "main", action_files(WEBHOOK, ["main"], {}, checks=["main"]))
    return repository


def branch_with(lakefs, repository: str, name: str, operation: str, *actions: dict) -> str:
    lakefs.create_branch(repository, name, "main")
    write_version(lakefs, repository, name, 1, operation, *actions)
    lakefs.commit_branch(repository, name, operation)
    return name


def test_a_merge_breaking_a_rule_is_refused_with_the_report_and_a_compliant_one_passes(lakefs, gated, service):
    repository = gated
    dropped = branch_with(lakefs, repository, "drop-amount", "DROP COLUMNS", metadata(
        {**SCHEMA, "fields": [f for f in SCHEMA["fields"] if f["name"] != "amount"]}))
    report = blocked(lakefs, repository, lambda: lakefs.merge(repository, dropped, "main"))
    assert "- events: schema: column `amount` removed (double)" in report, report
    cli = subprocess.run([sys.executable, "-m", "lakefs_delta.cli", "check", "--repo", repository, "--from", dropped,
                          "--into", "main"], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 1 and "- events: schema: column `amount` removed (double)" in cli.stdout, cli

    deletion_vectors = branch_with(lakefs, repository, "enable-dv", "SET TBLPROPERTIES", {"protocol": {
        "minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
        "writerFeatures": ["deletionVectors"]}})
    report = blocked(lakefs, repository, lambda: lakefs.merge(repository, deletion_vectors, "main"))
    assert "- events: readers: delta-sharing cannot read deletionVectors, which this change brings" in report, report
    assert "duckdb" not in report  # DuckDB reads deletion vectors

    deleted = branch_with(lakefs, repository, "delete-30", "DELETE", *[remove(f"part-{i}.parquet") for i in range(3)])
    report = blocked(lakefs, repository, lambda: lakefs.merge(repository, deleted, "main"))
    assert "- events: rows: 300 rows removed (30.0% of 1,000): more than 5% of the rows" in report, report

    answer = api(service, f"/repositories/{repository}/otf/refs/main/checks/{deleted}")
    assert answer.status_code == 200 and answer.json()["passed"] is False, answer.text
    assert answer.json()["findings"] == [{"table": "events", "path": "tables/events", "rule": "rows",
                                          "found": "300 rows removed (30.0% of 1,000): more than 5% of the rows",
                                          "rows": []}]
    assert httpx.get(f"{service}/repositories/{repository}/otf/refs/main/checks/{deleted}").status_code == 401

    appended = branch_with(lakefs, repository, "append", "WRITE", add("part-10.parquet"))
    answer = api(service, f"/repositories/{repository}/otf/refs/main/checks/{appended}").json()
    assert answer["passed"] is True and answer["tables"] == ["events"] and answer["findings"] == [], answer
    merged = lakefs.merge(repository, appended, "main")
    assert lakefs.commit(repository, "main").id == merged


def test_a_rule_file_with_a_typo_blocks_with_the_reason(lakefs, gated):
    repository = gated
    lakefs.create_branch(repository, "typo", "main")
    lakefs.upload_object(repository, "typo", "_lakefs_tables/events.yaml",
                         b"name: events\ntype: delta\npath: tables/events\nchecks:\n  readers: [delta_rs]\n")
    lakefs.commit_branch(repository, "typo", "a reader misspelt")
    report = blocked(lakefs, repository, lambda: lakefs.merge(repository, "typo", "main"))
    assert ("- events: rules: _lakefs_tables/events.yaml: `checks.readers`: 'delta_rs' is not one of spark-3.5, "
            "delta-rs, duckdb, delta-sharing, iceberg (did you mean 'delta-rs'?)") in report, report


def test_a_commit_on_a_gated_branch_is_checked_as_staged(lakefs, gated, tmp_path):
    """lakeFS reads a branch's pre-commit actions through a cache: a newly committed one applies
    seconds later (4-6 s measured). Harmless commits (no table changed: the gate passes them) are
    made until lakeFS runs the gate on one, then the table is changed."""
    repository = gated
    deadline = time.monotonic() + 60
    for probe in itertools.count():
        lakefs.upload_object(repository, "main", f"probe/{probe}", b"x")
        lakefs.commit_branch(repository, "main", f"probe {probe}")
        if any(r["event_type"] == "pre-commit" for r in lakefs.branch_runs(repository, "main")):
            break
        assert time.monotonic() < deadline, "lakeFS never ran the pre-commit action"
        time.sleep(0.5)
    write_version(lakefs, repository, "main", 1, "DELETE", *[remove(f"part-{i}.parquet") for i in range(5)])
    report = blocked(lakefs, repository, lambda: lakefs.commit_branch(repository, "main", "half the rows"))
    assert "- events: rows: 500 rows removed (50.0% of 1,000): more than 5% of the rows" in report, report
    lakefs.delete_object(repository, "main", f"tables/events/_delta_log/{1:020d}.json")
    write_version(lakefs, repository, "main", 1, "WRITE", add("part-10.parquet"))
    assert lakefs.commit_branch(repository, "main", "a compliant append")

    # a new table staged with a key written twice: its rows are read from the staged objects
    folder = tmp_path / "orders"
    deltalake.write_deltalake(str(folder), orders([1, 2, 2]), mode="append")
    upload_folder(lakefs, repository, "main", "tables/orders", folder)
    lakefs.upload_object(repository, "main", "_lakefs_tables/orders.yaml",
                         f"name: orders\ntype: delta\npath: tables/orders\n{ORDERS_RULES}".encode())
    report = blocked(lakefs, repository, lambda: lakefs.commit_branch(repository, "main", "orders, a key twice"))
    assert "- orders: keys: 1 key(s) written more than once by the change: order_id=2 (2 rows)" in report, report


ORDERS_RULES = ("checks:\n  keys: [order_id]\n  columns:\n    status: {not_null: true, accepted: [new, paid, shipped]}\n"
                "  rows:\n    removed_at_most: 5%\n")


def orders(ids, status: str = "new") -> pa.Table:
    ids = list(ids)
    return pa.table({"order_id": pa.array(ids, pa.int64()), "status": pa.array([status] * len(ids), pa.string())})


def test_a_merge_writing_a_key_twice_or_again_or_a_value_not_accepted_is_refused_naming_them(
        lakefs, gated, tmp_path, service, config):
    """`orders` (delta-rs, 200 rows in two files) declares its key and its status's values; each
    branch appends one file. What is read: the appended file, and of main's files only those whose
    order_id statistics could hold an appended key. The diff page shows the same findings, each
    with the rows it is about. A rewrite removing 30 % of the rows while adding as many is counted
    in its rows and refused by the 5 % rule."""
    from tests.integration.browser import open_checks

    repository = gated
    base = tmp_path / "base"
    deltalake.write_deltalake(str(base), orders(range(1, 101)), mode="append")
    deltalake.write_deltalake(str(base), orders(range(101, 201), "paid"), mode="append")
    upload_folder(lakefs, repository, "main", "tables/orders", base)
    lakefs.upload_object(repository, "main", "_lakefs_tables/orders.yaml",
                         f"name: orders\ntype: delta\npath: tables/orders\n{ORDERS_RULES}".encode())
    lakefs.commit_branch(repository, "main", "orders, with a key")

    def branch_appending(name: str, rows: pa.Table, mode: str = "append") -> str:
        folder = tmp_path / name
        shutil.copytree(base, folder)
        deltalake.write_deltalake(str(folder), rows, mode=mode)
        lakefs.create_branch(repository, name, "main")
        before = {path.relative_to(base) for path in base.rglob("*")}
        for file in sorted(folder.rglob("*")):
            if file.is_file() and file.relative_to(folder) not in before:
                lakefs.upload_object(repository, name, f"tables/orders/{file.relative_to(folder).as_posix()}",
                                     file.read_bytes())
        lakefs.commit_branch(repository, name, f"append to orders on {name}")
        return name

    twice = branch_appending("key-twice", orders([150, 201, 201, 202]))
    report = blocked(lakefs, repository, lambda: lakefs.merge(repository, twice, "main"))
    assert "- orders: keys: 1 key(s) written more than once by the change: order_id=201 (2 rows)" in report, report
    assert "- orders: keys: 1 key(s) the change writes are already in the table: order_id=150" in report, report
    summary, shown, rows = open_checks(f"{service}/diff?repository={repository}&left=main&right={twice}",
                                 (config.lakefs.access_key_id, config.lakefs.secret_access_key.get_secret_value()),
                                 "merge-gate-diff-page.png")
    assert summary == "Blocked: 2 finding(s) over 1 table(s) checked.", summary
    assert shown == ["orders\tkeys\t1 key(s) written more than once by the change: order_id=201 (2 rows)",
                     "orders\tkeys\t1 key(s) the change writes are already in the table: order_id=150"], shown
    # under each finding, the rows it is about: the appended rows of the keys it names
    assert rows == [["order_id\tstatus", "201\tnew", "201\tnew"], ["order_id\tstatus", "150\tnew"]], rows

    lost = branch_appending("status-lost", orders([300, 301], "lost"))
    report = blocked(lakefs, repository, lambda: lakefs.merge(repository, lost, "main"))
    assert ("- orders: columns: 2 added or updated row(s) with `status` not one of new, paid, shipped: "
            "'lost' (2)") in report, report
    assert "keys" not in report, report

    # a rewrite that leaves the count as it was: 60 orders gone, 60 new ones; the logs say only that up
    # to all 200 rows may have gone, so the gate counts the changed rows (matched by the key)
    rewritten = branch_appending("rewritten", pa.concat_tables(
        [orders(range(1, 101)), orders(range(101, 141), "paid"), orders(range(301, 361))]), mode="overwrite")
    report = blocked(lakefs, repository, lambda: lakefs.merge(repository, rewritten, "main"))
    assert ("- orders: rows: 60 rows removed (30.0% of 200) (counted in the changed rows): more than 5% of the "
            "rows") in report, report
    assert "keys" not in report and "columns" not in report, report

    compliant = branch_appending("more-orders", orders([400, 401], "shipped"))
    assert lakefs.merge(repository, compliant, "main") == lakefs.commit(repository, "main").id
