"""lakeFS's answers to the service's own calls, as the errors a task retries or not."""

from __future__ import annotations

import json

import pytest
from exporter.config import LakeFSConfig
from exporter.errors import BadRequest, CredentialsRefused, NotFound, ServiceUnavailable
from exporter.lakefs.client import LakeFS

pytestmark = pytest.mark.unit


@pytest.fixture
def answering():
    """A local HTTP server standing in for lakeFS's API: it answers each request with the (status, body)
    set on it (None: it closes the connection without an answer) and records the request's method,
    target, Authorization and Content-Type headers and body (`requests`; `asked`: target and
    Authorization of each)."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            server.requests.append((self.command, self.path, self.headers.get("Content-Type"), body))
            server.asked.append((self.path, self.headers.get("Authorization")))
            if server.answer is None:
                self.close_connection = True
                return
            status, answer = server.answer
            self.send_response(status)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST = do_DELETE = _answer  # noqa: N815 (http.server's names)

        def log_message(self, *_):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.asked, server.requests, server.answer = [], [], (200, b"{}")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def client(answering) -> LakeFS:
    return LakeFS(LakeFSConfig(endpoint=f"http://127.0.0.1:{answering.server_port}", access_key_id="AKID",
                               secret_access_key="shh"))


@pytest.mark.parametrize("status,body,error,permanent", [
    (401, b'{"message": "error authenticating request"}', CredentialsRefused, False),
    (404, b'{"message": "commit not found"}', NotFound, True),
    (500, b'{"message": "could not parse modifier ~x: ref: invalid value: validation error"}', BadRequest, True),
    (503, b"busy", ServiceUnavailable, False),
])
def test_lakefs_answers_to_a_read_become_errors_a_task_retries_or_not(answering, status, body, error, permanent):
    lakefs = client(answering)
    answering.answer = (status, body)
    with pytest.raises(error) as raised:
        lakefs.commit("repo", "main~x")
    assert raised.value.permanent is permanent
    assert str(raised.value).startswith(("lakeFS: get commit repo@main~x", "lakeFS answered"))
    assert str(raised.value).endswith(body.decode() if status == 503 else json.loads(body)["message"])
    assert answering.asked == [("/api/v1/repositories/repo/commits/main~x", "Basic QUtJRDpzaGg=")]


def test_a_listing_quotes_its_parameters(answering):
    lakefs = LakeFS(LakeFSConfig(endpoint=f"http://127.0.0.1:{answering.server_port}/"))
    answering.answer = (200, b'{"results": [{"path": "t/a b"}], "pagination": {"has_more": false}}')
    assert [entry.path for entry in lakefs.list_objects("repo", "feature@x", "t/a b&c", delimiter="/")] == ["t/a b"]
    assert answering.asked[0][0] == ("/api/v1/repositories/repo/refs/feature%40x/objects/ls"
                                     "?prefix=t/a%20b%26c&after=&amount=1000&delimiter=/")


def test_a_listing_page_becomes_typed_entries_and_a_garbled_one_an_outage(answering):
    lakefs = client(answering)
    answering.answer = (200, json.dumps({"results": [
        {"path": "t/p=1/", "path_type": "common_prefix", "physical_address": "", "checksum": "", "mtime": 0},
        {"path": "t/a.parquet", "path_type": "object", "physical_address": "s3://b/data/g1/c1", "checksum": "c0ffee",
         "size_bytes": 12, "mtime": 1700000000, "metadata": {"k": "v"}, "content_type": "application/octet-stream"}],
        "pagination": {"has_more": False, "next_offset": "", "results": 2, "max_per_page": 1000}}).encode())
    folder, entry = lakefs.list_objects("repo", "main", "t/", delimiter="/")
    assert (folder.path, folder.path_type, folder.size_bytes) == ("t/p=1/", "common_prefix", None)
    assert (entry.path, entry.path_type, entry.physical_address, entry.checksum, entry.size_bytes, entry.mtime) == \
        ("t/a.parquet", "object", "s3://b/data/g1/c1", "c0ffee", 12, 1700000000)
    for garbled in (b"<html>gateway</html>", b'{"results": [{"path": 7}], "pagination": {"has_more": false}}',
                    b'{"results": []}'):
        answering.answer = (200, garbled)
        with pytest.raises(ServiceUnavailable, match="lakeFS answered list repo@main/t/ with what is not a listing"):
            list(lakefs.list_objects("repo", "main", "t/"))


def test_a_listing_of_several_pages_asks_each_from_the_last_offset(answering):
    lakefs = client(answering)
    pages = iter([{"results": [{"path": "t/a"}], "pagination": {"has_more": True, "next_offset": "t/a"}},
                  {"results": [{"path": "t/b"}], "pagination": {"has_more": False, "next_offset": ""}}])
    answering.answer = None
    Handler = answering.RequestHandlerClass
    original = Handler._answer

    def answer(handler):
        answering.answer = (200, json.dumps(next(pages)).encode())
        original(handler)

    Handler.do_GET = answer
    assert [[entry.path for entry in page] for page in lakefs.object_pages("repo", "main", "t/")] == [["t/a"], ["t/b"]]
    assert [target.split("?")[1] for target, _ in answering.asked] == ["prefix=t/&after=&amount=1000",
                                                                       "prefix=t/&after=t/a&amount=1000"]
    assert lakefs.calls == 2


def test_lakefs_not_listening_is_an_outage_a_task_retries():
    import socket

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(ServiceUnavailable, match="lakeFS unreachable during get commit repo@main"):
        LakeFS(LakeFSConfig(endpoint=f"http://127.0.0.1:{port}")).commit("repo", "main")


@pytest.mark.parametrize("status,body,error,permanent", [
    (401, b'{"message": "error authenticating request"}', CredentialsRefused, False),  # also while lakeFS recovers
    (404, b'{"message": "branch not found"}', NotFound, True),
    (400, b'{"message": "commit message required"}', BadRequest, True),
    (503, b'{"message": "busy"}', ServiceUnavailable, False),
])
def test_lakefs_answers_to_a_write_become_errors_a_task_retries_or_not(answering, status, body, error, permanent):
    answering.answer = (status, body)
    with pytest.raises(error) as raised:
        client(answering).commit_branch("repo", "main", "m")
    assert raised.value.permanent is permanent
    assert str(raised.value).endswith(json.loads(body)["message"])


def test_a_write_sends_its_fields_as_json_and_an_upload_the_objects_bytes(answering):
    lakefs = client(answering)
    answering.answer = (201, b'{"id": "c1", "parents": [], "creation_date": 1, "message": "m", "metadata": {}}')
    assert lakefs.commit_branch("repo", "feature/x", "add t", {"source": "test"}) == "c1"
    answering.answer = (201, b"{}")
    lakefs.upload_object("repo", "main", "t/_delta_log/0.json", b"\x00{}\n")
    (method, target, content_type, body), (upload, upload_target, upload_type, uploaded) = answering.requests
    assert (method, target, content_type) == ("POST", "/api/v1/repositories/repo/branches/feature%2Fx/commits",
                                              "application/json")
    assert json.loads(body) == {"message": "add t", "metadata": {"source": "test"}}
    assert (upload, upload_target, upload_type, uploaded) == (
        "POST", "/api/v1/repositories/repo/branches/main/objects?path=t/_delta_log/0.json", "application/octet-stream",
        b"\x00{}\n")


def test_a_boolean_parameter_is_sent_as_lakefs_writes_one(answering):
    answering.answer = (200, b'{"results": [], "pagination": {"has_more": false}}')
    assert client(answering).log("repo", "main", amount=5, first_parent=True) == []
    assert answering.asked[0][0] == "/api/v1/repositories/repo/refs/main/commits?amount=5&limit=true&first_parent=true"


def test_a_read_whose_connection_drops_is_asked_again_and_a_write_is_not(answering):
    answering.answer = None  # every request: the connection closed, no answer
    lakefs = client(answering)
    with pytest.raises(ServiceUnavailable, match="lakeFS unreachable during get commit repo@main"):
        lakefs.commit("repo", "main")
    assert len(answering.requests) == 3  # the read, asked three times
    answering.requests.clear()
    with pytest.raises(ServiceUnavailable, match="lakeFS unreachable during commit repo/main"):
        lakefs.commit_branch("repo", "main", "m")
    assert [method for method, *_ in answering.requests] == ["POST"]  # lakeFS may have committed it: never twice
