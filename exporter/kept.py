"""Values kept in a process by key, so a fact asked again and again (a commit by id, a repository's
storage namespace, a descriptor by its checksum) is asked once: at most `entries` of them (a full
store starts over), each for `seconds` when it may change (None: until forgotten)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
_ABSENT: Any = object()


class Kept(Generic[K, V]):
    def __init__(self, entries: int = 4096, seconds: float | None = None):
        self.entries, self.seconds = entries, seconds
        self._values: dict[K, tuple[V, float]] = {}

    def get(self, key: K, default: Any = None) -> V | Any:
        """The value kept for `key`, or `default` when none is (or it is older than `seconds`)."""
        found = self._values.get(key, _ABSENT)
        if found is _ABSENT or (self.seconds is not None and time.monotonic() - found[1] >= self.seconds):
            return default
        return found[0]

    def put(self, key: K, value: V) -> V:
        if len(self._values) >= self.entries:
            self._values.clear()
        self._values[key] = (value, time.monotonic())
        return value

    def keep(self, key: K, make: Callable[[], V], final: Callable[[V], bool] | None = None) -> V:
        """The value kept for `key`, else `make()`'s, kept (None too) unless `final` says it may
        still change (it is made again next time); an error of `make` keeps nothing."""
        found = self.get(key, _ABSENT)
        if found is not _ABSENT:
            return found
        made = make()
        return self.put(key, made) if final is None or final(made) else made
