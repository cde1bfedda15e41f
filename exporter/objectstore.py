"""The one object-store writer: boto3, with endpoint and credentials chosen per storage namespace."""

from __future__ import annotations

import boto3
import botocore.config
import botocore.exceptions

from exporter.config import Config
from exporter.errors import ExporterError, NotFound, ServiceUnavailable
from exporter.paths import physical_uri


def split_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> (`bucket`, `a/b`)."""
    scheme, _, rest = uri.partition("://")  # not urlsplit: a key may hold `?` or `#`
    bucket, _, key = rest.partition("/")
    if scheme not in ("s3", "s3a") or not bucket:
        raise ExporterError(f"unsupported storage location {uri!r}: only s3:// namespaces are supported")
    return bucket, key


class ObjectStore:
    """Writes and reads objects under one storage namespace."""

    def __init__(self, config: Config, storage_namespace: str):
        store = config.object_store_for(storage_namespace)
        self.bucket, self.root = split_uri(storage_namespace.rstrip("/"))
        self.client = boto3.client(
            "s3",
            endpoint_url=store.endpoint or None,
            region_name=store.region,
            aws_access_key_id=store.access_key_id or None,
            aws_secret_access_key=store.secret_access_key.get_secret_value() or None,
            config=botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3, "mode": "standard"},
                                          max_pool_connections=32,
                                          connect_timeout=5, read_timeout=30),
        )

    def key(self, relative: str) -> str:
        return f"{self.root}/{relative}" if self.root else relative

    def uri(self, relative: str) -> str:
        """A valid URI: the key percent-encoded (a ref or table name may hold `#`, `%`, `+`, ...)."""
        return physical_uri(f"s3://{self.bucket}/{self.key(relative)}")

    def put(self, relative: str, body: bytes, content_type: str = "application/octet-stream") -> None:
        self._call("put", self.uri(relative), lambda: self.client.put_object(Bucket=self.bucket, Key=self.key(relative),
                                                                   Body=body, ContentType=content_type))

    def copy(self, source_relative: str, relative: str) -> None:
        """A server-side copy within the namespace's bucket: no bytes pass through this process."""
        self._call("copy", self.uri(source_relative), lambda: self.client.copy_object(
            Bucket=self.bucket, Key=self.key(relative), CopySource={"Bucket": self.bucket, "Key": self.key(source_relative)}))

    def get(self, relative: str) -> bytes:
        return self.get_uri(self.uri(relative))

    def get_uri(self, uri: str) -> bytes:
        """Read an object by its absolute address (a physical address from lakeFS, never decoded)."""
        bucket, key = split_uri(uri)
        return self._call("get", uri, lambda: self.client.get_object(Bucket=bucket, Key=key)["Body"].read())

    def exists(self, relative: str) -> bool:
        try:
            self._call("head", self.uri(relative), lambda: self.client.head_object(Bucket=self.bucket, Key=self.key(relative)))
            return True
        except NotFound:
            return False

    def list_keys(self, relative: str) -> list[str]:
        """Every object under `relative`, as names relative to the namespace."""
        paginator = self.client.get_paginator("list_objects_v2")
        pages = self._call("list", self.uri(relative),
                           lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=self.key(relative))))
        root = self.key("")
        return [item["Key"][len(root):] for page in pages for item in page.get("Contents", [])]

    def list_folders(self, relative: str) -> list[str]:
        """The names of the "folders" directly under `relative` (a listing with delimiter `/`)."""
        paginator = self.client.get_paginator("list_objects_v2")
        prefix = self.key(relative)
        pages = self._call("list", self.uri(relative), lambda: list(
            paginator.paginate(Bucket=self.bucket, Prefix=prefix, Delimiter="/")))
        return [item["Prefix"][len(prefix):].rstrip("/") for page in pages for item in page.get("CommonPrefixes", [])]

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
        except botocore.exceptions.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code in ("NoSuchKey", "404", "NotFound"):
                raise NotFound(f"object store: {location} does not exist") from None
            if status >= 500 or status == 429 or code in ("SlowDown", "RequestTimeout"):
                raise ServiceUnavailable(f"object store answered {status} {code} to {what} {location}") from None
            raise ExporterError(f"object store refused {what} {location}: {code} {exc}") from None
        except (botocore.exceptions.BotoCoreError, OSError) as exc:
            raise ServiceUnavailable(f"object store unreachable during {what} {location}: {exc}") from None
