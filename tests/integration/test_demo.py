"""The demo scenario, non-interactively, through the same code path as `make demo`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def test_demo_exports_every_commit_reads_outside_lakefs_and_diffs(service, stack_env):
    result = subprocess.run([sys.executable, "-m", "devtools.demo", "--json"], cwd=ROOT, capture_output=True,
                            text=True, timeout=1200, env={**os.environ, **stack_env})
    assert result.returncode == 0, result.stderr[-4000:]
    facts = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("DEMO-FACTS "))[11:])

    assert len(facts["exports"]) == 6  # 4 ingest commits (+ accounts in the first) and the ETL commit
    assert all(e["state"] == "done" and "/_lakefs/exported/" in e["location"] for e in facts["exports"])
    assert facts["external_count"] == facts["lakefs_count"] == 240
    assert facts["catalog_counts"] == {"pyiceberg": 240, "duckdb": 240}  # through the catalog, no bucket keys
    assert "ACCESS_DELEGATION_MODE 'vended_credentials'" in result.stdout and "load_catalog('lake'" in result.stdout
    branch_table = facts["branch_table"]
    assert branch_table["location"].endswith("/_lakefs/exported/main/latest/transactions/")
    assert branch_table["commits"][0]["version"] == branch_table["commits"][0]["source_version"] >= 3
    diff = facts["diff"]
    assert sorted(c["column"] for c in diff["schema_changes"] if c["change"] == "removed") == ["description", "merchant"]
    assert {k: diff["row_count"][k] for k in ("left", "right", "difference")} == {"left": 160, "right": 240,
                                                                                 "difference": 80}
    assert [op["operation"] for op in diff["results"]] == ["WRITE", "WRITE", "DELETE", "SET TBLPROPERTIES"]
    assert "removed" in result.stdout and "rows   160 -> 240  (+80)" in result.stdout
    assert facts["page"] in result.stdout and "stack down" in result.stdout

    # the exact link printed opens the diff, signed in, with no further input
    from tests.integration.browser import open_diff_page

    seen = open_diff_page(facts["page"], "demo-diff-page.png")
    assert seen.removed_columns == ["description", "merchant"] and seen.row_difference == "(+80)"

    # the landing view: every table that differs between main and exp1, then the transactions table's rows
    from devtools import stack
    from lakefs_delta.client import sign_in_link
    from tests.integration.browser import open_overview

    state = stack.load_state()
    link = sign_in_link(service, state.lakefs_access_key_id, state.lakefs_secret_access_key,
                        {"repository": facts["repository"], "left": "main", "right": "exp1"})
    overview = open_overview(link, "tables/transactions", "demo-overview-rows.png")
    assert len(overview.tables) == 1 and overview.tables[0].startswith("transactions (tables/transactions)\tchanged\t+80")
    rows = httpx.get(f"{service}/repositories/{facts['repository']}/otf/refs/main/diff/exp1/rows",
                     params={"table_path": "tables/transactions"}, timeout=60,
                     headers={"Authorization": f"Bearer {state.webhook_token}"}).json()
    assert (overview.rows_added, overview.rows_removed) == (str(rows["counts"]["added"]), str(rows["counts"]["removed"]))
    assert (rows["counts"]["added"], rows["counts"]["removed"]) == (120, 40)
    assert overview.first_rows[0].startswith("removed\tdate=2026-03-01")
    assert "code=" not in seen.url and not seen.sign_in_shown
