"""The demo: a PySpark pipeline on lakeFS, exported and diffed automatically, read by Spark, PyIceberg and
DuckDB without lakeFS in the path.

`make demo` runs `python -m devtools.demo`; the integration test runs `run_demo()` itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import date
from pathlib import Path


from devtools import stack

SERVICE_PORT = int(os.environ.get("LAKEFS_DELTA_DEMO_PORT", "18080"))
CATALOG_PORT = SERVICE_PORT + 1  # the demo's Iceberg catalog: the service again, with vended credentials on
ROOT = Path(__file__).resolve().parent.parent


def say(message: str) -> None:
    print(message, flush=True)


class Steps:
    """The demo's numbered steps, each printed with the seconds since the demo started."""

    def __init__(self, count: int):
        self.count, self.done, self.started = count, 0, time.monotonic()

    def start(self, message: str) -> None:
        self.done += 1
        say(f"[{self.elapsed():4.0f} s] {self.done}/{self.count} {message}")

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def start_service(state: stack.StackState) -> str:
    """The webhook service and one worker, as stack processes (`stack down` stops them too)."""
    env = {**os.environ, **state.environment()}
    url = f"http://127.0.0.1:{SERVICE_PORT}"
    if stack._http_ok(url + "/healthz"):
        return url  # already running (an earlier demo, or the test suite's)
    for name, args in (("service", ["serve", "--port", str(SERVICE_PORT)]), ("worker", ["worker", "--name", "demo@%h"])):
        if stack._running_pid(stack.STACK_DIR, name) is None:
            say(f"  starting the {name}")
            stack._start(stack.STACK_DIR, name, [sys.executable, "-m", "lakefs_delta.cli", *args], env,
                         [SERVICE_PORT] if name == "service" else [])
    stack._wait_healthy(stack.STACK_DIR, "service", lambda: stack._http_ok(url + "/healthz"))
    return url


def start_catalog(state: stack.StackState) -> str:
    """A second service process for the Iceberg catalog, with `iceberg.vended_credentials` on (off by
    default; DuckDB reads only with vended credentials) for the stack's lakeFS user `admin`, a
    whole-repository reader: `stack down` stops it too."""
    url = f"http://127.0.0.1:{CATALOG_PORT}"
    if not stack._http_ok(url + "/healthz"):
        env = {**os.environ, **state.environment(), "LAKEFS_DELTA_ICEBERG_VENDED_CREDENTIALS": "true",
               "LAKEFS_DELTA_ICEBERG_VENDED_CREDENTIALS_READERS": "user:admin"}
        stack._start(stack.STACK_DIR, "catalog", [sys.executable, "-m", "lakefs_delta.cli", "serve", "--port",
                                                  str(CATALOG_PORT)], env, [CATALOG_PORT])
        stack._wait_healthy(stack.STACK_DIR, "catalog", lambda: stack._http_ok(url + "/healthz"))
    return url + "/iceberg"


# Run in a process of its own whose environment holds no bucket keys (no AWS_* variable, a HOME
# without ~/.aws): it has the catalog's address and a lakeFS token, nothing else.
CATALOG_READERS = """
import os, sys
import duckdb, duckdb_ext
from pyiceberg.catalog import load_catalog

uri, token, repository, ref, table = sys.argv[1:6]
rows = load_catalog("lake", type="rest", uri=uri, token=token).load_table((repository, ref, table)).scan().to_arrow()
print("PYICEBERG", rows.num_rows)
duck = duckdb.connect(config={"extension_directory": list(duckdb_ext.__path__)[0] + "/extensions",
                              "autoinstall_known_extensions": False})
duck.execute("LOAD httpfs; LOAD avro; LOAD iceberg")
duck.execute(f"CREATE SECRET lake (TYPE iceberg, TOKEN '{token}')")
duck.execute(f"ATTACH 'lake' AS lake (TYPE iceberg, SECRET lake, ENDPOINT '{uri}', "
             "ACCESS_DELEGATION_MODE 'vended_credentials')")
print("DUCKDB", duck.execute(f'SELECT count(*) FROM lake."{repository}.{ref}".{table}').fetchone()[0])
"""


def catalog_counts(uri: str, token: str, repository: str, ref: str, table: str) -> dict[str, int]:
    """The table's rows counted by PyIceberg and DuckDB through the catalog, with no bucket keys."""
    import tempfile

    keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")
    with tempfile.TemporaryDirectory() as home:
        env = {name: value for name, value in os.environ.items()
               if name not in keys and not name.startswith("LAKEFS_DELTA_OBJECT_STORE_")}
        result = subprocess.run([sys.executable, "-c", CATALOG_READERS, uri, token, repository, ref, table],
                                capture_output=True, text=True, cwd=ROOT, env={**env, "HOME": home}, timeout=300)
    counts = {line.split()[0].lower(): int(line.split()[1]) for line in result.stdout.splitlines()
              if line.startswith(("PYICEBERG ", "DUCKDB "))}
    if set(counts) != {"pyiceberg", "duckdb"}:
        raise RuntimeError(f"reading through the Iceberg catalog failed:\n{result.stderr[-3000:]}")
    return counts


def external_count(location: str) -> int:
    """Count rows with a separate Spark session (its own JVM) that has no lakeFS endpoint at all."""
    code = ("import sys; from devtools.spark import stack_spark_session as s; "
            "spark = s(through_lakefs=False, app_name='external-reader'); "
            "print('COUNT', spark.read.format('delta').load(sys.argv[1]).count())")
    result = subprocess.run([sys.executable, "-c", code, location], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, **stack.load_state().environment()})
    for line in result.stdout.splitlines():
        if line.startswith("COUNT "):
            return int(line.split()[1])
    raise RuntimeError(f"the external Spark read failed:\n{result.stderr[-3000:]}")


def run_demo() -> dict:
    """Returns the facts it printed, for the test."""
    from examples.bank_pipeline import ingest, retention_and_column_remover, table_uri
    from exporter.lakefs.installer import action_files, install_actions
    from exporter.config import load_config
    from exporter.lakefs.client import LakeFS
    from lakefs_delta.cli import render_diff
    from lakefs_delta.client import lakefs_token, sign_in_link, table_diff, wait_for_branch_table, wait_for_exports
    from devtools.spark import stack_spark_session

    steps = Steps(6)
    steps.start("starting lakeFS, MinIO and Redis (first run builds them: several minutes)")
    state = stack.up()
    os.environ.update(state.environment())
    steps.start("starting the webhook service and a worker")
    url = start_service(state)
    config = load_config()
    lakefs = LakeFS(config.lakefs)
    repository = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    steps.start(f"creating repository {repository} and installing the export action")
    lakefs.create_repository(repository, f"s3://{stack.BUCKET}/{repository}")
    install_actions(lakefs, repository, "main", action_files(
        f"{url}/webhooks/lakefs", ["main", "exp*"],
        {"transactions": "tables/transactions", "accounts": "tables/accounts"}, branch_tables=["main"]))
    steps.start("running the PySpark ingest on main (one commit per day; Spark starts first)")
    spark = stack_spark_session(app_name="demo-pipeline")
    commits = [("main", c) for c in ingest(spark, lakefs, repository, "main", date(2026, 3, 1), 4)]
    lakefs.create_branch(repository, "exp1", "main")
    steps.start("running the retention-and-column-remover ETL on branch exp1")
    commits.append(("exp1", retention_and_column_remover(spark, lakefs, repository, "exp1", date(2026, 3, 2))))

    steps.start("waiting for the exports")
    facts: dict = {"repository": repository, "exports": []}
    for ref, commit_id in commits:
        for table, record in sorted(wait_for_exports(url, state.webhook_token, repository, commit_id, ref).items()):
            facts["exports"].append({"ref": ref, "commit": commit_id, "table": table, **record})
            say(f"  {ref:5} {commit_id[:12]} {table:13} {record['state']:6} {record.get('location', '')}")
    last_main = [c for ref, c in commits if ref == "main"][-1]
    facts["branch_table"] = wait_for_branch_table(url, state.webhook_token, repository, "main", "transactions",
                                                  last_main)
    entry = facts["branch_table"]["commits"][0]
    say(f"\nmain's branch table of transactions (one location for every commit on main): "
        f"{facts['branch_table']['location']}\n  version {entry['version']} is commit {last_main[:12]}; "
        f"`lakefs-delta versions --repo {repository} --branch main --table transactions` lists them all")
    exp1_export = next(e for e in facts["exports"] if e["ref"] == "exp1" and e["table"] == "transactions")
    facts["lakefs_count"] = spark.read.format("delta").load(table_uri(repository, commits[-1][1], "transactions")).count()
    spark.stop()
    facts["external_count"] = external_count(exp1_export["location"])
    say(f"\nexp1 transactions: {facts['external_count']} rows read by a separate Spark session from "
        f"{exp1_export['location']} (no lakeFS), {facts['lakefs_count']} rows through lakeFS")
    catalog = start_catalog(state)
    token = lakefs_token(state.lakefs_endpoint, state.lakefs_access_key_id, state.lakefs_secret_access_key)
    facts["catalog_counts"] = catalog_counts(catalog, token, repository, "exp1", "transactions")
    say(f"the same table through the Iceberg catalog at {catalog}, with no bucket keys: "
        f"{facts['catalog_counts']['pyiceberg']} rows in PyIceberg, {facts['catalog_counts']['duckdb']} in DuckDB. "
        "To read it yourself, with TOKEN a lakeFS token (POST /api/v1/auth/login):\n"
        f"  PyIceberg: load_catalog('lake', type='rest', uri='{catalog}', token=TOKEN)"
        f".load_table(('{repository}', 'exp1', 'transactions')).scan().to_arrow()\n"
        f"  DuckDB:    CREATE SECRET lake (TYPE iceberg, TOKEN 'TOKEN'); ATTACH 'lake' AS lake (TYPE iceberg, "
        f"SECRET lake, ENDPOINT '{catalog}', ACCESS_DELEGATION_MODE 'vended_credentials');\n"
        f"             SELECT count(*) FROM lake.\"{repository}.exp1\".transactions;\n"
        f"  Delta Sharing: with a share in the config, `lakefs-delta sharing recipient create` writes a partner's "
        "profile (README: \"Delta Sharing: share a branch with a partner\"); a branch's share reads its branch "
        f"table, here main's at {facts['branch_table']['location']}")
    facts["diff"] = table_diff(url, {"Authorization": f"Bearer {state.webhook_token}"}, repository, "main", "exp1",
                               "tables/transactions")
    say("\n" + render_diff(facts["diff"], "main", "exp1"))
    facts["page"] = sign_in_link(url, state.lakefs_access_key_id, state.lakefs_secret_access_key,
                                 {"repository": repository, "left": "main", "right": "exp1",
                                  "table_path": "tables/transactions"})
    say(f"\nDiff page (a one-time sign-in link as the stack's lakeFS admin, valid 15 minutes; "
        f"`lakefs-delta sign-in-link` makes another):\n{facts['page']}")
    say(f"\nThe demo ran in {steps.elapsed():.0f} s (set-up before it printed its own phases).")
    say("The service keeps running for the page. Stop everything with: .venv/bin/python -m devtools.stack down")
    return facts


if __name__ == "__main__":
    result = run_demo()
    if "--json" in sys.argv:  # the facts, for the integration test
        print("DEMO-FACTS " + json.dumps(result))
