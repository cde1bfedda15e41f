"""The service's edge (`hooks.edge`) as a client sees it: a body over its route's limit is refused
with 413 before any handler reads it (declared or streamed, and read no further than the limit),
JSON nested too deep with 400 where it used to be a 500, a commit id that is not 64 hex digits with
400; each in the error format of the app the path belongs to (the API's, Delta Sharing's, Iceberg's)."""

from __future__ import annotations


import httpx
import pytest
from pydantic import SecretStr

from exporter.config import Config
from hooks.app import create_app
from tests.fakes import lake_of
from tests.unit.hooks.asgi import call
from hooks.edge import BODY_LIMIT, JSON_DEPTH, MiB

pytestmark = pytest.mark.unit

COMMIT = "c" * 64
SIGN = f"/iceberg/v1/namespaces/repo%1Fmain/tables/events/commits/{COMMIT}/sign"
QUERY = "/delta-sharing/shares/s/schemas/main/tables/events/query"
WEBHOOK = "/webhooks/lakefs"
ROUTES = [  # (path, its body limit, how its errors read: (status, code) from the answer)
    ("/session", BODY_LIMIT, "api"),
    ("/session/code", BODY_LIMIT, "api"),
    (SIGN, BODY_LIMIT, "iceberg"),
    (WEBHOOK, MiB, "api"),
    (QUERY, MiB, "sharing"),
]
CHUNK = 16 * 1024


class Service:
    """The service's app over the fake lakeFS and an in-memory Redis; a webhook token and a service token."""

    def __init__(self, redis_url: str, lakefs):
        config = Config(redis_url=redis_url, webhook_tokens=(SecretStr("hook"),),
                        api={"tokens": [{"token": "svc", "repositories": ["repo"]}]})
        self.app = create_app(config, lake_of(config, lakefs))

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        return call(self.app, method, path, **kwargs)


@pytest.fixture
def service(lakefs, redis_url) -> Service:
    return Service(redis_url, lakefs)


def refusal(answer: httpx.Response, style: str) -> tuple[int, str]:
    """(status, message) of an error answer, checked to be in the format `style`."""
    body = answer.json()
    if style == "iceberg":
        assert body["error"]["code"] == answer.status_code and body["error"]["type"]
        return answer.status_code, body["error"]["message"]
    if style == "sharing":
        assert body["errorCode"]
        return answer.status_code, body["message"]
    return answer.status_code, body["error"]


class Counted:
    """A streamed (chunked) body of `size` bytes; `sent` is how many bytes the service took."""

    def __init__(self, size: int):
        self.size, self.sent = size, 0

    async def __aiter__(self):
        while self.sent < self.size:
            self.sent += CHUNK
            yield b" " * CHUNK


@pytest.mark.parametrize("path, limit, style", ROUTES)
def test_a_body_over_its_routes_limit_is_refused_from_its_content_length_before_it_is_read(service, path, limit, style):
    body = Counted(300 * MiB)
    answer = service.request("POST", path, content=body, headers={
        "Content-Length": str(body.size), "Content-Type": "application/json", "X-Webhook-Token": "hook"})
    status, message = refusal(answer, style)
    assert (status, message) == (413, f"request body larger than {limit} bytes")
    assert body.sent == 0  # not one byte read
    assert answer.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("path, limit, style", ROUTES)
def test_a_streamed_body_is_read_no_further_than_its_routes_limit(service, path, limit, style):
    body = Counted(300 * MiB)
    answer = service.request("POST", path, content=body, headers={"Content-Type": "application/json",
                                                                  "X-Webhook-Token": "hook"})
    assert refusal(answer, style) == (413, f"request body larger than {limit} bytes")
    assert limit < body.sent <= limit + CHUNK


@pytest.mark.parametrize("path, limit, style", ROUTES)
def test_a_body_at_its_routes_limit_reaches_the_route(service, path, limit, style):
    padded = b'{"code": "x", "padding": "' + b"x" * (limit - 40) + b'"}'
    answer = service.request("POST", path, content=padded.ljust(limit), headers={"Content-Type": "application/json",
                                                                                 "X-Webhook-Token": "hook"})
    assert answer.status_code not in (413, 500), answer.text  # the route's own answer (no token, no such code, ...)
    assert refusal(answer, style)[0] in (400, 401, 403, 404, 422)


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


@pytest.mark.parametrize("path, style", [(path, style) for path, _, style in ROUTES])
def test_json_nested_deeper_than_the_limit_is_a_400_not_a_500(service, path, style):
    """The webhook and the sharing query parsed it themselves: Python's parser ran out of recursion (500)."""
    headers = {"Content-Type": "application/json", "X-Webhook-Token": "hook"}
    answer = service.request("POST", path, content=nested(20_000), headers=headers)  # 40 KB: under every limit
    assert refusal(answer, style) == (400, f"request body nests arrays and objects deeper than {JSON_DEPTH} levels")
    answer = service.request("POST", path, content=b'{"a": ' + nested(JSON_DEPTH - 1) + b"}", headers=headers)
    assert answer.status_code != 400 or "nests" not in answer.text  # at the limit: the route's to answer


def test_brackets_inside_strings_are_not_nesting(service):
    code = '\\"' + "[{" * 5_000  # an escaped quote first: the string goes on
    answer = service.request("POST", "/session/code", content=f'{{"code": "{code}"}}'.encode(),
                             headers={"Content-Type": "application/json"})
    assert refusal(answer, "api")[0] == 401  # the route's answer: no such sign-in code


@pytest.mark.parametrize("commit", ["main~x", "main", "C" * 64, "c" * 63, "c" * 65, "g" * 64])
def test_a_commit_id_that_is_not_64_lowercase_hex_digits_is_a_400_naming_it(service, commit):
    answer = service.request("GET", f"/exports/repo/{commit}", headers={"Authorization": "Bearer svc"})
    assert refusal(answer, "api") == (400, f"commit: {commit!r} is not a lakeFS commit id (64 lowercase hex digits)")
    sign = SIGN.replace(COMMIT, commit)
    answer = service.request("POST", sign, json={"method": "GET", "uri": "http://minio.test/x"},
                             headers={"Authorization": "Bearer svc"})
    assert refusal(answer, "iceberg") == (400, f"commit_id: {commit!r} is not a lakeFS commit id "
                                               "(64 lowercase hex digits)")
    assert answer.json()["error"]["type"] == "BadRequestException"


def test_a_commit_id_of_64_hex_digits_reaches_the_route(service):
    answer = service.request("GET", f"/exports/repo/{COMMIT}", headers={"Authorization": "Bearer svc"})
    assert answer.status_code == 404, answer.text  # no export known: the route's answer
