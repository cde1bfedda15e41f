"""Retention of per-commit exports (`prune`) and checking that an export still reads (`verify`).

Per-commit exports accumulate: `prune` deletes those outside a policy (the newest `keep_last`
first-parent commits of each branch, everything exported less than `keep_hours` ago, and every
tag's export stay), never a branch table. Catch-up asks `within_policy` before re-exporting a
commit, so it never brings back what prune removed. A row diff's rows file belongs to what it
describes: it goes with the last export of its right-hand commit (unless that commit is a branch's
head, or the file is younger than `keep_hours`); `verify` names the rows files no export accounts for.
The Iceberg files exports share go once no export's Iceberg table names them (`iceberg_files`).

An export references data files by physical address; lakeFS garbage collection deletes an object
once no retained commit references it. `verify` HEADs every live data file and deletion vector of
an export or branch table and reports the ones that are gone.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote

from exporter.config import Config, RetentionConfig
from exporter.delta.deletion_vectors import stored_file
from exporter.delta.live_files import LiveFiles
from exporter.errors import NotFound
from exporter.export.log_writer import discard_export
from exporter.export.readback import read_exported_log
from exporter.lakefs.client import LakeFS
from exporter.lakefs.lake import Lake
from exporter.state.status import StatusStore
from exporter.storage.layout import (
    LATEST,
    MANIFEST,
    branch_table_location,
    export_location,
    exports_root,
    location_segment,
    row_diffs_root,
    segment_name,
)
from exporter.progress import Progress, Step, counted, each, quiet
from exporter.storage.objectstore import ObjectStore, split_uri
from exporter.threads import IO_THREADS, io_pool
from exporter.upkeep.iceberg_files import collect_iceberg_files

HOUR = 3600


@dataclass
class PrunePlan:
    repository: str
    dry_run: bool
    deleted: list[str] = field(default_factory=list)  # export locations removed (dry run: to remove)
    kept: dict[str, str] = field(default_factory=dict)  # export location -> why it stays
    objects_deleted: int = 0
    row_diffs_deleted: list[str] = field(default_factory=list)  # rows files removed (dry run: to remove)
    iceberg_files_deleted: int = 0  # Iceberg files no export's table names (dry run: to remove)
    iceberg_files_unnamed: int = 0  # named by none, deleted by a later prune if still so

    def summary(self) -> str:
        verb = "would delete" if self.dry_run else "deleted"
        return (f"{self.repository}: {verb} {len(self.deleted)} export(s)"
                + ("" if self.dry_run else f" ({self.objects_deleted} objects)") + f", kept {len(self.kept)}"
                + f", {verb} {len(self.row_diffs_deleted)} row diff rows file(s)"
                + f", {verb} {self.iceberg_files_deleted} Iceberg file(s) no export names"
                + (f" ({self.iceberg_files_unnamed} more unnamed: a later prune deletes them)"
                   if self.iceberg_files_unnamed else ""))


def within_policy(commit_position: int, commit_age_seconds: float, policy: RetentionConfig) -> bool:
    """Whether a branch commit's export is kept: among the newest `keep_last` first-parent commits
    (position 0 is the head), or younger than `keep_hours`."""
    return commit_position < policy.keep_last or commit_age_seconds < policy.keep_hours * HOUR


def prune(lake: Lake, repository: str, policy: RetentionConfig | None = None, dry_run: bool = False,
          now: float | None = None, progress: Progress = quiet) -> PrunePlan:
    """Delete the per-commit exports of a repository outside the policy (default: the config's).

    Each table's export is deleted under its export lock (the one its writers hold): an export
    being written is left alone, whatever its age."""
    config, lakefs = lake.config, lake.lakefs
    policy, now = policy or config.retention, time.time() if now is None else now
    status = StatusStore(config.redis)
    store = lake.store(repository)
    root = exports_root(config)
    tags = {location_segment(tag) for tag, _ in lakefs.list_tags(repository)}
    branches = {location_segment(branch): branch for branch in lakefs.list_branches(repository)}
    plan = PrunePlan(repository, dry_run)
    for ref_segment in store.list_folders(root):
        newest = []
        if ref_segment in branches:
            newest = [c.id for c in lakefs.log(repository, branches[ref_segment], amount=policy.keep_last,
                                                first_parent=True)] if policy.keep_last else []
        written: dict[str, float] = {}  # commit folder -> when its newest object was written
        for name, _, modified in store.list_objects(f"{root}{ref_segment}/"):
            commit_folder = name[len(root) + len(ref_segment) + 1:].split("/", 1)[0]
            if commit_folder != LATEST:  # branch tables are never pruned
                written[commit_folder] = max(written.get(commit_folder, 0.0), modified)
        done = counted(progress, "prune", f"{repository} {segment_name(ref_segment)}", "exports decided",
                       len(written), "exports", every=max(1, len(written) // 100))
        for commit_folder, modified in each(sorted(written.items()), done):
            location = f"{root}{ref_segment}/{commit_folder}/"
            if ref_segment in tags:
                plan.kept[store.uri(location)] = "a tag's export"
            elif commit_folder in newest:
                plan.kept[store.uri(location)] = f"among the newest {policy.keep_last} commits of the branch"
            elif now - modified < policy.keep_hours * HOUR:
                plan.kept[store.uri(location)] = f"exported less than {policy.keep_hours:g} hours ago"
            elif dry_run:
                plan.deleted.append(store.uri(location))
            else:
                busy = [table for table in store.list_folders(location) if not _discard_unless_written(
                    status, status.export_lock(repository, segment_name(ref_segment), commit_folder, segment_name(table)),
                    config.tasks.lock_ttl_seconds, store, f"{location}{table}/", plan)]
                if busy:
                    plan.kept[store.uri(location)] = f"being exported now: {', '.join(segment_name(t) for t in busy)}"
                else:
                    plan.deleted.append(store.uri(location))
                    plan.objects_deleted += _discard_rest(store, location)
    gone = {tuple(location.rstrip("/").rsplit("/", 2)[1:]) for location in plan.deleted}  # (ref, commit)
    exported = {commit for ref, commit in _exports(config, store) - gone} | _branch_heads(lakefs, repository)
    orphans = [(name, modified) for name, modified in _row_diff_files(config, store)
               if _right_commit(config, name) not in exported and now - modified >= policy.keep_hours * HOUR]
    plan.row_diffs_deleted = [store.uri(name) for name, _ in orphans]
    if orphans and not dry_run:
        store.delete([name for name, _ in orphans])
        plan.objects_deleted += len(orphans)
    progress(Step("prune", repository, "orphan row diffs", len(orphans), len(orphans), "files"))
    collection = collect_iceberg_files(store, config, now, iceberg_grace_seconds(config), dry_run)
    plan.iceberg_files_deleted, plan.iceberg_files_unnamed = len(collection.deleted), collection.candidates
    plan.objects_deleted += 0 if dry_run else len(collection.deleted)
    progress(Step("prune", repository, "Iceberg files no export names", len(collection.deleted),
                  len(collection.deleted), "files"))
    return plan


def iceberg_grace_seconds(config: Config) -> float:
    """How long an Iceberg file no table names is kept: longer than an export deriving its table
    from another's takes to name it (a task's time limit is below the visibility timeout; a task
    redelivered once is two)."""
    return 2.0 * config.tasks.visibility_timeout_seconds


def orphan_row_diffs(lake: Lake, repository: str) -> list[str]:
    """The rows files of row diffs whose right-hand commit has no export left and heads no branch."""
    config, lakefs = lake.config, lake.lakefs
    store = lake.store(repository)
    exported = {commit for _, commit in _exports(config, store)} | _branch_heads(lakefs, repository)
    return [store.uri(name) for name, _ in _row_diff_files(config, store)
            if _right_commit(config, name) not in exported]


def _exports(config: Config, store: ObjectStore) -> set[tuple[str, str]]:
    """(ref segment, commit id) of every per-commit export folder."""
    root = exports_root(config)
    return {(ref, commit) for ref in store.list_folders(root) for commit in store.list_folders(f"{root}{ref}/")
            if commit != LATEST}


def _branch_heads(lakefs: LakeFS, repository: str) -> set[str]:
    return {lakefs.commit(repository, branch).id for branch in lakefs.list_branches(repository)}


def _row_diff_files(config: Config, store: ObjectStore) -> list[tuple[str, float]]:
    return [(name, modified) for name, _, modified in store.list_objects(row_diffs_root(config))]


def _right_commit(config: Config, name: str) -> str:
    """`<rowdiff>/<left>/<right>/<table>/<key>.parquet` -> right."""
    return name[len(row_diffs_root(config)):].split("/")[1]


def _discard_unless_written(status: StatusStore, lock: str, ttl: int, store: ObjectStore, location: str,
                            plan: PrunePlan) -> bool:
    """Discard one table's export under its export lock (`lock`, the one its writers take); False
    when a delivery holds it (writing)."""
    with status.lock(lock, ttl) as held:
        if held:
            plan.objects_deleted += discard_export(store, location)
        return held


def _discard_rest(store: ObjectStore, location: str) -> int:
    """Objects left directly under a commit folder (none, normally)."""
    keys = store.list_keys(location)
    store.delete(keys)
    return len(keys)


@dataclass
class Verification:
    location: str
    version: int
    files_checked: int = 0
    missing: list[str] = field(default_factory=list)  # data files and deletion vectors that are gone
    unchecked: list[str] = field(default_factory=list)  # addresses outside S3 (abfss://, gs://): not checked
    orphan_row_diffs: list[str] = field(default_factory=list)  # the repository's rows files no export accounts for

    @property
    def ok(self) -> bool:
        return not self.missing

    def summary(self) -> str:
        head = (f"{'OK' if self.ok else 'MISSING'}  {self.location} version {self.version}: "
                f"{self.files_checked} file(s) checked, {len(self.missing)} missing"
                + (f", {len(self.unchecked)} not on S3 (not checked)" if self.unchecked else ""))
        return "\n".join([head, *(f"  missing {uri}" for uri in self.missing),
                          *(f"  orphan row diff {uri} (prune removes it)" for uri in self.orphan_row_diffs)])


def verify(lake: Lake, repository: str, ref: str, table: str, commit_id: str | None = None,
           progress: Progress = quiet) -> Verification:
    """Check the export of `table` at `commit_id` under `ref` (without a commit: the branch table
    of `ref`): every live data file and deletion vector it references still exists."""
    config, lakefs = lake.config, lake.lakefs
    store = lake.store(repository)
    if commit_id is None:
        location = branch_table_location(config, ref, table)
    else:
        location = export_location(config, ref, lakefs.commit(repository, commit_id).id, table)
        if not store.exists(location + MANIFEST):
            raise NotFound(f"no complete export of {table!r} at {commit_id} under {ref!r}: {store.uri(location)}")
    log = read_exported_log(store, location)
    if log is None:
        raise NotFound(f"nothing exported at {store.uri(location)}")
    table_root = store.uri(location)
    result = Verification(table_root, log.segment.head_version)
    stores: dict[str, ObjectStore] = {}

    def exists(address: str) -> bool:
        bucket, _ = split_uri(address)
        if bucket not in stores:
            stores[bucket] = lake.stores.at(f"s3://{bucket}")
        return stores[bucket].head_uri(address)

    with io_pool(IO_THREADS) as pool:  # a batch of addresses at a time: memory follows the batch
        addresses = _addresses(table_root, LiveFiles(log).files())
        while batch := list(dict.fromkeys(itertools.islice(addresses, 4096))):  # a DV file serves many data files
            on_s3 = [a for a in batch if a.startswith(("s3://", "s3a://"))]
            result.unchecked += [a for a in batch if a not in on_s3]
            result.missing += [a for a, there in zip(on_s3, pool.map(exists, on_s3)) if not there]
            result.files_checked += len(on_s3)
            progress(Step("verify", table_root, "files checked", result.files_checked, None, "files"))
    progress(Step("verify", table_root, "files checked", result.files_checked, result.files_checked, "files"))
    result.missing = sorted(set(result.missing))
    result.unchecked = sorted(set(result.unchecked))
    result.orphan_row_diffs = orphan_row_diffs(lake, repository)
    return result


def _addresses(table_root: str, files: Iterable[dict]) -> Iterable[str]:
    """The objects live files read: each data file, and its deletion vector's file when stored in one."""
    for add in files:
        yield _absolute(table_root, add["path"])
        if (vector_file := stored_file(add.get("deletionVector"))) is not None:
            yield _absolute(table_root, vector_file)


def _absolute(table_root: str, path: str) -> str:
    """The object a log path names: exported paths are absolute URIs; a relative one (kept because
    its object was gone at export) is under the table's root. Decoded once, as readers do."""
    if "://" in path:
        return unquote(path)
    return unquote(table_root.rstrip("/") + "/" + path)

