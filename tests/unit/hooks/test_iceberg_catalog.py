"""The Iceberg REST catalog (`/iceberg/v1/...`) as a client sees it: namespaces [repository, ref]
(a tag `v1.2%2Fx` too), the tables of a ref's commit with Iceberg metadata, a table loaded with
its metadata and signing config, S3 requests signed only for what its readers read; the API's
callers and refusals in the spec's error model; every write refused with 406, never a 500."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import httpx
import numpy as np
import pytest

import exporter.catalog.iceberg as catalog_module
from exporter.catalog.iceberg import IcebergCatalog
from exporter.config import Config
from exporter.iceberg import manifests as manifests_module
from exporter.iceberg.path_hashes import path_hash
from exporter.storage.scope import folders
from exporter.export.commit import export_iceberg, export_table
from exporter.export.job import ExportAt
from exporter.storage.layout import MANIFEST, export_location
from hooks.app import create_app
from tests.unit.hooks.asgi import call
from tests.unit.source_tables import SourceTable
from tests.fakes import lake_of

pytestmark = pytest.mark.unit

TAG = "v1.2%2Fx"  # a dot, and a `%2F` a server decoding the whole path would split (lakeFS refuses `/`)
STORE = {"endpoint": "http://minio.test:9000", "region": "us-east-1", "access_key_id": "AK", "secret_access_key": "SK"}
TOKENS = [{"token": "svc", "repositories": ["repo"]}, {"token": "other", "repositories": ["elsewhere"]}]
SVC = {"Authorization": "Bearer svc"}


def ns(*parts: str) -> str:
    """A namespace in a path, as PyIceberg sends it: each part quoted, joined by %1F."""
    return "%1F".join(quote(part, safe="") for part in parts)


class Catalog:
    """The service's app over the fake lakeFS, with a table `events` exported at `main`'s head and
    at the tag `v1.2%2Fx` (Iceberg on), and `plain` exported at `main` with Iceberg off."""

    def __init__(self, lakefs, redis_url, tmp_path):
        self.config = Config(iceberg={"enabled": True}, redis_url=redis_url, object_store=STORE,
                             api={"tokens": TOKENS})
        events = SourceTable(lakefs, "repo", "events", tmp_path / "events")
        plain = SourceTable(lakefs, "repo", "plain", tmp_path / "plain")
        events.append(1, 2)
        plain.append(7).commit()
        self.commit = events.commit()
        lakefs.create_tag("repo", TAG, self.commit)
        for ref, table, config in (("main", events, self.config), (TAG, events, self.config),
                                   ("main", plain, self.config.model_copy(update={"iceberg": Config(iceberg={"enabled": False}).iceberg}))):
            assert export_table(lake_of(config, lakefs), ExportAt("repo", ref, self.commit), table.descriptor).ok
            if config.iceberg.enabled:  # what the worker's task does next
                assert export_iceberg(lake_of(config, lakefs), "repo", ref, self.commit, table.descriptor.name)
        self.events, self.lakefs = events, lakefs
        self.store = lakefs.store.at("s3://lake/repo")
        self.manifest = json.loads(self.store.get(export_location(self.config, TAG, self.commit, "events") + MANIFEST))
        self.app = create_app(self.config, lake_of(self.config, lakefs))

    def request(self, method: str, path: str, headers: dict | None = SVC, **kwargs) -> httpx.Response:
        return call(self.app, method, "/iceberg/v1" + path, headers=headers, **kwargs)

    def sign(self, method: str, uri: str, ref: str = TAG) -> httpx.Response:
        return self.request("POST", f"/namespaces/{ns('repo', ref)}/tables/events/commits/{self.commit}/sign",
                            json={"method": method, "uri": uri, "region": "us-east-1", "headers": {}})


@pytest.fixture
def catalog(lakefs, redis_url, tmp_path) -> Catalog:
    return Catalog(lakefs, redis_url, tmp_path)


def error(answer: httpx.Response) -> tuple[int, str]:
    body = answer.json()["error"]
    assert body["code"] == answer.status_code and body["message"]
    return answer.status_code, body["type"]


def test_namespaces_are_repository_and_ref_a_tag_with_slash_and_dot_included(catalog):
    assert catalog.request("GET", "/config").json()["endpoints"][0] == "GET /v1/{prefix}/namespaces"
    assert catalog.request("GET", "/namespaces").json() == {"namespaces": [["repo"]]}
    assert catalog.request("GET", "/namespaces", params={"parent": "repo"}).json() == \
        {"namespaces": [["repo", "main"], ["repo", TAG]]}
    assert catalog.request("GET", "/namespaces", params={"parent": f"repo\x1f{TAG}"}).json() == {"namespaces": []}
    assert catalog.request("GET", f"/namespaces/{ns('repo', TAG)}").json() == \
        {"namespace": ["repo", TAG], "properties": {"commit-id": catalog.commit}}
    assert catalog.request("HEAD", f"/namespaces/{ns('repo', TAG)}").status_code == 204
    assert error(catalog.request("GET", f"/namespaces/{ns('nope')}")) == (403, "ForbiddenException")  # not its token's
    for missing in (ns("repo", "v9"), ns("repo", "v1.2/x"), ns("repo", TAG, "x")):
        assert error(catalog.request("GET", f"/namespaces/{missing}")) == (404, "NoSuchNamespaceException"), missing
    assert catalog.request("HEAD", f"/namespaces/{ns('repo', 'v9')}").status_code == 404


def test_listings_are_paged_by_name_with_the_specs_page_token(catalog):
    def listed(path: str, **params) -> dict:
        answer = catalog.request("GET", path, params=params)
        assert answer.status_code == 200, answer.text
        return answer.json()

    first = listed("/namespaces", parent="repo", pageSize=1)
    assert first == {"namespaces": [["repo", "main"]], "next-page-token": "main"}
    assert listed("/namespaces", parent="repo", pageSize=1, pageToken="main") == {"namespaces": [["repo", TAG]]}
    assert listed("/namespaces", parent="repo", pageSize=5) == {"namespaces": [["repo", "main"], ["repo", TAG]]}
    assert listed("/namespaces", pageSize=1) == {"namespaces": [["repo"]]}
    assert listed(f"/namespaces/{ns('repo', TAG)}/tables", pageSize=1, pageToken="events") == {"identifiers": []}
    for path in ("/namespaces", f"/namespaces/{ns('repo', TAG)}/tables"):
        assert error(catalog.request("GET", path, params={"pageSize": 0})) == (400, "BadRequestException")


def test_a_refs_tables_are_its_commits_exports_with_iceberg_metadata_and_load_with_signing_config(catalog):
    assert catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/tables").json() == \
        {"identifiers": [{"namespace": ["repo", TAG], "name": "events"}]}
    assert catalog.request("GET", f"/namespaces/{ns('repo', 'main')}/tables").json()["identifiers"] == \
        [{"namespace": ["repo", "main"], "name": "events"}]  # `plain` has no Iceberg table
    assert catalog.request("GET", f"/namespaces/{ns('repo')}/tables").json() == {"identifiers": []}

    loaded = catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/tables/events").json()
    assert loaded["metadata-location"] == catalog.manifest["iceberg"]["metadata_location"]
    metadata_key = loaded["metadata-location"].removeprefix("s3://lake/repo/")
    assert loaded["metadata"] == json.loads(catalog.store.get(metadata_key))
    assert loaded["config"] == {
        "s3.endpoint": STORE["endpoint"], "s3.region": "us-east-1", "client.region": "us-east-1",
        "s3.path-style-access": "true",
        "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO", "s3.signer": "S3V4RestSigner",
        "s3.remote-signing-enabled": "true",
        "s3.signer.endpoint": f"v1/namespaces/repo%1Fv1.2%252Fx/tables/events/commits/{catalog.commit}/sign"}
    assert loaded["remote-signing-config"] == {"properties": {"lakefs.commit-id": catalog.commit}}  # Iceberg 1.12's
    assert "SK" not in json.dumps(loaded)  # no store key leaves the service
    vended = catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/tables/events",
                             headers={**SVC, "X-Iceberg-Access-Delegation": "vended-credentials"}).json()
    assert vended["config"] == loaded["config"] and "storage-credentials" not in vended  # vending off: signed
    refused = catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/tables/events/credentials")
    assert error(refused) == (403, "ForbiddenException") and "vended_credentials is off" in refused.text
    assert catalog.request("HEAD", f"/namespaces/{ns('repo', TAG)}/tables/events").status_code == 204
    for table in ("plain", "nope"):
        assert error(catalog.request("GET", f"/namespaces/{ns('repo', 'main')}/tables/{table}")) == \
            (404, "NoSuchTableException")
    assert error(catalog.request("GET", f"/namespaces/{ns('repo')}/tables/events")) == (404, "NoSuchTableException")


def test_an_export_whose_iceberg_table_is_pending_is_not_a_table_until_it_is_written(catalog):
    catalog.lakefs.create_tag("repo", "v2", catalog.commit)
    assert export_table(lake_of(catalog.config, catalog.lakefs), ExportAt("repo", "v2", catalog.commit),
                        catalog.events.descriptor).ok
    tables = f"/namespaces/{ns('repo', 'v2')}/tables"

    assert catalog.request("GET", tables).json() == {"identifiers": []}
    pending = catalog.request("GET", f"{tables}/events")
    assert error(pending) == (404, "NoSuchTableException") and "pending" in pending.json()["error"]["message"]

    record = export_iceberg(lake_of(catalog.config, catalog.lakefs), "repo", "v2", catalog.commit, "events")

    assert catalog.request("GET", tables).json()["identifiers"] == [{"namespace": ["repo", "v2"], "name": "events"}]
    assert catalog.request("GET", f"{tables}/events").json()["metadata-location"] == record["metadata_location"]


def data_file(catalog: Catalog, ref: str, table: str) -> str:
    """The URL of a data file the export of `table` at `ref` reads, as its Delta log names it."""
    log = export_location(catalog.config, ref, catalog.commit, table) + "_delta_log/"
    adds = [json.loads(line)["add"]["path"] for key in sorted(catalog.store.list_keys(log)) if key.endswith(".json")
            for line in catalog.store.get(key).splitlines() if '"add"' in line.decode()]
    return adds[0].replace("s3://lake/", "http://minio.test:9000/lake/")


def test_readers_requests_are_signed_only_for_the_objects_the_table_reads(catalog):
    data = catalog.manifest["iceberg"]["metadata_location"].replace("s3://lake/", "http://minio.test:9000/lake/")
    signed = catalog.sign("GET", data).json()
    assert signed["headers"] == {} and signed["uri"].startswith(data + "?X-Amz-Algorithm=AWS4-HMAC-SHA256&")
    assert "X-Amz-Expires=900&" in signed["uri"] and "SK" not in signed["uri"]
    head = catalog.sign("HEAD", data).json()["uri"]
    assert head.split("X-Amz-Signature=")[1] != signed["uri"].split("X-Amz-Signature=")[1]
    assert catalog.sign("GET", data_file(catalog, TAG, "events")).status_code == 200  # a data file it reads
    other_export = export_location(catalog.config, "main", catalog.commit, "plain")
    for method, uri in [("PUT", data), ("DELETE", data),
                        ("GET", data_file(catalog, "main", "plain")),  # another table's data file, same namespace
                        ("GET", "http://minio.test:9000/lake/repo/data/g0/obj-1"),  # no table's file
                        ("GET", f"http://minio.test:9000/lake/repo/{other_export}{MANIFEST}"),  # _lakefs/, not its own
                        ("GET", "http://minio.test:9000/lake/repo/_lakefs/actions/log"),
                        ("GET", "http://minio.test:9000/lake/other-repo/data/x"),  # outside the namespace
                        ("GET", "http://minio.test:9000/lake/repo/data/../../other-repo/x"),
                        ("GET", "http://minio.test:9000/lake/?list-type=2&prefix=repo/"),  # a listing
                        ("GET", "http://elsewhere.test/lake/repo/data/x")]:
        assert error(catalog.sign(method, uri)) == (403, "ForbiddenException"), (method, uri)
    assert error(catalog.request("POST", f"/namespaces/{ns('repo', TAG)}/tables/events/commits/{catalog.commit}/sign",
                                 json={"uri": data})) == (400, "BadRequestException")
    assert error(catalog.request("POST", f"/namespaces/{ns('repo', TAG)}/tables/events/commits/{'0' * 64}/sign",
                                 json={"method": "GET", "uri": data})) == (404, "NoSuchTableException")



@pytest.fixture
def every_manifest_hashed(monkeypatch) -> None:
    """Every manifest keeps its path hashes, however small (the tables here are small): before `catalog` writes one."""
    monkeypatch.setattr(manifests_module, "PATH_HASHES_AT", 1)


def test_the_files_a_signature_may_name_come_from_the_path_hashes_as_from_reading_every_manifest(
        every_manifest_hashed, catalog, monkeypatch):
    """A data manifest's path hashes (8 bytes a file) stand for reading its Avro: the files a signer
    holds are the same either way, and a manifest without them is read."""
    lake = lake_of(catalog.config, catalog.lakefs)
    table = IcebergCatalog(lake).table("repo", TAG, catalog.commit, "events")
    decoded: list[int] = []
    read = catalog_module.read_manifest
    monkeypatch.setattr(catalog_module, "read_manifest", lambda raw: decoded.append(1) or read(raw))

    from_hashes = IcebergCatalog(lake).readers_objects(table).files
    assert decoded == []  # no manifest read: the table's only manifests hold data files
    hashes = [key for key in catalog.store.list_keys("_lakefs/") if key.endswith(".paths")]
    catalog.store.delete(hashes)
    from_manifests = IcebergCatalog(lake).readers_objects(table).files

    assert hashes and decoded  # read, now that their path hashes are gone
    assert len(from_hashes) > len(hashes) and np.array_equal(from_hashes, from_manifests)


def test_a_file_is_held_by_its_name_as_its_manifest_writes_it_whatever_it_holds():
    """A manifest names a file decoded once (`s3://lake/repo/data/day=1%3A00`, a key with a `%`); a
    request for it comes as its URL encodes it. Held: that object, under any S3 scheme; not held:
    the object the name decoded twice would be (`day=1:00`), nor a name that is no object's."""
    named = "s3://lake/repo/data/day=1%3A00/part-0.parquet"
    objects = catalog_module.ReadersObjects(folders(["s3://lake/repo/_lakefs/iceberg-files/t/"]),
                                            np.array([path_hash(named)], np.int64), ())
    assert objects.holds("s3://lake/repo/data/day=1%253A00/part-0.parquet")  # the request's address
    assert objects.holds("s3a://lake/repo/data/day=1%253A00/part-0.parquet")
    assert not objects.holds("s3://lake/repo/data/day=1%3A00/part-0.parquet")  # that is `day=1:00`
    assert not objects.holds("s3://lake/repo/data/day=1:00/part-0.parquet")
    assert not objects.holds("s3://lake/repo/data/x/../day=1%253A00/part-0.parquet")
    assert objects.holds("s3://lake/repo/_lakefs/iceberg-files/t/metadata/snap-1.avro")  # its own folder


def test_the_specifications_signer_signs_at_the_commit_its_properties_name_else_at_the_refs(catalog):
    """Iceberg 1.12's `/tables/{table}/sign`: the loaded commit travels in the request's `properties`
    (`remote-signing-config`); the same objects are signed, and refused, as at the per-commit address."""
    data = catalog.manifest["iceberg"]["metadata_location"].replace("s3://lake/", "http://minio.test:9000/lake/")
    path = f"/namespaces/{ns('repo', TAG)}/tables/events/sign"

    def sign(uri: str, properties: dict) -> httpx.Response:
        return catalog.request("POST", path, json={"method": "GET", "uri": uri, "region": "us-east-1",
                                                   "headers": {}, "properties": properties})

    for properties in ({"lakefs.commit-id": catalog.commit}, {}):
        assert sign(data, properties).json()["uri"].startswith(data + "?X-Amz-Algorithm=AWS4-HMAC-SHA256&")
        assert error(sign(data_file(catalog, "main", "plain"), properties)) == (403, "ForbiddenException")
    assert error(sign(data, {"lakefs.commit-id": "0" * 64})) == (404, "NoSuchTableException")
    assert error(sign(data, {"lakefs.commit-id": "main"})) == (400, "BadRequestException")
    assert error(catalog.request("POST", path, headers={}, json={"method": "GET", "uri": data})) == \
        (401, "NotAuthorizedException")

def test_callers_are_the_apis_and_refusals_have_the_spec_error_model(catalog):
    assert error(catalog.request("GET", "/namespaces", headers={})) == (401, "NotAuthorizedException")
    assert error(catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/tables/events", headers={})) == \
        (401, "NotAuthorizedException")
    other = {"Authorization": "Bearer other"}
    assert catalog.request("GET", "/namespaces", headers=other).json() == {"namespaces": []}
    for method, path in [("GET", f"/namespaces/{ns('repo', TAG)}"), ("GET", f"/namespaces/{ns('repo', TAG)}/tables"),
                         ("GET", f"/namespaces/{ns('repo', TAG)}/tables/events"),
                         ("GET", f"/namespaces/{ns('repo', 'v9')}/tables/events")]:  # before whether it exists
        assert error(catalog.request(method, path, headers=other)) == (403, "ForbiddenException"), path
    signer = f"/namespaces/{ns('repo', TAG)}/tables/events/commits/{catalog.commit}/sign"
    assert error(catalog.request("POST", signer, headers=other, json={"method": "GET", "uri": "http://minio.test:9000/lake/repo/data/x"})) == \
        (403, "ForbiddenException")


def test_a_table_outside_the_callers_lakefs_prefix_is_left_out_and_refused(catalog):
    def lakefs(request: httpx.Request) -> httpx.Response:  # RBAC: this identity reads only tables/plain/
        if request.url.path.endswith(("/user", "/repositories/repo")):
            return httpx.Response(200)
        if request.url.path.endswith("/objects/stat"):
            return httpx.Response(404 if request.url.params["path"].startswith("tables/plain/") else 401)
        return httpx.Response(500)

    catalog.app.state.services.access.client = httpx.AsyncClient(transport=httpx.MockTransport(lakefs))
    alice = {"Authorization": "Basic " + base64.b64encode(b"AKIA1:secret").decode()}
    assert catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/tables", headers=alice).json() == {"identifiers": []}
    assert error(catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/tables/events", headers=alice)) == \
        (403, "ForbiddenException")


@pytest.mark.parametrize("method, path", [
    ("POST", "/namespaces"), ("DELETE", f"/namespaces/{ns('repo', TAG)}"),
    ("POST", f"/namespaces/{ns('repo', TAG)}/properties"), ("POST", f"/namespaces/{ns('repo', TAG)}/tables"),
    ("POST", f"/namespaces/{ns('repo', TAG)}/register"), ("POST", f"/namespaces/{ns('repo', TAG)}/tables/events"),
    ("DELETE", f"/namespaces/{ns('repo', TAG)}/tables/events"), ("POST", "/tables/rename"),
    ("POST", "/transactions/commit"),
])
def test_every_write_is_refused_as_unsupported(catalog, method, path):
    assert error(catalog.request(method, path, json={"name": "x"})) == (406, "UnsupportedOperationException")


def test_other_requests_get_the_error_model_never_a_500(catalog):
    assert catalog.request("POST", f"/namespaces/{ns('repo', TAG)}/tables/events/metrics", json={}).status_code == 204
    assert error(catalog.request("PUT", f"/namespaces/{ns('repo', TAG)}")) == (405, "MethodNotAllowedException")
    assert error(catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/views")) == (404, "NotFoundException")
    assert error(catalog.request("GET", "/namespaces", params={"parent": "a\x1fb\x1fc"})) == \
        (404, "NoSuchNamespaceException")


def test_a_branch_with_a_branch_table_serves_it_and_its_readers_are_signed_for_it(catalog, lakefs):
    """Branches through their branch table (one stable Iceberg table whose snapshots follow the
    branch), tags through their export."""
    from exporter.branch_tables.table import append_commit
    from exporter.branch_tables.state import read_state
    from exporter.storage.layout import branch_table_location

    appending = catalog.config.model_copy(update={"branch_tables": ("main",)})
    assert append_commit(lake_of(appending, lakefs), "repo", "main", catalog.commit,
                         "events").iceberg["state"] == "written"
    location = branch_table_location(catalog.config, "main", "events")
    state = read_state(catalog.store, location)

    loaded = catalog.request("GET", f"/namespaces/{ns('repo', 'main')}/tables/events").json()
    tagged = catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/tables/events").json()

    assert loaded["metadata-location"] == state["iceberg"]["metadata_location"]
    assert loaded["metadata-location"].startswith(f"s3://lake/repo/{location}")
    assert tagged["metadata-location"] == catalog.manifest["iceberg"]["metadata_location"]  # the tag: its export
    assert catalog.request("GET", f"/namespaces/{ns('repo', 'main')}/tables").json()["identifiers"] == \
        [{"namespace": ["repo", "main"], "name": "events"}]
    own = loaded["metadata-location"].replace("s3://lake/", "http://minio.test:9000/lake/")
    assert catalog.sign("GET", own, ref="main").status_code == 200
    export_file = tagged["metadata-location"].replace("s3://lake/", "http://minio.test:9000/lake/")
    assert error(catalog.sign("GET", export_file, ref="main")) == (403, "ForbiddenException")  # not the branch's table


def test_loading_a_table_lists_no_folder_of_every_commit_the_ref_exported(catalog, monkeypatch):
    """A ref's namespace is known to exist from one key listed, not a listing of every exported commit."""
    listed = []
    real = catalog.store.list_folders
    monkeypatch.setattr(catalog.store, "list_folders", lambda relative: listed.append(relative) or real(relative))
    for _ in range(2):
        assert catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/tables/events").status_code == 200
    assert listed == []


def test_load_table_answers_304_for_the_etag_it_gave_once_the_caller_may_read_it(catalog):
    loaded = catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/tables/events")
    etag = loaded.headers["etag"]
    again = catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/tables/events", headers={**SVC, "If-None-Match": etag})
    assert again.status_code == 304 and again.headers["etag"] == etag and not again.content
    other = {"Authorization": "Bearer other", "If-None-Match": etag}  # the grant first: no 304 for a stranger
    assert error(catalog.request("GET", f"/namespaces/{ns('repo', TAG)}/tables/events", headers=other)) == \
        (403, "ForbiddenException")


def test_a_branch_serves_every_table_its_head_holds_from_their_newest_complete_exports(lakefs, redis_url, tmp_path):
    """A commit that changed only `a` exports only `a`: `b` is still the table the previous commit
    exported, and `a` is its previous export until its new one is complete (before: `b` was not
    listed and 404 on load; `a` 404 while its export was written)."""
    config = Config(iceberg={"enabled": True}, redis_url=redis_url, object_store=STORE, api={"tokens": TOKENS})
    a, b = (SourceTable(lakefs, "repo", name, tmp_path / name).append(n) for n, name in ((1, "a"), (2, "b")))
    a.commit()
    first = b.commit()
    for table in (a, b):
        assert export_table(lake_of(config, lakefs), ExportAt("repo", "main", first), table.descriptor).ok
        assert export_iceberg(lake_of(config, lakefs), "repo", "main", first, table.descriptor.name)
    app = create_app(config, lake_of(config, lakefs))

    def get(path: str) -> httpx.Response:
        return call(app, "GET", "/iceberg/v1" + path, headers=SVC)

    second = a.append(3).commit()  # only `a` changed; its export not written yet
    listed = get(f"/namespaces/{ns('repo', 'main')}/tables").json()["identifiers"]
    assert sorted(t["name"] for t in listed) == ["a", "b"]
    for name in ("a", "b"):
        loaded = get(f"/namespaces/{ns('repo', 'main')}/tables/{name}")
        assert loaded.status_code == 200 and f"/{first}/{name}/" in loaded.json()["metadata-location"], loaded.text

    assert export_table(lake_of(config, lakefs), ExportAt("repo", "main", second), a.descriptor).ok
    assert export_iceberg(lake_of(config, lakefs), "repo", "main", second, "a")
    assert f"/{second}/a/" in get(f"/namespaces/{ns('repo', 'main')}/tables/a").json()["metadata-location"]
    assert f"/{first}/b/" in get(f"/namespaces/{ns('repo', 'main')}/tables/b").json()["metadata-location"]

    lakefs.commit_files("repo", "main", {"_lakefs_tables/b.yaml": None})  # `b` dropped: no table any more
    assert get(f"/namespaces/{ns('repo', 'main')}/tables/b").status_code == 404
    assert [t["name"] for t in get(f"/namespaces/{ns('repo', 'main')}/tables").json()["identifiers"]] == ["a"]
