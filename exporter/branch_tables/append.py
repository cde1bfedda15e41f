"""Appending a commit's export to a branch table: the source's versions after the one the table
follows, under the table's own version numbers and each annotated with the lakeFS commit that
brought it, or one synthetic version when they cannot be appended as they are; and the state's
mapping of lakeFS commits to versions. `exporter.branch_tables.table.append_commit` decides when.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.branch_tables.log import (
    annotated,
    copy_checkpoint,
    digest,
    live_files_differ,
    now_iso,
    parsed_commits,
    source_versions,
    sync_commit,
    table_id_of,
    with_gone_files_resolved,
)
from exporter.config import Config
from exporter.delta.log import LOG_DIR, LogListing, commit_name, log_folder
from exporter.export.manifest import ExportManifest
from exporter.export.readback import ExportedLog
from exporter.lakefs.client import LakeFS
from exporter.storage.objectstore import ObjectStore


@dataclass
class AppendOutcome:
    table: str
    location: str
    head_version: int | None = None
    appended: list[int] = field(default_factory=list)  # branch-table versions written
    synthetic: str = ""  # why one synthetic version brought the table to the source's state
    skipped: str = ""  # why nothing was written
    checkpoint: int | None = None  # the branch-table version of a checkpoint the append copied
    expired: int = 0  # log files removed by the log retention after it
    sources: dict[int, int] = field(default_factory=dict)  # branch-table version -> source version, of those copied
    iceberg: dict | None = None  # with iceberg.enabled: the Iceberg table's record (`branch_iceberg_metadata`)
    lakefs_calls: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        if self.skipped:
            return f"UNCHANGED {self.table} -> {self.location}: {self.skipped}"
        how = f" (synthetic: {self.synthetic})" if self.synthetic else ""
        shown = f"{self.appended[0]}..{self.appended[-1]}" if self.appended else "none"
        iceberg = "" if self.iceberg is None else f"; Iceberg {self.iceberg['state']}: " + (
            self.iceberg.get("metadata_location") or self.iceberg.get("reason", ""))
        return (f"APPENDED {self.table} -> {self.location}  versions {shown}, head {self.head_version}{how}, "
                f"{self.lakefs_calls} lakeFS calls, {self.seconds:.2f}s{iceberg}")



@dataclass
class Append:
    """One append of a commit's export to a branch table: where it writes and what it records."""

    config: Config
    lakefs: LakeFS
    store: ObjectStore
    target: str  # the branch table's folder
    repository: str
    commit_id: str
    outcome: AppendOutcome


def append_versions(job: Append, exported: ExportedLog, state: dict, manifest: ExportManifest, between: list[str]) -> None:
    """Append the source's versions after the one the branch table follows (one commit each lakeFS
    commit on the way mapped to), or one synthetic version that makes the table the source's when
    they cannot be (`_why_not_appendable`); then the checkpoint, and the state's mapping."""
    followed, head = state["source_version"], exported.segment.head_version
    versions = {v: exported.raw(name) for v, name in exported.listing.commits.items() if followed <= v <= head}
    reason = _why_not_appendable(job, exported, state, versions, manifest.table_path)
    mapped: list[tuple[str, int]] = []  # (lakeFS commit, source head version) of each commit this append covers
    if reason is None:
        reason, mapped = _write_versions(job, exported, state, versions, manifest.table_path, between)
    offset, branch_head = state["offset"], state["head_version"]
    outcome = job.outcome
    if reason is not None:
        outcome.synthetic = reason
        sync_version = branch_head + 1 + len(outcome.appended)
        offset = sync_version - head
        job.store.put(job.target + LOG_DIR + commit_name(sync_version),
                      sync_commit(job.store, job.target, exported, reason, job.repository, job.commit_id))
        outcome.appended.append(sync_version)
        mapped = [(job.commit_id, head)]
    if copy_checkpoint(job.store, job.target, exported, offset, branch_head):
        outcome.checkpoint = exported.segment.checkpoint.version + offset
    table_id = table_id_of(parsed_commits({v: raw for v, raw in versions.items() if v > followed}), exported,
                           from_checkpoint=reason is not None) or state.get("table_id")
    state.update(head_version=head + offset, offset=offset, source_version=head,
                 source_sha256=digest(versions[head]) if head in versions else
                 (digest(exported.raw(exported.listing.commits[head])) if head in exported.listing.commits else None),
                 table_id=table_id)
    ranges = [(outcome.appended[0], outcome.appended[-1])] if reason is not None else \
        [(first + offset, last + offset) for first, last in _ranges(followed, mapped)]
    _record_commits(state, mapped, ranges, offset, reason)


def _why_not_appendable(job: Append, exported: ExportedLog, state: dict, versions: dict[int, bytes],
                        table_path: str) -> str | None:
    """Why the source's new versions cannot be appended as they are (None: they can). Versions the
    export starts after (at a checkpoint) are read from the source into `versions`."""
    followed, head = state["source_version"], exported.segment.head_version
    if head < followed:
        return f"the source's head moved back from version {followed} to {head}"
    gaps = [v for v in range(followed, head + 1) if v not in versions]
    if gaps:  # the export starts at a checkpoint after the versions the branch table has
        versions.update(source_versions(job.config, job.lakefs, job.store, job.repository, job.commit_id, table_path,
                                        gaps))
    lost = [v for v in range(followed + 1, head + 1) if v not in versions]
    if lost:
        return f"the source's log no longer holds version(s) {lost[0]}..{lost[-1]}"
    if followed in versions and state.get("source_sha256") not in (None, digest(versions[followed])):
        return f"the source's version {followed} was rewritten"
    if followed not in versions and state.get("table_id") and \
            table_id_of(parsed_commits(versions), exported) not in (None, state["table_id"]):  # nothing else to compare
        return "the source is a different table (its metaData id changed)"
    return None


def _write_versions(job: Append, exported: ExportedLog, state: dict, versions: dict[int, bytes], table_path: str,
                     between: list[str]) -> tuple[str | None, list[tuple[str, int]]]:
    """Write the source's new versions under the branch table's numbers, each annotated with the
    lakeFS commit that brought it; the mapped commits, or a reason to write a synthetic version
    after them when the table's live files came out other than the source's."""
    followed, head, offset = state["source_version"], exported.segment.head_version, state["offset"]
    new = list(range(followed + 1, head + 1))
    gone = with_gone_files_resolved(job.config, job.lakefs, job.store, job.repository, state["last_commit"], table_path,
                                    {v: versions[v] for v in new})
    mapped = _commits_between(job.lakefs, job.repository, table_path, between, job.commit_id, followed, head) + \
        [(job.commit_id, head)]
    introduced_by = {}
    for (first, last), (introducing, _) in zip(_ranges(followed, mapped), mapped):
        introduced_by.update((v, introducing) for v in range(first, last + 1))
    for version in new:
        job.store.put(job.target + LOG_DIR + commit_name(version + offset),
                      annotated(gone.get(version, versions[version]), job.repository, introduced_by[version], version))
    job.outcome.appended = [v + offset for v in new]
    job.outcome.sources = {v + offset: v for v in new}
    if gone and live_files_differ(job.store, job.target, exported):  # a remove matched no add: never left live
        return (f"after versions {new[0]}..{new[-1]} the branch table's live files differed from the "
                "source's (a removed file it could not match)"), []
    return None, mapped


def _record_commits(state: dict, mapped: list[tuple[str, int]], ranges: list[tuple[int, int]], offset: int,
                    reason: str | None) -> None:
    """The state's commit mapping: one entry per mapped commit, completing an interrupted append's."""
    for (mapped_commit, source_version), (first, last) in zip(mapped, ranges):
        entry = {"commit_id": mapped_commit, "version": source_version + offset, "source_version": source_version,
                 "appended": [first, last] if first <= last else None, "synthetic": reason, "at": now_iso()}
        earlier = state["commits"][-1] if state["commits"] else {}
        if earlier.get("interrupted") and earlier["commit_id"] == mapped_commit:  # its append, completed
            entry["appended"] = [earlier["appended"][0], last if first <= last else earlier["appended"][1]]
            state["commits"][-1] = entry
        else:
            state["commits"].append(entry)


def _ranges(followed: int, mapped: list[tuple[str, int]]) -> list[tuple[int, int]]:
    """The source versions each mapped commit brought, from the one after the previous commit's head."""
    heads = [followed] + [version for _, version in mapped]
    return list(zip([h + 1 for h in heads[:-1]], heads[1:]))


def _commits_between(lakefs: LakeFS, repository: str, table_path: str, between: list[str], commit_id: str,
                     followed: int, head: int) -> list[tuple[str, int]]:
    """Of the commits between the followed one and this one (oldest first), those that moved the
    table, each with its log's head: the version that reads as that commit, when its commits are
    byte for byte (lakeFS checksums) the ones appended now. One lakeFS listing per commit."""
    if not between:
        return []
    appended = _log_checksums(lakefs, repository, commit_id, table_path, followed)
    mapped, last = [], followed
    for commit in between:
        found = _log_checksums(lakefs, repository, commit, table_path, followed)
        version = max(found, default=followed)
        if last < version < head and all(found.get(v) == appended.get(v) for v in range(followed + 1, version + 1)):
            mapped.append((commit, version))
            last = version
    return mapped


def _log_checksums(lakefs: LakeFS, repository: str, ref: str, table_path: str, after: int) -> dict[int, str]:
    """Checksums of the table's commit files above version `after` at a ref."""
    log = log_folder(table_path)
    entries = {e.path[len(log):]: e.checksum for e in
               lakefs.list_objects(repository, ref, log, delimiter="/", after=log + commit_name(after))
               if e.path_type == "object"}
    listing = LogListing.from_names((name, 0) for name in entries)
    return {version: entries[name] for version, name in listing.commits.items()}
