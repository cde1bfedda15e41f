"""Presigned GET URLs for objects (AWS Signature Version 4, query-string form), made in-process.

The Delta Sharing server hands out one URL per data file and deletion vector: a million-file table
is a million URLs per query. boto3's `generate_presigned_url` costs 180-310 µs each on the
benchmark machine; here the signing key is derived once per (store, day) and one URL is a SHA-256
and an HMAC: 7-15 µs (bench/results/2026-11-23-sharing.md).
https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from exporter.config import Config, ObjectStoreConfig
from exporter.errors import ConfigError
from exporter.storage.objectstore import split_uri

_ALGORITHM = "AWS4-HMAC-SHA256"
_UNRESERVED = "-_.~"  # with letters and digits, never encoded (RFC 3986); S3 keeps `/` in the path
# `quote(key, safe=_UNRESERVED + "/")` for an ASCII key: only the characters that need it replaced
_TO_QUOTE = re.compile(r"[^A-Za-z0-9\-_.~/]")


def _quoted_path(key: str) -> str:
    if not key.isascii():
        return quote(key, safe=_UNRESERVED + "/")
    return _TO_QUOTE.sub(lambda found: f"%{ord(found.group()):02X}", key)


@dataclass(frozen=True)
class PresignedUrl:
    url: str
    expires_ms: int  # when it stops working, epoch milliseconds


class Presigner:
    """Presigns `s3://bucket/key` addresses with the credentials of the store that holds them
    (`Config.object_store_for`), path-style, as the exporter's own client addresses them. One
    instance signs a batch of URLs with one timestamp, so it is made per request."""

    def __init__(self, config: Config, lifetime_seconds: int, now: float | None = None):
        self.lifetime = lifetime_seconds
        # `Config.object_store_for`'s rule (the most specific prefix), with the sort done once
        self.stores = sorted((config.object_store, *config.extra_object_stores), key=lambda s: len(s.prefix),
                             reverse=True)
        moment = time.gmtime(time.time() if now is None else now)
        self.amz_date = time.strftime("%Y%m%dT%H%M%SZ", moment)
        self.day = self.amz_date[:8]
        self.expires_ms = (calendar.timegm(moment) + lifetime_seconds) * 1000
        self._stores: dict[str, _Signer] = {}  # by store prefix
        self._signers: dict[str, _Signer] = {}  # by bucket, for buckets whose objects all have one store
        # buckets some store's prefix names a folder of: their objects' store is found per object
        self._split_buckets = {s.prefix.partition("://")[2].split("/")[0] for s in self.stores
                               if "/" in s.prefix.partition("://")[2].strip("/")}

    def presign(self, uri: str) -> PresignedUrl:
        """`uri` as a Delta log holds a path: a URI, its key percent-encoded where needed."""
        return PresignedUrl(self.presign_many([uri])[0], self.expires_ms)

    def presign_many(self, uris: list[str]) -> list[str]:
        """The URLs of many addresses (each expiring at `expires_ms`), in one loop."""
        urls = []
        for uri in uris:
            bucket, key = split_uri(uri)
            if "%" in key:
                key = unquote(key)
            signer = self._signers.get(bucket)  # a bucket's store, found once by the store rule below
            if signer is None:
                signer = self._signer_of(uri, f"s3://{bucket}/{key}")
                if bucket not in self._split_buckets:
                    self._signers[bucket] = signer
            urls.append(signer.url(bucket, key))
        return urls

    def _signer_of(self, uri: str, address: str) -> "_Signer":
        store = next((s for s in self.stores if address.startswith(s.prefix)), None)
        if store is None:
            raise ConfigError(f"object_store: no store configured for {uri!r}: it cannot be presigned")
        signer = self._stores.get(store.prefix)
        if signer is None:
            signer = self._stores[store.prefix] = _Signer(store, self)
        return signer


class _Signer:
    def __init__(self, store: ObjectStoreConfig, batch: Presigner):
        endpoint = store.endpoint or f"https://s3.{store.region}.amazonaws.com"
        parts = urlsplit(endpoint)
        self.origin, self.host = f"{parts.scheme}://{parts.netloc}", parts.netloc
        scope = f"{batch.day}/{store.region}/s3/aws4_request"
        self.scope = scope
        secret = store.secret_access_key.get_secret_value()
        key = hmac.new(f"AWS4{secret}".encode(), batch.day.encode(), hashlib.sha256).digest()
        for part in (store.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        self.signing_key = key
        # sorted by name, as the canonical query string must be
        self.query = "&".join([
            f"X-Amz-Algorithm={_ALGORITHM}",
            f"X-Amz-Credential={quote(f'{store.access_key_id}/{scope}', safe=_UNRESERVED)}",
            f"X-Amz-Date={batch.amz_date}",
            f"X-Amz-Expires={batch.lifetime}",
            "X-Amz-SignedHeaders=host",
        ])
        self.to_sign_head = f"{_ALGORITHM}\n{batch.amz_date}\n{scope}\n"
        self.roots: dict[str, str] = {}  # bucket -> its quoted path

    def url(self, bucket: str, key: str) -> str:
        root = self.roots.get(bucket)
        if root is None:
            root = self.roots[bucket] = "/" + quote(bucket, safe=_UNRESERVED) + "/"
        path = root + _quoted_path(key)
        canonical = f"GET\n{path}\n{self.query}\nhost:{self.host}\n\nhost\nUNSIGNED-PAYLOAD"
        to_sign = self.to_sign_head + hashlib.sha256(canonical.encode()).hexdigest()
        signature = hmac.digest(self.signing_key, to_sign.encode(), "sha256").hex()
        return f"{self.origin}{path}?{self.query}&X-Amz-Signature={signature}"
