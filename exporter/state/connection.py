"""The one Redis connection of a process (per URL) and the one key prefix of everything this
product keeps there: export status, locks, counters, result caches, sharing recipients."""

import functools

import redis

PREFIX = "lakefs-delta"


@functools.cache
def connection(redis_url: str) -> redis.Redis:
    """A client whose pool every store of this process shares (redis-py pools are thread-safe and
    start afresh in a forked child)."""
    return redis.Redis.from_url(redis_url, socket_connect_timeout=2, socket_timeout=5)


def key(*parts: str) -> str:
    """`lakefs-delta:<part>:<part>...`."""
    return ":".join((PREFIX, *parts))
