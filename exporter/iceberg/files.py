"""Where an Iceberg table is written: the one interface the writer needs of an object store."""

from __future__ import annotations

from typing import Protocol


class IcebergFiles(Protocol):
    """Where the Iceberg table's new files go: `location` is their root URI (ending with `/`), keys
    are relative to it; `read` reads any file the table names, by its absolute URI (an appended
    table's older files may be at another location)."""

    location: str

    def put(self, key: str, body: bytes) -> None: ...

    def read(self, uri: str) -> bytes: ...
