"""Every engine reads an export's Iceberg table through the catalog, holding no bucket keys (issue 39):
Spark with Iceberg's runtimes 1.10, 1.11 and 1.12 (`SparkCatalog`, `type=rest`, remote signing),
DuckDB 1.4.4 (`ATTACH` with vended credentials), PyIceberg (remote signing, and vended credentials).
Each reads exactly the rows Spark reads from the source through lakeFS, at the head and at an older
snapshot. The table is Spark's: partitioned, column mapping `name`, deletion vectors, a checkpoint.

The catalog is a real service with `iceberg.vended_credentials` on for the reader's lakeFS group; a recording proxy in front of it
(`PrefixPolicies` with no policy: it forwards every request and keeps its method and path) shows
which signer each client called. Credentials come from the real MinIO's STS (AssumeRole with a
session policy), and are tried against it: a GET outside the repository, or any PUT, is refused.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
import subprocess
import time
import uuid
from pathlib import Path

import boto3
import botocore.exceptions
import httpx
import lakefs_sdk
import pyarrow.parquet as pq
import pytest

from devtools.spark import ICEBERG_RUNTIMES, IVY_DIR, iceberg_spark_python
from exporter.config import IcebergConfig
from lakefs_delta.client import lakefs_token
from tests.conftest import SERVICE_PORT
from tests.integration.deltatables import add_descriptor, export_one, table_uri
from tests.integration.lakefs_policy import PrefixPolicies
from tests.integration.test_api_auth import basic, lakefs_admin, new_user
from tests.integration.test_iceberg_catalog import no_bucket_keys  # noqa: F401 (a fixture)
from tests.integration.test_iceberg_exports import spark_rows, write_orders
from tests.integration.test_one_grant import write_table
from tests.unit.iceberg.readers import duckdb_connection, rows_of

pytestmark = pytest.mark.integration

VENDING_PORT, RECORDER_PORT = SERVICE_PORT + 60, SERVICE_PORT + 61
PATH = "tables/orders"
CLIENT = Path(__file__).with_name("spark_catalog_client.py")
SPARK_SECONDS = 900  # the first run of a runtime resolves it and the AWS bundle from Maven Central (~100 MB)


class Lake:
    """Repository `a`: Spark's `orders` exported at main with its Iceberg table (snapshots of versions
    3, the checkpoint, and 4); repository `b` (not nested in a's namespace) with a delta-rs table."""

    def __init__(self, spark, lakefs, config, stack_env, tmp: Path):
        bucket = stack_env["LAKEFS_DELTA_STACK_BUCKET"]
        self.a, self.b = (f"t-engines-{name}-{uuid.uuid4().hex[:6]}" for name in "ab")
        for repository in (self.a, self.b):
            lakefs.create_repository(repository, f"s3://{bucket}/{repository}")
        write_orders(spark, table_uri(self.a, "main", PATH))  # versions 0-4, a checkpoint at 3
        add_descriptor(lakefs, self.a, "orders", PATH)
        self.commit = lakefs.commit_branch(self.a, "main", "orders")
        assert any("deletion_vector_" in e.path for e in lakefs.list_objects(self.a, self.commit, PATH + "/"))
        iceberg = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
        self.orders = export_one(iceberg, lakefs, self.a, "main", self.commit, "orders")
        assert self.orders.ok and self.orders.iceberg["state"] == "written", self.orders.error
        self.snapshots = {int(v): s for v, s in self.orders.iceberg["snapshot_ids"].items()}
        assert sorted(self.snapshots) == [3, 4]
        self.rows = {version: spark_rows(spark, self.a, self.commit, version) for version in (3, 4)}
        assert self.rows[3] != self.rows[4]
        write_table(lakefs, self.b, "main", "tables/other", tmp / "other")
        add_descriptor(lakefs, self.b, "other", "tables/other")
        other = lakefs.commit_branch(self.b, "main", "other")
        self.other = export_one(iceberg, lakefs, self.b, "main", other, "other")
        assert self.other.ok, self.other.error


@pytest.fixture(scope="module")
def lake(spark, lakefs, config, stack_env, tmp_path_factory) -> Lake:
    return Lake(spark, lakefs, config, stack_env, tmp_path_factory.mktemp("engines"))


@pytest.fixture(scope="module")
def reader(lakefs) -> tuple[str, str]:
    """The keys of a user who reads every repository (through its group's ACL)."""
    return new_user(reads=True)


@pytest.fixture(scope="module")
def catalog(processes, stack_env, lakefs, reader):
    """The service with vended credentials on for the reader's group (a whole-repository reader),
    behind a proxy that records each request; its URL."""
    user = httpx.get(f"{stack_env['LAKEFS_DELTA_LAKEFS_ENDPOINT']}/api/v1/user", headers=basic(*reader),
                     timeout=30).json()["user"]["id"]
    group = lakefs_sdk.AuthApi(lakefs_admin()).list_user_groups(user).results[0].id
    service = processes.serve("service-vending", VENDING_PORT, extra_env={
        "LAKEFS_DELTA_ICEBERG_VENDED_CREDENTIALS": "true",
        "LAKEFS_DELTA_ICEBERG_VENDED_CREDENTIALS_READERS": f"group:{group}"})
    with PrefixPolicies(service, RECORDER_PORT) as recorder:
        yield recorder


@pytest.fixture(scope="module")
def token(reader, stack_env) -> str:
    """A lakeFS token of the reader."""
    return lakefs_token(stack_env["LAKEFS_DELTA_LAKEFS_ENDPOINT"], *reader)


def signs(catalog: PrefixPolicies, since: int) -> set[str]:
    """The signer paths called since the `since`-th recorded request, a commit id shown as `{id}`."""
    return {re.sub("[0-9a-f]{64}", "{id}", path.split("/iceberg/v1/", 1)[1]) for method, path, _ in catalog.requests[since:]
            if method == "POST" and path.endswith("/sign")}


def made(catalog: PrefixPolicies, since: int) -> str:
    """The requests recorded since `since`, by kind (for the test's output and the issue's note)."""
    kinds = Counter(f"{method} {re.sub('[0-9a-f]{64}', '{id}', path.split('?')[0])}"
                    for method, path, _ in catalog.requests[since:])
    return ", ".join(f"{kind} x{count}" for kind, count in sorted(kinds.items()))


def test_pyiceberg_reads_through_the_catalog_by_remote_signing_and_by_vended_credentials(lake, catalog, token,
                                                                                         no_bucket_keys):  # noqa: F811
    from pyiceberg.catalog import load_catalog

    identifier = (lake.a, "main", "orders")
    modes = {"remote-signing": lambda io: "s3.signer.endpoint" in io and "s3.session-token" not in io,
             "vended-credentials": lambda io: "s3.session-token" in io and "s3.remote-signing-enabled" not in io}
    for mode, configured in modes.items():
        since = len(catalog.requests)
        table = load_catalog(mode, **{"type": "rest", "uri": f"{catalog.url}/iceberg", "token": token,
                                      "header.X-Iceberg-Access-Delegation": mode}).load_table(identifier)
        assert configured(table.io.properties), (mode, sorted(table.io.properties))
        assert rows_of(table.scan().to_arrow_batch_reader()) == lake.rows[4], mode
        assert rows_of(table.scan(snapshot_id=lake.snapshots[3]).to_arrow_batch_reader()) == lake.rows[3], mode
        assert bool(signs(catalog, since)) == (mode == "remote-signing"), catalog.requests[since:]
        print(f"\nPyIceberg, {mode}: {made(catalog, since)}")


def test_duckdb_attaches_the_catalog_and_reads_with_vended_credentials(lake, catalog, token, stack_env):
    since = len(catalog.requests)
    connection = duckdb_connection()
    connection.execute("LOAD httpfs")
    connection.execute(f"CREATE SECRET catalog (TYPE iceberg, TOKEN '{token}')")
    connection.execute(f"ATTACH 'lake' AS lake (TYPE iceberg, SECRET catalog, ENDPOINT '{catalog.url}/iceberg', "
                       "ACCESS_DELEGATION_MODE 'vended_credentials')")
    assert not connection.execute("SELECT name FROM duckdb_secrets() WHERE type = 's3'").fetchall()  # no keys
    table = f'lake."{lake.a}.main".orders'
    assert rows_of([connection.execute(f"SELECT * FROM {table}").fetch_arrow_table()]) == lake.rows[4]
    older = connection.execute(f"SELECT * FROM {table} AT (VERSION => {lake.snapshots[3]})").fetch_arrow_table()
    assert rows_of([older]) == lake.rows[3]
    assert not signs(catalog, since), catalog.requests[since:]
    print(f"\nDuckDB: {made(catalog, since)}")


def test_a_vended_credential_reads_its_repository_only_and_writes_nothing(lake, catalog, token, s3, stack_env):
    """The credential for `orders` reads its data file and metadata; another repository's file, a
    listing and any PUT are refused by MinIO itself; it expires before the caller's lakeFS session."""
    answer = httpx.get(f"{catalog.url}/iceberg/v1/namespaces/{lake.a}%1Fmain/tables/orders/credentials",
                       headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert answer.status_code == 200, answer.text
    credentials = answer.json()["storage-credentials"]
    files = f"s3://{stack_env['LAKEFS_DELTA_STACK_BUCKET']}/{lake.a}/_lakefs/iceberg-files/orders/"
    assert [c["prefix"] for c in credentials] == [f"s3://{stack_env['LAKEFS_DELTA_STACK_BUCKET']}/{lake.a}/",
                                                  lake.orders.location, files]  # its table's Iceberg files
    issued = credentials[0]["config"]
    session_ends = json.loads(__import__("base64").urlsafe_b64decode(token.split(".")[1] + "=="))["exp"]
    assert int(issued["s3.session-token-expires-at-ms"]) <= session_ends * 1000
    vended = boto3.client("s3", endpoint_url=stack_env["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"], region_name="us-east-1",
                          aws_access_key_id=issued["s3.access-key-id"],
                          aws_secret_access_key=issued["s3.secret-access-key"],
                          aws_session_token=issued["s3.session-token"])
    bucket, own = split(lake.orders.iceberg["metadata_location"])
    metadata = json.loads(vended.get_object(Bucket=bucket, Key=own)["Body"].read())
    manifest_lists = [snapshot["manifest-list"] for snapshot in metadata["snapshots"]]
    assert manifest_lists and all(uri.startswith(files) for uri in manifest_lists), manifest_lists
    assert all(vended.get_object(Bucket=bucket, Key=split(uri)[1])["Body"].read() for uri in manifest_lists)
    _, other = split(lake.other.iceberg["metadata_location"])
    refused = [lambda: vended.get_object(Bucket=bucket, Key=other),
               lambda: vended.put_object(Bucket=bucket, Key=f"{lake.a}/written-by-a-reader", Body=b"x"),
               lambda: vended.list_objects_v2(Bucket=bucket, Prefix=f"{lake.a}/")]
    for attempt in refused:
        with pytest.raises(botocore.exceptions.ClientError, match="AccessDenied"):
            attempt()


def split(address: str) -> tuple[str, str]:
    bucket, _, key = address.removeprefix("s3://").partition("/")
    return bucket, key


@pytest.mark.parametrize("runtime", ICEBERG_RUNTIMES)
def test_spark_reads_through_the_catalog_with_each_iceberg_runtime(lake, catalog, token, runtime, tmp_path):
    """Spark 3.5 with Iceberg's runtime `runtime` and its AWS bundle, no S3 keys anywhere: 1.10 and
    1.11 sign through `s3.signer.endpoint` (the per-commit address), 1.12 through the
    specification's `/tables/{table}/sign`, which it derives from the table itself."""
    request = {"runtime": runtime, "uri": f"{catalog.url}/iceberg", "token": token, "ivy": str(IVY_DIR),
               "out": str(tmp_path / "rows"),
               "reads": [{"table": [lake.a, "main", "orders"], "snapshot_id": None},
                         {"table": [lake.a, "main", "orders"], "snapshot_id": lake.snapshots[3]}]}
    (tmp_path / "request.json").write_text(json.dumps(request))
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "JAVA_HOME": _java_home(),
                   "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
                   "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_CONFIG_FILE": str(tmp_path / "none")}
    # the suite's JVM settings (scripts/test.sh; flags, no keys): a runtime's JVM took 23 s of CPU without, 12-14 s with
    if "JAVA_TOOL_OPTIONS" in os.environ:
        environment["JAVA_TOOL_OPTIONS"] = os.environ["JAVA_TOOL_OPTIONS"]
    since, started = len(catalog.requests), time.monotonic()
    ran = subprocess.run([str(iceberg_spark_python()), str(CLIENT), str(tmp_path / "request.json")],
                         capture_output=True, text=True, timeout=SPARK_SECONDS, env=environment)
    assert ran.returncode == 0, ran.stderr[-6000:]
    print(f"\nSpark with Iceberg {runtime}: {json.loads(ran.stdout.splitlines()[-1])}, "
          f"{time.monotonic() - started:.0f}s; {made(catalog, since)}")
    for index, version in enumerate((4, 3)):
        assert rows_of(pq.read_table(tmp_path / "rows" / str(index)).to_batches()) == lake.rows[version], version
    standard, per_commit = (f"namespaces/{lake.a}%1Fmain/tables/orders/sign",
                            f"namespaces/{lake.a}%1Fmain/tables/orders/commits/{{id}}/sign")
    assert signs(catalog, since) == ({standard} if runtime.startswith("1.12.") else {per_commit}), catalog.requests[since:]


def _java_home() -> str:
    return os.environ.get("JAVA_HOME") or str(Path(subprocess.run(["readlink", "-f", "/usr/bin/java"], capture_output=True,
                                                                   text=True).stdout.strip()).parents[1])
