"""lakeFS's answers to the service's own calls, as the errors a task retries or not."""

from __future__ import annotations

import json

import pytest
from lakefs_sdk.exceptions import ApiException

from exporter.config import LakeFSConfig
from exporter.errors import BadRequest, CredentialsRefused, NotFound, ServiceUnavailable
from exporter.lakefs.client import LakeFS

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("status,body,error,permanent", [
    (401, '{"message": "error authenticating request"}', CredentialsRefused, False),  # also while lakeFS recovers
    (404, '{"message": "not found"}', NotFound, True),
    (400, '{"message": "bad ref"}', BadRequest, True),
    (503, '{"message": "busy"}', ServiceUnavailable, False),
])
def test_lakefs_answers_become_errors_a_task_retries_or_not(status, body, error, permanent):
    def answered(**_):
        error = ApiException(status=status, reason="")
        error.body = body
        raise error

    with pytest.raises(error) as raised:
        LakeFS(LakeFSConfig())._call("get repository r", answered)
    assert raised.value.permanent is permanent
    assert str(raised.value).endswith(json.loads(body)["message"])


@pytest.fixture
def answering():
    """A local HTTP server standing in for lakeFS's API: it answers each GET with the (status, body)
    set on it and records the request's target and Authorization header."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            server.asked.append((self.path, self.headers.get("Authorization")))
            status, body = server.answer
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.asked, server.answer = [], (200, b"{}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


@pytest.mark.parametrize("status,body,error,permanent", [
    (401, b'{"message": "error authenticating request"}', CredentialsRefused, False),
    (404, b'{"message": "commit not found"}', NotFound, True),
    (500, b'{"message": "could not parse modifier ~x: ref: invalid value: validation error"}', BadRequest, True),
    (503, b"busy", ServiceUnavailable, False),
])
def test_the_reads_sent_without_the_sdk_map_lakefs_answers_as_the_sdk_calls_do(answering, status, body, error, permanent):
    lakefs = LakeFS(LakeFSConfig(endpoint=f"http://127.0.0.1:{answering.server_port}", access_key_id="AKID",
                                 secret_access_key="shh"))
    answering.answer = (status, body)
    with pytest.raises(error) as raised:
        lakefs.commit("repo", "main~x")
    assert raised.value.permanent is permanent
    assert str(raised.value).startswith(("lakeFS: get commit repo@main~x", "lakeFS answered"))
    assert str(raised.value).endswith(body.decode() if status == 503 else json.loads(body)["message"])
    assert answering.asked == [("/api/v1/repositories/repo/commits/main~x", "Basic QUtJRDpzaGg=")]


def test_a_listing_sent_without_the_sdk_quotes_its_parameters_and_follows_its_pages(answering):
    lakefs = LakeFS(LakeFSConfig(endpoint=f"http://127.0.0.1:{answering.server_port}/"))
    answering.answer = (200, b'{"results": [{"path": "t/a b"}], "pagination": {"has_more": false}}')
    assert [entry["path"] for entry in lakefs.list_objects("repo", "feature@x", "t/a b&c", delimiter="/")] == ["t/a b"]
    assert answering.asked[0][0] == ("/api/v1/repositories/repo/refs/feature%40x/objects/ls"
                                     "?prefix=t/a%20b%26c&after=&amount=1000&delimiter=/")


def test_lakefs_not_listening_is_an_outage_a_task_retries():
    import socket

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(ServiceUnavailable, match="lakeFS unreachable during get commit repo@main"):
        LakeFS(LakeFSConfig(endpoint=f"http://127.0.0.1:{port}")).commit("repo", "main")
