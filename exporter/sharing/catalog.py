"""Delta Sharing over lakeFS refs (delta-io/delta-sharing PROTOCOL.md): what a share offers, and
the protocol's answers for one shared table, streamed.

A share (config `sharing.shares`) is a set of repositories; a schema is a ref of one of them (a
branch, read through its branch table; a tag, through its export); a table is a table name. With
one repository the schema is the ref's name, with several `<repository>__<ref>` (repository names
hold no `_`). A ref whose name a client cannot address (`.`, `/`, `#`, ...) is not offered. A table
whose name a client cannot address (`delta-0.8.0`) is offered under a stable name it can
(`shared_name`: `delta-0_8_0_` and 8 hex digits of the name's SHA-256), the original in the listing
(`lakefsName`) and, when the table's metaData names none, as its metaData `name`. Share patterns
(`tables`) match the original name.

Versions are the shared location's own: a branch table's (`branch_table`), or a tag export's
(the source's, from its checkpoint on). A version's timestamp is the one its readers take: the
in-commit timestamp when the commit has one, else the log file's modification time (for a tag
export, the source's, from the manifest). File URLs are presigned (`presign`); no byte of data
passes through the service.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import re
from collections.abc import Iterable
from typing import NamedTuple

from exporter.config import ShareConfig
from exporter.errors import NotFound, NotShared, ShareNotFound
from exporter.lakefs.lake import Lake
from exporter.sharing.versions import Schema, SharedTable, branch_table, tag_export
from exporter.storage.layout import (
    branch_tables_root,
    commit_root,
    segment_name,
)
from exporter.storage.objectstore import ObjectStore

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")  # a name every client can put in `profile#share.schema.table`
_SEPARATOR = "__"
_DERIVED = re.compile(r".*_[0-9a-f]{8}")  # the shape of every name `shared_name` derives
log = logging.getLogger(__name__)


class TableName(NamedTuple):
    shared: str    # the name the share offers it under
    original: str  # its name in lakeFS (the export's folder)


def shared_name(name: str) -> str:
    """The name a share offers table `name` under: itself when every client can address it, else
    its unaddressable characters as `_`, then `_` and the first 8 hex digits of its SHA-256."""
    if NAME.fullmatch(name):
        return name
    return re.sub(r"[^A-Za-z0-9_-]", "_", re.sub(r"^-", "_", name)) + "_" + \
        hashlib.sha256(name.encode()).hexdigest()[:8]


# ------------------------------------------------------------------ what a share offers


class Catalog:
    """Shares, their schemas and tables, as one recipient may see them."""

    def __init__(self, lake: Lake, shares: Iterable[str]):
        self.lake, self.config, self.lakefs = lake, lake.config, lake.lakefs
        self.granted = {name.lower() for name in shares}

    def shares(self) -> list[ShareConfig]:
        return sorted((share for share in self.config.sharing.shares if share.name.lower() in self.granted),
                      key=lambda share: share.name)  # by name: the order pages follow

    def share(self, name: str) -> ShareConfig:
        for share in self.config.sharing.shares:
            if share.name.lower() == name.lower():
                if share.name.lower() not in self.granted:
                    raise NotShared(f"share {share.name!r} is not shared with this recipient")
                return share
        raise ShareNotFound(f"no share {name!r}")

    def schemas(self, share: ShareConfig) -> list[Schema]:
        found = []
        for repository in share.repositories:
            store = self._store(repository)
            for branch in self.lakefs.list_branches(repository):
                if _offered(branch, share.refs) and store.list_folders(branch_tables_root(self.config, branch)):
                    found.append(Schema(_schema_name(share, repository, branch), repository, branch, "branch"))
            for tag, commit_id in self.lakefs.list_tags(repository):
                if _offered(tag, share.refs):
                    found.append(Schema(_schema_name(share, repository, tag), repository, tag, "tag", commit_id))
        return sorted(found, key=lambda schema: schema.name)

    def schema(self, share: ShareConfig, name: str) -> Schema:
        repository, ref = _split_schema(share, name)
        if repository is None or not _offered(ref, share.refs):
            raise ShareNotFound(f"no schema {name!r} in share {share.name!r}")
        branches = self.lakefs.list_branches(repository)
        if ref in branches:
            return Schema(name, repository, ref, "branch")
        for tag, commit_id in self.lakefs.list_tags(repository):
            if tag == ref:
                return Schema(name, repository, ref, "tag", commit_id)
        raise ShareNotFound(f"no schema {name!r} in share {share.name!r}: {repository!r} has no branch or tag {ref!r}")

    def tables(self, share: ShareConfig, schema: Schema) -> list[TableName]:
        store = self._store(schema.repository)
        root = branch_tables_root(self.config, schema.ref) if schema.kind == "branch" else \
            commit_root(self.config, schema.ref, schema.commit_id)
        names = [segment_name(folder) for folder in store.list_folders(root)]
        by_shared: dict[str, list[str]] = {}
        for name in names:
            if _matches(name, share.tables):
                by_shared.setdefault(shared_name(name), []).append(name)
        for shared, originals in by_shared.items():
            if len(originals) > 1:  # two names one shared name: neither is offered, rather than the wrong one
                log.warning("tables %s of %s@%s share the name %r: none is offered", sorted(originals),
                            schema.repository, schema.ref, shared)
        return sorted(TableName(shared, originals[0]) for shared, originals in by_shared.items() if len(originals) == 1)

    def table(self, share_name: str, schema_name: str, table: str) -> "SharedTable":
        share = self.share(share_name)
        schema = self.schema(share, schema_name)
        original = table
        if not NAME.fullmatch(table):
            raise NotShared(f"table {table!r} is not in share {share.name!r}")
        if _DERIVED.fullmatch(table):  # a derived name is one the listing gives: its original is found there
            original = next((name.original for name in self.tables(share, schema) if name.shared == table), table)
        if not _matches(original, share.tables):
            raise NotShared(f"table {table!r} is not in share {share.name!r}")  # whether it exists is not theirs to learn
        read = branch_table if schema.kind == "branch" else tag_export
        store = self._store(schema.repository)
        shared = read(self.config, store, schema, original, self.lake.read_scope(schema.repository))
        shared.shared_as = table
        return shared

    def _store(self, repository: str) -> ObjectStore:
        try:
            return self.lake.store(repository)
        except NotFound:
            raise ShareNotFound(f"repository {repository!r} of this share does not exist") from None


def _offered(name: str, patterns: Iterable[str]) -> bool:
    return bool(NAME.fullmatch(name)) and _matches(name, patterns)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _schema_name(share: ShareConfig, repository: str, ref: str) -> str:
    return ref if len(share.repositories) == 1 else f"{repository}{_SEPARATOR}{ref}"


def _split_schema(share: ShareConfig, name: str) -> tuple[str | None, str]:
    if len(share.repositories) == 1:
        return share.repositories[0], name
    repository, separator, ref = name.partition(_SEPARATOR)
    return (repository if separator and repository in share.repositories else None), ref


# ------------------------------------------------------------------ one shared table


# ------------------------------------------------------------------ the answers
