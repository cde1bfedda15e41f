"""Branch tables: one Delta table per (branch, table) at a location that never changes,
`<export prefix>/<branch>/latest/<table>/`, whose log follows the branch.

Each completed export of a commit on the branch appends the source versions the branch table does
not have yet, under the same version numbers and with the export's bytes (absolute paths), plus
the export's checkpoint and a true `_last_checkpoint`. Each appended commit's `commitInfo` gains
a `lakeFS` member naming the lakeFS commit it came from.

A lakeFS revert, reset or merge can replace the source's log (versions rewritten, the head moving
back, a new table). The branch table's history is never rewritten under its readers: one
synthetic version (operation `LAKEFS SYNC`) removes the files no longer live and adds the new
ones, and from then on source version v is branch version v + offset. The state beside
`_delta_log/` (`_lakefs_branch_table.json`, written last) holds the head, the offset, the lakeFS
commit <-> version mapping and `table_paths`: every path in the repository its versions were read
from (a re-pointed descriptor adds one; a reader of the branch table reads what each held, so must
be allowed each); with `iceberg.enabled`, the record of the branch table's Iceberg table too
(`exporter.export.iceberg_metadata.branch_iceberg_metadata`: a snapshot appended per version,
written after the Delta log and before the state).

Appends are serialised per (branch, table) by the caller (a Redis lock in the worker); each is
idempotent and ordered: a commit the branch table already followed, or an ancestor of it, is a
no-op. Versions an interrupted append wrote past the recorded head are never taken back (a Delta
reader lists them as soon as they exist): the next append takes them in and goes on from them.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from exporter.config import Config
from exporter.delta.live_files import LiveFiles
from exporter.delta.log import LOG_DIR, commit_name
from exporter.delta.log_retention import expired_log_files, log_retention_seconds
from exporter.errors import BranchTableRefused, CorruptLog, NotFound
from exporter.branch_tables.state import read_from, read_state, write_state
from exporter.branch_tables.append import Append, AppendOutcome, append_versions
from exporter.branch_tables.log import (
    annotated,
    digest,
    interrupted_versions,
    now_iso,
    parsed_commits,
    table_id_of,
)
from exporter.export.manifest import ICEBERG, ExportManifest
from exporter.export.iceberg_metadata import branch_iceberg_metadata
from exporter.export.log_writer import discard_export, write_log
from exporter.export.readback import ExportedLog, read_exported_log
from exporter.lakefs.installer import branch_tables_kept, installed_action
from exporter.lakefs.client import LakeFS
from exporter.lakefs.lake import Lake
from exporter.storage.layout import branch_table_location, commit_root, export_location
from exporter.storage.objectstore import ObjectStore

LINE_LIMIT = 1000  # first-parent commits searched for the event's commit, from the branch head


def follows(branch: str, patterns: Iterable[str]) -> bool:
    """Whether a branch keeps branch tables: it matches one of the patterns (`fnmatch`, `*` any)."""
    return any(fnmatch.fnmatchcase(branch, pattern) for pattern in patterns)


def branch_table_versions(lake: Lake, repository: str, branch: str, table: str) -> dict:
    """The branch table's location, head, lakeFS commit <-> version mapping and the table paths its
    versions were read from (`table_paths`, the current one last); NotFound when none."""
    config = lake.config
    store = lake.store(repository)
    location = branch_table_location(config, branch, table)
    state = read_state(store, location)
    if state is None:
        raise NotFound(f"no branch table for table {table!r} on branch {branch!r} of {repository!r} "
                       f"(is `branch_tables` set for the branch, and has a commit been exported since?)")
    return {**state, "location": store.uri(location)}


def lagging_branch_tables(lake: Lake, repository: str, branch: str, head: str) -> list[str]:
    """Tables whose export of the branch's head is complete but whose branch table does not follow
    that commit yet (its append was lost: the worker died after the export)."""
    config = lake.config
    store = lake.store(repository)
    root = commit_root(config, branch, head)
    lagging = []
    for folder in store.list_folders(root):
        try:
            table = ExportManifest.read(store, f"{root}{folder}/").table
        except NotFound:
            continue  # not complete: catch-up queues its export, which appends after
        state = read_state(store, branch_table_location(config, branch, table))
        if state is None or state.get("last_commit") != head:
            lagging.append(table)
    return lagging


def append_commit(lake: Lake, repository: str, branch: str, commit_id: str, table: str,
                  still_held: Callable[[], None] | None = None) -> AppendOutcome:
    """Bring the branch table of `table` on `branch` to the commit's complete export. `still_held`
    (the caller's lock) raises before the state is written once another append may be writing.

    Refused (BranchTableRefused) unless the branch keeps branch tables by the config or the
    installed action, and the commit is on the branch's first-parent line: an event's own claims
    (its `branch_id`, its `branch_tables` query) never move a branch table alone."""
    config, lakefs = lake.config, lake.lakefs
    started, calls_before = time.monotonic(), lakefs.calls
    store = lake.store(repository)
    target = branch_table_location(config, branch, table)
    outcome = AppendOutcome(table=table, location=store.uri(target))
    try:
        if not follows(branch, branch_tables_kept(config, installed_action(lakefs, repository))):
            raise BranchTableRefused(f"branch {branch!r} keeps no branch tables: neither the config's `branch_tables` "
                                     "nor the installed action's names it")
        manifest, exported = _commit_export(store, export_location(config, branch, commit_id, table))
        commit = lakefs.commit(repository, commit_id)
        state = read_state(store, target)
        relation, between = _place_on_branch(lakefs, repository, branch, commit_id, state and state["last_commit"])
        if state is None:
            state = _create(store, target, exported, repository, branch, commit_id, manifest)
            outcome.appended = list(range(state["first_version"], state["head_version"] + 1))
            outcome.sources = {v: v for v in outcome.appended}
        else:
            if relation != "newer":
                outcome.skipped = ("the branch table already follows this commit" if relation == "same" else
                                   f"commit {commit_id} is older than {state['last_commit']}, which the branch table follows")
                outcome.head_version = state["head_version"]
                return outcome
            if read_from(state, manifest.table_path):  # re-pointed: named before a version from it is written
                if still_held:
                    still_held()
                write_state(store, target, state)
            _go_on_from_interrupted(config, store, target, state, branch, table)
            append_versions(Append(config, lakefs, store, target, repository, commit_id, outcome), exported, state,
                            manifest, between)
        state.update(last_commit=commit_id, last_commit_created=commit.creation_date)
        if config.iceberg.enabled:  # off, the Iceberg table stays where it was: the next append on continues it
            timestamps = manifest.source_timestamps
            state[ICEBERG] = outcome.iceberg = branch_iceberg_metadata(
                store, target, state.get(ICEBERG),
                {version: timestamps[source] for version, source in outcome.sources.items() if source in timestamps},
                still_held, state["first_version"], lake.read_scope(repository))
        if still_held:
            still_held()
        write_state(store, target, state)  # last: the commit point
        outcome.head_version = state["head_version"]
        if outcome.checkpoint is not None:  # after a checkpoint, as Delta writers clean their log up
            outcome.expired = expire_log(store, target, state, LiveFiles(exported).metadata or {}, outcome.checkpoint,
                                         time.time(), still_held)
        return outcome
    finally:
        outcome.seconds = time.monotonic() - started
        outcome.lakefs_calls = lakefs.calls - calls_before


def _commit_export(store: ObjectStore, export: str) -> tuple[ExportManifest, ExportedLog]:
    """The complete export an append reads: its manifest and its log."""
    try:
        manifest = ExportManifest.read(store, export)
    except NotFound:
        raise NotFound(f"no complete export at {store.uri(export)} (pruned, or not exported yet): "
                       "nothing to append from") from None
    exported = read_exported_log(store, export)
    if exported is None:
        raise CorruptLog(f"the export {store.uri(export)} has a manifest but no _delta_log/")
    return manifest, exported


def expire_log(store: ObjectStore, target: str, state: dict, metadata: Mapping[str, Any], upto: int, now: float,
               still_held: Callable[[], None] | None = None) -> int:
    """Delta's log retention on a branch table (`exporter.delta.log_retention`: the table's
    `delta.logRetentionDuration`, default 30 days), over its log up to the checkpoint at `upto`:
    the state first (its first version, and the commit mapping of versions still readable), then
    the expired files, oldest first. How many files it removed."""
    retention = log_retention_seconds(metadata.get("configuration") or {})
    if retention is None:
        return 0
    prefix = target + LOG_DIR
    files = [(name[len(prefix):], size, at) for name, size, at in store.list_objects(prefix, stop_at=prefix + f"{upto + 1:020d}")]
    start, expired = expired_log_files(files, now - retention)
    if not expired:
        return 0
    state.update(first_version=max(start, state["first_version"]),
                 commits=[entry for entry in state["commits"] if entry["version"] >= start])
    if still_held:
        still_held()
    write_state(store, target, state)
    store.delete([prefix + name for name in sorted(expired)])
    return len(expired)


def _go_on_from_interrupted(config: Config, store: ObjectStore, target: str, state: dict, branch: str,
                            table: str) -> None:
    """Versions an interrupted append wrote past the recorded head: a reader may have read them, so
    they are never taken back. The state takes them in (their source version and lakeFS commit are
    in their `commitInfo.lakeFS`), and the append goes on from them: the retried commit appends the
    rest, another compares the source with them as with any version the table holds."""
    found = interrupted_versions(store, target, state["head_version"])
    if found is None:
        return
    try:
        source = store.get(export_location(config, branch, found.commit_id, table) + LOG_DIR +
                           commit_name(found.source_version))
    except NotFound:  # that export is pruned: the next append cannot tell a rewritten source version
        source = None
    head = found.versions[-1]
    state.update(head_version=head, offset=head - found.source_version, source_version=found.source_version,
                 source_sha256=digest(source) if source is not None else None,
                 table_id=table_id_of(found.commits, None, from_checkpoint=False) or state.get("table_id"))
    state["commits"].append({"commit_id": found.commit_id, "version": head, "source_version": found.source_version,
                             "appended": [found.versions[0], head], "synthetic": found.synthetic,
                             "interrupted": True, "at": now_iso()})


def _place_on_branch(lakefs: LakeFS, repository: str, branch: str, commit_id: str,
                     followed: str | None) -> tuple[str, list[str]]:
    """Where the commit sits on the branch's first-parent line against the commit the branch table
    follows: `same`, `older` (a late event: an ancestor of the followed commit) or `newer` (on the
    line, above the followed commit or with the followed commit off the line after a reset), with,
    for `newer` on one line, the commits strictly between the two, oldest first.
    BranchTableRefused when the commit is not on the line."""
    if commit_id == followed:
        return "same", []
    line, _ = lakefs.first_parent_line(repository, branch, stop_at=followed, limit=LINE_LIMIT)
    ids = [c.id for c in line]
    if commit_id in ids:
        above = ids[:ids.index(followed)] if followed in ids else \
            ids if line and line[-1].parents[:1] == [followed] else None
        return "newer", list(reversed(above[above.index(commit_id) + 1:])) if above and commit_id in above else []
    if followed is not None and lakefs.merge_base(repository, commit_id, followed) == commit_id:
        return "older", []
    raise BranchTableRefused(f"commit {commit_id} is not on the first-parent line of branch {branch!r} (its head and "
                             f"the {LINE_LIMIT} commits below it): the event names a branch its commit is not on")


def _create(store: ObjectStore, target: str, exported: ExportedLog, repository: str, branch: str, commit_id: str,
            manifest: ExportManifest) -> dict:
    """The first append: the export's log, annotated, in the fail-closed write order of an export."""
    discard_export(store, target)  # what an interrupted first append left: never a table to a reader
    versions = {name: version for version, name in exported.listing.commits.items()}
    raw: dict[str, bytes] = {}

    def write(name: str) -> None:
        if name in versions:
            raw.setdefault(name, exported.raw(name))
            store.put(target + LOG_DIR + name, annotated(raw[name], repository, commit_id, versions[name]))
        elif name in exported.sizes:
            store.copy(exported.location + LOG_DIR + name, target + LOG_DIR + name)

    segment = exported.segment
    write_log(segment, [n for n in exported.sizes if n.startswith("_sidecars/")], write)
    head = segment.head_version
    first = segment.checkpoint.version if segment.checkpoint else 0
    head_name = exported.listing.commits.get(head)
    return {
        "repository": repository, "branch": branch, "table": manifest.table, "table_path": manifest.table_path,
        "table_paths": [manifest.table_path],
        "first_version": first, "head_version": head, "offset": 0, "source_version": head,
        "source_sha256": digest(raw[head_name]) if head_name in raw else None,
        "table_id": table_id_of(parsed_commits({versions[n]: content for n, content in raw.items()}), exported),
        "commits": [{"commit_id": commit_id, "version": head, "source_version": head, "appended": [first, head],
                     "synthetic": None, "at": now_iso()}],
    }
