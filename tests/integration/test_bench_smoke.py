"""The benchmark runs as shipped: `python -m bench` with tiny sizes, every part of it (lakeFS's Lua
exporter beside this project's, branch tables, presigning, Delta Sharing, a commit storm, again with
one worker group beside the two it runs, the grant and the signer, PyIceberg's full read through the
catalog, the row diff four ways, the merge gates) on the real stack, writing its table and plots. It
asserts that each part ran, never a time."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

SMOKE = ["--actions", "1000", "--stream-actions", "1000", "--sizes", "100", "--diff-versions", "20",
         "--row-diff-rows", "0", "--branch-table-sizes", "100", "--storm", "2", "--presign-urls", "100", "--object-requests", "20",
         "--sharing-sizes", "100", "--sharing-queries", "3", "--lua-timeout", "120", "--storm-iceberg", "--storm-workers", "1",
         "--grant-files", "1000", "--grant-folders", "20", "--row-diff-scale", "1000",
         "--gate-sizes", "100", "--gate-key-rows", "1000", "--pyiceberg-read-files", "100",
         "--quiet-wait", "0"]  # the other tests keep the machine busy: a quiet one is waited for in vain


def test_the_benchmark_runs_to_its_table_and_plot(stack_env, tmp_path):
    out = tmp_path / "smoke.md"
    done = subprocess.run([sys.executable, "-m", "bench", *SMOKE, "--out", str(out)], capture_output=True, text=True,
                          timeout=900)  # the environment points at the stack (`stack_env`)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    table = out.read_text()
    for part in ("checkpoint file rewrite, 1,000 adds", "export 100-file table + 50 commits (cold, the Delta log alone",
                 "export 100-file table + 50 commits (cold, with iceberg.enabled", "| ≤ 6 s: ",
                 "each the process's second export, its first ", "the Iceberg step's files alone (100-file table)",
                 "lakeFS Lua exporter, 100-file table + 50 commits", "history diff of the 10-file commit",
                 "cold diff, 20 versions", "cached diff through the API p99 (GET of the service", "branch table of a 100-file table: append a 10-file commit",
                 "presign 100 GET URLs", "object request, copy (20, 1 KB): exporter.storage.requests",
                 "object request, HEAD (20, 1 KB): alternative: boto3's client",
                 "object request, copy (20, 1 KB): alternative: the same requests on urllib3's pool", "Delta Sharing query, 160-file branch table, parquet",
                 "webhook answers while 3 Delta Sharing queries of the 160-file branch table stream",
                 "Iceberg metadata of the cold export above (100-file table",
                 "webhook answer p50 (2 hook runs)",
                 "table exports per minute (6 exports, 0 commits lost, iceberg.enabled off)",
                 "table exports per minute (6 exports, 0 commits lost, iceberg.enabled)",
                 "commit to its Iceberg tables, p50 / p99 / max ", "s (0 commits without; 2 workers)",
                 "s (0 commits without; 1 workers)", "one more worker host of ",
                 "table exports a minute by worker groups on the same ",
                 "commit to complete export, distribution: p10 / p25 / p50 / p75 / p90 / max",
                 "grant: lakeFS asked about each of 20 folders", "signer: the first signature on a 1,000-file table",
                 "catalog: loadTable of a 1,000-file table's export (", "catalog: loadTable, p99 of 200",
                 "row diff, 1,000 rows changed: in the worker", "row diff, 1,000 rows changed: Spark job, local[2]",
                 "row diff, 1,000 rows changed: Spark job, standalone cluster",
                 "row diff, 1,000 rows changed: alternative, Spark reads both versions whole",
                 "merge gate, a 10-file change to a table of 100 files",
                 "merge gate, a 10-file change to a table of 100 files, its diff cached by the workers",
                 "PyIceberg reads a 100-file table whole through the catalog, no bucket keys",
                 "merge gate, key rule over 1,000 appended rows on a 1,000-row table, in the worker",
                 "merge gate, key rule over 1,000 appended rows on a 1,000-row table, as the Spark job",
                 "merge gate, key rule over 1,000 appended rows on a 1,000-row table: alternative"):
        assert part in table, part
    assert "same add paths: True" in table  # the Lua export read back beside this project's
    assert (tmp_path / "smoke-export-time.png").stat().st_size > 0
    assert (tmp_path / "smoke-storm.png").stat().st_size > 0
    assert (tmp_path / "smoke-worker-groups.png").stat().st_size > 0
    assert (tmp_path / "smoke-row-diff-scale.png").stat().st_size > 0 and (tmp_path / "smoke-grant.png").stat().st_size > 0
    assert (tmp_path / "smoke-object-requests.png").stat().st_size > 0
    assert (tmp_path / "smoke-gates.png").stat().st_size > 0
