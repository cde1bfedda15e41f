"""lakeFS decides who reads what through the API: real lakeFS users (made through lakeFS's auth API,
kept by lakeFS's ACL server), the real service asking the real lakeFS with the caller's credentials."""

from __future__ import annotations

import base64
import functools
import json
import os
import signal
import uuid
from contextlib import contextmanager

import httpx
import lakefs_sdk
import pytest

from tests.conftest import SERVICE_PORT

pytestmark = pytest.mark.integration
BOUND_PORT = SERVICE_PORT + 21  # a service whose one API token reads one repository


def basic(key: str, secret: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{key}:{secret}".encode()).decode()}


@functools.cache
def lakefs_admin() -> lakefs_sdk.ApiClient:
    """lakeFS's generated client on the stack's admin key (the environment `stack_env` set, this test
    process's stack): for users, groups and metaranges, which the service's own client never asks for."""
    from exporter.config import load_config

    config = load_config().lakefs
    return lakefs_sdk.ApiClient(lakefs_sdk.Configuration(host=config.endpoint.rstrip("/") + "/api/v1",
                                                         username=config.access_key_id,
                                                         password=config.secret_access_key.get_secret_value()))


def new_user(reads: bool) -> tuple[str, str]:
    """A lakeFS user with an access key; `reads`: in a group whose ACL reads repositories."""
    auth = lakefs_sdk.AuthApi(lakefs_admin())
    name = f"user-{uuid.uuid4().hex[:8]}"
    auth.create_user(lakefs_sdk.UserCreation(id=name))
    if reads:
        group = f"readers-{uuid.uuid4().hex[:8]}"
        auth.create_group(lakefs_sdk.GroupCreation(id=group))
        auth.set_group_acl(group, lakefs_sdk.ACL(permission="Read"))
        auth.add_group_membership(group, name)
    credentials = auth.create_credentials(name)
    return credentials.access_key_id, credentials.secret_access_key


def a_table(lakefs, repository: str) -> str:
    """A one-version Delta table committed on main; the commit id."""
    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
    metadata = {"metaData": {"id": "t", "format": {"provider": "parquet"}, "partitionColumns": [],
                             "schemaString": '{"type":"struct","fields":[]}', "configuration": {}}}
    log = "\n".join(json.dumps(a) for a in ({"commitInfo": {"operation": "CREATE TABLE"}}, protocol, metadata))
    lakefs.upload_object(repository, "main", "tables/t/_delta_log/" + f"{0:020d}.json", (log + "\n").encode())
    return lakefs.commit_branch(repository, "main", "a table")


@contextmanager
def workers_held(processes):
    """Every worker of the session stopped (SIGSTOP, its pool too) for the duration: a task queued
    meanwhile waits in Redis."""
    live = [worker.pid for worker in processes.workers.values() if worker.poll() is None]
    for pgid in live:
        os.killpg(pgid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pgid in live:
            os.killpg(pgid, signal.SIGCONT)


def diff_path(repository: str) -> str:
    return f"/repositories/{repository}/otf/refs/main/diff/main?table_path=tables/t"


def test_lakefs_identities_read_what_lakefs_lets_them_read(service, lakefs, repository):
    a_table(lakefs, repository)
    reader, stranger = new_user(reads=True), new_user(reads=False)

    allowed = httpx.get(service + diff_path(repository), headers=basic(*reader), timeout=30)
    refused = httpx.get(service + diff_path(repository), headers=basic(*stranger), timeout=30)
    anonymous = httpx.get(service + diff_path(repository), timeout=30)
    wrong_secret = httpx.get(service + diff_path(repository), headers=basic(reader[0], "not-the-secret"), timeout=30)
    datasets = httpx.get(f"{service}/repositories/{repository}/refs/main/datasets", headers=basic(*stranger),
                         timeout=30)

    assert allowed.status_code == 200, allowed.text
    assert allowed.json()["diff_type"] == "none" and allowed.headers["cache-control"] == "no-store"
    assert refused.status_code == 403 and repository in refused.json()["error"]
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Basic")
    assert wrong_secret.status_code == 401
    assert datasets.status_code == 403
    # the stranger reads nothing, whatever the repository, existing or not: no existence oracle
    assert httpx.get(service + diff_path("no-such-repo-x"), headers=basic(*stranger), timeout=30).status_code == 403


def test_a_service_token_reads_only_the_repositories_it_names(processes, lakefs, repository, stack_env):
    other = f"{repository[:40]}-y"
    lakefs.create_repository(other, f"s3://{stack_env['LAKEFS_DELTA_STACK_BUCKET']}/{other}")
    a_table(lakefs, repository)
    a_table(lakefs, other)
    token = uuid.uuid4().hex
    bound = processes.serve("service-bound-token", BOUND_PORT, extra_env={"LAKEFS_DELTA_API_TOKENS": f"{token}={repository}"})
    bearer = {"Authorization": f"Bearer {token}"}

    assert httpx.get(bound + diff_path(repository), headers=bearer, timeout=30).status_code == 200
    assert httpx.get(bound + diff_path(other), headers=bearer, timeout=30).status_code == 403
    # not a service token: taken for a lakeFS token, which lakeFS refuses
    assert httpx.get(bound + diff_path(repository), headers={"Authorization": "Bearer x"}, timeout=30).status_code == 401


def test_a_name_lakefs_rejects_is_a_client_error_not_an_outage(service, lakefs, repository):
    """`main~x` is no valid ref, `0` no valid repository: lakeFS answers 400, and so does the API
    (`/exports` takes a commit id only, and refuses anything else itself: 400 too)."""
    reader = new_user(reads=True)
    answers = [httpx.get(service + path, headers=basic(*reader), timeout=30) for path in (
        f"/repositories/{repository}/refs/main~x/datasets",
        f"/repositories/{repository}/otf/refs/main~x/diff/main?table_path=tables/t",
        f"/repositories/{repository}/refs/main~x/datasets/resolve?path=x",
        f"/exports/{repository}/main~x")]
    assert [a.status_code for a in answers] == [400, 400, 400, 400], [a.text for a in answers]
    # an invalid repository name: no such repository, for a lakeFS identity and a service token alike
    for headers in (basic(*reader), {"Authorization": f"Bearer {os.environ['LAKEFS_DELTA_WEBHOOK_TOKENS'].split(',')[0]}"}):
        answer = httpx.get(f"{service}/repositories/0/refs/0/datasets", headers=headers, timeout=30)
        assert answer.status_code in (400, 404), answer.text


@pytest.mark.parametrize("key_id", [".", ".."])
def test_a_key_id_lakefs_answers_500_to_is_refused_as_unknown_not_as_an_outage(service, stack_env, key_id):
    """lakeFS itself answers 500 to these (asked here first: the premise); the API answers 401, at its
    sign-in and as basic credentials, never 503 ("lakeFS cannot be reached")."""
    lakefs_api = stack_env["LAKEFS_DELTA_LAKEFS_ENDPOINT"].rstrip("/") + "/api/v1"
    premise = httpx.post(lakefs_api + "/auth/login", json={"access_key_id": key_id, "secret_access_key": "x"},
                         timeout=30)
    assert premise.status_code == 500, premise.text
    sign_in = httpx.post(f"{service}/session", json={"access_key_id": key_id, "secret_access_key": "x"}, timeout=30)
    as_basic = httpx.get(service + diff_path("any-repository"), headers=basic(key_id, "x"), timeout=30)
    assert (sign_in.status_code, as_basic.status_code) == (401, 401), (sign_in.text, as_basic.text)
    assert "no such access key id" in sign_in.text and "no such access key id" in as_basic.text


def test_what_is_not_cached_is_computed_by_a_worker_and_the_api_says_ask_again(processes, service, lakefs,
                                                                               repository, config):
    """With no wait at all, the first ask is 202 (queued on the workers); the diff then comes from
    the cache. A table whose log cannot be read comes back as the worker's 422, not as 202 forever.
    Datasets likewise."""
    import time

    a_table(lakefs, repository)
    lakefs.upload_object(repository, "main", "tables/broken/_delta_log/" + f"{0:020d}.json", b"{not json\n")
    lakefs.commit_branch(repository, "main", "a broken table")
    impatient = processes.serve("service-no-wait", BOUND_PORT + 1, extra_env={"LAKEFS_DELTA_API_DIFF_WAIT_SECONDS": "0"})
    admin = basic(config.lakefs.access_key_id, config.lakefs.secret_access_key.get_secret_value())

    with workers_held(processes):  # the diff cannot be computed before the first answer: 202, not a race
        first = httpx.get(impatient + diff_path(repository), headers=admin, timeout=30)
    assert first.status_code == 202 and first.headers["retry-after"] == "2" and first.json()["status"] == "computing"
    answers = [first]
    while answers[-1].status_code == 202 and len(answers) < 180:  # a second apart: a busy worker, not a stuck one
        time.sleep(1)
        answers.append(httpx.get(impatient + diff_path(repository), headers=admin, timeout=30))
    assert answers[-1].status_code == 200 and answers[-1].json()["cached"] is True

    broken = f"/repositories/{repository}/otf/refs/main/diff/main?table_path=tables/broken"
    answers = [httpx.get(impatient + broken, headers=admin, timeout=30)]
    while answers[-1].status_code == 202 and len(answers) < 180:  # a second apart: a busy worker, not a stuck one
        time.sleep(1)
        answers.append(httpx.get(impatient + broken, headers=admin, timeout=30))
    assert answers[-1].status_code == 422 and "00000000000000000000.json" in answers[-1].json()["error"]

    # datasets too: listed by a worker once per commit
    datasets = f"/repositories/{repository}/refs/main/datasets"
    with workers_held(processes):
        answers = [httpx.get(impatient + datasets, headers=admin, timeout=30)]
    while answers[-1].status_code == 202 and len(answers) < 180:  # a second apart: a busy worker, not a stuck one
        time.sleep(1)
        answers.append(httpx.get(impatient + datasets, headers=admin, timeout=30))
    assert answers[0].status_code == 202 and answers[-1].status_code == 200
    assert {d["path"] for d in answers[-1].json()["results"]} == {"tables/t", "tables/broken"}
