"""The object store's own request signing (`exporter.storage.requests`) against botocore's SigV4
signer, and how its answers and failures come back."""

from __future__ import annotations

import datetime
import http.server
import threading
import time

import botocore.auth
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from exporter.errors import ExporterError, NotFound, ServiceUnavailable
from exporter.storage.requests import RequestFailed, SignedRequests, quoted_path

pytestmark = pytest.mark.unit

KEYS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "a-session-token")


@pytest.mark.parametrize("method,key,headers,body", [
    ("GET", "tables/t/_delta_log/00000000000000000001.json", {}, b""),
    ("GET", "day=1%3A00/part 0+x#y?z.parquet", {"range": "bytes=0-99"}, b""),
    ("PUT", "exports/main/ü/_delta_log/_last_checkpoint", {"content-type": "application/json"}, b'{"version":1}'),
    ("PUT", "a/b", {"x-amz-copy-source": quoted_path("bucket", "src key%/ä")}, b""),
    ("HEAD", "a/~b_c-d.e", {}, b""),
])
def test_a_request_is_signed_as_botocore_signs_it(monkeypatch, method, key, headers, body):
    requests = SignedRequests("http://127.0.0.1:9000", "eu-west-1", KEYS)
    monkeypatch.setattr(time, "gmtime", lambda *_: time.struct_time((2026, 11, 29, 8, 30, 0, 6, 333, 0)))
    ours = requests._signed(method, quoted_path("bucket", key), headers, body)

    theirs = AWSRequest(method=method, url="http://127.0.0.1:9000" + quoted_path("bucket", key), data=body,
                        headers={**headers, "x-amz-content-sha256": ours["x-amz-content-sha256"]})
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: datetime.datetime(2026, 11, 29, 8, 30, 0))
    S3SigV4Auth(KEYS, "s3", "eu-west-1").add_auth(theirs)
    assert ours["authorization"] == theirs.headers["Authorization"]


class _Store(http.server.BaseHTTPRequestHandler):
    """Answers each request with the next of `answers` (status, body); records what it was asked."""

    answers: list[tuple[int, bytes]] = []
    asked: list[str] = []

    def _answer(self):
        self.asked.append(f"{self.command} {self.path}")
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        status, body = self.answers.pop(0)
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = _answer

    def log_message(self, *_):
        pass


@pytest.fixture
def store():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Store)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Store.answers, _Store.asked = [], []
    yield SignedRequests(f"http://127.0.0.1:{server.server_address[1]}", "us-east-1", KEYS), _Store
    server.shutdown()


def test_a_busy_store_is_asked_again_and_a_missing_key_is_not(store, monkeypatch):
    requests, answers = store
    monkeypatch.setattr(time, "sleep", lambda _: None)
    answers.answers = [(503, b"<Error><Code>SlowDown</Code><Message>later</Message></Error>"), (200, b"body")]
    assert requests.get("bucket", "k") == b"body" and len(answers.asked) == 2
    answers.answers = [(404, b"<Error><Code>NoSuchKey</Code></Error>")]
    with pytest.raises(RequestFailed) as missing:
        requests.get("bucket", "k")
    assert missing.value.code == "NoSuchKey" and len(answers.asked) == 3
    answers.answers = [(500, b"")] * 3
    with pytest.raises(RequestFailed) as failed:
        requests.head("bucket", "k")
    assert failed.value.status == 500 and len(answers.asked) == 6


def test_a_copy_failing_inside_its_200_answer_fails(store):
    requests, answers = store
    answers.answers = [(200, b'<?xml version="1.0"?><Error><Code>InternalError</Code><Message>copy</Message></Error>')] * 3
    with pytest.raises(RequestFailed) as failed:
        requests.copy("bucket", "a", "bucket", "b")
    assert failed.value.code == "InternalError"


def test_the_store_maps_answers_to_the_projects_errors(store, monkeypatch):
    from exporter.storage.objectstore import ObjectStore

    requests, answers = store
    monkeypatch.setattr(time, "sleep", lambda _: None)
    objects = ObjectStore.__new__(ObjectStore)
    objects.bucket, objects.root, objects.requests = "bucket", "ns", requests
    answers.answers = [(404, b"")]
    assert objects.exists("x") is False
    answers.answers = [(403, b"<Error><Code>AccessDenied</Code></Error>")]
    with pytest.raises(ExporterError, match="refused get s3://bucket/ns/x: AccessDenied"):
        objects.get("x")
    answers.answers = [(503, b"")] * 3
    with pytest.raises(ServiceUnavailable):
        objects.put("x", b"1")
    answers.answers = [(404, b"<Error><Code>NoSuchKey</Code></Error>")]
    with pytest.raises(NotFound):
        objects.get("x")


def test_the_environments_proxy_is_used_for_the_store_as_boto3_uses_it(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "minio.internal")
    assert SignedRequests("http://s3.example:9000", "us-east-1", KEYS).connections.proxy == "http://proxy.example:3128"
    assert SignedRequests("http://minio.internal:9000", "us-east-1", KEYS).connections.proxy is None


@pytest.mark.parametrize("query", [
    {"list-type": "2", "encoding-type": "url", "max-keys": "1000", "prefix": "refs/feature#1 +x%/tbl/_delta_log/"},
    {"list-type": "2", "encoding-type": "url", "max-keys": "1", "prefix": "ü/a b", "start-after": "ü/a b/0~1",
     "delimiter": "/"},
    {"list-type": "2", "encoding-type": "url", "max-keys": "1000", "prefix": "",
     "continuation-token": "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="},
])
def test_a_listing_is_signed_as_botocore_signs_its_parameters(monkeypatch, query):
    from exporter.storage.requests import canonical_query

    requests = SignedRequests("http://127.0.0.1:9000", "eu-west-1", KEYS)
    monkeypatch.setattr(time, "gmtime", lambda *_: time.struct_time((2026, 11, 29, 8, 30, 0, 6, 333, 0)))
    ours = requests._signed("GET", "/bucket", {}, b"", canonical_query(query))

    theirs = AWSRequest(method="GET", url="http://127.0.0.1:9000/bucket", params=query,
                        headers={"x-amz-content-sha256": ours["x-amz-content-sha256"]})
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: datetime.datetime(2026, 11, 29, 8, 30, 0))
    S3SigV4Auth(KEYS, "s3", "eu-west-1").add_auth(theirs)
    assert ours["authorization"] == theirs.headers["Authorization"]


LISTED = b"""<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bucket</Name><Prefix>refs%2F</Prefix>
<KeyCount>2</KeyCount><MaxKeys>2</MaxKeys><Delimiter>%2F</Delimiter><EncodingType>url</EncodingType>
<IsTruncated>true</IsTruncated><NextContinuationToken>next+token=</NextContinuationToken>
<Contents><Key>refs%2Ffeature%231+%2Bx%25%2F0.json</Key><LastModified>2026-11-29T08:30:00.500Z</LastModified>
<ETag>&quot;abc&quot;</ETag><Size>12</Size><StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>refs%2F%C3%BC%01</Key><LastModified>2026-11-29T08:30:01Z</LastModified><Size>0</Size></Contents>
<CommonPrefixes><Prefix>refs%2Fa+b%2F</Prefix></CommonPrefixes></ListBucketResult>"""


def test_a_listing_answer_is_read_with_its_keys_decoded_and_its_next_page():
    from exporter.storage.requests import _list_page

    page = _list_page(LISTED)
    assert page.objects == [("refs/feature#1 +x%/0.json", 12, 1795941000.5), ("refs/ü\x01", 0, 1795941001.0)]
    assert page.prefixes == ["refs/a b/"] and page.next_token == "next+token="
    assert _list_page(LISTED.replace(b"<IsTruncated>true", b"<IsTruncated>false")).next_token is None
    with pytest.raises(RequestFailed, match="without a continuation token"):
        _list_page(LISTED.replace(b"<NextContinuationToken>next+token=</NextContinuationToken>", b""))


class _KeptAlive(_Store):
    """HTTP/1.1: a connection carries request after request; with `close_after_answer`, the store
    closes each one after its answer without saying so, as a store whose idle time-out passed."""

    protocol_version = "HTTP/1.1"
    close_after_answer = False
    connections = 0

    def setup(self):
        super().setup()
        type(self).connections += 1

    def _answer(self):
        super()._answer()
        if self.close_after_answer:
            self.close_connection = True

    do_GET = do_PUT = do_HEAD = _answer


@pytest.fixture
def kept_alive():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeptAlive)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _KeptAlive.answers, _KeptAlive.asked, _KeptAlive.connections, _KeptAlive.close_after_answer = [], [], 0, False
    yield SignedRequests(f"http://127.0.0.1:{server.server_address[1]}", "us-east-1", KEYS), _KeptAlive
    server.shutdown()


def test_requests_share_one_kept_connection(kept_alive):
    requests, store = kept_alive
    store.answers = [(200, b"a"), (200, b""), (404, b"<Error><Code>NoSuchKey</Code></Error>"), (200, b"d")]
    assert requests.get("bucket", "a") == b"a"
    requests.put("bucket", "b", b"body", "application/json")
    with pytest.raises(RequestFailed):
        requests.get("bucket", "c")
    assert requests.get("bucket", "d") == b"d"
    assert store.connections == 1 and len(store.asked) == 4


def test_a_connection_the_store_closed_while_idle_is_replaced_without_a_retry(kept_alive, monkeypatch):
    requests, store = kept_alive
    store.close_after_answer = True
    monkeypatch.setattr(time, "sleep", lambda _: pytest.fail("a closed idle connection cost an attempt"))
    store.answers = [(200, b"1"), (200, b"2"), (200, b"3")]
    assert [requests.get("bucket", "k") for _ in range(3)] == [b"1", b"2", b"3"]
    assert store.connections == 3 and len(store.asked) == 3


def test_a_request_through_an_http_proxy_names_the_store_in_its_target(monkeypatch):
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Store)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    _Store.answers, _Store.asked = [(200, b"through")], []
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.server_address[1]}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        assert SignedRequests("http://s3.example:9000", "us-east-1", KEYS).get("bucket", "k") == b"through"
    finally:
        proxy.shutdown()
    assert _Store.asked == ["GET http://s3.example:9000/bucket/k"]
