"""Table descriptors (`_lakefs_tables/<name>.yaml`, lakeFS's convention) and which tables a commit changed."""

from __future__ import annotations

import itertools
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml

from exporter.errors import DescriptorError
from exporter.kept import Kept
from exporter.lakefs.client import PAGE_SIZE, LakeFS

DESCRIPTORS_PREFIX = "_lakefs_tables/"
# (descriptor path, content checksum) -> what parse_descriptor made of it: a descriptor is read
# once per content, not once per commit
_parsed: Kept[tuple[str, str], "TableDescriptor | None | DescriptorError"] = Kept()


@dataclass(frozen=True)
class TableDescriptor:
    name: str
    path: str  # from the repository root, no leading or trailing slash
    descriptor: str  # the descriptor's own path, e.g. `_lakefs_tables/events.yaml`
    # its `checks:` section as written, read by the merge gates (`exporter.checks.rules`) alone: a
    # rule with a typo blocks a merge, never an export
    checks: Any = field(default=None, compare=False)

    @property
    def prefix(self) -> str:
        return self.path + "/"


@dataclass(frozen=True)
class Discovery:
    tables: list[TableDescriptor]
    errors: list[DescriptorError]  # one per bad descriptor; the other tables still export


def parse_descriptor(descriptor: str, raw: bytes) -> TableDescriptor | None:
    """A Delta table descriptor, `None` for another table type, `DescriptorError` when invalid."""
    try:
        document = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise DescriptorError(descriptor, f"not valid YAML: {exc}") from None
    if not isinstance(document, dict):
        raise DescriptorError(descriptor, "expected a mapping with `name`, `type` and `path`")
    table_type = document.get("type", "delta")
    if table_type != "delta":
        return None
    name, path = document.get("name"), document.get("path")
    if not isinstance(name, str) or not name.strip():
        raise DescriptorError(descriptor, "`name` is required")
    name = name.strip()  # checked as it is used: `" .."` is `..`
    if "/" in name or name in (".", ".."):
        raise DescriptorError(descriptor, f"`name` {name!r} must not contain `/` or be `.` or `..`; it names the "
                                          "export folder")
    if not isinstance(path, str) or not path.strip("/ "):
        raise DescriptorError(descriptor, "`path` is required (the table's folder from the repository root)")
    if path.startswith("/") or "://" in path:
        raise DescriptorError(descriptor, f"`path` {path!r} must be relative to the repository root")
    if ".." in path.split("/"):
        raise DescriptorError(descriptor, f"`path` {path!r} escapes the repository")
    return TableDescriptor(name=name, path=posixpath.normpath(path).strip("/"), descriptor=descriptor,
                           checks=document.get("checks"))


def discover_tables(lakefs: LakeFS, repository: str, ref: str) -> Discovery:
    tables: dict[str, TableDescriptor] = {}
    errors: list[DescriptorError] = []
    duplicates: set[str] = set()
    for entry in lakefs.list_objects(repository, ref, DESCRIPTORS_PREFIX, delimiter="/"):
        descriptor = entry.path
        if entry.path_type != "object" or not descriptor.endswith((".yaml", ".yml")):
            continue
        parsed = _read_descriptor(lakefs, repository, ref, descriptor, entry.checksum)
        if isinstance(parsed, DescriptorError):
            errors.append(parsed)
            continue
        table = parsed
        if table is None:
            continue
        if table.name in tables:
            duplicates.add(table.name)
            errors.append(DescriptorError(descriptor, f"table name {table.name!r} is also used by "
                                          f"{tables[table.name].descriptor}; neither is exported"))
            continue
        tables[table.name] = table
    return Discovery([t for name, t in sorted(tables.items()) if name not in duplicates], errors)


def _read_descriptor(lakefs: LakeFS, repository: str, ref: str, descriptor: str,
                     checksum: str | None) -> TableDescriptor | None | DescriptorError:
    def parsed() -> TableDescriptor | None | DescriptorError:
        try:
            return parse_descriptor(descriptor, lakefs.get_object(repository, ref, descriptor))
        except DescriptorError as exc:
            return exc

    return _parsed.keep((descriptor, checksum), parsed) if checksum else parsed()


def changed_tables(lakefs: LakeFS, repository: str, commit_id: str, tables: list[TableDescriptor]) -> list[TableDescriptor]:
    """Tables with any change under their path or in their descriptor since the first parent: from
    one page of the commit's whole diff when it fits, else one diff per table."""
    commit = lakefs.commit(repository, commit_id)
    if not commit.parents:
        return list(tables)
    parent = commit.parents[0]
    whole = commit_changes(lakefs, repository, parent, commit.id)
    if whole is not None:
        changed = {c["path"] for c in whole}
        return [table for table in tables
                if table.descriptor in changed or any(path.startswith(table.prefix) for path in changed)]
    changed_descriptors = {d["path"] for d in lakefs.diff(repository, parent, commit_id, prefix=DESCRIPTORS_PREFIX)}
    return [table for table in tables
            if table.descriptor in changed_descriptors
            or next(iter(lakefs.diff(repository, parent, commit_id, prefix=table.prefix, amount=1)), None) is not None]


# (repository, parent id, commit id) -> the commit's whole diff when one page holds it, else None:
# two commits never change, so the tables a commit changed and then each table's own changes (its
# export, its diff) are answered from one call in a process
_commit_diffs: Kept[tuple[str, str, str], "list[dict] | None"] = Kept(entries=64)


def commit_changes(lakefs: LakeFS, repository: str, parent_id: str, commit_id: str) -> list[dict] | None:
    """Every entry of the diff between two commit ids, or None when it is longer than a page."""
    def whole() -> list[dict] | None:
        changes = list(itertools.islice(lakefs.diff(repository, parent_id, commit_id), PAGE_SIZE + 1))
        return changes if len(changes) <= PAGE_SIZE else None

    return _commit_diffs.keep((repository, parent_id, commit_id), whole)


def changes_under(lakefs: LakeFS, repository: str, parent_id: str, commit_id: str, prefix: str) -> Iterable[dict]:
    """The diff entries under `prefix` between two commit ids: from the commit's whole diff when this
    process has it, else one diff of the prefix."""
    whole = _commit_diffs.get((repository, parent_id, commit_id))
    if whole is not None:
        return [change for change in whole if change["path"].startswith(prefix)]
    return lakefs.diff(repository, parent_id, commit_id, prefix=prefix)


@dataclass(frozen=True)
class TableChanges:
    """A commit's first parent and the diff entries under one table's folder since it (`path`,
    `type`): immutable facts the process that chose the tables to export holds, handed to each
    table's export (`known_changes`) instead of being asked of lakeFS again there."""

    parent: str
    changes: tuple[dict, ...]

    def as_message(self) -> dict:
        return {"parent": self.parent, "changes": [{"path": c["path"], "type": c.get("type")} for c in self.changes]}

    @classmethod
    def from_message(cls, message: dict) -> TableChanges:
        return cls(message["parent"], tuple(message["changes"]))


MAX_KNOWN_CHANGES = 200  # more changes under a table are not handed over: its export lists them itself


def known_changes(lakefs: LakeFS, repository: str, commit_id: str, table: TableDescriptor) -> TableChanges | None:
    """The table's changes since the commit's first parent, when this process holds the commit's
    whole diff (`commit_changes`, as `changed_tables` read it) and they are at most MAX_KNOWN_CHANGES;
    else None."""
    commit = lakefs.commit(repository, commit_id)
    if not commit.parents:
        return None
    whole = _commit_diffs.get((repository, commit.parents[0], commit.id))
    if whole is None:
        return None
    under = tuple(change for change in whole if change["path"].startswith(table.prefix))
    return TableChanges(commit.parents[0], under) if len(under) <= MAX_KNOWN_CHANGES else None


@dataclass
class Selection:
    """The tables a commit exports, and what was asked for but cannot be."""

    tables: list[TableDescriptor]
    refused: dict[str, str]  # descriptor path (or a name asked for) -> why it is not exported


def tables_to_export(lakefs: LakeFS, repository: str, commit_id: str, names: Iterable[str] = (),
                     every_table: bool = False) -> Selection:
    """The one rule for which tables a commit exports: the named ones, or all (a tag), or those the
    commit changed since its first parent. An invalid descriptor is refused, never guessed at."""
    discovery = discover_tables(lakefs, repository, commit_id)
    refused = {error.descriptor: str(error) for error in discovery.errors}
    tables, names = discovery.tables, set(names)
    if names:
        refused.update((name, "no such table in _lakefs_tables/") for name in sorted(names - {t.name for t in tables}))
        tables = [t for t in tables if t.name in names]
    elif not every_table:
        tables = changed_tables(lakefs, repository, commit_id, tables)
    return Selection(tables, refused)
