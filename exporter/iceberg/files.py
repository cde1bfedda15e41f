"""Where an Iceberg table is written: the one interface the writer needs of an object store."""

from __future__ import annotations

from typing import Protocol


class IcebergFiles(Protocol):
    """Where the Iceberg table goes: `location` is its root URI (ending with `/`); keys are relative to it."""

    location: str

    def put(self, key: str, body: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...
