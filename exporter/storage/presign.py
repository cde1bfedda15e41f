"""Presigned GET URLs for objects (AWS Signature Version 4, query-string form), made in-process.

The Delta Sharing server hands out one URL per data file and deletion vector: a million-file table
is a million URLs per query. boto3's `generate_presigned_url` costs 180-310 µs each on the
benchmark machine; here the signing key is derived once per (store, day) and one URL is a SHA-256
and an HMAC: 7-15 µs (bench/results/2026-11-23-sharing.md). A column of addresses (a checkpoint's
batch) is signed in Arrow: quoted and joined column by column, only the hashes one row at a time.
https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html
"""

from __future__ import annotations

import binascii
import calendar
import hashlib
import hmac
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.config import Config, ObjectStoreConfig
from exporter.errors import ConfigError
from exporter.storage.objectstore import split_uri
from exporter.storage.requests import ALGORITHM, UNRESERVED, quoted_key, signing_key, store_endpoint

_KEPT = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~/"  # bytes `quote` keeps
_QUOTE_PASSES = 8  # distinct bytes to quote in a batch replaced column-wide; more (non-ASCII text): `quote` per key
_BLOCK = 64  # SHA-256's block size, for HMAC's padded keys (RFC 2104)


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

    def presign(self, uri: str, method: str = "GET") -> PresignedUrl:
        """`uri` as a Delta log holds a path: a URI, its key percent-encoded where needed."""
        return PresignedUrl(self.presign_many([uri], method)[0], self.expires_ms)

    def presign_many(self, uris: list[str], method: str = "GET") -> list[str]:
        """The URLs of many addresses (each expiring at `expires_ms`), in one loop."""
        urls = []
        for uri in uris:
            bucket, key = split_uri(uri)
            if "%" in key:
                key = unquote(key)
            urls.append(self._signer(uri, bucket, key).url(bucket, key, method))
        return urls

    def address_of(self, url: str) -> str | None:
        """The `s3://bucket/key` a request URL to a configured store's endpoint names, path-style (as
        these URLs address it) or virtual-hosted, its key as the URL encodes it; None for a URL to no
        configured endpoint, or one with a query (a listing, a part, a version: not one object)."""
        parts = urlsplit(url)
        if parts.query or parts.fragment:
            return None
        for store in self.stores:
            origin = urlsplit(store_endpoint(store.endpoint, store.region))
            if parts.scheme != origin.scheme:
                continue
            if parts.netloc == origin.netloc:
                bucket, _, key = parts.path.lstrip("/").partition("/")
            elif parts.netloc.endswith("." + origin.netloc):
                bucket, key = parts.netloc[:-len(origin.netloc) - 1], parts.path.lstrip("/")
            else:
                continue
            if bucket and key:
                return f"s3://{unquote(bucket)}/{key}"
        return None

    def presign_column(self, uris: pa.Array) -> pa.Array:
        """`presign_many` of a string column, the same URLs: the addresses in the first one's bucket
        (and scheme) whose keys need no decoding are signed column by column; any other (another
        bucket, a `%` to decode, a bucket whose objects have several stores) as `presign_many` signs it."""
        if not len(uris):
            return pa.array([], pa.string())
        first = uris[0].as_py()
        bucket, key = split_uri(first)
        prefix = first[:len(first) - len(key)]
        together = pc.starts_with(uris, prefix) if prefix.endswith("/") and bucket not in self._split_buckets \
            else pa.repeat(False, len(uris))
        if b"%" in string_bytes(uris):
            together = pc.and_(together, pc.invert(pc.match_substring(uris, "%")))
        if together.true_count == len(uris):
            return self._signer(first, bucket, key).urls(bucket, pc.utf8_slice_codeunits(uris, len(prefix)))
        urls = pa.nulls(len(uris), pa.string())
        if together.true_count:
            keys = pc.utf8_slice_codeunits(uris.filter(together), len(prefix))
            urls = pc.replace_with_mask(urls, together, self._signer(first, bucket, key).urls(bucket, keys))
        apart = pc.invert(together)
        return pc.replace_with_mask(urls, apart, pa.array(self.presign_many(uris.filter(apart).to_pylist()), pa.string()))

    def _signer(self, uri: str, bucket: str, key: str) -> "_Signer":
        signer = self._signers.get(bucket)  # a bucket's store, found once by the store rule below
        if signer is None:
            signer = self._signer_of(uri, f"s3://{bucket}/{key}")
            if bucket not in self._split_buckets:
                self._signers[bucket] = signer
        return signer

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
        endpoint = store_endpoint(store.endpoint, store.region)
        parts = urlsplit(endpoint)
        self.origin, self.host = f"{parts.scheme}://{parts.netloc}", parts.netloc
        if not _JSON_PLAIN.fullmatch(self.origin):  # so that every URL is a JSON string as it is
            raise ConfigError(f"object_store: endpoint {endpoint!r} is not a URL of printable ASCII characters")
        scope = f"{batch.day}/{store.region}/s3/aws4_request"
        self.scope = scope
        self.signing_key = key = signing_key(store.secret_access_key.get_secret_value(), batch.day, store.region)
        # HMAC-SHA256 (RFC 2104) as two SHA-256s over the padded key, their states past the constant
        # prefixes kept: `urls` copies them per row
        padded = key.ljust(_BLOCK, b"\0")
        self.outer = hashlib.sha256(bytes(b ^ 0x5C for b in padded))
        inner_pad = bytes(b ^ 0x36 for b in padded)
        # sorted by name, as the canonical query string must be
        self.query = "&".join([
            f"X-Amz-Algorithm={ALGORITHM}",
            f"X-Amz-Credential={quote(f'{store.access_key_id}/{scope}', safe=UNRESERVED)}",
            f"X-Amz-Date={batch.amz_date}",
            f"X-Amz-Expires={batch.lifetime}",
            "X-Amz-SignedHeaders=host",
        ])
        self.to_sign_head = f"{ALGORITHM}\n{batch.amz_date}\n{scope}\n"
        self.inner = hashlib.sha256(inner_pad + self.to_sign_head.encode())  # the string to sign but its last line
        self.canonical_tail = f"\n{self.query}\nhost:{self.host}\n\nhost\nUNSIGNED-PAYLOAD"
        self.roots: dict[str, str] = {}  # bucket -> its quoted path

    def root(self, bucket: str) -> str:
        root = self.roots.get(bucket)
        if root is None:
            root = self.roots[bucket] = "/" + quote(bucket, safe=UNRESERVED) + "/"
        return root

    def url(self, bucket: str, key: str, method: str = "GET") -> str:
        path = self.root(bucket) + quoted_key(key)
        canonical = f"{method}\n{path}{self.canonical_tail}"
        to_sign = self.to_sign_head + hashlib.sha256(canonical.encode()).hexdigest()
        signature = hmac.digest(self.signing_key, to_sign.encode(), "sha256").hex()
        return f"{self.origin}{path}?{self.query}&X-Amz-Signature={signature}"

    def urls(self, bucket: str, keys: pa.Array) -> pa.Array:
        """`url` of each key of a column (decoded keys): only the hashes one row at a time."""
        root = self.root(bucket)
        paths = _quoted_paths(keys)
        canonical = pc.binary_join_element_wise(f"GET\n{root}", paths, self.canonical_tail, "").cast(pa.binary())
        return pc.binary_join_element_wise(self.origin + root, paths, f"?{self.query}&X-Amz-Signature=",
                                           hex_digests(self._signatures(canonical.to_pylist()), 32, len(keys)), "")

    def _signatures(self, canonical: list[bytes]) -> list[bytes]:
        """The HMAC of each canonical request's string to sign (`url`'s `hmac.digest`): a copy of a
        kept state and an update cost less than a new hash, and hash only what changes."""
        signatures, sha256, hexlify, inner, outer = [], hashlib.sha256, binascii.hexlify, self.inner.copy, self.outer.copy
        for request in canonical:
            to_sign = inner()
            to_sign.update(hexlify(sha256(request).digest()))
            signature = outer()
            signature.update(to_sign.digest())
            signatures.append(signature.digest())
        return signatures


_JSON_PLAIN = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]*")  # printable ASCII but `"` and `\`


def hex_digests(digests: Iterable[bytes], size: int, count: int) -> pa.Array:
    """`count` digests of `size` bytes as a string column of their hex: one join and one hexlify."""
    text = binascii.hexlify(b"".join(digests))
    if len(text) != 2 * size * count:
        raise ValueError(f"{len(text) // (2 * size)} digests of {size} bytes, not {count}")
    offsets = np.arange(0, 2 * size * (count + 1), 2 * size, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(text)])


def string_bytes(column: pa.Array) -> bytes:
    """The bytes of a string column's values, end to end (a whole batch tested for a byte at once)."""
    if column.null_count == len(column) or len(column) == 0:
        return b""
    width = np.int64 if pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type) else np.int32
    offsets = np.frombuffer(column.buffers()[1], width, len(column) + 1, column.offset * np.dtype(width).itemsize)
    return column.buffers()[2][int(offsets[0]):int(offsets[-1])].to_pybytes()


def _quoted_paths(keys: pa.Array) -> pa.Array:
    """`quoted_key` of each key of a column: each byte `quote` would encode replaced column-wide
    (a key's UTF-8 bytes are what `quote` encodes), or, with many distinct ones, `quote` per key."""
    distinct = sorted(set(string_bytes(keys).translate(None, _KEPT)))
    if not distinct:
        return keys
    if len(distinct) > _QUOTE_PASSES:
        return pa.array([quoted_key(key) for key in keys.to_pylist()], pa.string())
    quoted = keys.cast(pa.binary())
    for byte in distinct:  # no key holds `%` here (decoded keys with one are signed one by one)
        quoted = pc.replace_substring(quoted, bytes([byte]), f"%{byte:02X}".encode())
    return quoted.cast(pa.string())
