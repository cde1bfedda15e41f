"""A log names another repository's data file: a caller who may commit to repository A writes a
Delta log whose `add.path` is the physical address of a file of repository B (a namespace sharing
A's prefix, `<A>-b`, or one nested in A's, `<A>/nested-x`, which lakeFS accepts). The service reads
and signs with its own object-store keys, which reach B too: the row diff API must refuse the diff
naming the refusal, with none of B's rows, and Delta Sharing must hand out no URL for B's file
(issue 37, item 2). Real lakeFS, MinIO, Redis; the service and a worker as processes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exporter.errors import PathOutsideRepository
from tests.conftest import ROOT, SERVICE_PORT
from tests.integration.deltatables import add_descriptor, export_one

pytestmark = pytest.mark.integration

SHARING_PORT = SERVICE_PORT + 53  # a port no other test serves on
SHARE = "confined"
SCHEMA = {"type": "struct", "fields": [{"name": "name", "type": "string", "nullable": True, "metadata": {}},
                                       {"name": "salary", "type": "long", "nullable": True, "metadata": {}}]}
RUN = uuid.uuid4().hex[:6]


def api_token() -> str:
    """The stack's service token (every repository)."""
    return os.environ["LAKEFS_DELTA_API_TOKENS"].split(",")[0].partition("=")[0]


@pytest.fixture(scope="module")
def repositories(lakefs, stack_env) -> dict[str, str]:
    """A, and two other repositories: B, whose namespace is A's with `-b` after it (a sibling by
    prefix), and N, whose namespace is inside A's."""
    bucket = stack_env["LAKEFS_DELTA_STACK_BUCKET"]
    a = f"t-confined-{RUN}"
    names = {"a": a, "sibling": f"{a}-b", "nested": f"{a}-n"}
    namespaces = {"a": f"s3://{bucket}/{a}", "sibling": f"s3://{bucket}/{a}-b", "nested": f"s3://{bucket}/{a}/nested-x"}
    lakefs.create_repository(names["a"], namespaces["a"])
    lakefs.upload_object(a, "main", "README", b"A's first object: its namespace is in use")
    lakefs.commit_branch(a, "main", "a first object")
    for whose in ("sibling", "nested"):
        lakefs.create_repository(names[whose], namespaces[whose])
    return names


def parquet(rows: list[tuple[str, int]]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"name": [r[0] for r in rows], "salary": pa.array([r[1] for r in rows], pa.int64())}),
                   sink)
    return sink.getvalue()


def add(path: str, size: int, records: int) -> dict:
    return {"add": {"path": path, "partitionValues": {}, "size": size, "modificationTime": int(time.time() * 1000),
                    "dataChange": True, "stats": json.dumps({"numRecords": records})}}


def commit_log(lakefs, repository: str, table: str, version: int, actions: list[dict], files: dict[str, bytes]) -> str:
    """One Delta commit of `table` (its data files first), committed in lakeFS: the commit id."""
    for name, body in files.items():
        lakefs.upload_object(repository, "main", f"{table}/{name}", body)
    log = "".join(json.dumps(action) + "\n" for action in actions).encode()
    lakefs.upload_object(repository, "main", f"{table}/_delta_log/{version:020d}.json", log)
    return lakefs.commit_branch(repository, "main", f"{table} version {version}")


def start(table: str) -> list[dict]:
    return [{"commitInfo": {"operation": "WRITE"}}, {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
            {"metaData": {"id": table, "format": {"provider": "parquet", "options": {}}, "partitionColumns": [],
                          "schemaString": json.dumps(SCHEMA), "configuration": {}}}]


def secret_file(lakefs, repository: str) -> tuple[str, int, list[str]]:
    """A table of the other repository: (its data file's physical address, size, the secret names)."""
    names = [f"secret-{RUN}-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    body = parquet([(names[0], 1_000_001), (names[1], 1_000_002)])
    commit = commit_log(lakefs, repository, "tables/salaries", 0,
                        [*start("salaries"), add("part-0.parquet", len(body), 2)], {"part-0.parquet": body})
    return lakefs.physical_address(repository, commit, "tables/salaries/part-0.parquet"), len(body), names


def hostile_table(lakefs, repository: str, table: str, address: str, size: int) -> tuple[str, str]:
    """A's table: a file of its own at version 0, then an add naming the other repository's file;
    (the commit of version 0, the commit of version 1)."""
    own = parquet([("public-1", 1), ("public-2", 2)])
    before = commit_log(lakefs, repository, table, 0, [*start(table), add("part-0.parquet", len(own), 2)],
                        {"part-0.parquet": own})
    after = commit_log(lakefs, repository, table, 1, [add(address, size, 2)], {})
    return before, after


@pytest.mark.parametrize("whose", ["sibling", "nested"])
def test_the_row_diff_refuses_a_log_naming_another_repositorys_file_and_shows_none_of_its_rows(
        service, lakefs, repositories, whose):
    a = repositories["a"]
    address, size, secrets = secret_file(lakefs, repositories[whose])
    before, after = hostile_table(lakefs, a, f"tables/rows-{whose}", address, size)

    answer = httpx.get(f"{service}/repositories/{a}/otf/refs/{before}/diff/{after}/rows",
                       params={"table_path": f"tables/rows-{whose}"},
                       headers={"Authorization": f"Bearer {api_token()}"}, timeout=180)

    assert 400 <= answer.status_code < 500, answer.text
    assert answer.status_code == 422
    namespace = lakefs.storage_namespace(a).rstrip("/") + "/"
    # the refusal names the path and A's namespace only: nothing of the object (size, existence)
    assert answer.json() == {"error": str(PathOutsideRepository(address, namespace))}
    assert not any(secret in answer.text for secret in secrets)


@pytest.fixture(scope="module")
def sharing(processes, repositories, tmp_path_factory) -> tuple[str, str]:
    """A Delta Sharing server sharing A's tags, and a recipient's bearer token: (endpoint, token)."""
    env = {"LAKEFS_DELTA_SHARING_SHARES": f"{SHARE}={repositories['a']}:v*:*",
           "LAKEFS_DELTA_SHARING_ENDPOINT": f"http://127.0.0.1:{SHARING_PORT}/delta-sharing"}
    endpoint = processes.serve("sharing-confined", SHARING_PORT, extra_env=env) + "/delta-sharing"
    profile = tmp_path_factory.mktemp("profile") / "recipient.share"
    done = subprocess.run([sys.executable, "-m", "lakefs_delta.cli", "sharing", "recipient", "create",
                           f"confined-{RUN}", "--share", SHARE, "--output", str(profile)],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    assert done.returncode == 0, done.stderr
    return endpoint, json.loads(Path(profile).read_text())["bearerToken"]


@pytest.mark.parametrize("whose", ["sibling", "nested"])
def test_sharing_an_export_whose_log_names_another_repositorys_file_signs_no_url_for_it(
        config, lakefs, repositories, sharing, whose):
    a, (endpoint, token) = repositories["a"], sharing
    address, size, _ = secret_file(lakefs, repositories[whose])
    table = f"shared-{whose}"
    add_descriptor(lakefs, a, table, f"tables/{table}")
    _, after = hostile_table(lakefs, a, f"tables/{table}", address, size)
    tag = f"v-{whose}"
    lakefs.create_tag(a, tag, after)
    outcome = export_one(config, lakefs, a, tag, after, table)
    assert outcome.ok, outcome.error  # the export keeps an absolute path as it is, and never reads it

    received, status, broken = b"", None, False
    try:
        with httpx.stream("POST", f"{endpoint}/shares/{SHARE}/schemas/{tag}/tables/{table}/query", json={},
                          headers={"Authorization": f"Bearer {token}"}, timeout=60) as answer:
            status = answer.status_code
            for chunk in answer.iter_bytes():
                received += chunk
    except httpx.HTTPError:  # refused after the status was sent: the connection is broken off
        broken = True

    key = address.removeprefix("s3://")  # the path of a presigned URL for it: /<bucket>/<key>
    assert key not in received.decode(errors="replace")
    assert broken or status >= 400, (status, received[-2000:])
    if not broken:
        assert "outside the objects this repository's logs may name" in received.decode()
