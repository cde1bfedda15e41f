"""What the Iceberg REST catalog answers (issue 26), without HTTP: its namespaces, the tables of a
namespace, a table's current metadata, and the objects its readers may have signed.

A namespace has two levels, [repository, ref] (PyIceberg prints it `repository.ref`): a repository
name holds no `.`, but a ref may (`v1.2`, `release/v1.2`), so one level `repository.ref` could not
be split back. The namespaces of a repository are its branches and tags with exports (a folder under
the exports root); a lookup of any such ref works. A branch's tables are its branch tables with a
written Iceberg table (their state records it: one stable table whose snapshots follow the branch),
else the exports of its head; a tag's tables are the exports of its commit whose manifest records
a written Iceberg table. Nothing is listed beyond a folder listing and one small file per table.

Readers sign their object requests through the catalog (S3 remote signing): GET or HEAD of one
object under the repository's storage namespace (the data files), outside `_lakefs/` except the
table's own export (its Iceberg metadata and delete files); signed by `Presigner`, the one SigV4.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from exporter.config import Config
from exporter.errors import NoSuchIcebergTable, NoSuchNamespace, NotFound, SignatureRefused
from exporter.export.branch_table import read_state
from exporter.export.iceberg_metadata import ICEBERG, PENDING
from exporter.kept import Kept
from exporter.lakefs.client import LakeFS
from exporter.storage.layout import (MANIFEST, branch_table_location, branch_tables_root, commit_root, export_location,
                                     exports_root, location_segment, segment_name)
from exporter.storage.objectstore import ObjectStore
from exporter.storage.presign import Presigner, folders, within

SIGNED_SECONDS = 900  # a signed request's lifetime: readers use it at once
SIGNED_METHODS = ("GET", "HEAD")


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
    table_path: str  # in the repository: what lakeFS authorizes a reader of the table for
    location: str  # the export's or branch table's, relative to the storage namespace
    metadata_location: str
    branch_table: bool = False  # a branch's stable table, not the export of one commit


class IcebergCatalog:
    """The catalog's lookups, as the service's lakeFS user and object-store keys see them; who may
    read which repository and table is the caller's business (`hooks.deps.require_reader`)."""

    def __init__(self, config: Config, lakefs: LakeFS):
        self.config, self.lakefs = config, lakefs
        # complete exports', read by signatures: kept once their Iceberg record is final (not rewritten again)
        self._manifests: Kept[tuple[str, str], dict] = Kept()
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
        """The ref and its current commit; NoSuchNamespace unless the ref has exports and resolves."""
        store = self._store(repository)
        if not store.list_folders(f"{exports_root(self.config)}{location_segment(ref)}/"):
            raise NoSuchNamespace(f"no namespace {repository}.{ref}: {ref!r} has no exports in {repository!r}")
        try:
            return RefNamespace(repository, ref, self.lakefs.commit(repository, ref).id)
        except NotFound:
            raise NoSuchNamespace(f"no namespace {repository}.{ref}: no branch or tag {ref!r}") from None

    def tables(self, namespace: RefNamespace) -> list[CatalogTable]:
        """The ref's tables that have an Iceberg table (its branch tables', its current commit's exports'), by name."""
        store = self._store(namespace.repository)
        names = {segment_name(folder) for root in (commit_root(self.config, namespace.ref, namespace.commit_id),
                                                   branch_tables_root(self.config, namespace.ref))
                 for folder in store.list_folders(root)}
        found = []
        for name in names:
            try:
                found.append(self.table(namespace.repository, namespace.ref, namespace.commit_id, name))
            except NoSuchIcebergTable:
                continue
        return sorted(found, key=lambda table: table.name)

    def table(self, repository: str, ref: str, commit_id: str, name: str) -> CatalogTable:
        """The Iceberg table of `name` through `ref`: its branch table's when it has one written,
        else that of the export of `name` at `commit_id`."""
        location = branch_table_location(self.config, ref, name)
        state = self._state(repository, location)
        if state is not None and (state.get(ICEBERG) or {}).get("state") == "written":
            return CatalogTable(repository, ref, commit_id, name, state["table_path"], location,
                                state[ICEBERG]["metadata_location"], branch_table=True)
        location = export_location(self.config, ref, commit_id, name)
        manifest = self._manifest(repository, location)
        if manifest is None:
            raise NoSuchIcebergTable(f"no table {name!r} at {ref!r}: commit {commit_id} has no complete export of it")
        record = manifest.get(ICEBERG) or {"state": "off", "reason": "exported with iceberg.enabled off"}
        if record["state"] != "written":
            raise NoSuchIcebergTable(f"no Iceberg table {name!r} at {ref!r}: its export has none "
                                     f"({record['state']}: {record.get('reason', '')})")
        return CatalogTable(repository, ref, commit_id, name, manifest["table_path"], location, record["metadata_location"])

    def metadata(self, table: CatalogTable) -> dict:
        """The table's current metadata (its `metadata.json`)."""
        return json.loads(self._store(table.repository).get_uri(table.metadata_location))

    def storage_properties(self, repository: str) -> dict[str, str]:
        """What a reader needs to address the repository's store (no credentials)."""
        store = self.config.object_store_for(self._storage_namespace(repository))
        return {"s3.region": store.region, **({"s3.endpoint": store.endpoint} if store.endpoint else {})}

    def signed_url(self, table: CatalogTable, method: str, url: str) -> str:
        """A presigned URL for the request `method url` of a reader of `table` (S3 remote signing);
        SignatureRefused unless it reads one object the table's readers need."""
        if method.upper() not in SIGNED_METHODS:
            raise SignatureRefused(f"only {' and '.join(SIGNED_METHODS)} requests are signed, not {method}")
        presigner = Presigner(self.config, SIGNED_SECONDS)
        address = presigner.address_of(url)
        if address is None:
            raise SignatureRefused(f"{url} is not a request for one object of a configured object store")
        store = self._store(table.repository)
        own = within(address, folders([store.uri(table.location)]))
        if not own and not (within(address, folders([store.uri("")]))
                            and not within(address, folders([store.uri("_lakefs/")]))):
            raise SignatureRefused(f"{address} is outside what readers of table {table.name!r} read: the repository's "
                                   "storage namespace (but _lakefs/) and the table's export")
        return presigner.presign(address, method.upper()).url

    def _manifest(self, repository: str, location: str) -> dict | None:
        try:
            return self._manifests.keep((repository, location),
                                        lambda: json.loads(self._store(repository).get(location + MANIFEST)),
                                        final=lambda manifest: manifest.get(ICEBERG) != PENDING)
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
        return ObjectStore(self.config, self._storage_namespace(repository))
