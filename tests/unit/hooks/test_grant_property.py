"""Property: over random grants (which table paths, and which folders inside a table, lakeFS lets a
caller read, whether it may read the repository at all, whether the operator names it a
whole-repository reader, or a service token) and random requests to the doors (export status,
datasets, the Iceberg catalog's namespaces, tables, loadTable, signer and vended credentials, paged
with random sizes), no answer names a table, path or row outside the grant, no signature is given for
an object outside it, and a credential is vended only to a whole-repository reader.

The app is the service's own over the fake lakeFS and store; lakeFS's authorization answers come
from a fake transport applying the grant (the integration tests ask the real lakeFS)."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

import boto3
import botocore.config
import httpx
import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, given, settings

from exporter.config import Config
from exporter.diff.datasets import list_datasets
from exporter.export.commit import export_iceberg, export_table
from exporter.export.job import ExportAt
from exporter.lakefs.descriptors import TableDescriptor
from exporter.storage import vended
from exporter.storage.layout import export_location
from hooks.app import create_app
from hooks.auth import RepositoryAccess
from tests.unit.hooks.asgi import call
from tests.unit.source_tables import SourceTable
from exporter.lakefs.lake import Lake
from tests.fakes import lake_of

pytestmark = pytest.mark.unit

# the store's endpoint: a loopback port nothing listens on, so its STS is refused at once, no name looked up
ENDPOINT = "http://127.0.0.1:9"
STORE = {"endpoint": ENDPOINT, "region": "us-east-1", "access_key_id": "AK", "secret_access_key": "SK"}
# names no answer would hold by chance: each names one table, at its own path
TABLES = {"alphatable": "zone0/alphatable", "bravotable": "zone1/bravotable", "charlietable": "zone1/deep/charlietable",
          "deltatable": "zone2/deltatable", "echotable": "zone3/echotable"}
PARTITIONED = "echotable"  # partitioned by `part`: its files live in part=1/ and part=2/
FOLDERS = {name: [f"{path}/part=1/", f"{path}/part=2/"] if name == PARTITIONED else [] for name, path in TABLES.items()}
# above tables, a folder inside one, and one no file lives in (it refuses nothing)
PREFIXES = ["zone0/", "zone1/", "zone1/deep/", "zone2/", "zone3/echotable/part=1/", "zone3/echotable/part=9/"]
READERS_GROUP = "analysts"  # iceberg.vended_credentials_readers names it
CALLER = {"Authorization": "Basic " + base64.b64encode(b"AKIA1:secret").decode()}
SERVICE = {"Authorization": "Bearer svc"}


class Lake:
    """Four tables of `repo`, exported at main with their Iceberg tables."""

    def __init__(self, lakefs, redis_url, tmp_path):
        self.config = Config(iceberg={"enabled": True, "vended_credentials": True,
                                      "vended_credentials_readers": [f"group:{READERS_GROUP}"]},
                             redis_url=redis_url, object_store=STORE,
                             api={"tokens": [{"token": "svc", "repositories": ["repo"]}]})
        sources = []
        for name, path in TABLES.items():
            source = SourceTable(lakefs, "repo", name, tmp_path / name)
            source.descriptor = TableDescriptor(name, path, f"_lakefs_tables/{name}.yaml")
            sources.append(source.append(len(sources) + 1) if name != PARTITIONED else source.partitioned(1, 2))
        for source in sources:
            self.commit = source.commit()
        self.store = lakefs.store.at("s3://lake/repo")
        self.data_files: dict[str, str] = {}
        for source in sources:
            assert export_table(lake_of(self.config, lakefs), ExportAt("repo", "main", self.commit),
                                source.descriptor).ok
            assert export_iceberg(lake_of(self.config, lakefs), "repo", "main", self.commit, source.descriptor.name)
            self.data_files[source.descriptor.name] = self._data_file(source.descriptor.name)
        self.app = create_app(self.config, lake_of(self.config, lakefs))
        services = self.app.state.services
        services.datasets.put(list_datasets(lakefs, "repo", self.commit), "repo", self.commit)  # as a worker would

    def _data_file(self, name: str) -> str:
        log = export_location(self.config, "main", self.commit, name) + "_delta_log/"
        for key in sorted(self.store.list_keys(log)):
            for line in self.store.get(key).splitlines() if key.endswith(".json") else []:
                if b'"add"' in line:
                    return json.loads(line)["add"]["path"].replace("s3://lake/", ENDPOINT + "/lake/")
        raise AssertionError(name)

    def metadata_url(self, name: str) -> str:
        manifest = json.loads(self.store.get(export_location(self.config, "main", self.commit, name) + "_lakefs_export.json"))
        return manifest["iceberg"]["metadata_location"].replace("s3://lake/", ENDPOINT + "/lake/")

    def grant(self, denied: frozenset[str], repository_readable: bool, named: bool) -> None:
        """lakeFS's answers for CALLER: the repository (or not), no path under `denied`, and its
        groups (READERS_GROUP among them when `named`)."""
        def lakefs(request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/user"):
                return httpx.Response(200, json={"user": {"id": "caller"}})
            if request.url.path.endswith("/auth/users/caller/groups"):
                groups = [{"id": "others"}] + ([{"id": READERS_GROUP}] if named else [])
                return httpx.Response(200, json={"results": groups, "pagination": {"has_more": False}})
            if request.url.path.endswith("/repositories/repo"):
                return httpx.Response(200 if repository_readable else 401)
            if request.url.path.endswith("/objects/stat"):
                path = request.url.params["path"]
                return httpx.Response(401 if any(path.startswith(prefix) for prefix in denied) else 404)
            return httpx.Response(500)

        self.app.state.services.access.__init__(self.config, httpx.AsyncClient(transport=httpx.MockTransport(lakefs)))

    def request(self, method: str, path: str, headers: dict, **kwargs) -> httpx.Response:
        return call(self.app, method, path, headers=headers, **kwargs)


@pytest.fixture(autouse=True)
def sts_tried_once(monkeypatch):
    """The store's STS asked once per vend: a refused connection retried with backoff took 1-3 s a
    request, 40 s of some runs (the retries are the service's to keep, not this property's to wait on)."""
    client = boto3.client("sts", endpoint_url=ENDPOINT, region_name="us-east-1", aws_access_key_id="AK",
                          aws_secret_access_key="SK", config=botocore.config.Config(retries={"max_attempts": 1}))
    monkeypatch.setattr(vended, "_sts_client", lambda *store: client)


@pytest.fixture
def lake(lakefs, redis_url, tmp_path) -> Lake:
    return Lake(lakefs, redis_url, tmp_path)


NAMESPACE = "/iceberg/v1/namespaces/repo%1Fmain"
doors = st.one_of(
    st.tuples(st.just("tables"), st.integers(1, 5)),
    st.tuples(st.just("namespaces"), st.integers(1, 3)),
    st.tuples(st.just("load"), st.sampled_from(sorted(TABLES))),
    st.tuples(st.just("sign"), st.tuples(st.sampled_from(sorted(TABLES)), st.sampled_from(sorted(TABLES)),
                                         st.booleans())),
    st.tuples(st.just("status"), st.just(0)),
    st.tuples(st.just("datasets"), st.just(0)),
    st.tuples(st.just("resolve"), st.sampled_from(sorted(TABLES))),
    st.tuples(st.just("credentials"), st.sampled_from(sorted(TABLES))),
)
NOT_A_READER = "whole-repository readers"  # the refusal of a credential to whom is not one
NO_STS = "offers no STS"  # the store's answer once a credential may be vended: the unit tests' store has none


def pages(lake: Lake, path: str, size: int, headers: dict, field: str) -> list[httpx.Response]:
    answers, token = [], None
    while len(answers) < 20:
        answers.append(lake.request("GET", path, headers, params={"pageSize": size, **({"pageToken": token} if token else {})}))
        token = answers[-1].json().get("next-page-token") if answers[-1].status_code == 200 else None
        if not token:
            return answers
    raise AssertionError(f"{path} paged forever")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None)
@given(denied=st.frozensets(st.sampled_from(PREFIXES)), repository_readable=st.booleans(), service=st.booleans(),
       named=st.booleans(), requests=st.lists(doors, min_size=1, max_size=6))
def test_no_door_answers_outside_the_grant(lake, denied, repository_readable, service, named, requests):
    lake.grant(denied, repository_readable, named)
    headers = SERVICE if service else CALLER
    if service:  # a service token reads its whole repository
        denied, repository_readable, named = frozenset(), True, True
    allowed = {name for name, path in TABLES.items()  # a prefix above the table, or a folder its files live in
               if repository_readable and not any((path + "/").startswith(prefix)
                                                  or any(folder.startswith(prefix) for folder in FOLDERS[name])
                                                  for prefix in denied)}
    hidden = set(TABLES) - allowed

    for door, argument in requests:
        if door == "tables":
            answers = pages(lake, NAMESPACE + "/tables", argument, headers, "identifiers")
        elif door == "namespaces":
            answers = pages(lake, "/iceberg/v1/namespaces", argument, headers, "namespaces")
            assert not repository_readable or any(["repo"] in a.json()["namespaces"] for a in answers)
        elif door == "load":
            answers = [lake.request("GET", f"{NAMESPACE}/tables/{argument}", headers)]
            assert (answers[0].status_code == 200) == (argument in allowed), answers[0].text
        elif door == "sign":
            table, file_of, metadata = argument
            url = lake.metadata_url(file_of) if metadata else lake.data_files[file_of]
            answers = [lake.request("POST", f"{NAMESPACE}/tables/{table}/commits/{lake.commit}/sign", headers,
                                    json={"method": "GET", "uri": url, "region": "us-east-1", "headers": {}})]
            assert (answers[0].status_code == 200) == (table in allowed and file_of == table), (argument, answers[0].text)
        elif door == "status":
            answers = [lake.request("GET", f"/exports/repo/{lake.commit}", headers)]
            if answers[0].status_code == 200:
                assert set(answers[0].json()["refs"]["main"]["tables"]) == allowed
        elif door == "datasets":
            answers = [lake.request("GET", "/repositories/repo/refs/main/datasets", headers)]
            if answers[0].status_code == 200:
                assert {d["name"] for d in answers[0].json()["results"]} == allowed
        elif door == "credentials":
            answers = [lake.request("GET", f"{NAMESPACE}/tables/{argument}/credentials", headers)]
            assert answers[0].status_code == 403 and "storage-credentials" not in answers[0].json(), answers[0].text
            if argument in allowed:  # refused as no whole-repository reader, or past that, by the store alone
                assert (NO_STS if named else NOT_A_READER) in answers[0].text, (named, answers[0].text)
            else:
                assert NO_STS not in answers[0].text, answers[0].text
        else:
            answers = [lake.request("GET", "/repositories/repo/refs/main/datasets/resolve", headers,
                                    params={"path": TABLES[argument] + "/part-0.parquet"})]
            assert (answers[0].status_code == 200) == (argument in allowed), answers[0].text
        for answer in answers:
            assert answer.status_code < 500, answer.text
            leaked = [name for name in hidden if name in answer.text or quote(name) in answer.text]
            if door in ("load", "resolve", "sign", "credentials") and argument and answer.status_code != 200:
                leaked = [name for name in leaked if name not in (argument if door != "sign" else argument[:2])]
            assert not leaked, (door, argument, answer.status_code, answer.text)
