"""Prune's collection of the Iceberg files per-commit exports share (`layout.iceberg_files_location`).

An export's Iceberg table names files other exports wrote (an export derived from another names
the other's manifests and manifest lists where they are), so those files outlive the export that
wrote them: one is deleted once no complete export's Iceberg table names it. An export deriving
its table from another reads the other's metadata while prune may remove that export; it names
what it read within its time limit. So a file is deleted only when two collections `grace` apart
both found it named by no table (the first records it in the table's `CANDIDATES`), and a file
younger than `grace` is never a candidate (an export being written).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from exporter.config import Config
from exporter.errors import NotFound
from exporter.export.manifest import ExportManifest, IcebergState, iceberg_state
from exporter.iceberg import names
from exporter.iceberg.manifests import DELETES, read_manifest, read_manifest_list
from exporter.storage.layout import LATEST, exports_root, iceberg_files_root
from exporter.storage.objectstore import ObjectStore

CANDIDATES = "_unnamed.json"  # in a table's folder: {key: when a collection first found it named by no table}


@dataclass
class Collection:
    deleted: list[str] = field(default_factory=list)  # keys deleted (dry run: that would be)
    candidates: int = 0  # files named by no table, deleted by a later collection if still so


def collect_iceberg_files(store: ObjectStore, config: Config, now: float, grace: float,
                          dry_run: bool = False) -> Collection:
    """Delete the Iceberg files of every table's folder that no complete export's table names."""
    root = iceberg_files_root(exports_root(config))
    collection = Collection()
    tables = {}  # table segment -> metadata locations of its complete exports' Iceberg tables, read once
    for table in store.list_folders(root):
        folder = f"{root}{table}/"
        candidates_key = folder + CANDIDATES
        ages = {name: modified for name, _, modified in store.list_objects(folder) if name != candidates_key}
        previous = _candidates(store, candidates_key)
        old = {name for name, modified in ages.items() if now - modified >= grace}
        if not old and not previous:
            continue
        if not tables:
            tables = _iceberg_tables(store, config)
        named = _named_keys(store, tables.get(table, ()))
        unnamed = old - named
        due = sorted(key for key in unnamed if now - previous.get(key, now) >= grace)
        kept = {key: previous.get(key, now) for key in sorted(unnamed) if key not in due}
        collection.deleted += due
        collection.candidates += len(kept)
        if dry_run:
            continue
        store.delete(due)
        if kept:
            store.put(candidates_key, json.dumps(kept).encode(), "application/json")
        elif previous:
            store.delete([candidates_key])
    return collection


def _candidates(store: ObjectStore, key: str) -> dict[str, float]:
    try:
        return json.loads(store.get(key))
    except NotFound:
        return {}


def _iceberg_tables(store: ObjectStore, config: Config) -> dict[str, list[str]]:
    """Table segment -> the metadata locations of the Iceberg tables of its complete per-commit exports."""
    root = exports_root(config)
    tables: dict[str, list[str]] = {}
    for ref in store.list_folders(root):
        for commit in store.list_folders(f"{root}{ref}/"):
            if commit == LATEST:
                continue  # branch tables keep their Iceberg files at their own location
            for table in store.list_folders(f"{root}{ref}/{commit}/"):
                try:
                    record = ExportManifest.read(store, f"{root}{ref}/{commit}/{table}/").iceberg
                except NotFound:
                    continue
                if iceberg_state(record) is IcebergState.WRITTEN:
                    tables.setdefault(table, []).append(record["metadata_location"])
    return tables


def _named_keys(store: ObjectStore, metadata_locations: Iterable[str]) -> set[str]:
    """The keys of every file the tables at `metadata_locations` name: manifest lists, manifests
    (and their path hashes), delete files; each list and delete manifest read once."""
    base = store.uri("")
    lists: set[str] = set()
    for location in metadata_locations:
        try:
            lists |= {snapshot["manifest-list"] for snapshot in json.loads(store.get_uri(location))["snapshots"]}
        except NotFound:
            continue  # pruned meanwhile: it names nothing now
    named = set(lists)
    manifests: dict[str, int] = {}
    for uri in lists:
        try:
            manifests.update((r["manifest_path"], r["content"]) for r in read_manifest_list(store.get_uri(uri)))
        except NotFound:
            continue
    for uri, content in manifests.items():
        named |= {uri, names.path_hashes_key(uri)}
        if content == DELETES:
            try:
                named |= {entry["data_file"]["file_path"] for entry in read_manifest(store.get_uri(uri))}
            except NotFound:
                continue
    return {uri[len(base):] for uri in named if uri.startswith(base)}
