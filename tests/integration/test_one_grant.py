"""One grant per reader, tried as an attacker would on the real stack: each door of the API and the
Iceberg catalog answers only what the caller may read, at resolved commits.

Real lakeFS, MinIO, Redis and workers. lakeFS can deny a user the objects under a prefix, but the
stack's lakeFS keeps users in its ACL server, which has no prefixes: the service under test asks
lakeFS through `PrefixPolicies` (tests/integration/lakefs_policy.py), a stand-in that answers as lakeFS
with such a policy answers (in lakeFS's order: what it refuses before authorizing, then the policy)
and forwards everything else to the real lakeFS. `carol` reads every repository but is denied
`restricted/` in this module's repository; `dave` reads every table but is denied `private/` (an object
that is no table's); `reader` reads everything and is named a whole-repository reader
(`iceberg.vended_credentials_readers`); a service token bound to one repository reads that one only.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import boto3
import botocore.exceptions
import deltalake
import httpx
import lakefs_sdk
import pyarrow as pa
import pytest

from exporter.config import IcebergConfig
from exporter.branch_tables.table import append_commit
from tests.conftest import SERVICE_PORT
from tests.integration.deltatables import add_descriptor, export_one
from tests.integration.lakefs_policy import PrefixPolicies
from tests.integration.test_api_auth import basic, lakefs_admin, new_user
from exporter.lakefs.lake import Lake
from tests.fakes import lake_of

pytestmark = pytest.mark.integration

POLICY_PORT, GUARDED_PORT = SERVICE_PORT + 50, SERVICE_PORT + 51
PRIVATE, SECRET_BYTES = "private/secret.csv", b"id,salary\n1,100\n"
ODD_TAG = "rel%"  # lakeFS answers 400 for it at some routes before it authorizes (decoded twice)
ROWS = [pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}),
        pa.table({"id": pa.array([3], pa.int64()), "name": ["c"]})]


def write_table(lakefs, repository: str, branch: str, path: str, folder: Path, versions: int = 2) -> None:
    """A delta-rs table of `versions` appends, uploaded under `path` on `branch` (not committed)."""
    for batch in ROWS[:versions]:
        deltalake.write_deltalake(str(folder), batch, mode="append")
    upload_folder(lakefs, repository, branch, path, folder)


def upload_folder(lakefs, repository: str, branch: str, path: str, folder: Path) -> None:
    """Every file under `folder`, uploaded under `path` on `branch` (not committed)."""
    for file in sorted(folder.rglob("*")):
        if file.is_file():
            lakefs.upload_object(repository, branch, f"{path}/{file.relative_to(folder).as_posix()}", file.read_bytes())


def ns(*parts: str) -> str:
    return "%1F".join(quote(part, safe="") for part in parts)


class Lake:
    """The module's repository `a`: `orders` at public/orders, `secret` at restricted/secret (both with
    Iceberg tables), `hidden` at restricted/hidden (Iceberg off), exported at main, the tag `rel%` and
    commit `first` (before the tables); repository `nested`, whose storage namespace lies inside a's."""

    def __init__(self, lakefs, config, stack_env, tmp: Path):
        bucket = stack_env["LAKEFS_DELTA_STACK_BUCKET"]
        self.a = f"t-grant-a-{uuid.uuid4().hex[:6]}"
        self.namespace = f"s3://{bucket}/{self.a}"
        lakefs.create_repository(self.a, self.namespace)
        self.first = lakefs.commit(self.a, "main").id
        iceberg = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
        plain = config.model_copy(update={"iceberg": IcebergConfig(enabled=False)})
        for name, path in (("orders", "public/orders"), ("secret", "restricted/secret"), ("hidden", "restricted/hidden")):
            write_table(lakefs, self.a, "main", path, tmp / name)
            add_descriptor(lakefs, self.a, name, path)
        lakefs.upload_object(self.a, "main", PRIVATE, SECRET_BYTES)  # no table's: only lakeFS's policy guards it
        self.commit = lakefs.commit_branch(self.a, "main", "three tables")
        lakefs.create_tag(self.a, ODD_TAG, self.commit)
        self.exports = {}
        for ref, name, settings in (("main", "orders", iceberg), ("main", "secret", iceberg), ("main", "hidden", plain),
                                    (ODD_TAG, "secret", iceberg)):
            outcome = export_one(settings, lakefs, self.a, ref, self.commit, name)
            assert outcome.ok, outcome.error
            self.exports[(ref, name)] = outcome
        self.nested = f"t-grant-n-{uuid.uuid4().hex[:6]}"
        lakefs.create_repository(self.nested, f"{self.namespace}/nested-x")  # lakeFS accepts it
        write_table(lakefs, self.nested, "main", "tables/n", tmp / "nested")
        add_descriptor(lakefs, self.nested, "n", "tables/n")
        nested_commit = lakefs.commit_branch(self.nested, "main", "a table")
        self.nested_export = export_one(iceberg, lakefs, self.nested, "main", nested_commit, "n")
        assert self.nested_export.ok, self.nested_export.error

    def metadata_url(self, outcome, endpoint: str) -> str:
        return outcome.iceberg["metadata_location"].replace("s3://", endpoint.rstrip("/") + "/")


@pytest.fixture(scope="module")
def lake(lakefs, config, stack_env, tmp_path_factory) -> Lake:
    return Lake(lakefs, config, stack_env, tmp_path_factory.mktemp("grant"))


@pytest.fixture(scope="module")
def policies(stack_env):
    with PrefixPolicies(stack_env["LAKEFS_DELTA_LAKEFS_ENDPOINT"], POLICY_PORT) as running:
        yield running


@pytest.fixture(scope="module")
def people(lakefs, lake, policies, stack_env) -> dict[str, dict[str, str]]:
    reader, carol, dave = (new_user(reads=True) for _ in range(3))
    ids = {name: user_id(stack_env, keys) for name, keys in (("reader", reader), ("carol", carol), ("dave", dave))}
    policies.deny(ids["carol"], lake.a, ["restricted/"])
    policies.deny(ids["dave"], lake.a, ["private/"])
    bound = uuid.uuid4().hex
    return {"reader": basic(*reader), "carol": basic(*carol), "dave": basic(*dave),
            "bound": {"Authorization": f"Bearer {bound}"}, "_bound": bound, "_carol": ids["carol"],
            "_reader": ids["reader"]}


def user_id(stack_env, keys: tuple[str, str]) -> str:
    return httpx.get(f"{stack_env['LAKEFS_DELTA_LAKEFS_ENDPOINT']}/api/v1/user", headers=basic(*keys),
                     timeout=30).json()["user"]["id"]


@pytest.fixture(scope="module")
def guarded(service, processes, policies, people, lake, stack_env) -> str:
    """The service asking lakeFS through the stand-in, vending credentials to `reader` alone of the
    lakeFS users; a service token of its own reads only repository a."""
    tokens = f"{stack_env['LAKEFS_DELTA_API_TOKENS']},{people['_bound']}={lake.a}"
    return processes.serve("service-grant", GUARDED_PORT, extra_env={
        "LAKEFS_DELTA_LAKEFS_ENDPOINT": policies.url, "LAKEFS_DELTA_API_TOKENS": tokens,
        "LAKEFS_DELTA_ICEBERG_VENDED_CREDENTIALS": "true",
        "LAKEFS_DELTA_ICEBERG_VENDED_CREDENTIALS_READERS": f"user:{people['_reader']}"})


def get(url: str, headers: dict, **params) -> httpx.Response:
    return httpx.get(url, headers=headers, params=params, timeout=120)


def data_file(s3, outcome) -> str:
    """The address of a data file the export reads, as its Delta log names it."""
    bucket, _, key = outcome.location.removeprefix("s3://").partition("/")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=key + "_delta_log/")["Contents"]
    for item in sorted(listed, key=lambda o: o["Key"]):
        if item["Key"].endswith(".json"):
            for line in s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().splitlines():
                action = json.loads(line)
                if "add" in action:
                    return action["add"]["path"]
    raise AssertionError(f"no add in {outcome.location}")


def sign(guarded: str, headers: dict, repository: str, ref: str, table: str, commit: str, url: str) -> httpx.Response:
    return httpx.post(f"{guarded}/iceberg/v1/namespaces/{ns(repository, ref)}/tables/{table}/commits/{commit}/sign",
                      headers=headers, json={"method": "GET", "uri": url, "region": "us-east-1", "headers": {}},
                      timeout=60)


def test_the_stand_in_answers_as_lakefs_with_a_prefix_policy(guarded, lake, people, policies, lakefs):
    """The premise: carol may read public/ and not restricted/ (as lakeFS with a policy answers)."""
    endpoint = f"{policies.url}/api/v1/repositories/{lake.a}/refs/{lake.commit}/objects/stat"
    assert get(endpoint, people["carol"], path="public/orders/_delta_log/").status_code == 404
    assert get(endpoint, people["carol"], path="restricted/secret/_delta_log/").status_code == 401
    assert get(endpoint, people["reader"], path="restricted/secret/_delta_log/").status_code == 404


def test_lakefs_400_before_authorizing_is_not_taken_for_allowed(guarded, lake, people, s3, stack_env):
    """Item 7: through the tag `rel%`, lakeFS answers the stat 400 before it authorizes; the grant
    authorizes at the commit the tag resolves to, where the policy holds."""
    endpoint = stack_env["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"]
    secret = lake.exports[(ODD_TAG, "secret")]
    metadata = lake.metadata_url(secret, endpoint)
    refused = sign(guarded, people["carol"], lake.a, ODD_TAG, "secret", lake.commit, metadata)
    loaded = get(f"{guarded}/iceberg/v1/namespaces/{ns(lake.a, ODD_TAG)}/tables/secret", people["carol"])
    assert refused.status_code == 403 and "uri" not in refused.json(), refused.text
    assert loaded.status_code in (400, 403), loaded.text  # lakeFS cannot resolve the tag by name: no table either way
    allowed = sign(guarded, people["reader"], lake.a, ODD_TAG, "secret", lake.commit, metadata)
    assert allowed.status_code == 200 and httpx.get(allowed.json()["uri"], timeout=30).status_code == 200


def test_the_signer_signs_only_the_objects_the_tables_readers_read(guarded, lake, people, s3, stack_env):
    """Item 8 and the signer's object set: a token bound to repository a, allowed its `orders`,
    gets no signature for repository `nested` (whose namespace lies inside a's), for another table's
    data file, or for a's `_lakefs/`; the data file `orders` reads is signed and served."""
    endpoint = stack_env["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"]
    orders = lake.exports[("main", "orders")]
    as_url = lambda address: address.replace("s3://", endpoint.rstrip("/") + "/")  # noqa: E731
    own = sign(guarded, people["bound"], lake.a, "main", "orders", lake.commit, as_url(data_file(s3, orders)))
    assert own.status_code == 200, own.text
    assert httpx.get(own.json()["uri"], timeout=30).status_code == 200
    for address in (data_file(s3, lake.nested_export), lake.nested_export.iceberg["metadata_location"],
                    data_file(s3, lake.exports[("main", "secret")]), f"{lake.namespace}/_lakefs/dummy"):
        answer = sign(guarded, people["bound"], lake.a, "main", "orders", lake.commit, as_url(address))
        assert answer.status_code == 403 and answer.json()["error"]["type"] == "ForbiddenException", (address, answer.text)
    loaded = get(f"{guarded}/iceberg/v1/namespaces/{ns(lake.nested, 'main')}/tables/n", people["bound"])
    assert loaded.status_code == 403


def test_the_specifications_signer_keeps_to_the_grant_at_the_commit_its_properties_name(guarded, lake, people, s3,
                                                                                        stack_env):
    """Issue 39: the specification's `/tables/{table}/sign` (Iceberg 1.12's) refuses what the
    per-commit signer refuses: carol gets nothing for `secret`, the bound token no other table's data
    file; at the commit its signing properties name, or the ref's current one without."""
    endpoint = stack_env["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"]
    as_url = lambda address: address.replace("s3://", endpoint.rstrip("/") + "/")  # noqa: E731

    def sign_table(headers: dict, table: str, url: str, commit: str | None) -> httpx.Response:
        properties = {"lakefs.commit-id": commit} if commit else {}
        return httpx.post(f"{guarded}/iceberg/v1/namespaces/{ns(lake.a, 'main')}/tables/{table}/sign",
                          headers=headers, json={"method": "GET", "uri": url, "region": "us-east-1", "headers": {},
                                                 "properties": properties}, timeout=60)

    orders_file = as_url(data_file(s3, lake.exports[("main", "orders")]))
    for commit in (lake.commit, None):
        own = sign_table(people["bound"], "orders", orders_file, commit)
        assert own.status_code == 200 and httpx.get(own.json()["uri"], timeout=30).status_code == 200, own.text
        for headers, table, url in ((people["carol"], "secret", lake.metadata_url(lake.exports[("main", "secret")],
                                                                                   endpoint)),
                                    (people["bound"], "orders", as_url(data_file(s3, lake.exports[("main", "secret")]))),
                                    (people["bound"], "orders", as_url(data_file(s3, lake.nested_export)))):
            refused = sign_table(headers, table, url, commit)
            assert refused.status_code == 403 and "uri" not in refused.json(), (table, url, refused.text)
    assert sign_table(people["bound"], "orders", orders_file, "not-a-commit").status_code == 400


def test_a_credential_is_vended_only_to_a_named_whole_repository_reader_and_reaches_no_lakefs_metadata(
        guarded, lake, people, s3, stack_env, lakefs):
    """Issue 49: dave may read every table of main but not `private/`, carol not `secret`; main's grant
    vended dave a credential that read private/secret.csv and lakeFS's metaranges. Neither gets one
    now (loadTable answers them for remote signing, `/credentials` refuses with the reason). The
    reader, whom `iceberg.vended_credentials_readers` names, and the token bound to the repository get
    one; MinIO serves it the table's own files and the repository's data, and refuses lakeFS's
    `_lakefs/` (the commit's metarange), another table's export and a nested repository's objects."""
    table = f"{guarded}/iceberg/v1/namespaces/{ns(lake.a, 'main')}/tables/orders"
    vended = {"X-Iceberg-Access-Delegation": "vended-credentials"}
    for who in ("carol", "dave"):
        answered = get(table, {**people[who], **vended})
        assert answered.status_code == 200 and "s3.session-token" not in answered.json()["config"], answered.text
        assert answered.json()["config"]["s3.remote-signing-enabled"] == "true"
        refused = get(table + "/credentials", people[who])
        assert refused.status_code == 403 and "whole-repository readers" in refused.json()["error"]["message"], \
            (who, refused.text)

    bucket = stack_env["LAKEFS_DELTA_STACK_BUCKET"]
    metarange = f"{lake.a}/_lakefs/" + lakefs_sdk.CommitsApi(lakefs_admin()).get_commit(lake.a, lake.commit).meta_range_id
    assert s3.head_object(Bucket=bucket, Key=metarange)  # the premise: lakeFS keeps it there
    secret = lakefs.physical_address(lake.a, lake.commit, PRIVATE).removeprefix(f"s3://{bucket}/")
    for who in ("reader", "bound"):
        readers = get(table, {**people[who], **vended})
        assert readers.status_code == 200 and "ETag" not in readers.headers, readers.text
        issued = readers.json()["storage-credentials"][0]["config"]
        assert readers.json()["config"]["s3.session-token"] == issued["s3.session-token"]
        assert get(table + "/credentials", people[who]).status_code == 200
        client = boto3.client("s3", endpoint_url=stack_env["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"],
                              region_name="us-east-1", aws_access_key_id=issued["s3.access-key-id"],
                              aws_secret_access_key=issued["s3.secret-access-key"],
                              aws_session_token=issued["s3.session-token"])
        own = lake.exports[("main", "orders")].iceberg["metadata_location"].removeprefix(f"s3://{bucket}/")
        assert client.get_object(Bucket=bucket, Key=own)["Body"].read()
        data = data_file(s3, lake.exports[("main", "orders")]).removeprefix(f"s3://{bucket}/")
        assert client.get_object(Bucket=bucket, Key=data)["Body"].read()
        assert client.get_object(Bucket=bucket, Key=secret)["Body"].read() == SECRET_BYTES  # they read the repository
        other = lake.exports[("main", "secret")].iceberg["metadata_location"].removeprefix(f"s3://{bucket}/")
        nested = lake.nested_export.iceberg["metadata_location"].removeprefix(f"s3://{bucket}/")
        for key in (metarange, other, nested, data_file(s3, lake.nested_export).removeprefix(f"s3://{bucket}/")):
            with pytest.raises(botocore.exceptions.ClientError, match="AccessDenied"):
                client.get_object(Bucket=bucket, Key=key)


def test_iceberg_listings_and_pages_name_only_what_the_caller_may_read(guarded, lake, people, policies):
    """Item 5: paging runs over what the grant allows, so no page token names another repository or
    a table the caller may not load; /config answers only credentials lakeFS knows."""
    seen, token = [], None
    while True:
        answer = get(f"{guarded}/iceberg/v1/namespaces", people["bound"], pageSize=1,
                     **({"pageToken": token} if token else {})).json()
        seen += [part for namespace in answer["namespaces"] for part in namespace]
        token = answer.get("next-page-token")
        if not token:
            break
        seen.append(token)
    assert set(seen) == {lake.a}, seen

    names, token = [], None
    while True:
        answer = get(f"{guarded}/iceberg/v1/namespaces/{ns(lake.a, 'main')}/tables", people["carol"], pageSize=1,
                     **({"pageToken": token} if token else {})).json()
        names += [identifier["name"] for identifier in answer["identifiers"]]
        token = answer.get("next-page-token")
        if not token:
            break
        names.append(token)
    assert set(names) == {"orders"}, names
    everything = get(f"{guarded}/iceberg/v1/namespaces/{ns(lake.a, 'main')}/tables", people["reader"]).json()
    assert {identifier["name"] for identifier in everything["identifiers"]} == {"orders", "secret"}

    stranger = {"Authorization": f"Bearer not-a-token-{uuid.uuid4().hex}"}
    assert get(f"{guarded}/iceberg/v1/config", stranger).status_code == 401
    assert get(f"{guarded}/iceberg/v1/config", basic(people["carol"]["Authorization"][:10], "wrong")).status_code == 401
    assert get(f"{guarded}/iceberg/v1/config", people["carol"]).status_code == 200
    # an unknown credential is asked about once, however many repositories a listing would check
    another = {"Authorization": f"Bearer not-a-token-{uuid.uuid4().hex}"}
    assert get(f"{guarded}/iceberg/v1/namespaces", another).status_code == 401
    assert get(f"{guarded}/repositories/{lake.a}/refs/main/datasets", another).status_code == 401
    assert len([r for r in policies.requests if r[2] == another["Authorization"]]) == 1


def test_status_overview_and_lookups_name_only_readable_tables(guarded, lake, people):
    """Item 6: the export status and the refs overview list only the tables the caller may read;
    why a table has no Iceberg metadata is told only to its readers."""
    status = get(f"{guarded}/exports/{lake.a}/{lake.commit}", people["carol"])
    assert status.status_code == 200, status.text
    assert set(status.json()["refs"]["main"]["tables"]) == {"orders"}
    assert "secret" not in status.text and "hidden" not in status.text and "restricted" not in status.text
    assert set(get(f"{guarded}/exports/{lake.a}/{lake.commit}", people["reader"]).json()["refs"]["main"]["tables"]) \
        == {"orders", "secret", "hidden"}

    overview = f"{guarded}/repositories/{lake.a}/otf/refs/{lake.first}/diff/{lake.commit}/tables"
    carols = get(overview, people["carol"])
    assert carols.status_code == 200, carols.text
    assert [table["path"] for table in carols.json()["tables"]] == ["public/orders"]
    assert {table["path"] for table in get(overview, people["reader"]).json()["tables"]} == \
        {"public/orders", "restricted/secret", "restricted/hidden"}

    hidden = f"{guarded}/iceberg/v1/namespaces/{ns(lake.a, 'main')}/tables/hidden"
    refused, told = get(hidden, people["carol"]), get(hidden, people["reader"])
    assert refused.status_code == 404 and "iceberg.enabled" not in refused.text, refused.text
    assert told.status_code == 404 and "iceberg.enabled off" in told.text, told.text


def test_a_branch_table_re_pointed_is_read_only_by_whom_may_read_every_path(guarded, lake, people, policies, lakefs,
                                                                            config, repository, tmp_path):
    """Item 1: the descriptor of `orders` re-pointed from public/orders to restricted/orders; the
    branch table holds versions from both, so carol (denied restricted/) loads, signs and maps none."""
    keeping = config.model_copy(update={"iceberg": IcebergConfig(enabled=True), "branch_tables": ("main",)})
    write_table(lakefs, repository, "main", "public/orders", tmp_path / "public", versions=1)
    add_descriptor(lakefs, repository, "orders", "public/orders")
    first = lakefs.commit_branch(repository, "main", "orders at public/")
    assert export_one(keeping, lakefs, repository, "main", first, "orders").ok
    assert append_commit(lake_of(keeping, lakefs), repository, "main", first, "orders").iceberg["state"] == "written"
    write_table(lakefs, repository, "main", "restricted/orders", tmp_path / "restricted")
    add_descriptor(lakefs, repository, "orders", "restricted/orders")
    second = lakefs.commit_branch(repository, "main", "orders re-pointed to restricted/")
    assert export_one(keeping, lakefs, repository, "main", second, "orders").ok
    appended = append_commit(lake_of(keeping, lakefs), repository, "main", second, "orders")
    assert appended.iceberg["state"] == "written", appended
    policies.deny(people["_carol"], repository, ["restricted/"])

    table = f"{guarded}/iceberg/v1/namespaces/{ns(repository, 'main')}/tables/orders"
    versions = f"{guarded}/repositories/{repository}/branches/main/tables/orders/versions"
    assert get(table, people["carol"]).status_code == 403
    assert get(versions, people["carol"]).status_code == 403
    loaded = get(table, people["reader"])
    assert loaded.status_code == 200, loaded.text
    metadata = loaded.json()["metadata-location"].replace("s3://", config.object_store.endpoint.rstrip("/") + "/")
    assert get(versions, people["reader"]).json()["table_paths"] == ["public/orders", "restricted/orders"]
    assert sign(guarded, people["carol"], repository, "main", "orders", second, metadata).status_code == 403
    listed = get(f"{guarded}/iceberg/v1/namespaces/{ns(repository, 'main')}/tables", people["carol"]).json()
    assert listed["identifiers"] == []


def test_row_diff_cache_keys_do_not_collide_across_tables(guarded, lakefs, people, policies, repository, tmp_path,
                                                          stack_env):
    """Item 4: `reports:secret` (denied to carol) diffed and cached first; carol's `table_path=reports`
    with `key=secret:-` once joined to the same cache key and read its rows."""
    policies.deny(people["_carol"], repository, ["reports:secret/"])
    base = lakefs.commit(repository, "main").id
    write_table(lakefs, repository, "main", "reports:secret", tmp_path / "secret")
    head = lakefs.commit_branch(repository, "main", "a secret table")
    admin = {"Authorization": f"Bearer {stack_env['LAKEFS_DELTA_WEBHOOK_TOKENS'].split(',')[0]}"}
    rows = f"{guarded}/repositories/{repository}/otf/refs/{base}/diff/{head}/rows"
    cached = get(rows, admin, table_path="reports:secret")
    assert cached.status_code == 200 and len(cached.json()["rows"]) == 3, cached.text
    assert get(rows, people["carol"], table_path="reports:secret").status_code == 403
    colliding = get(rows, people["carol"], table_path="reports", key="secret:-")
    assert colliding.status_code != 200 or not colliding.json()["rows"], colliding.text
    assert '"c"' not in colliding.text and "secret" not in colliding.text.replace("secret:-", "")


def test_a_folder_refused_inside_a_table_refuses_the_table_at_every_door(guarded, lakefs, people, policies, config,
                                                                       repository, s3, stack_env, tmp_path):
    """Issue 49: erin may read `tables/orders` but not its partition `region=eu/` (a policy per
    partition). main's grant asked about the `_delta_log/` alone, and the catalog (remote signing)
    handed her every row, those of `region=eu/` too. Now no door hands out the table: loadTable, the
    signer (for either partition's file), the history and row diffs answer 403 naming the folder,
    and datasets leaves it out; `reader`, denied nothing, reads it."""
    erin_keys = new_user(reads=True)
    erin = basic(*erin_keys)
    policies.deny(user_id(stack_env, erin_keys), repository, ["tables/orders/region=eu/"])
    folder = tmp_path / "orders"
    deltalake.write_deltalake(str(folder), pa.table({"id": pa.array([1, 2], pa.int64()), "region": ["eu", "us"]}),
                              partition_by=["region"])
    upload_folder(lakefs, repository, "main", "tables/orders", folder)
    add_descriptor(lakefs, repository, "orders", "tables/orders")
    first = lakefs.commit_branch(repository, "main", "orders in two regions")
    deltalake.write_deltalake(str(folder), pa.table({"id": pa.array([3], pa.int64()), "region": ["us"]}), mode="append",
                              partition_by=["region"])
    upload_folder(lakefs, repository, "main", "tables/orders", folder)
    head = lakefs.commit_branch(repository, "main", "one more order")
    export = export_one(config.model_copy(update={"iceberg": IcebergConfig(enabled=True)}), lakefs, repository,
                        "main", head, "orders")
    assert export.ok and export.iceberg["state"] == "written", export.error
    files = {region: next(entry.path for entry in lakefs.list_objects(repository, head, f"tables/orders/region={region}/"))
             for region in ("eu", "us")}
    stat = f"{policies.url}/api/v1/repositories/{repository}/refs/{head}/objects/stat"
    assert get(stat, erin, path=files["eu"]).status_code == 401  # the premise: lakeFS refuses her the folder
    assert get(stat, erin, path=files["us"]).status_code == 200
    assert get(stat, erin, path="tables/orders/_delta_log/").status_code == 404  # and lets her read the log

    endpoint = stack_env["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"].rstrip("/") + "/"
    table = f"{guarded}/iceberg/v1/namespaces/{ns(repository, 'main')}/tables/orders"
    loaded = get(table, erin)
    assert loaded.status_code == 403 and "tables/orders/region=eu/" in loaded.json()["error"]["message"], loaded.text
    for region in ("eu", "us"):
        url = lakefs.physical_address(repository, head, files[region]).replace("s3://", endpoint)
        assert sign(guarded, erin, repository, "main", "orders", head, url).status_code == 403, region
        signed = sign(guarded, people["reader"], repository, "main", "orders", head, url)
        assert signed.status_code == 200 and httpx.get(signed.json()["uri"], timeout=30).status_code == 200, signed.text
    assert get(table, people["reader"]).status_code == 200

    diff = f"{guarded}/repositories/{repository}/otf/refs/{first}/diff/{head}"
    for door in (diff, diff + "/rows"):
        refused = get(door, erin, table_path="tables/orders")
        assert refused.status_code == 403 and "region=eu/" in refused.text, (door, refused.text)
    rows = answered(lambda: get(diff + "/rows", people["reader"], table_path="tables/orders"))
    assert len(rows.json()["rows"]) == 1, rows.text
    datasets = f"{guarded}/repositories/{repository}/refs/main/datasets"
    assert {d["path"] for d in answered(lambda: get(datasets, people["reader"])).json()["results"]} == {"tables/orders"}
    assert answered(lambda: get(datasets, erin)).json()["results"] == []
    resolve = get(datasets + "/resolve", erin, path=files["us"])
    assert resolve.status_code == 404, resolve.text


def answered(ask, seconds: float = 60) -> httpx.Response:
    """The first answer that is not 202 (a worker still computing it)."""
    deadline = time.monotonic() + seconds
    while True:
        answer = ask()
        if answer.status_code != 202 or time.monotonic() > deadline:
            assert answer.status_code == 200, answer.text
            return answer
        time.sleep(0.5)


def test_the_merge_gates_report_names_only_the_tables_the_caller_may_read(guarded, lake, lakefs, people):
    """The gate's report over a change to a table under restricted/: its finding is the reader's to
    see; carol, refused that folder, learns the gate's answer (she would meet it merging) and not
    which table or what was found."""
    branch = f"gate-{uuid.uuid4().hex[:6]}"
    lakefs.create_branch(lake.a, branch, lake.commit)
    schema = {"type": "struct", "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}]}
    actions = [{"commitInfo": {"operation": "CREATE TABLE"}}, {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
               {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                             "schemaString": json.dumps(schema), "partitionColumns": [], "configuration": {}}},
               {"add": {"path": "part-0.parquet", "partitionValues": {}, "size": 1, "modificationTime": 0,
                        "dataChange": True, "stats": json.dumps({"numRecords": 5})}}]
    lakefs.upload_object(lake.a, branch, f"restricted/gated/_delta_log/{0:020d}.json",
                         "".join(json.dumps(a) + "\n" for a in actions).encode())
    lakefs.upload_object(lake.a, branch, "_lakefs_tables/gated.yaml",
                         b"name: gated\ntype: delta\npath: restricted/gated\nchecks:\n  rows:\n    added_at_most: 0\n")
    commit = lakefs.commit_branch(lake.a, branch, "a gated table under restricted/")
    report = f"{guarded}/repositories/{lake.a}/otf/refs/{lake.commit}/checks/{commit}"

    readers, carols = get(report, people["reader"]), get(report, people["carol"])

    assert readers.status_code == 200 and readers.json()["passed"] is False, readers.text
    assert [(f["table"], f["rule"]) for f in readers.json()["findings"]] == [("gated", "rows")], readers.text
    assert carols.status_code == 200 and carols.json()["passed"] is False, carols.text
    assert carols.json()["findings"] == [] and carols.json()["tables"] == [], carols.text
