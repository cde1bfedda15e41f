"""Every file name of an Iceberg table this product writes, relative to the table's location, in one
place: built here and parsed here.

    metadata/v<delta version>.metadata.json   the table as of that Delta version, written last
    metadata/snap-<snapshot id>.avro          a snapshot's manifest list
    metadata/<snapshot id>-m<n>.avro          the n-th manifest the snapshot wrote
    metadata/<snapshot id>-m<n>.paths         its live entries' data paths, hashed (`manifests.PATH_HASHES`)
    data/deletes/<digest>.parquet             a position delete file: one data file's deletion vector
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from exporter.delta.deletion_vectors import unique_id

FOLDERS = ("metadata/", "data/")  # everything a table has, under its location
_METADATA_FILE = re.compile(r"metadata/v(\d+)\.metadata\.json")


def metadata_file(version: int) -> str:
    """The metadata file of the table as of Delta `version`: the file a reader is pointed at."""
    return f"metadata/v{version}.metadata.json"


def metadata_file_version(key: str) -> int | None:
    """The Delta version of the metadata file `key` (relative, or a URI ending with it); None: not one."""
    found = re.search(r"(?:^|/)" + _METADATA_FILE.pattern + "$", key)
    return int(found.group(1)) if found else None


def is_metadata_file(key: str, location: str = "") -> bool:
    """Whether `key` is a metadata file of the table at `location` (a prefix of `key`; "" when `key`
    is relative to it): one that makes the table's other files a table. Any `metadata/*.metadata.json`,
    so a table another writer named its own way is one too."""
    return key.startswith(location) and bool(re.fullmatch(r"metadata/[^/]*\.metadata\.json", key[len(location):]))


def manifest_list(snapshot_id: int) -> str:
    return f"metadata/snap-{snapshot_id}.avro"


def manifest(snapshot_id: int, number: int) -> str:
    return f"metadata/{snapshot_id}-m{number}.avro"


def path_hashes_key(manifest: str) -> str:
    """Where the hashes of a manifest's data paths are kept, beside it (`manifests.PATH_HASHES`): a
    key from a key, a URI from a URI."""
    return manifest.removesuffix(".avro") + ".paths"


def delete_file_key(data_path: str, descriptor: Mapping[str, Any]) -> str:
    """Where the delete file of one data file and deletion vector goes: a name from both, so writing
    the same table again writes the same objects."""
    digest = hashlib.blake2b(f"{data_path}\0{unique_id(descriptor)}".encode(), digest_size=16).hexdigest()
    return f"data/deletes/{digest}.parquet"


def uri(location: str, key: str) -> str:
    """The absolute URI of `key` in the table at `location`."""
    return f"{location.rstrip('/')}/{key}"
