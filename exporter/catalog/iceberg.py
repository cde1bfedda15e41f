"""What the Iceberg REST catalog answers (issue 26), without HTTP: its namespaces, the tables of a
namespace, a table's current metadata, and the objects its readers may have signed.

A namespace has two levels, [repository, ref] (PyIceberg prints it `repository.ref`): a repository
name holds no `.`, but a ref may (`v1.2`, `release/v1.2`), so one level `repository.ref` could not
be split back. The namespaces of a repository are its branches and tags with exports (a folder under
the exports root); a lookup of any such ref works. A branch's tables are its branch tables with a
written Iceberg table (their state records it: one stable table whose snapshots follow the branch),
else each table its head holds, from the newest complete export along its first parents (a commit
exports only the tables it changed, and a new export is read once complete); a tag's tables are the
exports of its commit whose manifest records a written Iceberg table.

Readers sign their object requests through the catalog (S3 remote signing): GET or HEAD of one
object its readers read, and nothing else: a file of the table's own Iceberg location (metadata,
manifests, delete files) or a data file one of its snapshots names (`ReadersObjects`), never an
object of another repository whose storage namespace lies inside this one's; signed by `Presigner`,
the one SigV4.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

from exporter.errors import NoSuchIcebergTable, NoSuchNamespace, NotFound, SignatureRefused
from exporter.branch_tables.state import read_state
from exporter.export.manifest import ICEBERG, ExportManifest, IcebergState, iceberg_state
from exporter.iceberg import names
from exporter.iceberg.manifests import DATA, DELETED, PATH_HASHES, keeps_path_hashes, read_manifest, \
    read_manifest_list
from exporter.iceberg.path_hashes import digests, hashes_of, path_hash
from exporter.kept import Kept
from exporter.lakefs.descriptors import discover_tables
from exporter.lakefs.lake import Lake
from exporter.storage.layout import (branch_table_location, branch_tables_root, export_location,
                                     exports_root, iceberg_table_files, location_segment, segment_name)
from exporter.storage.objectstore import ObjectStore
from exporter.storage.presign import Presigner
from exporter.storage.scope import S3_SCHEMES, folders, plain_address, within
from exporter.storage.vended import repository_data, vend
from exporter.threads import io_pool

SIGNED_SECONDS = 900  # a signed request's lifetime: readers use it at once
SIGNED_METHODS = ("GET", "HEAD")
SIGNABLE_TABLES = 64  # tables whose readers' objects are kept (8 bytes a data file); more are read again
MANIFESTS_KEPT = 16_384  # manifests whose data files are kept (manifests never change)
LOOK_BACK = 50  # first-parent commits searched for a table the current commit did not export
NAMESPACES_SECONDS = 10.0  # every repository's storage namespace is listed again after this (a new nested one counts)


@dataclass(frozen=True)
class RefNamespace:
    repository: str
    ref: str
    commit_id: str  # the ref's current commit


@dataclass(frozen=True)
class CatalogTable:
    repository: str
    ref: str
    commit_id: str
    name: str
    table_path: str  # in the repository: the table's current one
    # every path in the repository the versions a reader can reach were read from, the current one
    # last: what lakeFS must authorize a reader of the table for (an export's: its one table_path)
    table_paths: tuple[str, ...]
    location: str  # the export's or branch table's, relative to the storage namespace
    metadata_location: str
    branch_table: bool = False  # a branch's stable table, not the export of one commit


class IcebergCatalog:
    """The catalog's lookups, as the service's lakeFS user and object-store keys see them; who may
    read which repository and table is the request's grant's business (`hooks.grant`)."""

    def __init__(self, lake: Lake):
        self.lake, self.config, self.lakefs = lake, lake.config, lake.lakefs
        # what readers of a table read, by its metadata file (a new one for every change)
        self._objects: Kept[tuple[str, str], ReadersObjects] = Kept(entries=SIGNABLE_TABLES)
        self._manifest_files: Kept[str, np.ndarray] = Kept(entries=MANIFESTS_KEPT)
        self._namespaces: Kept[str, dict[str, str]] = Kept(entries=1, seconds=NAMESPACES_SECONDS)
        self._held: Kept[tuple[str, str], dict[str, str]] = Kept(entries=1024)  # a commit's tables: name -> path
        self._lines: Kept[tuple[str, str], list[str]] = Kept(entries=1024)  # a commit's first parents
        # complete exports', read by signatures: kept once their Iceberg record is final (not rewritten again)
        self._manifests: Kept[tuple[str, str], ExportManifest] = Kept()
        # a branch table's state (None: no branch table), read again after 5 s: each append rewrites it
        self._states: Kept[tuple[str, str], dict | None] = Kept(seconds=5.0)

    def repositories(self) -> list[str]:
        return sorted(self.lakefs.list_repositories())

    def refs(self, repository: str) -> list[str]:
        """The repository's branches and tags that have exports, by name."""
        exported = {segment_name(folder) for folder in self._store(repository).list_folders(exports_root(self.config))}
        names = {*self.lakefs.list_branches(repository), *(tag for tag, _ in self.lakefs.list_tags(repository))}
        return sorted(exported & names)

    def namespace(self, repository: str, ref: str) -> RefNamespace:
        """The ref and its current commit; NoSuchNamespace unless the ref has exports and resolves.
        One listing call of one key, however many commits the ref has exported."""
        store = self._store(repository)
        if not store.has_objects(f"{exports_root(self.config)}{location_segment(ref)}/"):
            raise NoSuchNamespace(f"no namespace {repository}.{ref}: {ref!r} has no exports in {repository!r}")
        try:
            return RefNamespace(repository, ref, self.lakefs.commit(repository, ref).id)
        except NotFound:
            raise NoSuchNamespace(f"no namespace {repository}.{ref}: no branch or tag {ref!r}") from None

    def tables(self, namespace: RefNamespace) -> list[CatalogTable]:
        """The ref's tables that have an Iceberg table, by name: its branch tables', and each table its
        current commit holds (`current`)."""
        store = self._store(namespace.repository)
        names = {segment_name(folder) for folder in store.list_folders(branch_tables_root(self.config, namespace.ref))}
        names |= self._names_at(namespace.repository, namespace.commit_id)
        found = []
        for name in names:
            try:
                found.append(self.current(namespace, name))
            except NoSuchIcebergTable:
                continue
        return sorted(found, key=lambda table: table.name)

    def current(self, namespace: RefNamespace, name: str) -> CatalogTable:
        """The table `name` as the ref's current commit holds it: its branch table, else the export of
        the current commit, else (the commit did not change it, or its export is still being written)
        the newest complete export along the ref's first parents, within `LOOK_BACK` commits: the
        same table, since no commit in between exported it, or the one readers had until the new
        export is complete. A table the current commit no longer holds has none."""
        try:
            return self.table(namespace.repository, namespace.ref, namespace.commit_id, name)
        except NoSuchIcebergTable as at_head:
            if name not in self._names_at(namespace.repository, namespace.commit_id):
                raise
            for commit_id in self._line(namespace.repository, namespace.commit_id)[1:]:
                try:
                    return self.table(namespace.repository, namespace.ref, commit_id, name)
                except NoSuchIcebergTable:
                    continue
            raise at_head

    def _names_at(self, repository: str, commit_id: str) -> set[str]:
        return set(self._held_at(repository, commit_id))

    def _held_at(self, repository: str, commit_id: str) -> dict[str, str]:
        """The tables a commit holds (its valid descriptors), name -> path: kept, commits never change."""
        return self._held.keep((repository, commit_id), lambda: {
            table.name: table.path for table in discover_tables(self.lakefs, repository, commit_id).tables})

    def _line(self, repository: str, commit_id: str) -> list[str]:
        """The commit and its first parents, newest first, `LOOK_BACK` at most: kept, commits never change."""
        return self._lines.keep((repository, commit_id), lambda: [
            commit.id for commit in self.lakefs.log(repository, commit_id, amount=LOOK_BACK, first_parent=True)])

    def table(self, repository: str, ref: str, commit_id: str, name: str) -> CatalogTable:
        """The Iceberg table of `name` through `ref`: its branch table's when it has one written,
        else that of the export of `name` at `commit_id`."""
        location = branch_table_location(self.config, ref, name)
        state = self._state(repository, location)
        if state is not None and iceberg_state(state.get(ICEBERG)) is IcebergState.WRITTEN:
            return CatalogTable(repository, ref, commit_id, name, state["table_path"], tuple(state["table_paths"]),
                                location, state[ICEBERG]["metadata_location"], branch_table=True)
        location = export_location(self.config, ref, commit_id, name)
        manifest = self._manifest(repository, location)
        if manifest is None:
            raise NoSuchIcebergTable(f"no table {name!r} at {ref!r}: commit {commit_id} has no complete export of it")
        record = manifest.iceberg or {"state": "off", "reason": "exported with iceberg.enabled off"}
        if record["state"] != IcebergState.WRITTEN:  # the reason may name the table's columns: for its readers only
            raise NoSuchIcebergTable(f"no Iceberg table {name!r} at {ref!r}: its export has none "
                                     f"({record['state']}: {record.get('reason', '')})", (manifest.table_path,))
        return CatalogTable(repository, ref, commit_id, name, manifest.table_path, (manifest.table_path,), location,
                            record["metadata_location"])

    def metadata(self, table: CatalogTable) -> dict:
        """The table's current metadata (its `metadata.json`)."""
        return json.loads(self._store(table.repository).get_uri(table.metadata_location))

    def storage_properties(self, repository: str) -> dict[str, str]:
        """What a reader needs to address the repository's store (no credentials)."""
        store = self.config.object_store_for(self._storage_namespace(repository))
        return {"s3.region": store.region, "client.region": store.region,  # PyIceberg's, Iceberg Java's
                **({"s3.endpoint": store.endpoint} if store.endpoint else {})}

    def storage_credentials(self, table: CatalogTable, seconds: int) -> list[dict]:
        """The spec's `storage-credentials` for a reader of `table`: one read-only credential for the
        objects lakeFS wrote for its repository, the table's own location and its table's Iceberg
        files (`layout.iceberg_table_files`; `exporter.storage.vended`:
        no nested repository's, nothing else of `_lakefs/`), listed for the namespace and for the
        table's own location, since DuckDB 1.4.4 scopes a lone credential to the metadata file itself
        (duckdb-iceberg src/storage/iceberg_table_information.cpp)."""
        namespace, store = self._storage_namespace(table.repository), self._store(table.repository)
        own = folders(dict.fromkeys([store.uri(table.location), store.uri(iceberg_table_files(table.location))]))
        readable = folders([repository_data(namespace), *own])
        credential = vend(self.config.object_store_for(namespace), readable, self._nested(table.repository),
                          seconds, self.config.iceberg.vended_credentials_role_arn)
        properties = {**self.storage_properties(table.repository), "s3.path-style-access": "true",
                      **credential.s3_properties()}
        prefixes = (*folders([namespace]), *own)
        return [{"prefix": prefix, "config": properties} for prefix in prefixes]

    def signed_url(self, table: CatalogTable, method: str, url: str) -> str:
        """A presigned URL for the request `method url` of a reader of `table` (S3 remote signing);
        SignatureRefused unless it reads one object the table's readers read (`readers_objects`)."""
        if method.upper() not in SIGNED_METHODS:
            raise SignatureRefused(f"only {' and '.join(SIGNED_METHODS)} requests are signed, not {method}")
        presigner = Presigner(self.config, SIGNED_SECONDS)
        address = presigner.address_of(url)
        if address is None:
            raise SignatureRefused(f"{url} is not a request for one object of a configured object store")
        if not self.readers_objects(table).holds(address):
            raise SignatureRefused(f"{address} is not an object readers of table {table.name!r} read: a data file "
                                   "its snapshots name, or a file of its Iceberg table")
        return presigner.presign(address, method.upper()).url

    def readers_objects(self, table: CatalogTable) -> "ReadersObjects":
        """What readers of the table read: the files of its own location, the manifest lists,
        manifests and delete files its snapshots name (its Iceberg files may be another export's),
        and the data files they name (read once per metadata file, each manifest once)."""
        return self._objects.keep((table.repository, table.metadata_location), lambda: self._readers_objects(table))

    def _readers_objects(self, table: CatalogTable) -> "ReadersObjects":
        store = self._store(table.repository)
        metadata = self.metadata(table)
        lists = list(dict.fromkeys(snapshot["manifest-list"] for snapshot in metadata.get("snapshots") or []))
        records = {record["manifest_path"]: record for uri in lists for record in read_manifest_list(store.get_uri(uri))}
        manifests = list(records)
        hashed = (metadata.get("properties") or {}).get(PATH_HASHES) == "true"
        with io_pool(8) as pool:
            hashes = list(pool.map(lambda path: self._manifest_files.keep(path, lambda: _named_files(
                store, path, hashed and records[path]["content"] == DATA and keeps_path_hashes(records[path]))),
                manifests))
        named = digests([*lists, *manifests])
        files = np.unique(np.concatenate([named, *hashes]))
        return ReadersObjects(folders([store.uri(table.location)]), files, self._nested(table.repository))

    def _nested(self, repository: str) -> tuple[str, ...]:
        """The storage namespaces of other repositories that lie inside this one's (lakeFS accepts them)."""
        namespaces = self._namespaces.keep("", self.lakefs.storage_namespaces)
        own = folders([self._storage_namespace(repository)])
        return folders([namespace for name, namespace in namespaces.items()
                        if name != repository and within(namespace.rstrip("/") + "/", own)])

    def _manifest(self, repository: str, location: str) -> ExportManifest | None:
        try:
            return self._manifests.keep((repository, location),
                                        lambda: ExportManifest.read(self._store(repository), location),
                                        final=lambda manifest: iceberg_state(manifest.iceberg) is not IcebergState.PENDING)
        except NotFound:
            return None

    def _state(self, repository: str, location: str) -> dict | None:
        """A branch table's state (None: no branch table), read at most every few seconds."""
        return self._states.keep((repository, location), lambda: read_state(self._store(repository), location))

    def _storage_namespace(self, repository: str) -> str:
        try:
            return self.lakefs.storage_namespace(repository)  # the client keeps it a minute
        except NotFound:
            raise NoSuchNamespace(f"no repository {repository!r}") from None

    def _store(self, repository: str) -> ObjectStore:
        return self.lake.stores.at(self._storage_namespace(repository))


@dataclass(frozen=True)
class ReadersObjects:
    """The objects readers of one Iceberg table read: under its own location (`folders`), or a file
    its snapshots name (`files`: hashes of plain addresses, sorted: manifest lists, manifests, delete
    and data files); never one of another repository nested inside (`excluded`)."""

    location: tuple[str, ...]
    files: np.ndarray
    excluded: tuple[str, ...]

    def holds(self, address: str) -> bool:
        plain = plain_address(address)  # None: no object's address, or one with a dot or empty segment
        if plain is None or within(plain, self.excluded):
            return False
        if within(plain, self.location):
            return True
        # the object's name decoded once, as a manifest names it, under each scheme naming S3's objects
        _, _, bucket_and_key = plain.partition("://")
        for scheme in S3_SCHEMES:
            wanted = path_hash(f"{scheme}://{bucket_and_key}")
            at = int(np.searchsorted(self.files, wanted))
            if at < len(self.files) and self.files[at] == wanted:
                return True
        return False


def _named_files(store: ObjectStore, manifest_path: str, hashed: bool) -> np.ndarray:
    """The hashes of the files a manifest's live entries name (data files, or delete files). A data
    manifest that keeps its path hashes (`PATH_HASHES`, `keeps_path_hashes`) is not read: the
    hashes beside it are these (8 bytes a file; decoding a manifest's Avro costs about 22 µs an
    entry, 22 s of a first signature at 1,000,000 files); one without them is read."""
    if hashed:
        try:
            return hashes_of(store.get_uri(names.path_hashes_key(manifest_path)))
        except NotFound:
            pass  # a manifest written before its table kept path hashes
    return digests([entry["data_file"]["file_path"] for entry in read_manifest(store.get_uri(manifest_path))
                    if entry["status"] != DELETED])
