"""An Iceberg table this package wrote at one location, made again at another without rewriting
its data manifests: for an export derived from another (an incremental export, a tag's copy), whose
own table must not name the other export's files (prune removes that export, older, first).

Iceberg names manifests and delete files by absolute location (spec.md#manifest-lists), so:
manifests of data files and the delete files are copied as they are (immutable; they name only data
files, which are not under the location); manifests of delete files name their delete files, so
they are rewritten (one entry per deletion vector); every snapshot's manifest list is rewritten
(small: one record per manifest) so that every snapshot stays readable (time travel). The metadata
is returned, not written: the caller appends its versions and writes `metadata.json` last.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

from exporter.errors import CorruptLog
from exporter.iceberg.files import IcebergFiles
from exporter.iceberg.manifests import DELETES, FORMAT_VERSION, PATH_HASHES, read_manifest_list, relocate_manifest, \
    relocate_manifest_list
from exporter.iceberg.names import path_hashes_key
from exporter.threads import IO_THREADS, io_pool

CopyKeys = Callable[[list[str]], None]  # copy these keys of the source table to the same keys at the new location


def relocate_table(metadata_key: str, source: IcebergFiles, files: IcebergFiles, copy: CopyKeys) -> dict:
    """The table `source`'s `metadata_key` describes, at `files.location`: its manifests, delete
    files and manifest lists there (copied or rewritten); its metadata naming them, not written.
    The metadata log starts anew: the source's metadata files are not the new table's."""
    metadata = json.loads(source.get(metadata_key))
    if metadata.get("format-version") != FORMAT_VERSION:
        raise CorruptLog(f"{metadata_key}: format version {metadata.get('format-version')}, not {FORMAT_VERSION}")
    old, new = source.location.rstrip("/") + "/", files.location.rstrip("/") + "/"
    if metadata.get("location", "").rstrip("/") + "/" != old:
        raise CorruptLog(f"{metadata_key}: the table's location is {metadata.get('location')!r}, not {old!r}")

    def key_of(uri: str) -> str:
        if not uri.startswith(old):
            raise CorruptLog(f"{metadata_key}: {uri} is not under the table's location {old}")
        return uri[len(old):]

    indexed = (metadata.get("properties") or {}).get(PATH_HASHES) == "true"
    with io_pool(IO_THREADS) as pool:  # each step's requests at once: a table has a list per snapshot
        list_keys = list(dict.fromkeys(key_of(s["manifest-list"]) for s in metadata["snapshots"]))
        lists = dict(zip(list_keys, pool.map(source.get, list_keys)))
        copied: dict[str, None] = {}  # in order, each once
        delete_manifests: dict[str, None] = {}
        for raw in lists.values():
            for record in read_manifest_list(raw):
                key = key_of(record["manifest_path"])
                (delete_manifests if record["content"] == DELETES else copied)[key] = None
                if indexed:
                    copied[path_hashes_key(key)] = None  # the data paths it holds: the same after the move
        rewritten: dict[str, bytes] = {}  # delete manifests, rewritten
        for key, raw in zip(delete_manifests, pool.map(source.get, delete_manifests)):
            rewritten[key], moved = relocate_manifest(raw, old, new)
            copied.update(dict.fromkeys(key_of(path) for path in moved))
        copy(list(copied))
        lengths = {new + key: len(body) for key, body in rewritten.items()}
        writes = [*rewritten.items(), *((key, relocate_manifest_list(raw, old, new, lengths)) for key, raw in lists.items())]
        list(pool.map(lambda write: files.put(*write), writes))
    location = new.rstrip("/")
    snapshots = [{**s, "manifest-list": new + key_of(s["manifest-list"])} for s in metadata["snapshots"]]
    return {**metadata, "location": location, "table-uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, location)),
            "snapshots": snapshots, "metadata-log": []}
