"""Delta Sharing: a partner reads a branch's tables with the real `delta-sharing` connector from
PyPI, in its own virtualenv (its pyarrow is not this project's), with a profile file the CLI made,
and no storage credentials at all. Real lakeFS, MinIO, Redis and Spark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta, timezone
from hashlib import sha256
from pathlib import Path

import httpx
import pytest

from exporter.branch_tables.table import append_commit, branch_table_versions
from tests.conftest import ARTIFACTS, ROOT, SERVICE_PORT
from tests.integration.deltatables import add_descriptor, export_one, table_uri
from tests.fakes import lake_of
from tests.integration.writers import isolated_python

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def config(config):
    """The session's config, keeping branch tables on `main`: this module appends from library calls,
    with no action installed to name the branch (`append_commit` refuses a branch nobody named)."""
    return config.model_copy(update={"branch_tables": ("main",)})

SHARING_PORT = SERVICE_PORT + 40  # a port no other test serves on
CONNECTOR = ["delta-sharing==1.4.2"]
SHARE = "partner"
DOTTED = "dotted"  # a share of tables whose names hold a `.`, in a repository of its own
TABLES = ("orders", "events", "archive_*")  # "secret" is on the branch too, but not in the share

# Runs in the connector's virtualenv with an empty environment: no AWS_*, no LAKEFS_*; only the
# profile file. Prints one JSON document.
CONSUMER = r'''
import json, os, sys
import delta_sharing
from requests.exceptions import HTTPError

profile, calls = sys.argv[1], json.loads(sys.argv[2])
out = {}
def frame(df):
    return json.loads(df.to_json(orient="records", date_format="iso"))
for name, call in calls.items():
    try:
        kind, url, options = call
        if kind == "list":
            client = delta_sharing.SharingClient(profile)
            out[name] = sorted(f"{t.share}.{t.schema}.{t.name}" for t in client.list_all_tables())
        elif kind == "load":
            out[name] = frame(delta_sharing.load_as_pandas(f"{profile}#{url}", **options))
        elif kind == "changes":
            out[name] = frame(delta_sharing.load_table_changes_as_pandas(f"{profile}#{url}", **options))
        elif kind == "version":
            out[name] = delta_sharing.get_table_version(f"{profile}#{url}", **options)
    except HTTPError as error:
        out[name] = {"error": error.response.status_code, "body": error.response.text}
print(json.dumps(out), flush=True)
# The connector's thread pools sometimes abort the interpreter at exit ("terminate called without an active
# exception", SIGABRT) after the answer is printed: leave without tearing them down.
os._exit(0)
'''


@pytest.fixture(scope="module")
def connector_python() -> Path:
    return isolated_python("delta-sharing-1.4.2", CONNECTOR)


@pytest.fixture(scope="module")
def sharing_repository(lakefs, stack_env) -> str:
    name = f"t-sharing-{uuid.uuid4().hex[:6]}"
    lakefs.create_repository(name, f"s3://{stack_env['LAKEFS_DELTA_STACK_BUCKET']}/{name}")
    return name


@pytest.fixture(scope="module")
def dots_repository(lakefs, stack_env) -> str:
    name = f"t-sharing-dots-{uuid.uuid4().hex[:6]}"
    lakefs.create_repository(name, f"s3://{stack_env['LAKEFS_DELTA_STACK_BUCKET']}/{name}")
    return name


@pytest.fixture(scope="module")
def sharing_env(sharing_repository, dots_repository) -> dict[str, str]:
    return {"LAKEFS_DELTA_SHARING_SHARES": f"{SHARE}={sharing_repository}:main+v*:{'+'.join(TABLES)},"
                                           f"{DOTTED}={dots_repository}:v*:archive*",
            "LAKEFS_DELTA_SHARING_ENDPOINT": f"http://127.0.0.1:{SHARING_PORT}/delta-sharing",
            "LAKEFS_DELTA_SHARING_URL_LIFETIME_SECONDS": "900"}


@pytest.fixture(scope="module")
def sharing_service(processes, sharing_env) -> str:
    return processes.serve("sharing", SHARING_PORT, extra_env=sharing_env) + "/delta-sharing"


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lakefs_delta.cli", *args], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=60)


def make_profile(sharing_env: dict[str, str], tmp_path: Path, name: str, *extra: str, share: str = SHARE) -> Path:
    """A new recipient `name` (made unique: recipients outlive a test run in the stack's Redis)."""
    path = tmp_path / f"{name}.share"
    done = cli(sharing_env, "sharing", "recipient", "create", unique(name), "--share", share, "--output", str(path),
               *extra)
    assert done.returncode == 0, done.stderr
    return path


RUN = uuid.uuid4().hex[:6]


def unique(name: str) -> str:
    return f"{name}-{RUN}"


def consume(python: Path, profile: Path, calls: dict) -> dict:
    """The connector, with nothing but PATH: it can reach data only through the URLs the server signs."""
    done = subprocess.run([str(python), "-c", CONSUMER, str(profile), json.dumps(calls)], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(profile.parent)}, timeout=300,
                          cwd=profile.parent)
    (ARTIFACTS / "sharing-consumer.log").write_text(done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def records(spark_frame, columns: list[str]) -> list[tuple]:
    return sorted((tuple(row[c] for c in columns) for row in spark_frame.collect()), key=repr)


def shared(frame: list[dict], columns: list[str]) -> list[tuple]:
    return sorted((tuple(row[c] for c in columns) for row in frame), key=repr)


@pytest.fixture(scope="module")
def tables(spark, lakefs, config, sharing_repository) -> dict:
    """`orders` (change data feed on; insert, update, delete over five versions), `events`
    (deletion vectors), `secret` (not in the share), each appended to main's branch table."""
    repository = sharing_repository
    orders = table_uri(repository, "main", "tables/orders")
    spark.sql(f"CREATE TABLE delta.`{orders}` (id INT, amount DOUBLE, region STRING) USING delta "
              "PARTITIONED BY (region) TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true', "
              "'delta.enableDeletionVectors' = 'false', 'delta.checkpointInterval' = '3')")
    spark.sql(f"INSERT INTO delta.`{orders}` VALUES (1, 10.0, 'eu'), (2, 20.0, 'us'), (3, 30.0, 'eu')")
    events = table_uri(repository, "main", "tables/events")
    spark.sql(f"CREATE TABLE delta.`{events}` (id BIGINT, kind STRING) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.range(0, 400).selectExpr("id", "CASE WHEN id % 3 = 0 THEN 'click' ELSE 'view' END AS kind") \
        .coalesce(1).write.format("delta").mode("append").save(events)
    secret = table_uri(repository, "main", "tables/secret")
    spark.sql(f"CREATE TABLE delta.`{secret}` (id INT) USING delta")
    spark.sql(f"INSERT INTO delta.`{secret}` VALUES (42)")
    for name in ("orders", "events", "secret"):
        add_descriptor(lakefs, repository, name, f"tables/{name}")
    commits = [commit_and_append_all(config, lakefs, repository, "tables")]

    spark.sql(f"UPDATE delta.`{orders}` SET amount = amount + 1 WHERE id = 1")  # version 2
    spark.sql(f"INSERT INTO delta.`{orders}` VALUES (4, 40.0, 'us')")  # version 3: a checkpoint
    spark.sql(f"DELETE FROM delta.`{events}` WHERE id % 10 = 0")  # a deletion vector
    commits.append(commit_and_append_all(config, lakefs, repository, "update, insert, delete"))
    lakefs.create_tag(repository, "v1", commits[-1])  # a release: shared as its export
    for name in ("orders", "events", "secret"):
        assert export_one(config, lakefs, repository, "v1", commits[-1], name).ok

    spark.sql(f"DELETE FROM delta.`{orders}` WHERE id = 2")  # version 4
    spark.sql(f"UPDATE delta.`{events}` SET kind = 'tap' WHERE id = 7")
    commits.append(commit_and_append_all(config, lakefs, repository, "delete, update"))
    return {"repository": repository, "commits": commits, "orders": "tables/orders", "events": "tables/events"}


def commit_and_append_all(config, lakefs, repository: str, message: str) -> str:
    commit_id = lakefs.commit_branch(repository, "main", message)
    for name in ("orders", "events", "secret"):
        outcome = export_one(config, lakefs, repository, "main", commit_id, name)
        assert outcome.ok, outcome.error
        assert not append_commit(lake_of(config, lakefs), repository, "main", commit_id, name).skipped
    return commit_id


def version_time(s3, location: str, version: int) -> str:
    """The branch table's version's commit timestamp as Delta's readers take it (no in-commit
    timestamps here): its log file's modification time, made increasing over the versions (a time
    not after the previous version's is that one's + 1 ms). Two versions one append writes can be
    written within one millisecond (a listing's resolution; 2 of 200 pairs of sequential puts on
    this stack): the later one's own time then names the earlier version."""
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}_delta_log/")["Contents"]  # a HEAD has only seconds
    written = {int(name[:-5]): item["LastModified"] for item in listed
               if (name := item["Key"].rsplit("/", 1)[-1]).endswith(".json") and name[:-5].isdigit()}
    at = None
    for number in sorted(written):
        at = written[number] if at is None or written[number] > at else at + timedelta(milliseconds=1)
        if number == version:
            return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    raise AssertionError(f"version {version} has no commit file under {location}")


def test_a_partner_reads_a_branch_table_with_the_delta_sharing_connector(
        spark, config, lakefs, tables, sharing_service, sharing_env, connector_python, tmp_path, s3):
    repository, head = tables["repository"], tables["commits"][-1]
    profile = make_profile(sharing_env, tmp_path, "acme")
    document = json.loads(profile.read_text())
    assert set(document) == {"shareCredentialsVersion", "endpoint", "bearerToken", "expirationTime"}
    assert document["endpoint"] == sharing_service and document["bearerToken"].startswith("lds_")

    source = table_uri(repository, head, tables["orders"])
    columns = ["id", "amount", "region"]
    versions = branch_table_versions(lake_of(config, lakefs), repository, "main", "orders")
    middle = next(entry["version"] for entry in versions["commits"] if entry["commit_id"] == tables["commits"][1])
    got = consume(connector_python, profile, {
        "tables": ["list", "", {}],
        "latest": ["load", f"{SHARE}.main.orders", {}],
        "at_version": ["load", f"{SHARE}.main.orders", {"version": middle}],
        "version": ["version", f"{SHARE}.main.orders", {}],
        "changes": ["changes", f"{SHARE}.main.orders", {"starting_version": 1, "ending_version": 4}],
        "changes_delta": ["changes", f"{SHARE}.main.orders",
                          {"starting_version": 2, "ending_version": 4, "use_delta_format": True}],
        "latest_delta": ["load", f"{SHARE}.main.orders", {"use_delta_format": True}],
        "at_time": ["load", f"{SHARE}.main.orders", {"timestamp": version_time(s3, versions["location"], middle)}],
        "tag": ["load", f"{SHARE}.v1.orders", {}],
        "tag_version": ["version", f"{SHARE}.v1.orders", {}],
    })
    assert got["tables"] == [f"{SHARE}.main.events", f"{SHARE}.main.orders", f"{SHARE}.v1.events",
                             f"{SHARE}.v1.orders"], "secret is not in the share; v1 is the tag"
    assert got["version"] == versions["head_version"] == 4
    spark_latest = records(spark.read.format("delta").load(source), columns)
    assert shared(got["latest"], columns) == spark_latest
    assert shared(got["latest_delta"], columns) == spark_latest
    at_middle = records(spark.read.format("delta").option("versionAsOf", middle).load(source), columns)
    assert shared(got["at_version"], columns) == at_middle
    assert shared(got["at_time"], columns) == at_middle, "the version committed at or before the time"
    assert shared(got["tag"], columns) == records(spark.read.format("delta").load(
        table_uri(repository, tables["commits"][1], tables["orders"])), columns)
    assert got["tag_version"] == middle == 3, "a tag's versions are the source's"

    change_columns = [*columns, "_change_type", "_commit_version"]

    def spark_changes(start: int, end: int) -> list[tuple]:
        feed = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start) \
            .option("endingVersion", end).load(source)
        return records(feed, change_columns)
    assert shared(got["changes"], change_columns) == spark_changes(1, 4)
    assert {row["_change_type"] for row in got["changes"]} == {"insert", "update_preimage", "update_postimage",
                                                              "delete"}
    assert shared(got["changes_delta"], change_columns) == spark_changes(2, 4)


def test_tables_whose_names_hold_a_dot_are_shared_under_names_every_client_can_address(
        spark, config, lakefs, dots_repository, sharing_service, sharing_env, connector_python, tmp_path):
    repository = dots_repository
    names = {"archive": "archive", "archive.2024-q1": f"archive_2024-q1_{sha256(b'archive.2024-q1').hexdigest()[:8]}",
             "archive-v0.8.0": f"archive-v0_8_0_{sha256(b'archive-v0.8.0').hexdigest()[:8]}"}
    for number, name in enumerate(names):
        spark.range(number * 10, number * 10 + 3).selectExpr("id", f"'{name}' AS source") \
            .write.format("delta").save(table_uri(repository, "main", f"tables/{name}"))
        add_descriptor(lakefs, repository, name, f"tables/{name}")
    commit_id = lakefs.commit_branch(repository, "main", "three archives")
    lakefs.create_tag(repository, "v1", commit_id)
    for name in names:
        assert export_one(config, lakefs, repository, "v1", commit_id, name).ok

    profile = make_profile(sharing_env, tmp_path, "dots-reader", share=DOTTED)
    got = consume(connector_python, profile, {"tables": ["list", "", {}],
                                              **{name: ["load", f"{DOTTED}.v1.{shared}", {}]
                                                 for name, shared in names.items()}})
    assert got["tables"] == sorted(f"{DOTTED}.v1.{shared}" for shared in names.values())
    for number, name in enumerate(names):
        assert shared(got[name], ["id", "source"]) == [(number * 10 + i, name) for i in range(3)], name

    headers = {"Authorization": f"Bearer {json.loads(profile.read_text())['bearerToken']}"}
    listing = httpx.get(f"{sharing_service}/shares/{DOTTED}/schemas/v1/tables", headers=headers, timeout=30).json()
    assert {item["name"]: item.get("lakefsName") for item in listing["items"]} == \
        {shared: (name if shared != name else None) for name, shared in names.items()}, "the original name, listed"
    for name, shared_as in names.items():
        lines = httpx.get(f"{sharing_service}/shares/{DOTTED}/schemas/v1/tables/{shared_as}/metadata", headers=headers,
                          timeout=30).text.splitlines()
        assert json.loads(lines[1])["metaData"].get("name") == (name if shared_as != name else None)
    refused = httpx.get(f"{sharing_service}/shares/{DOTTED}/schemas/v1/tables/archive.2024-q1/metadata",
                        headers=headers, timeout=30)
    assert refused.status_code == 403, "the original name is no address: a client could not write it"


def test_a_deletion_vector_table_is_read_with_the_delta_response_format(
        spark, tables, sharing_service, sharing_env, connector_python, tmp_path):
    repository, head = tables["repository"], tables["commits"][-1]
    profile = make_profile(sharing_env, tmp_path, "dv-reader")
    got = consume(connector_python, profile, {
        "auto": ["load", f"{SHARE}.main.events", {}],
        "parquet": ["load", f"{SHARE}.main.events", {"use_delta_format": False}],
    })
    expected = records(spark.read.format("delta").load(table_uri(repository, head, tables["events"])), ["id", "kind"])
    assert len(expected) == 360 and ("tap" in {kind for _, kind in expected})
    assert shared(got["auto"], ["id", "kind"]) == expected, "the connector chose the delta format by itself"
    # the parquet format cannot carry a deletion vector: refused, never the deleted rows back
    assert got["parquet"]["error"] == 400
    assert json.loads(got["parquet"]["body"])["errorCode"] == "UNSUPPORTED_OPERATION"
    assert "deletionVectors" in json.loads(got["parquet"]["body"])["message"]


def test_revoked_and_expired_tokens_and_unshared_tables_are_refused_with_protocol_errors(
        tables, sharing_service, sharing_env, connector_python, tmp_path):
    revoked = make_profile(sharing_env, tmp_path, "former-partner")
    expired = make_profile(sharing_env, tmp_path, "short-lived", "--days", "0.00002")  # 1.7 s
    good = make_profile(sharing_env, tmp_path, "current-partner")
    done = cli(sharing_env, "sharing", "recipient", "revoke", unique("former-partner"))
    assert done.returncode == 0 and "revoked" in done.stdout, done.stderr
    assert cli(sharing_env, "sharing", "recipient", "create", unique("never"), "--share", SHARE, "--days", "0") \
        .returncode == 2, "a token expired at birth is refused"
    time.sleep(2)
    listed = json.loads(cli(sharing_env, "sharing", "recipient", "list", "--json").stdout)
    assert {r["name"]: r["state"] for r in listed}[unique("former-partner")] == "revoked"
    assert {r["name"]: r["state"] for r in listed}[unique("short-lived")] == "expired"
    assert not any("token" in key.lower() for r in listed for key in r), "only hashes are stored, none listed"

    for profile, words in ((revoked, "revoked"), (expired, "expired")):
        got = consume(connector_python, profile, {"read": ["load", f"{SHARE}.main.orders", {}]})
        assert got["read"]["error"] == 401, got
        body = json.loads(got["read"]["body"])
        assert body["errorCode"] == "UNAUTHENTICATED" and words in body["message"]

    got = consume(connector_python, good, {"secret": ["load", f"{SHARE}.main.secret", {}],
                                           "unshared": ["load", f"{SHARE}.main.nothing", {}],
                                           "missing": ["load", f"{SHARE}.main.archive_2020", {}],
                                           "no_share": ["load", "other.main.orders", {}],
                                           "no_branch": ["load", f"{SHARE}.dev.orders", {}],
                                           "too_new": ["load", f"{SHARE}.main.orders", {"version": 99}]})
    for name in ("secret", "unshared"):  # refused alike: whether a table outside the share exists is not told
        assert got[name]["error"] == 403 and json.loads(got[name]["body"])["errorCode"] == "PERMISSION_DENIED"
    for name in ("missing", "no_share", "no_branch"):
        assert got[name]["error"] == 404, (name, got[name])
        assert json.loads(got[name]["body"])["errorCode"] == "RESOURCE_DOES_NOT_EXIST"
    assert got["too_new"]["error"] == 400
    assert "versions 0 to 4" in json.loads(got["too_new"]["body"])["message"]


def test_a_consumer_without_storage_credentials_gets_only_presigned_urls(
        tables, sharing_service, sharing_env, tmp_path, stack_env):
    token = json.loads(make_profile(sharing_env, tmp_path, "http-reader").read_text())["bearerToken"]
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{sharing_service}/shares/{SHARE}/schemas/main/tables/orders"
    answer = httpx.post(url + "/query", json={}, headers=headers, timeout=30)
    assert answer.status_code == 200 and answer.headers["delta-table-version"] == "4"
    assert answer.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in answer.text.splitlines()]
    assert lines[0] == {"protocol": {"minReaderVersion": 1}} and "metaData" in lines[1]
    files = [line["file"] for line in lines[2:]]
    assert files and all("X-Amz-Signature=" in f["url"] for f in files)
    assert all(f["url"].startswith(stack_env["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"]) for f in files)
    assert all("region" in f["partitionValues"] and f["size"] > 0 and f["expirationTimestamp"] > 0 for f in files)
    assert stack_env["LAKEFS_DELTA_OBJECT_STORE_SECRET_ACCESS_KEY"] not in answer.text
    signed = httpx.get(files[0]["url"], timeout=10)
    assert signed.status_code == 200 and signed.content[:4] == b"PAR1"
    assert httpx.get(files[0]["url"].split("?")[0], timeout=10).status_code == 403, "the bucket is not public"

    # the protocol's other answers, as a client sees them
    version = httpx.get(url + "/version", headers=headers, timeout=30)
    assert version.status_code == 200 and version.headers["delta-table-version"] == "4" and version.content == b""
    at_time = httpx.get(url + "/version", params={"startingTimestamp": "2000-01-01T00:00:00Z"}, headers=headers,
                        timeout=30)
    assert at_time.headers["delta-table-version"] == "0", "the oldest version at or after a time before all"
    metadata = httpx.get(url + "/metadata", headers={**headers, "delta-sharing-capabilities": "responseformat=delta"},
                         timeout=30)
    assert metadata.headers["delta-sharing-capabilities"] == "responseformat=delta"
    first, second = (json.loads(line) for line in metadata.text.splitlines())
    assert "deltaProtocol" in first["protocol"] and second["metaData"]["deltaMetadata"]["partitionColumns"] == ["region"]
    streaming = httpx.post(url + "/query", json={"startingVersion": 3}, headers=headers, timeout=30)
    assert streaming.status_code == 200 and streaming.headers["delta-table-version"] == "3"
    changes = [json.loads(line) for line in streaming.text.splitlines()][2:]
    assert {kind for line in changes for kind in line} == {"add", "remove"}, "data change files, no cdc"
    assert {line[kind]["version"] for line in changes for kind in line if kind != "metaData"} == {3, 4}
    shares = httpx.get(f"{sharing_service}/shares", params={"maxResults": 1}, headers=headers, timeout=30).json()
    assert shares == {"items": [{"name": SHARE}]}
    assert httpx.get(f"{sharing_service}/shares", timeout=30).json()["errorCode"] == "UNAUTHENTICATED"
    bad = httpx.post(url + "/query", content=b"{not json", headers=headers, timeout=30)
    assert bad.status_code == 400 and bad.json()["errorCode"] == "MALFORMED_REQUEST"
    both = httpx.post(url + "/query", json={"version": 1, "timestamp": "2026-01-01T00:00:00Z"}, headers=headers,
                      timeout=30)
    assert both.status_code == 400 and both.json()["errorCode"] == "INVALID_PARAMETER_VALUE"


def test_a_branch_table_of_twenty_thousand_versions_is_listed_from_the_checkpoint_a_query_needs(
        config, lakefs, repository, s3, stack_env):
    """A branch table committed every minute gains ~500k log files a year. `/metadata` and `/query`
    list its log from the newest checkpoint at or below the version asked, not from its start:
    LIST calls counted at the real object store's client (before: one per 1,000 log files)."""
    import io

    import pyarrow.parquet as pq

    from bench.synthetic import METADATA, PROTOCOL, put_extracted, synthetic_checkpoint
    from exporter.sharing.versions import Schema, branch_table
    from exporter.storage.layout import STATE, branch_table_location
    from exporter.storage.objectstore import ObjectStore

    versions, every = 20_000, 500
    store = ObjectStore(config, lakefs.storage_namespace(repository))
    location = branch_table_location(config, "main", "long")
    data = [store.uri(f"data/part-{v:05d}.parquet") for v in range(versions)]

    def log():
        for version in range(versions):
            actions = [PROTOCOL, METADATA] if version == 0 else []
            actions.append({"add": {"path": data[version], "partitionValues": {}, "size": 100, "modificationTime": 0,
                                    "dataChange": True}})
            yield f"{version:020d}.json", "\n".join(map(json.dumps, actions)).encode()
            if version % every == 0 and version:
                sink = io.BytesIO()
                pq.write_table(synthetic_checkpoint(data[:version + 1]), sink)
                yield f"{version:020d}.checkpoint.parquet", sink.getvalue()

    # the log's 20,040 objects in one request: the test took 12 s of the machine's CPU so, 20 s with a
    # PUT for each object (run alone, one run each)
    put_extracted(store.bucket, store.key(f"{location}log.tar"),
                  ((store.key(f"{location}_delta_log/{name}"), body) for name, body in log()))
    store.put(f"{location}_delta_log/_last_checkpoint", json.dumps({"version": 19_500, "size": 19_503}).encode())
    store.put(location + STATE, json.dumps({"head_version": versions - 1, "first_version": 0, "commits": []}).encode())

    lists = []
    list_page = store.requests.list_page

    def count(*args, **kwargs):  # each listing request the store sends
        lists.append(1)
        return list_page(*args, **kwargs)

    store.requests.list_page = count
    try:
        schema = Schema("main", repository, "main", "branch")

        def calls(read) -> tuple[int, object]:
            lists.clear()
            answer = read(branch_table(config, store, schema, "long"))
            return len(lists), answer

        def query(table, version: int | None = None) -> tuple[str, int]:  # what /metadata and /query read
            snapshot = table.snapshot(version)
            return snapshot.metadata["id"], len(list(snapshot.live.files(whole=True)))

        head = calls(query)
        old = calls(lambda table: query(table, 10_250))
        changes = calls(lambda table: sorted(table.commits(19_990, 19_999)))
        whole = calls(lambda table: len(table.entries))
    finally:
        del store.requests.list_page

    assert head == (1, ("bench", versions)), head  # _last_checkpoint's checkpoint 19,500 and 499 commits: one page
    assert old == (2, ("bench", 10_251)), old  # one window of 1,000 versions back holds checkpoint 10,000: 2 pages
    assert changes == (1, list(range(19_990, 20_000))), changes
    assert whole == (21, versions + versions // every - 1 + 1), whole  # what every query listed before
