"""A data engineer compares a Delta table between branches: operations, removed columns, row count.

The story from the diff issue, built with Spark through lakeFS: `main` has `transactions`; on
`exp1` a retention-and-column-remover ETL drops two columns, deletes old rows and (by mistake)
appends duplicates. The diff `main..exp1` must say exactly that.
"""

from __future__ import annotations

import os
import time

import httpx
import pytest

from exporter.diff.table import DiffCache, cached_diff
from exporter.diff.overview import compare_refs
from tests.integration.deltatables import add_descriptor, table_uri
from tests.fakes import lake_of

pytestmark = pytest.mark.integration
ARTIFACTS = os.path.join(os.path.dirname(__file__), "..", "artifacts")
COLUMNS = "id INT, day STRING, amount DOUBLE, description STRING, account STRING"


def transactions(spark, ids: range):
    return spark.createDataFrame([(i, f"2024-01-{1 + i % 5:02d}", i * 1.25, f"café purchase {i}", f"acct-{i % 3}")
                                  for i in ids], COLUMNS)


def run_etl(spark, uri: str) -> None:
    """Retention (drop days before 2024-01-03) and column removal, then the planted duplicate append."""
    kept = spark.read.format("delta").load(uri).filter("day >= '2024-01-03'").drop("description", "account")
    kept = kept.localCheckpoint()  # materialise before overwriting the table it was read from
    kept.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(uri)
    kept.limit(25).write.format("delta").mode("append").save(uri)


@pytest.fixture
def story(spark, lakefs, repository):
    uri_main = table_uri(repository, "main", "tables/transactions")
    transactions(spark, range(100)).write.format("delta").save(uri_main)
    add_descriptor(lakefs, repository, "transactions", "tables/transactions")
    lakefs.commit_branch(repository, "main", "ingest transactions")
    lakefs.create_branch(repository, "exp1", "main")
    run_etl(spark, table_uri(repository, "exp1", "tables/transactions"))
    lakefs.commit_branch(repository, "exp1", "retention and column remover", {"job": "etl"})
    return repository


def diff(config, lakefs, repository: str, left: str, right: str, path: str) -> dict:
    cache = DiffCache(config.redis, 60)
    return cached_diff(lake_of(config, lakefs), cache, repository, left, right, path)[0]


def test_diff_shows_the_etl_operations_removed_columns_and_row_change(config, lakefs, story):
    result = diff(config, lakefs, story, "main", "exp1", "tables/transactions")

    assert result["diff_type"] == "changed"
    assert [(op["id"], op["operation"]) for op in result["results"]] == [("2", "WRITE"), ("1", "WRITE")]
    assert result["results"][1]["operation_content"]["operationParameters"]["mode"] == "Overwrite"
    assert all(isinstance(op["timestamp"], int) and op["timestamp"] > 1_600_000_000_000 for op in result["results"])
    removed = sorted(c["column"] for c in result["schema_changes"] if c["change"] == "removed")
    assert removed == ["account", "description"]
    kept = sum(1 for i in range(100) if 1 + i % 5 >= 3)
    # the overwrite rewrote every row: up to all 100 removed, all that is there now added (logs only)
    assert result["row_count"] == {"left": 100, "right": kept + 25, "difference": kept + 25 - 100,
                                   "in_files_removed": 100, "in_files_added": kept + 25}
    assert not result["history_truncated"]


def test_reverse_diff_after_more_commits_on_main_shows_only_mains_operations(spark, config, lakefs, story):
    transactions(spark, range(100, 110)).write.format("delta").mode("append") \
        .save(table_uri(story, "main", "tables/transactions"))
    lakefs.commit_branch(story, "main", "more transactions")

    result = diff(config, lakefs, story, "exp1", "main", "tables/transactions")

    # main's version 1 is a different commit from exp1's version 1: told apart by content
    assert [(op["id"], op["operation"]) for op in result["results"]] == [("1", "WRITE")]
    assert result["results"][0]["operation_content"]["operationParameters"]["mode"] == "Append"
    added = sorted(c["column"] for c in result["schema_changes"] if c["change"] == "added")
    assert added == ["account", "description"]


def test_table_created_on_branch_and_table_dropped(spark, config, lakefs, story):
    spark.createDataFrame([(1,)], "id INT").write.format("delta").save(table_uri(story, "exp1", "tables/fresh"))
    for entry in list(lakefs.list_objects(story, "exp1", "tables/transactions/")):
        lakefs.delete_object(story, "exp1", entry.path)
    lakefs.commit_branch(story, "exp1", "new table, old one dropped")

    assert diff(config, lakefs, story, "main", "exp1", "tables/fresh")["diff_type"] == "created"
    dropped = diff(config, lakefs, story, "main", "exp1", "tables/transactions")
    assert dropped["diff_type"] == "dropped" and dropped["row_count"]["right"] is None


def test_row_counts_are_net_of_deletion_vectors(spark, config, lakefs, repository):
    uri = table_uri(repository, "main", "tables/dv")
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT) USING delta TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"INSERT INTO delta.`{uri}` SELECT id FROM range(1000)")
    lakefs.commit_branch(repository, "main", "dv table")
    lakefs.create_branch(repository, "cleanup", "main")
    spark.sql(f"DELETE FROM delta.`{table_uri(repository, 'cleanup', 'tables/dv')}` WHERE id % 10 = 0")
    lakefs.commit_branch(repository, "cleanup", "delete every tenth row")
    assert any("deletion_vector_" in e.path for e in lakefs.list_objects(repository, "cleanup", "tables/dv/"))

    result = diff(config, lakefs, repository, "main", "cleanup", "tables/dv")

    # the deletion vectors say exactly which rows went: 100 removed, none added
    assert result["row_count"] == {"left": 1000, "right": 900, "difference": -100, "in_files_removed": 100,
                                   "in_files_added": 0}
    assert [op["operation_type"] for op in result["results"]] == ["delete"]


def test_commit_through_webhook_is_served_from_the_precomputed_cache(service, spark, config, lakefs, repository):
    from exporter.lakefs.installer import action_files, install_actions
    from tests.integration.test_webhooks import WEBHOOK, api, wait_for_export

    install_actions(lakefs, repository, "main", action_files(WEBHOOK, ["main"], {"transactions": "tables/transactions"}))
    transactions(spark, range(20)).write.format("delta").save(table_uri(repository, "main", "tables/transactions"))
    commit = lakefs.commit_branch(repository, "main", "ingest")
    wait_for_export(service, repository, commit, {"transactions"})
    parent = lakefs.commit(repository, commit).parents[0]
    cache = DiffCache(config.redis, 60)
    deadline = time.monotonic() + 60
    while cache.get(repository, parent, commit, "tables/transactions") is None and time.monotonic() < deadline:
        time.sleep(0.3)
    assert cache.get(repository, parent, commit, "tables/transactions") is not None  # before any request

    answer = api(service, f"/repositories/{repository}/otf/refs/{parent}/diff/{commit}?table_path=tables/transactions&type=delta")

    assert answer.status_code == 200 and answer.json()["cached"] is True
    assert answer.json()["diff_type"] == "created" and answer.json()["row_count"]["right"] == 20


def test_diff_api_errors(service, config, lakefs, story):
    from tests.integration.test_webhooks import api

    base = f"/repositories/{story}/otf/refs/main/diff/exp1"
    assert api(service, base + "?table_path=tables/transactions&type=delta").status_code == 200
    assert api(service, base + "?type=delta").status_code == 400
    assert api(service, base + "?table_path=tables/transactions&type=iceberg").status_code == 400
    assert api(service, base + "?table_path=tables/nothing-here").status_code == 404
    assert api(service, f"/repositories/{story}/otf/refs/main/diff/no-such-ref?table_path=tables/transactions").status_code == 404
    assert api(service, "/repositories/no-such-repo/otf/refs/main/diff/exp1?table_path=t").status_code == 404
    page = api(service, base + "?table_path=tables/transactions&amount=1")
    assert len(page.json()["results"]) == 1 and page.json()["pagination"]["has_more"] is True
    datasets = api(service, f"/repositories/{story}/refs/exp1/datasets").json()["results"]
    assert [(d["path"], d["source"], d["latest_version"]) for d in datasets] == [("tables/transactions", "descriptor", 2)]
    resolved = api(service, f"/repositories/{story}/refs/exp1/datasets/resolve?path=tables/transactions/day=2024-01-03/x.parquet")
    assert resolved.json()["path"] == "tables/transactions"


def test_diff_page_opens_signed_in_from_a_one_time_link(service, story, config):
    from lakefs_delta.client import sign_in_link
    from tests.integration.browser import open_diff_page

    page = {"repository": story, "left": "main", "right": "exp1", "table_path": "tables/transactions"}
    secret = config.lakefs.secret_access_key.get_secret_value()
    link = sign_in_link(service, config.lakefs.access_key_id, secret, page)

    seen = open_diff_page(link, "diff-page.png")

    assert seen.removed_columns == ["account", "description"]
    assert seen.row_difference.startswith("(-")  # 100 -> 85 rows
    assert "code=" not in seen.url and "table_path=tables%2Ftransactions" in seen.url  # the code left the address bar
    assert not seen.sign_in_shown
    [session] = [c for c in seen.cookies if c["name"] == "lakefs_delta_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict" and secret not in session["value"]
    # the link worked once: opened again, the page asks to sign in
    code = link.rsplit("code=", 1)[1]
    assert httpx.post(service + "/session/code", json={"code": code}, timeout=10).status_code == 401


def test_diff_page_signs_in_with_lakefs_keys_and_keeps_no_secret(service, story, config):
    from tests.integration.browser import open_diff_page

    secret = config.lakefs.secret_access_key.get_secret_value()
    link = f"{service}/diff?repository={story}&left=main&right=exp1&table_path=tables/transactions"

    seen = open_diff_page(link, "diff-page-sign-in.png", keys=(config.lakefs.access_key_id, secret))

    assert seen.removed_columns == ["account", "description"] and not seen.sign_in_shown
    [session] = [c for c in seen.cookies if c["name"] == "lakefs_delta_session"]
    assert session["httpOnly"] and secret not in session["value"] and config.lakefs.access_key_id not in session["value"]


def test_history_reaches_past_the_checkpoint_and_says_when_it_is_gone(config, lakefs, repository):
    """25 versions on a branch with checkpoints at 10 and 20: all 25 operations are listed; once the
    JSON commits before the checkpoint are cleaned up, the diff says its history is truncated."""
    from bench.synthetic import build_history

    build_history(lakefs, repository, 25)

    full = diff(config, lakefs, repository, "main", "topic", "tables/history")
    assert [int(op["id"]) for op in full["results"]] == list(range(25, 0, -1))
    assert not full["history_truncated"] and full["row_count"]["right"] == 10 * 25

    for version in range(1, 15):  # log cleanup
        lakefs.delete_object(repository, "topic", f"tables/history/_delta_log/{version:020d}.json")
    lakefs.commit_branch(repository, "topic", "log cleanup")

    cleaned = diff(config, lakefs, repository, "main", "topic", "tables/history")
    assert [int(op["id"]) for op in cleaned["results"]] == list(range(25, 14, -1))
    assert cleaned["history_truncated"]


def test_a_table_dropped_and_created_again_on_a_branch_is_replaced_with_its_whole_history(spark, config, lakefs,
                                                                                          repository):
    """The recreated table shares version numbers 0-2 with main's, not its commits: every one of its
    versions is listed, those before its checkpoints too, and the diff says the table was replaced."""
    spark.sql(f"CREATE TABLE delta.`{table_uri(repository, 'main', 'tables/t')}` (id INT, day STRING) USING delta")
    for day in ("2024-01-01", "2024-01-02"):
        spark.sql(f"INSERT INTO delta.`{table_uri(repository, 'main', 'tables/t')}` VALUES (1, '{day}')")
    lakefs.commit_branch(repository, "main", "table t, versions 0-2")
    lakefs.create_branch(repository, "recreate", "main")
    for entry in list(lakefs.list_objects(repository, "recreate", "tables/t/")):  # DROP: the folder deleted
        lakefs.delete_object(repository, "recreate", entry.path)
    uri = table_uri(repository, "recreate", "tables/t")
    spark.sql(f"CREATE TABLE delta.`{uri}` (name STRING, score DOUBLE) USING delta "
              "TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    for score in range(1, 6):
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES ('n{score}', {score}.5)")
    lakefs.commit_branch(repository, "recreate", "table t dropped and created again, versions 0-5")
    log = [e.path.rsplit("/", 1)[-1] for e in lakefs.list_objects(repository, "recreate", "tables/t/_delta_log/")]
    assert {f"{v:020d}.checkpoint.parquet" for v in (2, 4)} <= set(log)

    result = diff(config, lakefs, repository, "main", "recreate", "tables/t")

    assert [int(op["id"]) for op in result["results"]] == [5, 4, 3, 2, 1, 0]
    assert result["diff_type"] == "replaced"
    assert result["results"][-1]["operation"] == "CREATE TABLE"
    assert not result["history_truncated"]
    assert result["versions"] == {"left": 2, "right": 5, "base": 2}
    assert None not in result["table_ids"].values() and result["table_ids"]["left"] != result["table_ids"]["right"]
    assert sorted((c["change"], c["column"]) for c in result["schema_changes"]) == \
        [("added", "name"), ("added", "score"), ("removed", "day"), ("removed", "id")]
    # from checkpoints of their own, the logs cannot bound what changed
    assert result["row_count"] == {"left": 2, "right": 5, "difference": 3, "in_files_removed": None,
                                   "in_files_added": None}
    overview = compare_refs(lake_of(config, lakefs), DiffCache(config.redis, 60), repository, result["left_commit"],
                            result["right_commit"])
    assert [(t["path"], t["diff_type"], t["operations"]) for t in overview["tables"]] == [("tables/t", "replaced", 6)]


def test_a_table_whose_commits_before_a_checkpoint_were_cleaned_up_is_truncated_not_replaced(spark, config, lakefs,
                                                                                              repository):
    uri_main = table_uri(repository, "main", "tables/t")
    spark.sql(f"CREATE TABLE delta.`{uri_main}` (id INT) USING delta TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    spark.sql(f"INSERT INTO delta.`{uri_main}` VALUES (0)")
    lakefs.commit_branch(repository, "main", "table t, versions 0-1")
    lakefs.create_branch(repository, "cleanup", "main")
    for row in range(1, 5):  # versions 2-5, checkpoints at 2 and 4
        spark.sql(f"INSERT INTO delta.`{table_uri(repository, 'cleanup', 'tables/t')}` VALUES ({row})")
    for version in range(4):  # log cleanup: the JSON commits before the checkpoint at 4
        lakefs.delete_object(repository, "cleanup", f"tables/t/_delta_log/{version:020d}.json")
    lakefs.commit_branch(repository, "cleanup", "versions 2-5, log cleaned up to the checkpoint")

    result = diff(config, lakefs, repository, "main", "cleanup", "tables/t")

    assert result["diff_type"] == "changed"
    assert [int(op["id"]) for op in result["results"]] == [5, 4]
    assert result["history_truncated"]  # versions 2 and 3 are gone: their operations cannot be listed
    assert result["table_ids"]["left"] == result["table_ids"]["right"]


def test_the_api_reference_page_lists_every_operation(service):
    from playwright.sync_api import sync_playwright

    from tests.integration.browser import CHROMIUM_ARGS

    operations = httpx.get(service + "/openapi.json", timeout=10).json()["paths"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.goto(service + "/docs")
        page.wait_for_selector("#operations section", timeout=30_000)
        shown = page.locator("#operations h2").all_inner_texts()
        page.screenshot(path=os.path.join(ARTIFACTS, "api-docs.png"), full_page=True)
        browser.close()
    assert sorted(shown) == sorted(f"{method.upper()} {path}" for path, ops in operations.items() for method in ops)
