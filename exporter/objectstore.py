"""The one object-store writer: boto3, with endpoint and credentials chosen per storage namespace."""

from __future__ import annotations

import boto3
import botocore.config
import botocore.exceptions

from exporter.config import Config
from exporter.errors import ExporterError, NotFound, ServiceUnavailable


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
            aws_secret_access_key=store.secret_access_key or None,
            config=botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3, "mode": "standard"},
                                          max_pool_connections=32,
                                          connect_timeout=5, read_timeout=30),
        )

    def key(self, relative: str) -> str:
        return f"{self.root}/{relative}" if self.root else relative

    def uri(self, relative: str) -> str:
        return f"s3://{self.bucket}/{self.key(relative)}"

    def put(self, relative: str, body: bytes, content_type: str = "application/octet-stream") -> None:
        self._call("put", self.uri(relative), lambda: self.client.put_object(Bucket=self.bucket, Key=self.key(relative),
                                                                   Body=body, ContentType=content_type))

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

    def delete_prefix(self, relative: str) -> int:
        deleted = 0
        paginator = self.client.get_paginator("list_objects_v2")
        for page in self._call("list", self.uri(relative), lambda: list(paginator.paginate(Bucket=self.bucket, Prefix=self.key(relative)))):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:
                self._call("delete", self.uri(relative), lambda: self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys}))
                deleted += len(keys)
        return deleted

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
