"""Single-object requests (GET, PUT, server-side copy, HEAD) and listings, signed here and sent on
kept connections (HTTP/1.1 keep-alive).

boto3 costs 4.0-4.5 ms of CPU a request on the benchmark machine whatever the request (its event
hooks and models), and an export is a dozen small requests, an Iceberg step thirty: in a commit
storm the workers' object requests were half of their CPU. Signed here (Signature Version 4 in
headers) one costs 0.8-1.5 ms (bench/results/2026-11-29-object-requests.md). A listing too: boto3
parsed each object's time with dateutil, 25-40 ms of CPU for a page of 60 objects, the largest part
of a small table's Iceberg step. Batch deletes and multipart uploads stay boto3's: rare, their answers
documents boto3 parses. Sent on urllib3, a small GET to MinIO cost 330-520 us of the client's CPU;
on http.client's connections, kept here (`Connections`), 180-200 us: a third of the workers' CPU in
a commit storm was these requests. Of what was left, a third went in http.client's reading of the
answer's headers (it parses them with the email package) and in its checks of each header sent: a
request is written and its answer read here (`_exchange`), on a socket http.client connects (the
proxy's tunnel, TLS), and a GET costs 125-135 us where it cost 240-270.
https://docs.aws.amazon.com/AmazonS3/latest/API/sig-v4-header-based-auth.html
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import os
import random
import re
import select
import ssl
import threading
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import quote, unquote_plus, urlsplit
from urllib.request import getproxies, proxy_bypass

ALGORITHM = "AWS4-HMAC-SHA256"
UNRESERVED = "-_.~"  # with letters and digits, never encoded (RFC 3986); S3 keeps `/` in a key's path
# `quote(key, safe=UNRESERVED + "/")` for an ASCII key: only the characters that need it replaced
_TO_QUOTE = re.compile(r"[^A-Za-z0-9\-_.~/]")
_EMPTY = hashlib.sha256(b"").hexdigest()
_CODE = re.compile(rb"<Code>([^<]*)</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]*)</Message>")
ATTEMPTS = 3  # as boto3's "standard" retry mode: a connection error, 5xx or throttling tried again


_S3 = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@dataclass
class ListPage:
    """One answer of ListObjectsV2: keys as stored (decoded), the "folders" under a delimiter, and the
    token of the next page (None: the last)."""

    objects: list[tuple[str, int, float]] = field(default_factory=list)  # (key, size, modified epoch seconds)
    prefixes: list[str] = field(default_factory=list)
    next_token: str | None = None


class RequestFailed(Exception):
    """The store's answer to a request that did not succeed: its HTTP status and S3 error code (for a
    HEAD, which has no body, the status as the code)."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{status} {code}: {message}" if message else f"{status} {code}")
        self.status, self.code = status, code


def signing_key(secret: str, day: str, region: str) -> bytes:
    """SigV4's key for one day, region and S3 (derived once a day per store, not per request)."""
    key = hmac.new(f"AWS4{secret}".encode(), day.encode(), hashlib.sha256).digest()
    for part in (region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def store_endpoint(endpoint: str, region: str) -> str:
    """A store's endpoint: the one configured, else AWS's for the region."""
    return endpoint or f"https://s3.{region}.amazonaws.com"


def transient(status: int, code: str) -> bool:
    """Whether a store's error answer is worth asking again: 5xx, throttling, a request timed out."""
    return status >= 500 or status == 429 or code in ("SlowDown", "RequestTimeout")


def quoted_key(key: str) -> str:
    """A key as S3 canonicalizes it in a path: each byte but unreserved ones and `/` percent-encoded, once."""
    if not key.isascii():
        return quote(key, safe=UNRESERVED + "/")
    return _TO_QUOTE.sub(lambda found: f"%{ord(found.group()):02X}", key)


def quoted_path(bucket: str, key: str | None) -> str:
    """The path-style path of an object (of the bucket itself when `key` is None), as S3 canonicalizes it."""
    return "/" + quote(bucket, safe=UNRESERVED) + ("" if key is None else "/" + quoted_key(key))


def canonical_query(query: dict[str, str]) -> str:
    """A query string as SigV4 signs it (and as it is sent): names sorted, names and values
    percent-encoded but unreserved characters."""
    return "&".join(f"{quote(name, safe=UNRESERVED)}={quote(value, safe=UNRESERVED)}"
                    for name, value in sorted(query.items()))


@dataclass(frozen=True)
class Answer:
    """A store's answer to a request: its HTTP status and body."""

    status: int
    data: bytes


# what a connection that failed raises: the request is tried again (`SignedRequests.request`)
CONNECTION_ERRORS = (http.client.HTTPException, OSError)


class Connections:
    """Keep-alive HTTP/1.1 connections to one store's origin, straight or through the environment's
    proxy (an HTTP proxy: a tunnel for https, as boto3 has it), each carrying one request at a time
    and kept for the next; thread-safe. A connection the store closed while it was idle is dropped
    before it is used, and one a request failed on is never used again (its state is unknown).
    http.client makes each connection (the tunnel, TLS); requests go as `_exchange` writes them."""

    KEPT = 32  # idle connections kept at most (as many as a process's request threads)

    def __init__(self, origin: str, proxy: str | None, connect_timeout: float, read_timeout: float):
        parts = urlsplit(origin)
        self.origin, self.proxy = origin, proxy
        self.https = parts.scheme == "https"
        self.address = (parts.hostname or "", parts.port or (443 if self.https else 80))
        self.host = parts.netloc.rpartition("@")[2]  # the Host header of a request that names none
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self.context = ssl.create_default_context(cafile=os.environ.get("AWS_CA_BUNDLE") or None) \
            if self.https else None  # the store's own CA, as boto3 takes it
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def request(self, method: str, target: str, body: bytes | None, headers: dict[str, str]) -> Answer:
        """`target`: the path and query. A connection error raises (CONNECTION_ERRORS); a reused
        connection the store had closed meanwhile is replaced once, at once."""
        connection, reused = self._take()
        try:
            return self._send(connection, method, target, body, headers)
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            if not reused:
                raise
        return self._send(self._connect(), method, target, body, headers)

    def _send(self, connection: _Connection, method: str, target: str, body: bytes | None,
              headers: dict[str, str]) -> Answer:
        try:
            answer, will_close = _exchange(connection, method, self.origin + target if self.proxy and not self.https
                                           else target, self.host, headers, body)
        except BaseException:  # a time limit raised into it too: the connection's state is unknown
            connection.close()
            raise
        if will_close:
            connection.close()
        else:
            with self._lock:
                if len(self._idle) < self.KEPT:
                    self._idle.append(connection)
                    return answer
            connection.close()
        return answer

    def _take(self) -> tuple[_Connection, bool]:
        """An idle connection the store has not closed (its socket has nothing to read), else a new one."""
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._connect(), False
            if not select.select([connection.sock], [], [], 0)[0]:
                return connection, True
            connection.close()

    def _connect(self) -> _Connection:
        host, port = self.address
        if self.proxy:
            proxy = urlsplit(self.proxy)
            at = (proxy.hostname or "", proxy.port or 80)
        else:
            at = (host, port)
        if self.https:
            connection = http.client.HTTPSConnection(*at, timeout=self.connect_timeout, context=self.context)
            if self.proxy:
                connection.set_tunnel(host, port)
        else:
            connection = http.client.HTTPConnection(*at, timeout=self.connect_timeout)
        connection.connect()
        connection.sock.settimeout(self.read_timeout)
        return _Connection(connection)


class _Connection:
    """A connected socket (http.client made it: a proxy's tunnel, TLS) and the buffered reader of its answers."""

    def __init__(self, made: http.client.HTTPConnection):
        self.made, self.sock = made, made.sock
        self.reader = made.sock.makefile("rb")

    def close(self) -> None:
        self.reader.close()
        self.made.close()


_MAX_LINE = 65536  # as http.client: a longer status or header line is no HTTP answer


def _exchange(connection: _Connection, method: str, target: str, host: str, headers: dict[str, str],
              body: bytes | None) -> tuple[Answer, bool]:
    """Write one HTTP/1.1 request on the connection and read its answer (RFC 9112): the answer, and
    whether the connection ends with it. A body is read by its Content-Length, chunked, or up to
    the connection's end; an interim (1xx) answer is skipped. A connection that ends before the
    status line raises RemoteDisconnected (a kept one the store closed), a malformed answer
    another http.client.HTTPException: CONNECTION_ERRORS both."""
    lines = [f"{method} {target} HTTP/1.1\r\n"]
    if not any(name.lower() == "host" for name in headers):
        lines.append(f"Host: {host}\r\n")
    lines += [f"{name}: {value}\r\n" for name, value in headers.items()]
    if body is not None or method in ("PUT", "POST"):
        lines.append(f"Content-Length: {len(body or b'')}\r\n")
    head = "".join(lines).encode("latin-1") + b"\r\n"
    connection.sock.sendall(head + body if body else head)
    reader = connection.reader
    while True:
        line = reader.readline(_MAX_LINE + 1)
        if not line:
            raise http.client.RemoteDisconnected("the store closed the connection without an answer")
        version, _, rest = line.partition(b" ")
        if not version.startswith(b"HTTP/1.") or not rest[:3].isdigit() or len(line) > _MAX_LINE:
            raise http.client.BadStatusLine(line[:200].decode("latin-1"))
        status = int(rest[:3])
        length, chunked, will_close = None, False, version == b"HTTP/1.0"
        while (line := reader.readline(_MAX_LINE + 1)) not in (b"\r\n", b"\n", b""):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = _number(value, 10)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                will_close = b"close" in value.lower() or (will_close and b"keep-alive" not in value.lower())
        if not 100 <= status < 200:
            break
    if method == "HEAD" or status in (204, 304):
        return Answer(status, b""), will_close
    if chunked:
        parts = []
        while size := _number(reader.readline(_MAX_LINE + 1).split(b";", 1)[0], 16):
            parts.append(_read_exactly(reader, size))
            reader.readline(_MAX_LINE + 1)  # the chunk's CRLF
        while reader.readline(_MAX_LINE + 1) not in (b"\r\n", b"\n", b""):  # trailer fields
            pass
        return Answer(status, b"".join(parts)), will_close
    if length is not None:
        return Answer(status, _read_exactly(reader, length)), will_close
    return Answer(status, reader.read()), True  # delimited by the connection's end


def _number(text: bytes, base: int) -> int:
    """A length in an answer (Content-Length, a chunk's size); a connection that ended, or anything
    else, raises http.client.HTTPException."""
    try:
        return int(text.strip(), base)
    except ValueError:
        raise http.client.HTTPException(f"not a length in the answer: {text[:40]!r}") from None


def _read_exactly(reader, size: int) -> bytes:
    data = reader.read(size)
    if len(data) < size:
        raise http.client.IncompleteRead(data, size - len(data))
    return data


class SignedRequests:
    """One store's object requests, path-style; thread-safe (`Connections`), one per store and process.

    `credentials` is boto3's (static keys, or the environment's chain, refreshed by boto3), or None
    for unsigned requests."""

    def __init__(self, endpoint: str, region: str, credentials, connect_timeout: float = 5, read_timeout: float = 30):
        parts = urlsplit(endpoint)
        self.origin, self.host, self.region, self.credentials = f"{parts.scheme}://{parts.netloc}", parts.netloc, region, \
            credentials
        # the environment's proxy for the store, as boto3 honours HTTP(S)_PROXY and NO_PROXY
        proxy = None if proxy_bypass(parts.hostname or "") else getproxies().get(parts.scheme)
        self.connections = Connections(self.origin, proxy, connect_timeout, read_timeout)
        self._key: tuple[str, str, bytes] | None = None  # (day, secret, key)

    def get(self, bucket: str, key: str, byte_range: str | None = None) -> bytes:
        return self.request("GET", bucket, key, {"range": byte_range} if byte_range else {}).data

    def put(self, bucket: str, key: str, body: bytes, content_type: str) -> None:
        self.request("PUT", bucket, key, {"content-type": content_type}, body)

    def copy(self, source_bucket: str, source_key: str, bucket: str, key: str) -> None:
        """A server-side copy; its error may come in a 200 answer's body, as S3 documents."""
        answer = self.request("PUT", bucket, key, {"x-amz-copy-source": quoted_path(source_bucket, source_key)})
        if b"<Error>" in answer.data[:512]:
            raise _failed(500, answer.data)

    def head(self, bucket: str, key: str) -> None:
        self.request("HEAD", bucket, key, {})

    def list_page(self, bucket: str, prefix: str, start_after: str = "", token: str | None = None,
                  delimiter: str = "", max_keys: int = 1000) -> ListPage:
        """One page of the keys under `prefix` (ListObjectsV2), after `start_after`, or from
        `token` (the previous page's `next_token`). Keys come URL-encoded (`encoding-type=url`, as
        boto3 asks: XML cannot carry every byte a key may hold) and are decoded here."""
        query = {"list-type": "2", "encoding-type": "url", "max-keys": str(max_keys), "prefix": prefix,
                 **({"start-after": start_after} if start_after and token is None else {}),
                 **({"continuation-token": token} if token is not None else {}),
                 **({"delimiter": delimiter} if delimiter else {})}
        answer = self.request("GET", bucket, None, {}, query=query)
        return _list_page(answer.data)

    def request(self, method: str, bucket: str, key: str | None, headers: dict[str, str], body: bytes = b"",
                query: dict[str, str] | None = None) -> Answer:
        """The answer of a 2xx, else RequestFailed; a connection error, 5xx or throttling answer tried
        `ATTEMPTS` times in all. What a signal handler raises into it (a task's time limit) goes up as
        itself, never retried. `key` None: a request of the bucket (a listing), with `query`."""
        path = quoted_path(bucket, key)
        signed_query = canonical_query(query or {})
        target = path + (f"?{signed_query}" if signed_query else "")
        for attempt in range(1, ATTEMPTS + 1):
            try:
                answer = self.connections.request(method, target, body or None,
                                                  self._signed(method, path, headers, body, signed_query))
            except CONNECTION_ERRORS:
                if attempt == ATTEMPTS:
                    raise
            else:
                if 200 <= answer.status < 300:
                    return answer
                failed = _failed(answer.status, answer.data)
                if attempt == ATTEMPTS or not transient(failed.status, failed.code):
                    raise failed
            time.sleep(random.uniform(0, 0.2 * 2 ** attempt))  # full jitter, as boto3's standard mode

    def _signed(self, method: str, path: str, headers: dict[str, str], body: bytes,
                query_string: str = "") -> dict[str, str]:
        amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        payload = hashlib.sha256(body).hexdigest() if body else _EMPTY
        signed = {**headers, "host": self.host, "x-amz-date": amz_date, "x-amz-content-sha256": payload}
        if self.credentials is None:
            return signed
        keys = self.credentials.get_frozen_credentials()  # refreshed by boto3 when they expire
        if keys.token:
            signed["x-amz-security-token"] = keys.token
        names = sorted(signed)
        canonical = "\n".join([method, path, query_string, "".join(f"{n}:{signed[n].strip()}\n" for n in names), ";".join(names),
                               payload])
        scope = f"{amz_date[:8]}/{self.region}/s3/aws4_request"
        to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.digest(self._signing_key(amz_date[:8], keys.secret_key), to_sign.encode(), "sha256").hex()
        signed["authorization"] = (f"{ALGORITHM} Credential={keys.access_key}/{scope}, "
                                   f"SignedHeaders={';'.join(names)}, Signature={signature}")
        return signed

    def _signing_key(self, day: str, secret: str) -> bytes:
        kept = self._key
        if kept is None or kept[0] != day or kept[1] != secret:
            kept = self._key = (day, secret, signing_key(secret, day, self.region))
        return kept[2]


def _list_page(body: bytes) -> ListPage:
    """A ListObjectsV2 answer asked with `encoding-type=url`, read."""
    root = ElementTree.fromstring(body)
    encoded = root.findtext(f"{_S3}EncodingType") == "url"

    def decoded(value: str | None) -> str:
        return unquote_plus(value or "") if encoded else (value or "")

    page = ListPage()
    for item in root.iterfind(f"{_S3}Contents"):
        modified = datetime.fromisoformat(item.findtext(f"{_S3}LastModified") or "").timestamp()
        page.objects.append((decoded(item.findtext(f"{_S3}Key")), int(item.findtext(f"{_S3}Size") or 0), modified))
    page.prefixes = [decoded(item.findtext(f"{_S3}Prefix")) for item in root.iterfind(f"{_S3}CommonPrefixes")]
    if root.findtext(f"{_S3}IsTruncated") == "true":
        page.next_token = root.findtext(f"{_S3}NextContinuationToken")
        if not page.next_token:
            raise RequestFailed(200, "InvalidListing", "a truncated listing without a continuation token")
    return page


def _failed(status: int, body: bytes) -> RequestFailed:
    code, message = _CODE.search(body or b""), _MESSAGE.search(body or b"")
    return RequestFailed(status, code.group(1).decode() if code else str(status),
                         message.group(1).decode() if message else "")
