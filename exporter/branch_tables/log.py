"""A branch table's log, written: versions copied from an export and annotated with their lakeFS
commit, synthetic `LAKEFS SYNC` versions, removes of files an export no longer names resolved
against the branch table's own live files, checkpoints renamed by the offset, orphans dropped.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pyarrow.compute as pc

from exporter.config import Config
from exporter.delta.actions import parse_action_line, parse_actions
from exporter.delta.deletion_vectors import RELATIVE
from exporter.delta.live_files import LiveFiles
from exporter.delta.log import LAST_CHECKPOINT, LOG_DIR, LogListing, commit_name, with_version
from exporter.delta.paths import is_absolute
from exporter.delta.replay import checkpoint_row_groups
from exporter.errors import CorruptLog
from exporter.export.json_splice import add_member
from exporter.export.readback import ExportedLog, read_exported_log
from exporter.export.resolve import PathResolver
from exporter.export.rewrite import rewrite_commit
from exporter.lakefs.client import LakeFS
from exporter.lakefs.gateway_paths import LakeFSPaths
from exporter.lakefs.table_log import list_log, read_log_files
from exporter.storage.objectstore import ObjectStore

SYNC_OPERATION = "LAKEFS SYNC"  # the operation of a synthetic version that brings the log to the source


def with_gone_files_resolved(config: Config, lakefs: LakeFS, store: ObjectStore, repository: str, followed: str,
                              table_path: str, versions: dict[int, bytes]) -> dict[int, bytes]:
    """The versions whose removes name a file by a relative path, rewritten with the addresses at
    the followed commit.

    An export keeps a remove's path relative when its object is gone at the commit (vacuumed), while
    the branch table holds that file's add, appended earlier, with its absolute address: readers
    reconcile on the raw string (PROTOCOL.md#action-reconciliation), so the file would stay live.
    Every file live in the branch table is live in the source at the followed commit, so its object
    is there. Returns only the versions that needed it (none: no lakeFS call)."""
    def names_gone_file(raw: bytes, version: int) -> bool:
        for action in parse_actions(commit_name(version), raw):
            remove = action.get("remove")
            if isinstance(remove, dict) and (not is_absolute(str(remove.get("path", ""))) or
                                             (remove.get("deletionVector") or {}).get("storageType") == RELATIVE):
                return True
        return False

    relative = {v: raw for v, raw in versions.items() if names_gone_file(raw, v)}
    if not relative:
        return {}
    layout = list_log(lakefs, store, repository, followed, table_path)
    resolver = PathResolver(layout.addresses)  # absolute paths stay: the export already pinned them
    return {v: rewrite_commit(commit_name(v), raw, resolver).content for v, raw in relative.items()}


def live_files_differ(store: ObjectStore, target: str, exported: ExportedLog) -> bool:
    """Whether the branch table as written reads other files than the export (by path and
    deletion vector, as readers reconcile)."""
    written = read_exported_log(store, target)
    mine, theirs = LiveFiles(written).keys(), LiveFiles(exported).keys()
    return len(mine) != len(theirs) or not pc.all(pc.is_in(mine, value_set=theirs)).as_py()


def copy_checkpoint(store: ObjectStore, target: str, exported: ExportedLog, offset: int, branch_head: int) -> bool:
    """The export's checkpoint when it describes a version the branch table did not have, renamed
    by the offset; a V2 checkpoint names its version inside, so it is copied only without one.
    Whether it was copied."""
    checkpoint = exported.segment.checkpoint
    if checkpoint is None or checkpoint.version + offset <= branch_head or (offset and checkpoint.kind == "v2"):
        return False
    names = exported.checkpoint_files()

    def copy(name: str) -> None:
        renamed = name if name.startswith("_sidecars/") else with_version(name, checkpoint.version + offset)
        store.copy(exported.location + LOG_DIR + name, target + LOG_DIR + renamed)

    for name in names:  # sidecars, then parts: the last part makes the checkpoint complete
        copy(name)
    if LAST_CHECKPOINT in exported.sizes:
        document = json.loads(exported.raw(LAST_CHECKPOINT))
        document["version"] = checkpoint.version + offset
        store.put(target + LOG_DIR + LAST_CHECKPOINT, json.dumps(document).encode())
    return True


def source_versions(config: Config, lakefs: LakeFS, store: ObjectStore, repository: str, commit_id: str,
                     table_path: str, versions: list[int]) -> dict[int, bytes]:
    """Commits the export does not hold (it starts at a later checkpoint), read from the source's log
    at the commit and rewritten as an export would; those the log no longer holds are left out."""
    layout = list_log(lakefs, store, repository, commit_id, table_path)  # data files too: their paths resolve
    names = {v: layout.listing.commits[v] for v in versions if v in layout.listing.commits}
    raw = read_log_files(store, layout.addresses, list(names.values()))
    resolver = PathResolver(layout.addresses, LakeFSPaths(lakefs, store.bucket))
    return {v: rewrite_commit(name, raw[name], resolver).content for v, name in names.items()}


@dataclass(frozen=True)
class Interrupted:
    """What an interrupted append left past the recorded head: the versions that follow it without a
    gap (a reader may have read them), the last one's source version and lakeFS commit, and its
    actions."""

    versions: list[int]
    source_version: int
    commit_id: str
    synthetic: str | None  # a synthetic version's reason
    commits: list[list[dict]]  # the versions' actions, in order


def interrupted_versions(store: ObjectStore, target: str, head: int) -> Interrupted | None:
    """The versions an interrupted append wrote after `head`, from the first without a gap; what
    follows a gap (no reader reads past one) and a checkpoint past them go (`drop_orphans`)."""
    log = target + LOG_DIR
    listing = _past(store, target, head)
    versions = list(itertools.takewhile(lambda v: v in listing.commits, itertools.count(head + 1)))
    drop_orphans(store, target, versions[-1] if versions else head, listing)
    if not versions:
        return None
    commits = parsed_commits({v: store.get(log + listing.commits[v]) for v in versions})
    info = next((a["commitInfo"] for a in commits[-1] if isinstance(a.get("commitInfo"), dict)), {})
    marker = info.get("lakeFS") if isinstance(info.get("lakeFS"), dict) else None
    if marker is None or not isinstance(marker.get("sourceVersion"), int) or not marker.get("commit"):
        raise CorruptLog(f"branch table version {versions[-1]} past the recorded head {head} has no commitInfo.lakeFS: "
                         "not written by an append")
    synthetic = (info.get("operationParameters") or {}).get("reason") if info.get("operation") == SYNC_OPERATION else None
    return Interrupted(versions, marker["sourceVersion"], marker["commit"], synthetic, commits)


def _past(store: ObjectStore, target: str, head: int) -> LogListing:
    log = target + LOG_DIR  # only what sorts after the head's commit: the cost does not grow with the log
    return LogListing.from_names((name[len(log):], 0) for name, _, _ in
                                 store.list_objects(log, start_after=log + commit_name(head)))


def drop_orphans(store: ObjectStore, target: str, head: int, listing: LogListing | None = None) -> None:
    """What lies past `head` and no reader can read (after a gap in the versions) goes; `listing`,
    when the caller has listed past an earlier version already, spares a second listing."""
    listing = _past(store, target, head) if listing is None else listing
    orphans = [name for version, name in listing.commits.items() if version > head]
    orphans += [name for version, checkpoint in listing.checkpoints.items() if version > head for name in checkpoint.files]
    if not orphans:
        return
    if LAST_CHECKPOINT in listing.sizes and any(v > head for v in listing.checkpoints):
        orphans.append(LAST_CHECKPOINT)  # it names a checkpoint about to go: readers list instead
    store.delete([target + LOG_DIR + name for name in sorted(orphans, reverse=True)])


def annotated(raw: bytes, repository: str, commit_id: str, source_version: int) -> bytes:
    """The commit with `commitInfo.lakeFS` naming the lakeFS commit it came from; other bytes kept."""
    marker = {"repository": repository, "commit": commit_id, "sourceVersion": source_version}
    lines = raw.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if line.strip() and isinstance(parse_action_line("commit", number, line).get("commitInfo"), dict):
            lines[number - 1] = add_member(line, ("commitInfo",), "lakeFS", marker)
            break
    return b"\n".join(lines)


def sync_commit(store: ObjectStore, target: str, exported: ExportedLog, reason: str, repository: str,
                 commit_id: str) -> bytes:
    """One commit taking the branch table from its head to the export's snapshot
    (PROTOCOL.md#action-reconciliation): removes for files no longer live, adds for new ones,
    protocol and metaData when they changed."""
    before, after = LiveFiles(read_exported_log(store, target)), LiveFiles(exported)
    before_keys, after_keys = before.keys(), after.keys()
    removed = before_keys.filter(pc.invert(pc.is_in(before_keys, value_set=after_keys)))
    added = after_keys.filter(pc.invert(pc.is_in(after_keys, value_set=before_keys)))
    now = int(time.time() * 1000)
    info: dict[str, Any] = {}
    configuration = (after.metadata or {}).get("configuration") or {}
    if str(configuration.get("delta.enableInCommitTimestamps", "")).lower() == "true":
        info["inCommitTimestamp"] = max(now, before.in_commit_timestamp + 1)  # PROTOCOL.md#in-commit-timestamps
    info.update(timestamp=now, operation=SYNC_OPERATION, isBlindAppend=False,
                operationParameters={"reason": reason, "lakeFSCommit": commit_id,
                                     "sourceVersion": str(exported.segment.head_version)},
                lakeFS={"repository": repository, "commit": commit_id,
                        "sourceVersion": exported.segment.head_version})
    actions: list[dict] = [{"commitInfo": info}]
    if after.protocol != before.protocol:
        actions.append({"protocol": after.protocol})
    if after.metadata != before.metadata:
        actions.append({"metaData": after.metadata})
    actions += [{"remove": remove_of(add, now)} for add in before.adds(removed)]
    actions += [{"add": {**add, "dataChange": True}} for add in after.adds(added)]
    return "".join(json.dumps(action, separators=(",", ":")) + "\n" for action in actions).encode()


def remove_of(add: Mapping[str, Any], now: int) -> dict:
    """PROTOCOL.md#add-file-and-remove-file: the remove of a live file, with its extended metadata."""
    kept = ("path", "deletionVector", "partitionValues", "size", "tags", "baseRowId", "defaultRowCommitVersion")
    return {"path": add["path"], "deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True,
            **{k: add[k] for k in kept[1:] if k in add}}


def parsed_commits(versions: Mapping[int, bytes]) -> list[list[dict]]:
    return [parse_actions(commit_name(version), versions[version]) for version in sorted(versions)]


def table_id_of(commits: list[list[dict]], exported: ExportedLog, from_checkpoint: bool = True) -> str | None:
    """The newest metaData id among the commits, else (when asked) the export's checkpoint's."""
    ids = [a["metaData"].get("id") for actions in commits for a in actions if isinstance(a.get("metaData"), dict)]
    if ids:
        return ids[-1]
    if not from_checkpoint:
        return None
    for name in exported.checkpoint_files():
        if name.endswith(".parquet") and not name.startswith("_sidecars/"):
            for group in checkpoint_row_groups(name, exported.source(name), ["metaData.id"]):
                found = [i for i in group.column("metaData").to_pylist() if i]
                if found:
                    return found[0]["id"]
        elif name.endswith(".json"):
            found = [a["metaData"].get("id") for a in parse_actions(name, exported.raw(name)) if "metaData" in a]
            if found:
                return found[0]
    return None


def digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
