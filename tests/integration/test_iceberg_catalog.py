"""A user points PyIceberg's REST catalog client at the service (`uri: <service>/iceberg`) with a
lakeFS identity's token and no storage credentials: it lists the namespaces [repository, ref] (a tag
`v1.2#rc+1` included) and their tables, loads an export's Iceberg table and reads exactly its rows
at the head and at an older snapshot, every S3 request signed by the catalog (remote signing); a
lakeFS user without read rights is refused with 403. DuckDB attaches the catalog too, and reads only
with S3 keys of its own (it does no remote signing).

The table is written by delta-rs and committed through lakeFS's API (partitioned, two versions), and
exported in this process with `iceberg.enabled`; the catalog is the real service's.
"""

from __future__ import annotations

import time
from pathlib import Path

import deltalake
import duckdb
import httpx
import pyarrow as pa
import pytest

from exporter.config import IcebergConfig
from lakefs_delta.client import lakefs_token
from tests.integration.deltatables import add_descriptor, export_one
from tests.integration.test_api_auth import new_user
from tests.unit.iceberg.readers import duckdb_connection, rows_of

pytestmark = pytest.mark.integration

PATH, TAG = "tables/orders", "v1.2#rc+1"  # lakeFS refuses `/` in tag and branch names
FIRST = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "amount": pa.array([1.5, 2.5, None]),
                  "region": ["eu", "us", "eu"]})
SECOND = pa.table({"id": pa.array([4, 5], pa.int64()), "amount": pa.array([4.0, 5.0]), "region": ["ap", "eu"]})


def commit_delta_table(lakefs, repository: str, folder: Path) -> str:
    """Two delta-rs versions of a partitioned table, committed on main through lakeFS's API."""
    for batch in (FIRST, SECOND):
        deltalake.write_deltalake(str(folder), batch, mode="append", partition_by=["region"])
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            lakefs.upload_object(repository, "main", f"{PATH}/{path.relative_to(folder).as_posix()}", path.read_bytes())
    add_descriptor(lakefs, repository, "orders", PATH)
    return lakefs.commit_branch(repository, "main", "orders, two versions")


@pytest.fixture
def no_bucket_keys(monkeypatch, tmp_path):
    """The reader's process has no S3 credentials anywhere botocore looks; PyIceberg scans with one
    thread (PyIceberg 0.12 re-registers its signer on the one S3FileSystem of the process in each new
    thread, and a request sent meanwhile goes out unsigned: apache/iceberg-python#3896)."""
    from pyiceberg.utils.concurrent import ExecutorFactory

    monkeypatch.setenv("PYICEBERG_MAX_WORKERS", "1")
    monkeypatch.setattr(ExecutorFactory, "_instance", None)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_pyiceberg_reads_an_export_through_the_catalog_without_bucket_keys(service, lakefs, config, repository,
                                                                           stack_env, tmp_path, no_bucket_keys):
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import ForbiddenError

    started = time.monotonic()
    commit = commit_delta_table(lakefs, repository, tmp_path / "orders")
    lakefs.create_tag(repository, TAG, commit)
    iceberg = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
    outcomes = {ref: export_one(iceberg, lakefs, repository, ref, commit, "orders") for ref in ("main", TAG)}
    assert all(outcome.ok and outcome.iceberg["state"] == "written" for outcome in outcomes.values()), outcomes
    endpoint = stack_env["LAKEFS_DELTA_LAKEFS_ENDPOINT"]
    reader, stranger = new_user(reads=True), new_user(reads=False)

    catalog = load_catalog("lakefs", **{"type": "rest", "uri": f"{service}/iceberg",
                                        "token": lakefs_token(endpoint, *reader)})
    assert (repository,) in catalog.list_namespaces()
    assert catalog.list_namespaces(repository) == [(repository, "main"), (repository, TAG)]
    assert catalog.list_tables((repository, TAG)) == [(repository, TAG, "orders")]
    assert catalog.namespace_exists((repository, TAG)) and catalog.table_exists((repository, TAG, "orders"))
    assert not catalog.table_exists((repository, TAG, "missing"))

    table = catalog.load_table((repository, TAG, "orders"))
    assert table.metadata_location == outcomes[TAG].iceberg["metadata_location"]
    assert not any("secret" in key or "access-key" in key for key in table.io.properties)  # signed, not keyed
    assert rows_of([table.scan().to_arrow()]) == rows_of([FIRST, SECOND])
    first_snapshot = outcomes[TAG].iceberg["snapshot_ids"]["0"]
    assert rows_of([table.scan(snapshot_id=first_snapshot).to_arrow()]) == rows_of([FIRST])
    main = catalog.load_table((repository, "main", "orders"))
    assert rows_of([main.scan().to_arrow()]) == rows_of([FIRST, SECOND])

    refused = load_catalog("stranger", **{"type": "rest", "uri": f"{service}/iceberg",
                                          "token": lakefs_token(endpoint, *stranger)})
    assert (repository,) not in refused.list_namespaces()
    with pytest.raises(ForbiddenError):
        refused.load_table((repository, TAG, "orders"))
    answer = httpx.get(f"{service}/iceberg/v1/namespaces/{repository}%1Fv1.2%23rc%2B1/tables/orders",
                       headers={"Authorization": f"Bearer {lakefs_token(endpoint, *stranger)}"}, timeout=30)
    assert answer.status_code == 403 and answer.json()["error"]["type"] == "ForbiddenException"

    # DuckDB 1.4.4 attaches the catalog, but signs no request through it (it takes vended credentials
    # or its own S3 secret): without keys its reads are refused by the store; with a secret, exact
    token = lakefs_token(endpoint, *reader)
    keyless, keyed = duckdb_attached(service, token, stack_env, keys=False), duckdb_attached(service, token, stack_env)
    with pytest.raises(duckdb.HTTPException, match=r"HTTP 403"):
        keyless.execute(f'SELECT * FROM lake."{repository}.main".orders').fetchall()
    assert rows_of([keyed.execute(f'SELECT * FROM lake."{repository}.main".orders').fetch_arrow_table()]) == \
        rows_of([FIRST, SECOND])
    print(f"\ncatalog test body: {time.monotonic() - started:.1f}s")


def duckdb_attached(service: str, token: str, stack_env: dict[str, str], keys: bool = True):
    """DuckDB with the catalog attached as `lake` (no access delegation asked of it) and an S3 secret
    for MinIO, with its keys or (`keys` false) without: every request goes to MinIO, none leaves the
    machine. A namespace is `"repository.ref"`, which DuckDB splits at each `.`: refs with a `.` (the
    tag) cannot be named."""
    connection = duckdb_connection()
    connection.execute("LOAD httpfs")
    connection.execute(f"CREATE SECRET catalog (TYPE iceberg, TOKEN '{token}')")
    credentials = ""
    if keys:
        credentials = (f"KEY_ID '{stack_env['LAKEFS_DELTA_OBJECT_STORE_ACCESS_KEY_ID']}', "
                       f"SECRET '{stack_env['LAKEFS_DELTA_OBJECT_STORE_SECRET_ACCESS_KEY']}', ")
    connection.execute(f"CREATE SECRET minio (TYPE s3, {credentials}REGION 'us-east-1', "
                       f"ENDPOINT '{stack_env['LAKEFS_DELTA_OBJECT_STORE_ENDPOINT'].split('://', 1)[1]}', "
                       "URL_STYLE 'path', USE_SSL false)")
    delegation = ", ACCESS_DELEGATION_MODE 'none'"
    connection.execute(f"ATTACH 'lake' AS lake (TYPE iceberg, SECRET catalog, ENDPOINT '{service}/iceberg'{delegation})")
    return connection
