"""Catch-up: find the commits and tags whose export is incomplete, because lakeFS never retries a
post-hook (a receiver that was down, a 503, a dropped event).

One implementation for `lakefs-delta catch-up` and the workers' periodic task. It follows only
first parents, so after a merge the feature branch's commits are not exported under the
destination; it covers tags (every table); it skips exports whose status is a terminal `failed`
(re-queuing them would fail again) and commits outside the retention policy (prune would delete
their exports), and it queues at most `catch_up.max_per_run` commits a run.
"""

from __future__ import annotations

import fnmatch
import time
from dataclasses import dataclass, field

from exporter.config import Config
from exporter.errors import ExporterError
from exporter.export.branch_table import follows, lagging_branch_tables
from exporter.export.commit import missing_exports
from exporter.export.retention import within_policy
from exporter.lakefs.installer import ACTION_PATH, branch_tables_kept, installed_action
from exporter.lakefs.client import LakeFS
from exporter.state.status import StatusStore

_BRANCH_EVENTS = ("post-commit", "post-merge")


@dataclass(frozen=True)
class MissingExport:
    repository: str
    ref: str
    commit_id: str
    all_tables: bool  # a tag exports every table
    tables: tuple[str, ...]
    branch_table: bool = False  # the branch keeps branch tables: the exports append to them


@dataclass
class CatchUpPlan:
    queued: list[MissingExport] = field(default_factory=list)
    given_up: list[str] = field(default_factory=list)  # exports whose status is a terminal failure
    skipped_repositories: list[str] = field(default_factory=list)  # no action installed, or unreadable
    truncated: bool = False  # the per-run bound was reached
    # (repository, branch, head commit, table): branch tables behind their branch's exported head
    appends: list[tuple[str, str, str, str]] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{len(self.queued)} commit(s) queued, {len(self.appends)} branch table append(s) queued, "
                f"{len(self.given_up)} terminal failure(s) not re-queued"
                + (", more left for the next run" if self.truncated else ""))


def followed_branches(lakefs: LakeFS, repository: str, config: Config, action: dict | None) -> list[str] | None:
    """Branches whose commits are exported: the configured patterns, else those the installed action
    names for commits and merges; None when the repository has no action installed."""
    patterns = list(config.catch_up.branches)
    if not patterns:
        if action is None:
            return None
        events = action.get("on", action.get(True)) or {}  # YAML 1.1 reads a bare `on` key as true
        for event in _BRANCH_EVENTS:
            if event in events:
                named = (events.get(event) or {}).get("branches")
                patterns += named if isinstance(named, list) else ["*"]  # no list: every branch
    return sorted({b for b in lakefs.list_branches(repository) if any(fnmatch.fnmatchcase(b, p) for p in patterns)})


def _failed_for_good(record: dict | None) -> bool:
    """A permanent failure (bad descriptor, missing files, refused table): re-queuing fails again.
    An export that ran out of retries on transient errors is queued again."""
    return bool(record) and record.get("state") == "failed" and record.get("permanent", True)


def catch_up(config: Config, lakefs: LakeFS, status: StatusStore, repositories: list[str] | None = None) -> CatchUpPlan:
    plan = CatchUpPlan()
    for repository in repositories or list(config.catch_up.repositories) or lakefs.list_repositories():
        try:
            action = installed_action(lakefs, repository)
            branches = followed_branches(lakefs, repository, config, action)
            keeps_tables = branch_tables_kept(config, action)
        except ExporterError as exc:
            plan.skipped_repositories.append(f"{repository}: {exc}")
            continue
        if branches is None:
            plan.skipped_repositories.append(f"{repository}: no {ACTION_PATH} on its default branch")
            continue
        now = time.time()
        logs = {branch: lakefs.log(repository, branch, amount=config.catch_up.depth, first_parent=True)
                for branch in branches}
        # what prune would delete is not exported again
        candidates = [(branch, commit.id, False) for branch, commits in logs.items()
                      for position, commit in enumerate(commits)
                      if within_policy(position, now - commit.creation_date, config.retention)]
        candidates += [(tag, commit_id, True) for tag, commit_id in lakefs.list_tags(repository, config.catch_up.depth)]
        for ref, commit_id, all_tables in candidates:
            missing = missing_exports(config, repository, ref, commit_id, lakefs=lakefs, all_tables=all_tables)
            failed = [t for t in missing if _failed_for_good(status.record(repository, ref, commit_id, t))]
            plan.given_up += [f"{repository} {ref} {commit_id} {t}" for t in failed]
            retry = tuple(t for t in missing if t not in failed)
            if not retry:
                continue
            if len(plan.queued) >= config.catch_up.max_per_run:
                plan.truncated = True
                return plan
            plan.queued.append(MissingExport(repository, ref, commit_id, all_tables, retry,
                                             branch_table=not all_tables and follows(ref, keeps_tables)))
        plan.appends += [(repository, branch, commits[0].id, table) for branch, commits in logs.items()
                         if commits and follows(branch, keeps_tables)
                         for table in lagging_branch_tables(config, lakefs, repository, branch, commits[0].id)]
    return plan
