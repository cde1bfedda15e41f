"""Delta Sharing over lakeFS refs (delta-io/delta-sharing PROTOCOL.md): what a share offers, and
the protocol's answers for one shared table, streamed.

A share (config `sharing.shares`) is a set of repositories; a schema is a ref of one of them (a
branch, read through its branch table; a tag, through its export); a table is a table name. With
one repository the schema is the ref's name, with several `<repository>__<ref>` (repository names
hold no `_`). A ref or table whose name a client cannot address (`.`, `/`, `#`, ...) is not offered.

Versions are the shared location's own: a branch table's (`branch_table`), or a tag export's
(the source's, from its checkpoint on). A version's timestamp is the one its readers take: the
in-commit timestamp when the commit has one, else the log file's modification time (for a tag
export, the source's, from the manifest). File URLs are presigned (`presign`); no byte of data
passes through the service.
"""

from __future__ import annotations

import bisect
import fnmatch
import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

from exporter.config import Config, ShareConfig
from exporter.delta.actions import commit_timestamp, parse_actions
from exporter.delta.deletion_vectors import ABSOLUTE, RELATIVE
from exporter.delta.live_files import LiveFiles
from exporter.delta.log import LOG_DIR, LogListing, commit_version, log_file_version, select_segment
from exporter.errors import ExporterError, NotFound
from exporter.export.readback import ExportedLog
from exporter.lakefs.client import LakeFS
from exporter.storage.layout import (
    MANIFEST,
    STATE,
    branch_table_location,
    branch_tables_root,
    commit_root,
    export_location,
    segment_name,
)
from exporter.storage.objectstore import ObjectStore
from exporter.storage.presign import PresignedUrl, Presigner

NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")  # a name every client can put in `profile#share.schema.table`
_SEPARATOR = "__"
# Reader features about the log's own layout: a recipient reads a flat list of files, never this log.
_LAYOUT_FEATURES = frozenset({"v2Checkpoint", "vacuumProtocolCheck", "checkpointProtection"})


class SharingError(ExporterError):
    """An answer other than success, in the protocol's terms: HTTP status and `errorCode`."""

    def __init__(self, status: int, error_code: str, message: str):
        super().__init__(message)
        self.status, self.error_code = status, error_code


def not_found(message: str) -> SharingError:
    return SharingError(404, "RESOURCE_DOES_NOT_EXIST", message)


def forbidden(message: str) -> SharingError:
    return SharingError(403, "PERMISSION_DENIED", message)


def invalid(message: str) -> SharingError:
    return SharingError(400, "INVALID_PARAMETER_VALUE", message)


def unsupported(message: str) -> SharingError:
    return SharingError(400, "UNSUPPORTED_OPERATION", message)


# ------------------------------------------------------------------ what a share offers


@dataclass(frozen=True)
class Schema:
    name: str
    repository: str
    ref: str
    kind: str  # "branch" or "tag"
    commit_id: str | None = None  # a tag's


class Catalog:
    """Shares, their schemas and tables, as one recipient may see them."""

    def __init__(self, config: Config, lakefs: LakeFS, shares: Iterable[str]):
        self.config, self.lakefs = config, lakefs
        self.granted = {name.lower() for name in shares}

    def shares(self) -> list[ShareConfig]:
        return sorted((share for share in self.config.sharing.shares if share.name.lower() in self.granted),
                      key=lambda share: share.name)  # by name: the order pages follow

    def share(self, name: str) -> ShareConfig:
        for share in self.config.sharing.shares:
            if share.name.lower() == name.lower():
                if share.name.lower() not in self.granted:
                    raise forbidden(f"share {share.name!r} is not shared with this recipient")
                return share
        raise not_found(f"no share {name!r}")

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
            raise not_found(f"no schema {name!r} in share {share.name!r}")
        branches = self.lakefs.list_branches(repository)
        if ref in branches:
            return Schema(name, repository, ref, "branch")
        for tag, commit_id in self.lakefs.list_tags(repository):
            if tag == ref:
                return Schema(name, repository, ref, "tag", commit_id)
        raise not_found(f"no schema {name!r} in share {share.name!r}: {repository!r} has no branch or tag {ref!r}")

    def tables(self, share: ShareConfig, schema: Schema) -> list[str]:
        store = self._store(schema.repository)
        root = branch_tables_root(self.config, schema.ref) if schema.kind == "branch" else \
            commit_root(self.config, schema.ref, schema.commit_id)
        names = (segment_name(folder) for folder in store.list_folders(root))
        return sorted(name for name in names if NAME.fullmatch(name) and _offered(name, share.tables))

    def table(self, share_name: str, schema_name: str, table: str) -> "SharedTable":
        share = self.share(share_name)
        schema = self.schema(share, schema_name)
        if not _offered(table, share.tables):  # before any read: whether it exists is not the recipient's to learn
            raise forbidden(f"table {table!r} is not in share {share.name!r}")
        read = _branch_table if schema.kind == "branch" else _tag_export
        return read(self.config, self._store(schema.repository), schema, table)

    def _store(self, repository: str) -> ObjectStore:
        try:
            return ObjectStore(self.config, self.lakefs.storage_namespace(repository))
        except NotFound:
            raise not_found(f"repository {repository!r} of this share does not exist") from None


def _offered(name: str, patterns: Iterable[str]) -> bool:
    return bool(NAME.fullmatch(name)) and any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _schema_name(share: ShareConfig, repository: str, ref: str) -> str:
    return ref if len(share.repositories) == 1 else f"{repository}{_SEPARATOR}{ref}"


def _split_schema(share: ShareConfig, name: str) -> tuple[str | None, str]:
    if len(share.repositories) == 1:
        return share.repositories[0], name
    repository, separator, ref = name.partition(_SEPARATOR)
    return (repository if separator and repository in share.repositories else None), ref


# ------------------------------------------------------------------ one shared table


@dataclass
class SharedTable:
    """A shared table's log: its versions and their timestamps, from one listing made when first needed
    (the head comes from the state file or manifest: `/version` lists nothing)."""

    store: ObjectStore
    location: str  # relative to the storage namespace
    name: str
    head_version: int
    source_timestamps: dict[int, int] = field(default_factory=dict)  # a tag export's, from its manifest
    allowed: tuple[str, ...] = ()  # prefixes whose objects may be presigned (the storage namespace, ...)
    _timestamps: dict[int, int] = field(default_factory=dict)

    @functools.cached_property
    def entries(self) -> dict[str, tuple[int, float]]:
        """Name under _delta_log/ -> (size, modification time), up to the head (versions past it are an
        interrupted append's: not committed)."""
        return {name: meta for name, meta in _listing(self.store, self.location).items()
                if _at_or_below(name, self.head_version)}

    @functools.cached_property
    def commits(self) -> dict[int, str]:
        return {version: name for name in self.entries if (version := commit_version(name)) is not None}

    @functools.cached_property
    def first_version(self) -> int:
        """The oldest version a snapshot can be read at: the oldest complete checkpoint, or 0."""
        listing = LogListing.from_names((name, size) for name, (size, _) in self.entries.items())
        if 0 in listing.commits:
            return 0
        if not listing.checkpoints:
            raise SharingError(500, "INTERNAL_ERROR", f"the log of table {self.name!r} has no start")
        return min(listing.checkpoints)

    @functools.cached_property
    def _written(self) -> dict[int, int]:
        """Each commit's write time (ms), made increasing as Delta readers make them (a time not after
        the previous version's becomes that one + 1 ms)."""
        written, previous = {}, None
        for version in sorted(self.commits):
            at = int(self.entries[self.commits[version]][1] * 1000)
            previous = written[version] = at if previous is None or at > previous else previous + 1
        return written

    def check_version(self, version: int) -> int:
        if not self.first_version <= version <= self.head_version:
            raise invalid(f"version {version} of table {self.name!r} is not available: "
                          f"versions {self.first_version} to {self.head_version} are")
        return version

    def check_commits(self, start: int, end: int) -> None:
        """Every version of a change range has its commit in the log (checked before an answer starts)."""
        missing = [v for v in range(start, end + 1) if v not in self.commits]
        if missing:
            first = min((v for v in self.commits if v >= self.first_version), default=self.first_version)
            raise invalid(f"version {missing[0]} of table {self.name!r} is not in its log: changes can be read "
                          f"from version {first} to {self.head_version}")

    def snapshot(self, version: int | None = None) -> "Snapshot":
        version = self.head_version if version is None else self.check_version(version)
        entries = [(name, size) for name, (size, _) in self.entries.items() if _at_or_below(name, version)]
        listing = LogListing.from_names(entries)
        log = ExportedLog(self.store, self.location, dict(entries), listing, select_segment(listing))
        return Snapshot(self, version, LiveFiles(log))

    def timestamp(self, version: int, actions: list[dict] | None = None) -> int:
        """The version's commit timestamp, epoch ms: in-commit timestamp, else when its file was written."""
        if version not in self._timestamps:
            if version in self.source_timestamps:
                self._timestamps[version] = self.source_timestamps[version]
            else:
                if version not in self.commits:
                    raise invalid(f"version {version} of table {self.name!r} has no commit in its log")
                actions = self.actions(version) if actions is None else actions
                self._timestamps[version] = commit_timestamp(actions, self._written[version])
        return self._timestamps[version]

    def version_at(self, timestamp: str, at_or_after: bool) -> int:
        """The newest version committed at or before `timestamp` (a snapshot's), or the oldest at or
        after it (a change feed's start). Commit timestamps increase with the version: a binary search."""
        moment = _parse_timestamp(timestamp)
        versions = sorted(v for v in self.commits if v >= self.first_version)
        if not versions:
            raise invalid(f"table {self.name!r} has no commit to resolve a timestamp against")
        index = bisect.bisect_left(_Timestamps(self, versions), moment) if at_or_after else \
            bisect.bisect_right(_Timestamps(self, versions), moment) - 1
        if at_or_after and index == len(versions):
            raise invalid(f"timestamp {timestamp} is after the newest version of table {self.name!r} "
                          f"({self._iso(versions[-1])})")
        if not at_or_after and index < 0:
            raise invalid(f"timestamp {timestamp} is before the oldest readable version of table {self.name!r} "
                          f"({self._iso(versions[0])})")
        if at_or_after and index == 0 and versions[0] > 0 and moment < self.timestamp(versions[0]):
            # changes from a time before the shared history begins would silently miss the versions before it
            raise invalid(f"timestamp {timestamp} is before version {versions[0]} ({self._iso(versions[0])}), "
                          f"where the shared history of table {self.name!r} begins")
        return versions[index]

    def actions(self, version: int) -> list[dict]:
        name = self.commits[version]
        return parse_actions(name, self.store.get(self.location + LOG_DIR + name))

    def signer(self, presigner: Presigner) -> Callable[[str], tuple[str, PresignedUrl]]:
        """(absolute path, presigned URL) of a path in this table's log; a path outside the prefixes
        this table may expose (its repository's storage namespace but its `_lakefs/`,
        `sharing.allowed_locations`) is refused, so a log can never make the server sign an object it
        was not meant to share."""
        location = self.store.uri(self.location)
        allowed, denied = _folders(self.allowed), _folders([self.store.uri("_lakefs/")])  # lakeFS's own, and exports

        def sign(path: str) -> tuple[str, PresignedUrl]:
            absolute = _absolute(path, location)
            if not _within(absolute, allowed) or _within(absolute, denied):
                raise SharingError(500, "INTERNAL_ERROR", f"table {self.name!r} references {absolute}, outside its "
                                   "repository's storage namespace and sharing.allowed_locations: not shared")
            return absolute, presigner.presign(absolute)
        return sign

    def _iso(self, version: int) -> str:
        return datetime.fromtimestamp(self.timestamp(version) / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Timestamps:
    """A sequence of versions' timestamps read only where the binary search looks."""

    def __init__(self, table: SharedTable, versions: list[int]):
        self.table, self.versions = table, versions

    def __len__(self) -> int:
        return len(self.versions)

    def __getitem__(self, index: int) -> int:
        return self.table.timestamp(self.versions[index])


def _branch_table(config: Config, store: ObjectStore, schema: Schema, table: str) -> SharedTable:
    location = branch_table_location(config, schema.ref, table)
    try:
        state = json.loads(store.get(location + STATE))
    except NotFound:
        raise not_found(f"no table {table!r} on branch {schema.ref!r}: it has no branch table (is `branch_tables` "
                        f"set for the branch, and has a commit been exported since?)") from None
    return SharedTable(store, location, table, state["head_version"], allowed=_allowed(config, store))


def _tag_export(config: Config, store: ObjectStore, schema: Schema, table: str) -> SharedTable:
    location = export_location(config, schema.ref, schema.commit_id, table)
    try:
        manifest = json.loads(store.get(location + MANIFEST))
    except NotFound:
        raise not_found(f"no table {table!r} at tag {schema.ref!r}: its export is not complete "
                        f"(or the tag's commit has no such table)") from None
    timestamps = {int(v): t for v, t in manifest.get("source_timestamps_ms", {}).items()}
    return SharedTable(store, location, table, manifest["head_version"], timestamps, allowed=_allowed(config, store))


def _allowed(config: Config, store: ObjectStore) -> tuple[str, ...]:
    return (store.uri(""), *config.sharing.allowed_locations)


def _folders(prefixes: Iterable[str]) -> tuple[str, ...]:
    """Prefixes as `_within` compares them: decoded, `s3://`, each a folder (ending in `/`)."""
    return tuple(_s3(unquote(prefix)).rstrip("/") + "/" for prefix in prefixes)


def _within(path: str, folders: tuple[str, ...]) -> bool:
    """Whether the object at `path` (a URI) is under one of `folders` (from `_folders`)."""
    plain = _s3(unquote(path) if "%" in path else path)
    if "/../" in plain or "/./" in plain:
        return False
    return plain.startswith(folders)


def _s3(uri: str) -> str:
    if uri.startswith("s3://"):
        return uri
    scheme, separator, rest = uri.partition("://")
    return f"s3://{rest}" if separator and scheme in ("s3a", "s3n") else uri


def _listing(store: ObjectStore, location: str) -> dict[str, tuple[int, float]]:
    prefix = location + LOG_DIR
    return {key[len(prefix):]: (size, modified) for key, size, modified in store.list_objects(location + LOG_DIR)}


def _at_or_below(name: str, version: int) -> bool:
    """Log files of versions up to `version`; `_last_checkpoint` and sidecars are kept."""
    file_version = log_file_version(name)
    return file_version is None or file_version <= version

def _parse_timestamp(text: str) -> int:
    """The protocol's timestamp format (ISO 8601, UTC: `2022-01-01T00:00:00Z`) as epoch ms."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise invalid(f"timestamp {text!r} is not in ISO 8601 format (e.g. 2022-01-01T00:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


# ------------------------------------------------------------------ the answers


@dataclass
class Snapshot:
    table: SharedTable
    version: int
    live: LiveFiles

    @property
    def protocol(self) -> dict:
        return _shared_protocol(self.live.protocol or {"minReaderVersion": 1, "minWriterVersion": 2})

    @property
    def metadata(self) -> dict:
        if self.live.metadata is None:
            raise SharingError(500, "INTERNAL_ERROR", f"table {self.table.name!r} has no metaData at "
                                                      f"version {self.version}")
        return self.live.metadata


def response_format(capabilities: str | None, protocol: Mapping[str, Any]) -> str:
    """`parquet` or `delta` (PROTOCOL.md#delta-sharing-capabilities-header): parquet when the client
    takes it and the table needs no reader feature; delta when it must be, or is all it takes."""
    asked = _capability(capabilities, "responseformat") or ["parquet"]
    needs = _reader_features(protocol) or protocol.get("minReaderVersion", 1) > 1
    if needs:
        if "delta" not in asked:
            raise unsupported("the table needs reader features ("
                              + (", ".join(_reader_features(protocol)) or f"reader version {protocol['minReaderVersion']}")
                              + ") that only the delta response format carries: "
                              "send `delta-sharing-capabilities: responseformat=delta`")
        taken = _capability(capabilities, "readerfeatures")
        missing = [f for f in _reader_features(protocol) if taken is not None and f.lower() not in taken]
        if missing:
            raise unsupported(f"the table needs reader features this client does not declare: {', '.join(missing)}")
        return "delta"
    return "parquet" if "parquet" in asked else "delta"


def _capability(header: str | None, key: str) -> list[str] | None:
    for part in (header or "").split(";"):
        name, _, values = part.partition("=")
        if name.strip().lower() == key:
            return [v.strip().lower() for v in values.split(",") if v.strip()]
    return None


def _reader_features(protocol: Mapping[str, Any]) -> list[str]:
    return list(protocol.get("readerFeatures") or [])


def _shared_protocol(protocol: Mapping[str, Any]) -> dict:
    """The table's protocol without the features of its log's layout (a recipient reads a list of files)."""
    shared = dict(protocol)
    for key in ("readerFeatures", "writerFeatures"):
        if key in shared:
            shared[key] = [f for f in shared[key] if f not in _LAYOUT_FEATURES]
    if "readerFeatures" in shared and not shared["readerFeatures"]:  # nothing left that a reader must know
        del shared["readerFeatures"]
        shared["minReaderVersion"] = 1
    return shared


def metadata_lines(snapshot: Snapshot, fmt: str) -> list[dict]:
    return [_protocol_line(snapshot.protocol, fmt), _metadata_line(snapshot.metadata, fmt, None)]


def _protocol_line(protocol: dict, fmt: str) -> dict:
    if fmt == "delta":
        return {"protocol": {"deltaProtocol": protocol}}
    return {"protocol": {"minReaderVersion": 1}}


def _metadata_line(metadata: dict, fmt: str, version: int | None) -> dict:
    if fmt == "delta":
        line = {"deltaMetadata": metadata}
    else:
        line = {key: metadata[key] for key in ("id", "name", "description") if metadata.get(key) is not None}
        line.update(format={"provider": "parquet"}, schemaString=metadata.get("schemaString", ""),
                    partitionColumns=metadata.get("partitionColumns") or [],
                    configuration=metadata.get("configuration") or {})
    if version is not None:
        line["version"] = version
    return {"metaData": line}


def query_lines(snapshot: Snapshot, fmt: str, presigner: Presigner, versioned: bool) -> Iterator[dict]:
    """A snapshot query's answer: protocol, metadata, then one line per live file, streamed."""
    yield _protocol_line(snapshot.protocol, fmt)
    yield _metadata_line(snapshot.metadata, fmt, snapshot.version if versioned else None)
    sign = snapshot.table.signer(presigner)
    for add in snapshot.live.files(whole=True):
        yield _file_line("file", "add", add, fmt, sign)


def range_protocol(table: SharedTable, start: Snapshot, end: int) -> dict:
    """The protocol a reader of versions `start`..`end` must follow: the start's, with every reader
    feature the table gained by `end` (deletion vectors enabled mid-range need the delta format)."""
    protocol = dict(start.protocol)
    if end > start.version:
        later = table.snapshot(end).protocol
        features = list(dict.fromkeys([*_reader_features(protocol), *_reader_features(later)]))
        if features:
            protocol["readerFeatures"] = features
        protocol["minReaderVersion"] = max(protocol.get("minReaderVersion", 1), later.get("minReaderVersion", 1))
    return protocol


def changes_lines(table: SharedTable, snapshot: Snapshot, end: int, fmt: str, presigner: Presigner,
                  historical_metadata: bool, change_files: bool = True, protocol: dict | None = None) -> Iterator[dict]:
    """A change data feed (`change_files`: cdc files where a version has them, PROTOCOL.md#add-cdc-file)
    or the data change files of a streaming query, versions `snapshot.version` to `end`, under
    `protocol` (`range_protocol`: the strictest over the range)."""
    start = snapshot.version
    _require_change_data_feed(table, snapshot.metadata, start, change_files)
    yield _protocol_line(protocol or snapshot.protocol, fmt)
    yield _metadata_line(snapshot.metadata, fmt, start if historical_metadata or fmt == "delta" else None)
    sign = table.signer(presigner)
    for version in range(start, end + 1):
        if version not in table.commits:
            raise invalid(f"version {version} of table {table.name!r} is not in its log")
        actions = table.actions(version)
        timestamp = table.timestamp(version, actions)
        for action in actions:
            if "metaData" in action and version > start:
                _require_change_data_feed(table, action["metaData"], version, change_files)
                if historical_metadata:
                    yield _metadata_line(action["metaData"], fmt, version)
        has_cdc = change_files and any("cdc" in action for action in actions)
        for action in actions:
            for kind in ("add", "remove", "cdc"):
                file_action = action.get(kind)
                if not isinstance(file_action, dict):
                    continue
                if kind == "cdc" and not change_files:
                    continue
                if kind != "cdc" and (not file_action.get("dataChange", True) or (has_cdc and fmt == "parquet")):
                    continue
                wrapper = "cdf" if kind == "cdc" else kind
                yield _file_line(wrapper, kind, file_action, fmt, sign, version, timestamp)


def _require_change_data_feed(table: SharedTable, metadata: Mapping[str, Any], version: int, change_files: bool) -> None:
    if change_files and str((metadata.get("configuration") or {}).get("delta.enableChangeDataFeed", "")).lower() != "true":
        raise invalid(f"the change data feed is not enabled on table {table.name!r} at version {version} "
                      "(delta.enableChangeDataFeed)")


def _file_line(wrapper: str, kind: str, action: dict, fmt: str, sign: Callable[[str], tuple[str, PresignedUrl]],
               version: int | None = None, timestamp: int | None = None) -> dict:
    path, url = sign(action["path"])
    if fmt == "delta":
        shared = {**action, "path": url.url}
        line: dict[str, Any] = {"id": _file_id(path)}
        vector = action.get("deletionVector")
        if isinstance(vector, dict) and vector.get("storageType") == ABSOLUTE:
            vector_path, vector_url = sign(vector["pathOrInlineDv"])
            shared["deletionVector"] = {**vector, "pathOrInlineDv": vector_url.url}
            line["deletionVectorFileId"] = _file_id(vector_path)
        elif isinstance(vector, dict) and vector.get("storageType") == RELATIVE:
            raise SharingError(500, "INTERNAL_ERROR", f"a deletion vector relative to the table ({vector}) in an "
                                                      "exported log: the export should have made it absolute")
        if version is not None:
            line.update(version=version, timestamp=timestamp)
        line.update(expirationTimestamp=url.expires_ms, deltaSingleAction={kind: shared})
        return {"file": line}
    if action.get("deletionVector"):  # the parquet format cannot say which rows are deleted: never answer without
        raise unsupported(f"{path} has a deletion vector, which only the delta response format carries")
    line = {"url": url.url, "id": _file_id(path), "partitionValues": action.get("partitionValues") or {},
            "size": action.get("size", 0)}
    if action.get("stats") and kind == "add":
        line["stats"] = action["stats"]
    if version is not None:
        line.update(version=version, timestamp=timestamp)
    line["expirationTimestamp"] = url.expires_ms
    return {wrapper: line}


def _absolute(path: str, location: str) -> str:
    return path if "://" in path else location + path


def _file_id(path: str) -> str:
    return hashlib.md5(path.encode(), usedforsecurity=False).hexdigest()


_COMPACT = json.JSONEncoder(separators=(",", ":")).encode  # one encoder: `json.dumps` with options builds one a call


def encode_lines(lines: Iterable[dict], batch: int = 1000) -> Iterator[bytes]:
    """NDJSON, a batch of lines per chunk."""
    chunk: list[str] = []
    for line in lines:
        chunk.append(_COMPACT(line))
        if len(chunk) >= batch:
            yield ("\n".join(chunk) + "\n").encode()
            chunk = []
    if chunk:
        yield ("\n".join(chunk) + "\n").encode()
