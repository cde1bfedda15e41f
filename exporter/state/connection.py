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
    """`lakefs-delta:<part>:<part>...`, for fixed parts (names of this product, never free text)."""
    return ":".join((PREFIX, *parts))


def length_prefixed(*parts: object) -> str:
    """Parts, free text included (a table path, key columns), as one string no other parts make:
    each `<length>:<text>` (None: `-`), joined by `:`. A `:` inside a part is counted, never a
    boundary, and a suffix such as `:pending` starts with no length: it is never a part."""
    return ":".join("-" if part is None else f"{len(str(part))}:{part}" for part in parts)
