"""Results computed once and kept in Redis, keyed by immutable ids (commit ids), so an entry never
goes stale; bounded by a TTL (and by `RULES`).

The API never computes them itself: it asks the cache, and on a miss `claim`s the work (so one
caller queues it, however many ask), queues it on the workers and waits a little. The worker
`put`s the result, or `put_failure`s why there is none (kept briefly), so a request about a broken
input is answered with that failure instead of "ask again" forever.
"""

from __future__ import annotations

import json
from typing import Any

from exporter.errors import ExporterError, rebuilt
from exporter.state.connection import PREFIX, connection, length_prefixed

# Raised when the rules behind an answer change (2: columns matched by identity, replaced tables in
# the history diff; 3: keys of length-prefixed parts, as parts joined by `:` could pass for others):
# answers cached under older rules are never served, whatever their TTL.
RULES = 3


class ResultCache:
    FAILURE_TTL_SECONDS = 300
    # Which part is a table's path, if one is: `a/b/` and `a/b` name one table (its folder).
    TABLE_PATH_PART: int | None = None

    def __init__(self, redis_url: str, ttl_seconds: int, kind: str):
        self.redis = connection(redis_url)
        self.ttl_seconds, self.kind = ttl_seconds, kind

    def key(self, *parts: str | None) -> str:
        """`lakefs-delta:<kind>:r<RULES>:` and the parts, each length-prefixed: distinct parts never
        share a key, whatever `:` their free text (a table path, key columns) holds; only the
        `/` at either end of a table path is no part of it."""
        at = self.TABLE_PATH_PART
        if at is not None and at < len(parts) and parts[at] is not None:
            parts = (*parts[:at], parts[at].strip("/"), *parts[at + 1:])
        return f"{PREFIX}:{self.kind}:r{RULES}:" + length_prefixed(*parts)

    def get(self, *parts: str | None) -> Any | None:
        raw = self.redis.get(self.key(*parts))
        return json.loads(raw) if raw else None

    def put(self, value: Any, *parts: str | None) -> None:
        self.redis.set(self.key(*parts), json.dumps(value), ex=self.ttl_seconds)

    def put_failure(self, error: ExporterError, *parts: str | None) -> None:
        """Why there is no result (kept briefly): the error's class and message, never an HTTP status."""
        key = self.key(*parts)
        self.redis.set(key + ":failure", json.dumps({"kind": type(error).__name__, "error": str(error)}),
                       ex=self.FAILURE_TTL_SECONDS)
        self.redis.delete(key + ":pending")

    def failure(self, *parts: str | None) -> ExporterError | None:
        raw = self.redis.get(self.key(*parts) + ":failure")
        if not raw:
            return None
        document = json.loads(raw)
        return rebuilt(document.get("kind", ""), document["error"])

    def put_progress(self, progress: dict, *parts: str | None) -> None:
        """How far a long computation is (the API shows it while answering 202)."""
        self.redis.set(self.key(*parts) + ":progress", json.dumps(progress), ex=self.FAILURE_TTL_SECONDS)

    def progress(self, *parts: str | None) -> dict | None:
        raw = self.redis.get(self.key(*parts) + ":progress")
        return json.loads(raw) if raw else None

    def forget(self, *parts: str | None) -> None:
        """Drop a cached result whose objects are gone (a row diff's rows file pruned): computed again."""
        self.redis.delete(self.key(*parts))

    def claim(self, seconds: int, *parts: str | None) -> bool:
        """True for the one caller that should queue the computation (others wait for it)."""
        return bool(self.redis.set(self.key(*parts) + ":pending", "1", nx=True, ex=seconds))

    def release(self, *parts: str | None) -> None:
        self.redis.delete(self.key(*parts) + ":pending")
