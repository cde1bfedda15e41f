"""A table's history diff between two refs, read from lakeFS, cached in Redis by commit ids.

Refs are resolved to commit ids before the cache is asked, so a cached entry never goes stale:
the same two commits always have the same diff.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict

from exporter.delta.actions import parse_actions
from exporter.delta.log import LOG_DIR
from exporter.delta.replay import TableLog, TableState, snapshot_states, with_older_commits
from exporter.diff.history import NO_BASE, diff_history, same_table
from exporter.errors import NotFound, TableNotFound
from exporter.lakefs.client import LakeFS, commit_id_of
from exporter.lakefs.lake import Lake
from exporter.lakefs.table_log import LoadedLog, load_log
from exporter.state.results import ResultCache
from exporter.storage.objectstore import ObjectStore
from exporter.threads import io_pool


def load_table(lakefs: LakeFS, store: ObjectStore, repository: str, commit_id: str, table_path: str) -> LoadedLog | None:
    try:
        return load_log(lakefs, store, repository, commit_id, table_path, log_only=True)
    except TableNotFound:
        return None


def table_state(store: ObjectStore, loaded: LoadedLog | None, history_after: int | None = None) -> TableState | None:
    """The table as its log stands (None when absent); with `history_after`, its history reaches
    back past the checkpoint to there (`older_history`)."""
    state = table_states(store, [loaded])[0]
    return state if state is None or history_after is None else older_history(store, loaded, state, history_after)


def table_states(store: ObjectStore, logs: list[LoadedLog | None]) -> list[TableState | None]:
    """`table_state` of each log, replayed together: a checkpoint the logs share is read once."""
    table_logs = [_table_log(store, loaded) for loaded in logs if loaded is not None]
    states = iter(snapshot_states(table_logs))
    return [None if loaded is None else next(states) for loaded in logs]


def _table_log(store: ObjectStore, loaded: LoadedLog) -> TableLog:
    segment = loaded.segment
    checkpoint_version = segment.checkpoint.version if segment.checkpoint else None
    parquet = [n for n in loaded.checkpoint_files if n.endswith(".parquet")]
    checkpoint = [(n, loaded.source(store, n)) for n in parquet]
    checkpoint_actions = [a for n in loaded.checkpoint_files if n.endswith(".json")
                          for a in parse_actions(n, loaded.files[n])]
    commits = []
    if segment.checkpoint_commit:  # c.json: only its commitInfo is used
        commits.append((checkpoint_version, parse_actions(segment.checkpoint_commit, loaded.files[segment.checkpoint_commit])))
    commits += [(v, parse_actions(n, loaded.files[n])) for v, n in segment.commits]
    identity = tuple(loaded.addresses[LOG_DIR + n] for n in parquet) or None
    return TableLog(checkpoint_version, checkpoint, checkpoint_actions, commits, identity)


def older_history(store: ObjectStore, loaded: LoadedLog, state: TableState, history_after: int) -> TableState:
    """`state` with its history reaching back to `history_after` through the JSON commits older
    than its checkpoint that the log still holds (only what identifies each commit is used)."""
    older = [(v, n) for v, n in sorted(loaded.listing.commits.items()) if history_after < v < state.earliest_version]
    loaded.read_more(store, [n for _, n in older])
    return with_older_commits(state, [(v, parse_actions(n, loaded.files[n])) for v, n in older])


def compute_diff(lake: Lake, repository: str, left_commit: str | None, right_commit: str, table_path: str) -> dict:
    """`left_commit=None` compares against nothing (a repository's first commit)."""
    lakefs = lake.lakefs
    store = lake.store(repository)
    started = time.monotonic()
    loaded: dict[str, LoadedLog | None] = {}  # the base is often the left side itself (a parent)

    def load(commit_id: str) -> LoadedLog | None:
        if commit_id not in loaded:
            loaded[commit_id] = load_table(lakefs, store, repository, commit_id, table_path)
        return loaded[commit_id]

    base_commit = None
    if left_commit:
        try:
            base_commit = lakefs.merge_base(repository, right_commit, left_commit)
        except NotFound:
            base_commit = None  # no common ancestor: compare by content alone
    # each commit's table replayed once, together: a checkpoint the sides share is read once
    commits = [commit for commit in dict.fromkeys([base_commit, left_commit, right_commit]) if commit]
    states = dict(zip(commits, table_states(store, [load(commit) for commit in commits])))
    base = states[base_commit] if base_commit else NO_BASE
    # history is needed back to where the two sides share a version: the base's head, if known
    history_after = base.version if isinstance(base, TableState) else -1

    def with_history(commit_id: str) -> TableState | None:
        state = states[commit_id]
        return state if state is None else older_history(store, loaded[commit_id], state, history_after)

    right_log = load(right_commit)
    right = with_history(right_commit)
    left = with_history(left_commit) if left_commit else None
    if right_log and right and (left is None or not same_table(left, right)):
        right = older_history(store, right_log, right, -1)  # nothing shared: every version of right is new
    result = diff_history(left, right, base)
    result.update(table_path=table_path, left_commit=left_commit, right_commit=right_commit, base_commit=base_commit,
                  computed_seconds=round(time.monotonic() - started, 4))
    return result


class DiffCache(ResultCache):
    """Diffs keyed by (repository, left commit, right commit, table path), bounded by a TTL.

    The last `KEPT` diffs read (each under `KEPT_BYTES` as stored) are kept decoded in the process
    too: a diff of two commits never changes, and decoding one of 1,000 versions was 3 ms of a
    cached answer's 12-17 ms, paid again for each page a caller reads. Kept diffs are shared:
    callers never change what `get` returns."""

    TABLE_PATH_PART = 3
    KEPT = 16
    KEPT_BYTES = 1 << 20

    def __init__(self, redis_url: str, ttl_seconds: int):
        super().__init__(redis_url, ttl_seconds, "diff")
        self._kept: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, *parts: str | None) -> dict | None:
        key = self.key(*parts)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        raw = self.redis.get(key)
        if not raw:
            return None
        diff = json.loads(raw)
        if len(raw) <= self.KEPT_BYTES:
            with self._lock:
                self._kept[key] = diff
                while len(self._kept) > self.KEPT:
                    self._kept.popitem(last=False)
        return diff


def diff_commits(lakefs: LakeFS, repository: str, left_ref: str | None, right_ref: str) -> tuple[str | None, str]:
    """The commit ids a diff between two refs is keyed by: both refs asked of lakeFS at once (a cached
    diff's answer is these two requests and one Redis read)."""
    if not left_ref:
        return None, commit_id_of(lakefs, repository, right_ref)
    with io_pool(1) as pool:
        left = pool.submit(commit_id_of, lakefs, repository, left_ref)
        right = commit_id_of(lakefs, repository, right_ref)
        return left.result(), right


def cached_diff(lake: Lake, cache: DiffCache, repository: str, left_ref: str | None, right_ref: str,
                table_path: str) -> tuple[dict, bool]:
    """The diff between two refs, from the cache when present. Returns (diff, came from cache)."""
    lakefs = lake.lakefs
    left_commit, right_commit = diff_commits(lakefs, repository, left_ref, right_ref)
    found = cache.get(repository, left_commit, right_commit, table_path)
    if found is not None:
        return found, True
    diff = compute_diff(lake, repository, left_commit, right_commit, table_path)
    cache.put(diff, repository, left_commit, right_commit, table_path)
    return diff, False
