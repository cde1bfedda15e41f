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
from exporter.iceberg.manifests import DELETES, FORMAT_VERSION, PATH_HASHES, path_hashes_key, read_manifest_list, \
    relocate_manifest, relocate_manifest_list

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
    lists = {key_of(s["manifest-list"]): source.get(key_of(s["manifest-list"])) for s in metadata["snapshots"]}
    copied: dict[str, None] = {}  # in order, each once
    rewritten: dict[str, bytes] = {}  # delete manifests, rewritten
    for raw in lists.values():
        for record in read_manifest_list(raw):
            key = key_of(record["manifest_path"])
            if record["content"] == DELETES and key not in rewritten:
                rewritten[key], moved = relocate_manifest(source.get(key), old, new)
                copied.update(dict.fromkeys(key_of(path) for path in moved))
            elif record["content"] != DELETES:
                copied[key] = None
            if indexed:
                copied[path_hashes_key(key)] = None  # the data paths it holds: the same after the move
    copy(list(copied))
    for key, body in rewritten.items():
        files.put(key, body)
    lengths = {new + key: len(body) for key, body in rewritten.items()}
    for key, raw in lists.items():
        files.put(key, relocate_manifest_list(raw, old, new, lengths))
    location = new.rstrip("/")
    snapshots = [{**s, "manifest-list": new + key_of(s["manifest-list"])} for s in metadata["snapshots"]]
    return {**metadata, "location": location, "table-uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, location)),
            "snapshots": snapshots, "metadata-log": []}
