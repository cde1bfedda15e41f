"""Export status, locks and counters in Redis, shared by the webhook service and the workers."""

from __future__ import annotations

import json
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Iterator

import redis

PREFIX = "lakefs-delta"
STATES = ("queued", "running", "retrying", "done", "failed")
# release or renew only our own lock, atomically
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end return 0"


class StatusStore:
    def __init__(self, redis_url: str):
        self.redis = redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=5)

    # ------------------------------------------------------------ per-commit, per-table status

    def _key(self, repository: str, commit_id: str) -> str:
        return f"{PREFIX}:export:{repository}:{commit_id}"

    def set_table(self, repository: str, commit_id: str, table: str, state: str, **facts) -> None:
        assert state in STATES, state
        key = self._key(repository, commit_id)
        previous = self.redis.hget(key, table)
        record = json.loads(previous) if previous else {"retries": 0}
        record.update(facts, state=state, updated_at=time.time())
        if state == "retrying":
            record["retries"] = record.get("retries", 0) + 1
        self.redis.hset(key, table, json.dumps(record))
        self.redis.expire(key, 30 * 24 * 3600)

    def tables(self, repository: str, commit_id: str) -> dict[str, dict]:
        raw = self.redis.hgetall(self._key(repository, commit_id))
        return {name.decode(): json.loads(value) for name, value in raw.items()}

    # ------------------------------------------------------------ locks

    @contextmanager
    def lock(self, name: str, ttl_seconds: int) -> Iterator[bool]:
        """Yields True when this caller holds the lock. It is renewed while held, so it frees itself
        within `ttl_seconds` of its holder dying, and is never taken over while its holder lives."""
        key, token = f"{PREFIX}:lock:{name}", uuid.uuid4().hex
        held = bool(self.redis.set(key, token, nx=True, ex=ttl_seconds))
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew, args=(key, token, ttl_seconds, stop), daemon=True)
        if held:
            renewer.start()
        try:
            yield held
        finally:
            if held:
                stop.set()
                renewer.join()
                self.redis.eval(_RELEASE, 1, key, token)

    def _renew(self, key: str, token: str, ttl_seconds: int, stop: threading.Event) -> None:
        while not stop.wait(ttl_seconds / 3):
            try:
                self.redis.eval(_RENEW, 1, key, token, ttl_seconds)
            except redis.RedisError:
                pass  # the next renewal tries again; at worst the lock expires

    # ------------------------------------------------------------ counters (rendered by GET /metrics)

    def count(self, metric: str, labels: dict[str, str] | None = None, amount: float = 1) -> None:
        self.redis.hincrbyfloat(f"{PREFIX}:metrics", _series(metric, labels), amount)

    def observe(self, metric: str, value: float, labels: dict[str, str] | None = None) -> None:
        """A summary: `_sum` and `_count` series, enough for rates and means."""
        pipe = self.redis.pipeline()
        pipe.hincrbyfloat(f"{PREFIX}:metrics", _series(metric + "_sum", labels), value)
        pipe.hincrbyfloat(f"{PREFIX}:metrics", _series(metric + "_count", labels), 1)
        pipe.execute()

    def metrics(self) -> dict[str, float]:
        return {k.decode(): float(v) for k, v in self.redis.hgetall(f"{PREFIX}:metrics").items()}

    def ping(self) -> bool:
        try:
            return bool(self.redis.ping())
        except redis.RedisError:
            return False


def _series(metric: str, labels: dict[str, str] | None) -> str:
    if not labels:
        return metric
    inner = ",".join(f'{k}="{str(v).replace(chr(34), "")}"' for k, v in sorted(labels.items()))
    return f"{metric}{{{inner}}}"
