"""The one object-store writer, with endpoint and credentials chosen per storage namespace: its
single-object requests and listings signed and sent by `requests.SignedRequests` (a quarter of
boto3's CPU), batch deletes and multipart uploads by boto3."""

from __future__ import annotations

import functools
import os

import boto3
import botocore.config
import botocore.exceptions
import urllib3.exceptions

from exporter.config import Config
from exporter.delta.paths import physical_uri
from exporter.errors import ExporterError, NotFound, ServiceUnavailable
from exporter.storage.requests import CONNECTION_ERRORS, RequestFailed, SignedRequests, store_endpoint, transient


def split_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> (`bucket`, `a/b`)."""
    scheme, _, rest = uri.partition("://")  # not urlsplit: a key may hold `?` or `#`
    bucket, _, key = rest.partition("/")
    if scheme not in ("s3", "s3a") or not bucket:
        raise ExporterError(f"unsupported storage location {uri!r}: only s3:// namespaces are supported")
    return bucket, key


def _interrupted(caught_exception=None, **_) -> None:
    """botocore wraps whatever a request raises in HTTPClientError and retries it, so an exception a
    signal handler raised into the request (the task's soft time limit) became one more attempt and
    the task ran on to its hard limit. What is neither a socket nor a urllib3 error goes up as itself."""
    if isinstance(caught_exception, botocore.exceptions.HTTPClientError):
        cause = caught_exception.kwargs.get("error")
        if isinstance(cause, Exception) and not isinstance(cause, (OSError, urllib3.exceptions.HTTPError)):
            raise cause


@functools.lru_cache(maxsize=16)
def _client(endpoint: str, region: str, access_key_id: str, secret_access_key: str):
    """One boto3 client per store and process: creating one costs more CPU than a dozen requests,
    and it keeps its connections open. boto3 clients are thread-safe."""
    client = boto3.client(
        "s3",
        endpoint_url=endpoint or None,
        region_name=region,
        aws_access_key_id=access_key_id or None,
        aws_secret_access_key=secret_access_key or None,
        config=botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3, "mode": "standard"},
                                      max_pool_connections=32, connect_timeout=5, read_timeout=30),
    )
    client.meta.events.register_first("needs-retry.s3", _interrupted)
    return client


@functools.lru_cache(maxsize=16)
def _requests(endpoint: str, region: str, access_key_id: str, secret_access_key: str) -> SignedRequests:
    """The store's single-object requests, with the credentials boto3 would use (the keys given, else
    the environment's chain)."""
    credentials = boto3.session.Session(aws_access_key_id=access_key_id or None,
                                        aws_secret_access_key=secret_access_key or None,
                                        region_name=region).get_credentials()
    return SignedRequests(store_endpoint(endpoint, region), region, credentials)


def warm(config: Config) -> None:
    """Build every configured store's clients now (a worker process as it starts), not in its first
    task: a boto3 client costs more CPU than a dozen requests. Nothing is sent."""
    for store in (config.object_store, *config.extra_object_stores):
        keys = (store.endpoint, store.region, store.access_key_id, store.secret_access_key.get_secret_value())
        _client(*keys), _requests(*keys)


def _forked() -> None:  # a forked worker opens its own connections
    _client.cache_clear()
    _requests.cache_clear()


os.register_at_fork(after_in_child=_forked)


class ObjectStore:
    """Writes and reads objects under one storage namespace."""

    def __init__(self, config: Config, storage_namespace: str):
        store = config.object_store_for(storage_namespace)
        self.bucket, self.root = split_uri(storage_namespace.rstrip("/"))
        keys = (store.endpoint, store.region, store.access_key_id, store.secret_access_key.get_secret_value())
        self.client, self.requests = _client(*keys), _requests(*keys)

    def key(self, relative: str) -> str:
        return f"{self.root}/{relative}" if self.root else relative

    def uri(self, relative: str) -> str:
        """A valid URI: the key percent-encoded (a ref or table name may hold `#`, `%`, `+`, ...)."""
        return physical_uri(self.address(relative))

    def address(self, relative: str) -> str:
        """The object's address as `get_uri`, `get_range` and `copy_uri` take it (and lakeFS gives
        physical addresses): `s3://bucket/key`, the key as it is."""
        return f"s3://{self.bucket}/{self.key(relative)}"

    def put(self, relative: str, body: bytes, content_type: str = "application/octet-stream") -> None:
        self._call("put", self.uri(relative), lambda: self.requests.put(self.bucket, self.key(relative), body, content_type))

    def copy(self, source_relative: str, relative: str) -> None:
        """A server-side copy within the namespace's bucket: no bytes pass through this process."""
        self._call("copy", self.uri(source_relative), lambda: self.requests.copy(
            self.bucket, self.key(source_relative), self.bucket, self.key(relative)))

    def get(self, relative: str) -> bytes:
        """Read an object of the namespace by its name (not through its URI, which is encoded)."""
        return self._call("get", self.uri(relative), lambda: self.requests.get(self.bucket, self.key(relative)))

    def get_uri(self, uri: str) -> bytes:
        """Read an object by its absolute address (a physical address from lakeFS, never decoded)."""
        bucket, key = split_uri(uri)
        return self._call("get", uri, lambda: self.requests.get(bucket, key))

    def get_range(self, uri: str, start: int, end: int) -> bytes:
        """Bytes `start` to `end` (exclusive) of the object at `uri`."""
        if end <= start:
            return b""
        bucket, key = split_uri(uri)
        return self._call("get", uri, lambda: self.requests.get(bucket, key, f"bytes={start}-{end - 1}"))

    def copy_uri(self, source_uri: str, relative: str) -> None:
        """A server-side copy of any object of this store (e.g. a physical address) into the namespace."""
        bucket, key = split_uri(source_uri)
        self._call("copy", source_uri, lambda: self.requests.copy(bucket, key, self.bucket, self.key(relative)))

    def upload(self, relative: str) -> "Upload":
        """An object written piece by piece that nobody sees until `complete()`; see `Upload`."""
        return Upload(self, relative)

    def exists(self, relative: str) -> bool:
        try:
            self._call("head", self.uri(relative), lambda: self.requests.head(self.bucket, self.key(relative)))
            return True
        except NotFound:
            return False

    def has_objects(self, relative: str) -> bool:
        """Whether any object is under `relative`: one listing call of one key, however many there are."""
        page = self._call("list", self.uri(relative), lambda: self.requests.list_page(
            self.bucket, self.key(relative), max_keys=1))
        return bool(page.objects)

    def list_keys(self, relative: str) -> list[str]:
        """Every object under `relative`, as names relative to the namespace."""
        return list(self.list_sizes(relative))

    def list_sizes(self, relative: str) -> dict[str, int]:
        """Every object under `relative` and its size, by name relative to the namespace."""
        return {name: size for name, size, _ in self.list_objects(relative)}

    def list_objects(self, relative: str, start_after: str = "", stop_at: str = "") -> list[tuple[str, int, float]]:
        """(name relative to the namespace, size, modified as epoch seconds) of every object under
        `relative` whose name sorts after `start_after` and before `stop_at` (each when given: the
        listing starts there, and asks for no page past `stop_at`)."""
        stop = self.key(stop_at) if stop_at else None
        root = self.key("")
        found = []
        for page in self._pages(relative, start_after):
            found += [(key[len(root):], size, modified) for key, size, modified in page.objects
                      if stop is None or key < stop]
            if stop is not None and page.objects and page.objects[-1][0] >= stop:
                break
        return found

    def head_uri(self, uri: str) -> bool:
        """Whether the object at an absolute address exists."""
        bucket, key = split_uri(uri)
        try:
            self._call("head", uri, lambda: self.requests.head(bucket, key))
            return True
        except NotFound:
            return False

    def list_folders(self, relative: str) -> list[str]:
        """The names of the "folders" directly under `relative` (a listing with delimiter `/`)."""
        prefix = self.key(relative)
        return [folder[len(prefix):].rstrip("/") for page in self._pages(relative, delimiter="/")
                for folder in page.prefixes]

    def _pages(self, relative: str, start_after: str = "", delimiter: str = ""):
        """The pages of the listing of `relative` (names after `start_after`, when given), one
        request each, as they are read."""
        after = self.key(start_after) if start_after else ""
        token = None
        while True:
            page = self._call("list", self.uri(relative), lambda: self.requests.list_page(
                self.bucket, self.key(relative), after, token, delimiter))
            yield page
            if page.next_token is None:
                return
            token = page.next_token

    def delete(self, relatives: list[str]) -> None:
        for start in range(0, len(relatives), 1000):  # the most one DeleteObjects call takes
            batch = [{"Key": self.key(r)} for r in relatives[start:start + 1000]]
            answer = self._call("delete", self.uri(relatives[start]),
                                lambda: self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch}))
            if answer.get("Errors"):
                first = answer["Errors"][0]
                raise ServiceUnavailable(f"object store did not delete {len(answer['Errors'])} object(s), "
                                         f"e.g. {first.get('Key')}: {first.get('Code')} {first.get('Message')}")

    def _call(self, what: str, location: str, operation):
        try:
            return operation()
        except (botocore.exceptions.ClientError, RequestFailed) as exc:
            if isinstance(exc, RequestFailed):
                status, code = exc.status, exc.code
            else:
                code = exc.response.get("Error", {}).get("Code", "")
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code in ("NoSuchKey", "404", "NotFound"):
                raise NotFound(f"object store: {location} does not exist") from None
            if transient(status, code):
                raise ServiceUnavailable(f"object store answered {status} {code} to {what} {location}") from None
            raise ExporterError(f"object store refused {what} {location}: {code} {exc}") from None
        except (botocore.exceptions.BotoCoreError, urllib3.exceptions.HTTPError, *CONNECTION_ERRORS) as exc:
            raise ServiceUnavailable(f"object store unreachable during {what} {location}: {exc}") from None


class ObjectSource:
    """An object read by byte ranges (`parquet_splice.ParquetSource`): never held whole in memory.

    The small reads at either end (a parquet file's magic and its footer) are kept: the export
    opens each checkpoint file several times (sidecars, summary, rewrite), each a read of them."""

    _EDGE = 64 << 10

    def __init__(self, store: ObjectStore, uri: str, size: int):
        self.store, self.uri, self.size = store, uri, size
        self._edges: dict[tuple[int, int], bytes] = {}

    def read_range(self, start: int, end: int) -> bytes:
        if end - start > self._EDGE or (start != 0 and end != self.size):
            return self.store.get_range(self.uri, start, end)
        if (start, end) not in self._edges:
            self._edges[(start, end)] = self.store.get_range(self.uri, start, end)
        return self._edges[(start, end)]


class Upload:
    """An object written as a stream: parts of `PART_SIZE` go up while it is written (S3 multipart
    upload), and it appears only at `complete()`; `abort()` leaves nothing. An object smaller than
    one part is held here and put in one call at `complete()`. Memory: at most one part."""

    PART_SIZE = 5 << 20  # S3's minimum for every part but the last

    def __init__(self, store: ObjectStore, relative: str):
        self.store, self.relative = store, relative
        self.size = 0
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict] = []
        self._copy_source: str | None = None

    def write(self, data: bytes) -> int:
        self._buffer += data
        self.size += len(data)
        if len(self._buffer) >= self.PART_SIZE:
            self._send_part()
        return len(data)

    def copy_of(self, source_uri: str, size: int) -> None:
        """Make this upload a server-side copy of `source_uri` instead (what was written is dropped)."""
        self.abort()
        self._copy_source, self.size = source_uri, size

    def finish_writing(self) -> None:
        """Send what is buffered as the last part when parts went up already: nothing stays in memory."""
        if self._upload_id is not None and self._buffer:
            self._send_part()

    def complete(self) -> None:
        store, key = self.store, self.store.key(self.relative)
        if self._copy_source is not None:
            store.copy_uri(self._copy_source, self.relative)
        elif self._upload_id is None:
            store.put(self.relative, bytes(self._buffer))
        else:
            self.finish_writing()
            upload_id, parts = self._upload_id, self._parts
            store._call("complete upload", store.uri(self.relative), lambda: store.client.complete_multipart_upload(
                Bucket=store.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}))
            self._upload_id = None
        self._buffer = bytearray()

    def abort(self) -> None:
        if self._upload_id is not None:
            store, upload_id = self.store, self._upload_id
            self._upload_id = None
            try:
                store._call("abort upload", store.uri(self.relative), lambda: store.client.abort_multipart_upload(
                    Bucket=store.bucket, Key=store.key(self.relative), UploadId=upload_id))
            except ExporterError:
                pass  # an abandoned multipart upload is invisible to readers; bucket lifecycle rules expire it
        self._buffer, self._parts = bytearray(), []

    def _send_part(self) -> None:
        store, key = self.store, self.store.key(self.relative)
        if self._upload_id is None:
            self._upload_id = store._call("start upload", store.uri(self.relative), lambda: store.client.create_multipart_upload(
                Bucket=store.bucket, Key=key, ContentType="application/octet-stream"))["UploadId"]
        number, body, upload_id = len(self._parts) + 1, bytes(self._buffer), self._upload_id
        answer = store._call("upload part", store.uri(self.relative), lambda: store.client.upload_part(
            Bucket=store.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body))
        self._parts.append({"PartNumber": number, "ETag": answer["ETag"]})
        self._buffer = bytearray()
