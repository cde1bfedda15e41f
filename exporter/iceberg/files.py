"""Where an Iceberg table is written: the one interface the writer needs of an object store."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Protocol

from exporter.threads import IoPool


class IcebergFiles(Protocol):
    """Where the Iceberg table's new files go: `location` is their root URI (ending with `/`), keys
    are relative to it; `read` reads any file the table names, by its absolute URI (an appended
    table's older files may be at another location)."""

    location: str

    def put(self, key: str, body: bytes) -> None: ...

    def read(self, uri: str) -> bytes: ...


class WrittenBehind:
    """`IcebergFiles` whose puts run in the background, up to `threads` at once: a table's manifests
    and manifest lists are many small objects, each written once. A file read before its put ended
    is read from memory (a body is kept until its put ends); `flush` waits for every put and raises
    the first that failed: the caller flushes before the metadata file that names them."""

    def __init__(self, files: IcebergFiles, threads: int):
        self.files, self.location = files, files.location
        self._pool = IoPool(threads)
        self._pending: dict[str, bytes] = {}  # URI -> body, while its put runs
        self._puts: list[Future] = []
        self._lock = threading.Lock()

    def put(self, key: str, body: bytes) -> None:
        uri = self.location.rstrip("/") + "/" + key
        with self._lock:
            self._pending[uri] = body
        future = self._pool.submit(self.files.put, key, body)
        self._puts.append(future)
        future.add_done_callback(lambda done: self._ended(uri, body, done))

    def _ended(self, uri: str, body: bytes, done: Future) -> None:
        if done.cancelled() or done.exception() is not None:
            return  # not written: read from memory until `flush` raises
        with self._lock:
            if self._pending.get(uri) is body:
                del self._pending[uri]

    def read(self, uri: str) -> bytes:
        with self._lock:
            body = self._pending.get(uri)
        return body if body is not None else self.files.read(uri)

    def flush(self) -> None:
        puts, self._puts = self._puts, []
        for future in puts:
            future.result()

    def __enter__(self) -> "WrittenBehind":
        return self

    def __exit__(self, kind, error, trace) -> None:
        # after an error the puts still queued are dropped (no metadata file names them); else all were flushed
        if kind is None:
            self._pool.join()
        else:
            self._pool.cancel()
