"""One shared table's versions: a branch table's own (read up to its state file's committed head), or
a tag export's (the source's, from its checkpoint on); each version's timestamp (the in-commit
timestamp, else the log file's time; for a tag, the source's from the manifest); the snapshot at a
version; and which objects it may presign.
"""

from __future__ import annotations

import bisect
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from exporter.config import Config
from exporter.delta.actions import after, in_commit_timestamp, increasing, parse_actions
from exporter.delta.checkpoint import MissingSidecars
from exporter.delta.live_files import LiveFiles
from exporter.delta.log import (LAST_CHECKPOINT, LOG_DIR, Checkpoint, LogListing, commit_name, commit_version,
                                log_file_version, select_segment)
from exporter.errors import (ExporterError, InvalidParameter, NotFound, ShareNotFound, UnshareableTable,
                             VersionOutOfRange)
from exporter.branch_tables.state import read_state
from exporter.export.manifest import ExportManifest
from exporter.export.readback import ExportedLog
from exporter.storage.layout import (
    branch_table_location,
    export_location,
    private_folders,
)
from exporter.storage.objectstore import ObjectStore
from exporter.storage.presign import PresignedUrl, Presigner
from exporter.storage.scope import ReadScope


WINDOW = 1000  # versions listed at a time when looking back for a checkpoint (as Spark's reader does)


@dataclass
class SharedTable:
    """A shared table's log. A snapshot lists only from the newest complete checkpoint at or below
    its version (`_last_checkpoint`'s, else found looking back `WINDOW` versions at a time), and a
    version range only its own commits, so a long log costs a query no more than its tail; only a
    timestamp's resolution (and the message of a version out of range) lists the log whole. The head
    comes from the state file or manifest: `/version` lists nothing."""

    store: ObjectStore
    location: str  # relative to the storage namespace
    name: str
    head_version: int
    source_timestamps: dict[int, int] = field(default_factory=dict)  # a tag export's, from its manifest
    scope: ReadScope | None = None  # the objects its log may make the server presign; None: the storage namespace's
    shared_as: str = ""  # the name a share offers it under, when not `name` (`catalog.shared_name`)
    _timestamps: dict[int, int] = field(default_factory=dict)
    _seen: dict[str, tuple[int, float]] = field(default_factory=dict)  # log files listed so far
    _written_ms: dict[int, int] = field(default_factory=dict)  # commit write times of `_seen`, increasing
    _written_from: int = -1  # the size of `_seen` they were computed from

    def named(self, metadata: dict) -> dict:
        """A metaData action as shared: a table offered under another name carries its own as the
        metaData's `name` when the writer gave none."""
        if self.shared_as and self.shared_as != self.name and not metadata.get("name"):
            return {**metadata, "name": self.name}
        return metadata

    def _window(self, first: int, last: int) -> dict[str, tuple[int, float]]:
        """Name under _delta_log/ -> (size, modification time) of the files of versions first..last:
        one listing that starts at `first` and asks for no page past `last`."""
        prefix = self.location + LOG_DIR
        found = {key[len(prefix):]: (size, modified) for key, size, modified in self.store.list_objects(
            prefix, start_after=prefix + commit_name(first - 1) if first > 0 else "",
            stop_at=prefix + f"{min(last, self.head_version) + 1:020d}")}
        self._seen.update(found)
        return found

    @functools.cached_property
    def entries(self) -> dict[str, tuple[int, float]]:
        """Every log file up to the head (versions past it are an interrupted append's: not committed)."""
        found = {name: meta for name, meta in _listing(self.store, self.location).items()
                 if _at_or_below(name, self.head_version)}
        self._seen.update(found)
        return found

    @functools.cached_property
    def first_version(self) -> int:
        """The oldest version a snapshot can be read at: the oldest complete checkpoint, or 0."""
        listing = LogListing.from_names((name, size) for name, (size, _) in self.entries.items())
        if 0 in listing.commits:
            return 0
        if not listing.checkpoints:
            raise UnshareableTable(f"the log of table {self.name!r} has no start")
        return min(listing.checkpoints)

    @functools.cached_property
    def _last_checkpoint(self) -> int | None:
        """The version `_last_checkpoint` names: a hint (the listing decides), None when absent or past the head."""
        try:
            version = int(json.loads(self.store.get(self.location + LOG_DIR + LAST_CHECKPOINT))["version"])
        except (NotFound, ValueError, KeyError, TypeError):
            return None
        return version if version <= self.head_version else None

    def _segment_files(self, version: int) -> dict[str, tuple[int, float]]:
        """The log files a reader of `version` needs: from the newest complete checkpoint at or below
        it, or from version 0 when there is none."""
        last = self._last_checkpoint
        if last is not None and last <= version:
            found = self._window(last, version)
            if last in _complete(found):
                return self._with_sidecars(found, last)
        found, upper = {}, version
        while upper >= 0:
            lower = max(0, upper - WINDOW + 1)
            window = self._window(lower, upper)
            found.update(window)
            if checkpoints := _complete(found):
                start = max(checkpoints)
                return self._with_sidecars({name: meta for name, meta in found.items()
                                            if (v := log_file_version(name)) is None or v >= start}, start)
            if not window:  # nothing this far back: the log starts above (expired), or has a gap
                break
            upper = lower - 1
        return found

    def _with_sidecars(self, found: dict[str, tuple[int, float]], checkpoint: int) -> dict[str, tuple[int, float]]:
        """A V2 checkpoint's sidecars (`_sidecars/`, sorted after every version) are listed too."""
        if _complete(found)[checkpoint].kind != "v2":
            return found
        return self._listed_sidecars(found)

    def _listed_sidecars(self, found: dict[str, tuple[int, float]]) -> dict[str, tuple[int, float]]:
        prefix = self.location + LOG_DIR
        return {**found, **{key[len(prefix):]: (size, modified)
                            for key, size, modified in self.store.list_objects(prefix + "_sidecars/")}}

    def commits(self, start: int, end: int) -> dict[int, str]:
        """Version -> commit file name of the versions start..end the log holds (listed once per range)."""
        known = {v: name for name in self._seen if (v := commit_version(name)) is not None and start <= v <= end}
        if len(known) == end - start + 1:
            return known
        return {v: name for name in self._window(start, end) if (v := commit_version(name)) is not None}

    def check_commits(self, start: int, end: int) -> None:
        """Every version of a change range has its commit in the log (checked before an answer starts)."""
        commits = self.commits(start, end)
        missing = [v for v in range(start, end + 1) if v not in commits]
        if missing:
            raise VersionOutOfRange(f"version {missing[0]} of table {self.name!r} is not in its log: changes can be "
                                    f"read from version {self._oldest_commit()} to {self.head_version}")

    def _oldest_commit(self) -> int:
        return min((v for name in self.entries if (v := commit_version(name)) is not None and v >= self.first_version),
                   default=self.first_version)

    def snapshot(self, version: int | None = None) -> "Snapshot":
        version = self.head_version if version is None else version
        if not 0 <= version <= self.head_version:
            raise self._unavailable(version)
        files = self._segment_files(version)
        listing = LogListing.from_names((name, size) for name, (size, _) in files.items())
        try:
            segment = select_segment(listing)
        except ExporterError:
            raise self._unavailable(version) from None
        if segment.head_version != version:
            raise self._unavailable(version)
        try:
            live = LiveFiles(ExportedLog(self.store, self.location, dict(listing.sizes), listing, segment))
        except MissingSidecars:  # a classic-named checkpoint that is a V2 one (PROTOCOL.md#v2-spec): listed now
            listing = LogListing.from_names((name, size) for name, (size, _) in self._listed_sidecars(files).items())
            live = LiveFiles(ExportedLog(self.store, self.location, dict(listing.sizes), listing, segment))
        return Snapshot(self, version, live)

    def _unavailable(self, version: int) -> VersionOutOfRange:
        return VersionOutOfRange(f"version {version} of table {self.name!r} is not available: "
                                 f"versions {self.first_version} to {self.head_version} are")

    def timestamp(self, version: int, actions: list[dict] | None = None) -> int:
        """The version's commit timestamp, epoch ms: in-commit timestamp, else when its file was written
        (made increasing over the commits listed, as Delta readers make them: a time not after the
        previous version's becomes that one + 1 ms)."""
        if version not in self._timestamps:
            if version in self.source_timestamps:
                self._timestamps[version] = self.source_timestamps[version]
            else:
                actions = self.actions(version) if actions is None else actions
                written = in_commit_timestamp(actions)
                self._timestamps[version] = self._written(version) if written is None else written
        return self._timestamps[version]

    def _written(self, version: int) -> int:
        if commit_name(version) not in self._seen:
            self._window(version, version)
        if len(self._seen) != self._written_from:  # the listed commits' times, made increasing
            self._written_from, previous = len(self._seen), None
            for v in sorted(v for name in self._seen if (v := commit_version(name)) is not None):
                at = int(self._seen[commit_name(v)][1] * 1000)
                previous = self._written_ms[v] = after(previous, at)
        if version not in self._written_ms:
            raise VersionOutOfRange(f"version {version} of table {self.name!r} has no commit in its log")
        return self._written_ms[version]

    def version_at(self, timestamp: str, at_or_after: bool) -> int:
        """The newest version committed at or before `timestamp` (a snapshot's), or the oldest at or
        after it (a change feed's start). Commit timestamps increase with the version: a binary search
        over the whole log's commits."""
        moment = _parse_timestamp(timestamp)
        versions = sorted(v for name in self.entries if (v := commit_version(name)) is not None and v >= self.first_version)
        if not versions:
            raise VersionOutOfRange(f"table {self.name!r} has no commit to resolve a timestamp against")
        index = bisect.bisect_left(_Timestamps(self, versions), moment) if at_or_after else \
            bisect.bisect_right(_Timestamps(self, versions), moment) - 1
        if at_or_after and index == len(versions):
            raise VersionOutOfRange(f"timestamp {timestamp} is after the newest version of table {self.name!r} "
                                    f"({self._iso(versions[-1])})")
        if not at_or_after and index < 0:
            raise VersionOutOfRange(f"timestamp {timestamp} is before the oldest readable version of table "
                                    f"{self.name!r} ({self._iso(versions[0])})")
        if at_or_after and index == 0 and versions[0] > 0 and moment < self.timestamp(versions[0]):
            # changes from a time before the shared history begins would silently miss the versions before it
            raise VersionOutOfRange(f"timestamp {timestamp} is before version {versions[0]} "
                                    f"({self._iso(versions[0])}), where the shared history of table {self.name!r} begins")
        return versions[index]

    def actions(self, version: int) -> list[dict]:
        name = commit_name(version)
        try:
            raw = self.store.get(self.location + LOG_DIR + name)
        except NotFound:
            raise VersionOutOfRange(f"version {version} of table {self.name!r} has no commit in its log") from None
        return parse_actions(name, raw)

    def signer(self, presigner: Presigner) -> "TableSigner":
        """Presigns the paths of this table's log; a path outside its scope (`exporter.storage.scope`:
        its repository's storage namespace but its `_lakefs/` and other repositories' namespaces,
        `sharing.allowed_locations`) is refused, so a log can never make the server sign an object
        it was not meant to share. The export's own location is not in it: its log names data files
        and deletion vectors where lakeFS stores them, never a file of an export."""
        return TableSigner(self.name, self.store.uri(self.location), presigner,
                           self.scope or ReadScope(self.store.uri("")))

    def _iso(self, version: int) -> str:
        return datetime.fromtimestamp(self.timestamp(version) / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class TableSigner:
    table: str
    location: str  # the table's, for relative paths
    presigner: Presigner
    scope: ReadScope

    def __call__(self, path: str) -> tuple[str, PresignedUrl]:
        """(absolute path, presigned URL) of one path; PathOutsideRepository outside the scope."""
        absolute = absolute_path(path, self.location)
        self.scope.check(absolute)  # the presigner decodes the key once, as `check` does
        return absolute, self.presigner.presign(absolute)

    def column(self, paths: pa.Array) -> tuple[pa.Array, pa.Array]:
        """(absolute paths, presigned URLs) of a string column of paths, each checked as `__call__`
        checks it (`ReadScope.check_column`)."""
        absolute = paths
        if pc.starts_with(paths, "s3://").true_count < len(paths):
            relative = pc.invert(pc.match_substring(paths, "://"))
            if relative.true_count:
                absolute = pc.if_else(relative, pc.binary_join_element_wise(self.location, paths, ""), paths)
        self.scope.check_column(absolute)
        return absolute, self.presigner.presign_column(absolute)


class _Timestamps:
    """A sequence of versions' timestamps read only where the binary search looks."""

    def __init__(self, table: SharedTable, versions: list[int]):
        self.table, self.versions = table, versions

    def __len__(self) -> int:
        return len(self.versions)

    def __getitem__(self, index: int) -> int:
        return self.table.timestamp(self.versions[index])


def branch_table(config: Config, store: ObjectStore, schema: Schema, table: str,
                 scope: ReadScope | None = None) -> SharedTable:
    location = branch_table_location(config, schema.ref, table)
    state = read_state(store, location)
    if state is None:
        raise ShareNotFound(f"no table {table!r} on branch {schema.ref!r}: it has no branch table (is `branch_tables` "
                            f"set for the branch, and has a commit been exported since?)") from None
    return SharedTable(store, location, table, state["head_version"], scope=scope or _scope(config, store))


def tag_export(config: Config, store: ObjectStore, schema: Schema, table: str,
               scope: ReadScope | None = None) -> SharedTable:
    location = export_location(config, schema.ref, schema.commit_id, table)
    try:
        manifest = ExportManifest.read(store, location)
    except NotFound:
        raise ShareNotFound(f"no table {table!r} at tag {schema.ref!r}: its export is not complete "
                            f"(or the tag's commit has no such table)") from None
    timestamps = increasing(manifest.source_timestamps)
    return SharedTable(store, location, table, manifest.head_version, timestamps,
                       scope=scope or _scope(config, store))


def _scope(config: Config, store: ObjectStore) -> ReadScope:
    """The scope without the other repositories' namespaces (`Lake.read_scope` has them)."""
    return ReadScope(store.uri(""), allowed=config.sharing.allowed_locations, private=private_folders(config))


def _complete(files: Mapping[str, tuple[int, float]]) -> dict[int, Checkpoint]:
    """The complete checkpoints among listed log files, by version."""
    return LogListing.from_names((name, size) for name, (size, _) in files.items()).checkpoints


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
        raise InvalidParameter(f"timestamp {text!r} is not in ISO 8601 format (e.g. 2022-01-01T00:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


@dataclass
class Snapshot:
    table: SharedTable
    version: int
    live: LiveFiles

    @property
    def protocol(self) -> dict:
        return shared_protocol(self.live.protocol or {"minReaderVersion": 1, "minWriterVersion": 2})

    @property
    def metadata(self) -> dict:
        if self.live.metadata is None:
            raise UnshareableTable(f"table {self.table.name!r} has no metaData at version {self.version}")
        return self.table.named(self.live.metadata)


@dataclass(frozen=True)
class Schema:
    name: str
    repository: str
    ref: str
    kind: str  # "branch" or "tag"
    commit_id: str | None = None  # a tag's


_LAYOUT_FEATURES = frozenset({"v2Checkpoint", "vacuumProtocolCheck", "checkpointProtection"})


def shared_protocol(protocol: Mapping[str, Any]) -> dict:
    """The table's protocol without the features of its log's layout (a recipient reads a list of files)."""
    shared = dict(protocol)
    for key in ("readerFeatures", "writerFeatures"):
        if key in shared:
            shared[key] = [f for f in shared[key] if f not in _LAYOUT_FEATURES]
    if "readerFeatures" in shared and not shared["readerFeatures"]:  # nothing left that a reader must know
        del shared["readerFeatures"]
        shared["minReaderVersion"] = 1
    return shared


def absolute_path(path: str, location: str) -> str:
    return path if "://" in path else location + path
