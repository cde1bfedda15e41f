"""Delta tables from other projects' test suites, as their packages ship them.

delta-kernel-rs's crate (crates.io) and delta-rs's source distribution (PyPI) carry the tables
their tests read: written by Spark of many versions, Databricks and delta-rs, with features this
project's own writers do not make (inline deletion vectors, vacuumed versions, checkpoints with
struct-only statistics, V2 checkpoints with sidecars, log compaction files). They are fetched from
the registries, checked against a pinned SHA-256, cached under `~/.cache/`, and never committed.
"""

from __future__ import annotations

import hashlib
import html
import io
import os
import re
import tarfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("LAKEFS_DELTA_CACHE", Path.home() / ".cache" / "lakefs-delta-exporter")) / "others-tables"


@dataclass(frozen=True)
class Package:
    name: str                # the archive's file name
    sha256: str
    tables_under: str        # the folder of test tables inside the archive, after its top folder
    crate_url: str | None = None    # a crate comes from crates.io; otherwise from PyPI's simple index
    project: str | None = None      # the PyPI project whose simple index lists `name`


KERNEL = Package("delta_kernel-0.13.0.crate", "f06f3676832e713e44f65804cebf82f46962d3e126f64f3251eb5fbeb0ad94e4",
                 "tests/data", crate_url="https://static.crates.io/crates/delta_kernel/delta_kernel-0.13.0.crate")
DELTA_RS = Package("deltalake-0.18.2.tar.gz", "c6f9ad68736413a6d7c1526d60905cdf4aaeb59b8c95cc782661250917719aef",
                   "crates/test/tests/data", project="deltalake")
SIMPLE_INDEX = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


def _url(package: Package) -> str:
    """Where the archive is fetched from. A source distribution is fetched as the file it is: `pip
    download` of one prepares its metadata, which for a Rust package builds maturin from source
    (more than five minutes on two cores)."""
    if package.crate_url:
        return package.crate_url
    with urllib.request.urlopen(f"{SIMPLE_INDEX}/{package.project}/", timeout=60) as response:
        index = response.read().decode()
    found = re.search(rf'href="([^"#]*/{re.escape(package.name)})[#"]', index)
    if found is None:
        raise RuntimeError(f"{package.name} is not in {SIMPLE_INDEX}/{package.project}/")
    return urllib.parse.urljoin(f"{SIMPLE_INDEX}/{package.project}/", html.unescape(found.group(1)))


def _archive(package: Package) -> Path:
    path = CACHE / package.name
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.name}.{os.getpid()}.part")  # two test processes may fetch it at once
        with urllib.request.urlopen(_url(package), timeout=120) as response:
            part.write_bytes(response.read())
        part.rename(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != package.sha256:
        path.unlink()
        raise RuntimeError(f"{package.name}: SHA-256 {digest}, expected {package.sha256}")
    return path


def _members(archive: tarfile.TarFile, prefix: str):
    for member in archive.getmembers():
        if member.name.startswith(prefix) and (member.isfile() or member.isdir()):
            member.name = member.name[len(prefix):]
            yield member


def table(package: Package, name: str, into: Path) -> Path:
    """The test table `name` of `package`, extracted under `into`: a plain folder or, as the kernel
    ships its larger ones, a `.tar.zst` beside it."""
    with tarfile.open(_archive(package)) as archive:
        top = archive.getmembers()[0].name.split("/")[0]
        prefix = f"{top}/{package.tables_under}/"
        names = set(archive.getnames())
        if f"{prefix}{name}.tar.zst" in names:
            import zstandard

            packed = io.BytesIO(zstandard.ZstdDecompressor().stream_reader(
                archive.extractfile(f"{prefix}{name}.tar.zst")).read())
            with tarfile.open(fileobj=packed) as inner:
                inner.extractall(into, members=list(_members(inner, "")), filter="data")
        else:
            archive.extractall(into / name, members=list(_members(archive, f"{prefix}{name}/")), filter="data")
    return into / name
