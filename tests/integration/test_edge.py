"""The service's edge on the real stack: an unauthenticated 300 MB body to the sign-in routes or the
Iceberg signer is refused with 413 while the service's memory stays where it was (it used to grow
by about three times the body); JSON nested too deep is a 400, not a 500; a commit id that is not
64 hex digits is a 400."""

from __future__ import annotations

import os

import httpx
import pytest

from devtools.procs import memory_mib
from tests.conftest import SERVICE_PORT

pytestmark = pytest.mark.integration

EDGE_PORT = SERVICE_PORT + 54  # a service of this module's own (its process is the one measured), on a port no other test serves on
MiB = 1024 * 1024
BODY_MIB = 300
GROWTH_MIB = 50  # what the service's peak memory may grow by over every 300 MB request
SIGN = "/iceberg/v1/namespaces/repo%1Fmain/tables/events/commits/{commit}/sign"


@pytest.fixture(scope="module")
def edge(processes) -> tuple[str, int]:
    """The service's URL and its process id."""
    url = processes.serve("service-edge", EDGE_PORT)
    return url, processes.started[-1].pid


def body(mib: int):
    """`mib` MiB of JSON-ish bytes, streamed: one 1 MiB chunk, sent again and again."""
    chunk = b" " * MiB
    for _ in range(mib):
        yield chunk


def api_token() -> str:
    return os.environ["LAKEFS_DELTA_WEBHOOK_TOKENS"].split(",")[0]  # the stack's service token (every repository)


def test_a_300_mb_body_to_the_sign_in_routes_or_the_signer_is_refused_without_the_service_growing(edge):
    url, pid = edge
    targets = ["/session", "/session/code", SIGN.format(commit="c" * 64)]
    for path in targets:  # each route answered once: what a first request loads is not counted
        httpx.post(url + path, json={}, timeout=30)
    before = memory_mib(pid)["VmHWM"]

    answers = [(path, declared, httpx.post(url + path, content=body(BODY_MIB), timeout=300, headers={
        "Content-Type": "application/json",
        **({"Content-Length": str(BODY_MIB * MiB)} if declared else {})}))  # else streamed, chunked
        for path in targets for declared in (True, False)]

    for path, declared, answer in answers:
        assert answer.status_code == 413, (path, declared, answer.text)
    assert answers[0][2].json() == {"error": "request body larger than 65536 bytes"}
    assert answers[-1][2].json()["error"]["type"]  # the Iceberg spec's error model
    grown = memory_mib(pid)["VmHWM"] - before
    assert grown < GROWTH_MIB, f"the service's peak memory grew by {grown:.0f} MiB over {len(answers)} bodies"


def test_json_nested_too_deep_is_a_400_where_the_webhook_answered_500(edge):
    url, _ = edge
    nested = b"[" * 20_000 + b"]" * 20_000  # Python's parser recurses on each level
    answer = httpx.post(url + "/webhooks/lakefs", content=nested, timeout=30,
                        headers={"Content-Type": "application/json", "X-Webhook-Token": api_token()})
    assert answer.status_code == 400, answer.text
    assert answer.json() == {"error": "request body nests arrays and objects deeper than 64 levels"}
    assert httpx.post(url + "/session", content=nested, timeout=30,
                      headers={"Content-Type": "application/json"}).status_code == 400


def test_a_commit_id_that_is_not_64_hex_digits_is_a_400(edge):
    url, _ = edge
    bearer = {"Authorization": f"Bearer {api_token()}"}
    answer = httpx.get(url + "/exports/any-repository/main~x", headers=bearer, timeout=30)
    assert answer.status_code == 400, answer.text
    assert "is not a lakeFS commit id" in answer.json()["error"]
    answer = httpx.post(url + SIGN.format(commit="main"), json={"method": "GET", "uri": "http://x/y"},
                        headers=bearer, timeout=30)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["type"] == "BadRequestException"
