"""A Delta table in a local folder, exported as the exporter exports one (every path rewritten to
an absolute `file://` URI by `exporter.export.rewrite`), and read back as `exporter.iceberg` reads a
log; the Iceberg table goes to a local folder too."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

from exporter.delta.checkpoint import checkpoint_files
from exporter.delta.log import LOG_DIR, LogListing, select_segment
from exporter.delta.paths import physical_uri
from exporter.export.resolve import PathResolver
from exporter.export.rewrite import rewrite_checkpoint_file, rewrite_commit
from exporter.parquet.splice import BytesSource, ParquetSource


def export_locally(table: Path, target: Path) -> LocalLog:
    """`table`'s `_delta_log` with its paths made absolute, in `target/_delta_log` (data stays put)."""
    addresses = {path.relative_to(table).as_posix(): f"file://{path}" for path in table.rglob("*")
                 if path.is_file() and not path.relative_to(table).as_posix().startswith(LOG_DIR)}
    resolver = PathResolver(addresses)
    log = target / LOG_DIR
    if log.exists():
        shutil.rmtree(log)
    log.mkdir(parents=True)
    for source in sorted((table / LOG_DIR).iterdir()):
        if source.name.endswith(".json"):
            raw = rewrite_commit(source.name, source.read_bytes(), resolver).content
        elif source.name.endswith(".parquet"):
            raw = rewrite_checkpoint_file(source.name, source.read_bytes(), resolver).content
        else:
            raw = source.read_bytes()  # _last_checkpoint
        (log / source.name).write_bytes(raw)
    return LocalLog(target)


class LocalLog:
    """An exported `_delta_log/` in a folder (`exporter.delta.live_files.SnapshotLog`)."""

    def __init__(self, root: Path):
        self.root = root / LOG_DIR
        names = [(p.relative_to(self.root).as_posix(), p.stat().st_size) for p in self.root.rglob("*") if p.is_file()]
        self.segment = select_segment(LogListing.from_names(names))

    def raw(self, name: str) -> bytes:
        return (self.root / name).read_bytes()

    def raws(self, names: list[str]) -> Iterator[bytes]:
        return map(self.raw, names)

    def source(self, name: str) -> ParquetSource:
        return BytesSource(self.raw(name))

    def checkpoint_files(self) -> list[str]:
        if self.segment.checkpoint is None:
            return []
        listed = {LOG_DIR + p.relative_to(self.root).as_posix(): "" for p in self.root.rglob("*")}
        return checkpoint_files(listed, self.segment, self.source)


class LocalFiles:
    """`exporter.iceberg.table.IcebergFiles` in a folder."""

    def __init__(self, root: Path):
        self.root = root
        self.location = physical_uri(f"file://{root}") + "/"
        self.written: list[str] = []
        self.reads: list[str] = []  # URIs

    def put(self, key: str, body: bytes) -> None:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)
        self.written.append(key)

    def read(self, uri: str) -> bytes:
        self.reads.append(uri)
        return Path(unquote(urlsplit(uri).path)).read_bytes()


def read_range(uri: str, start: int, end: int) -> bytes:
    """Bytes of a `file://` URI, as the object store reads a range."""
    with open(unquote(urlsplit(uri).path), "rb") as file:
        file.seek(start)
        return file.read(end - start)
