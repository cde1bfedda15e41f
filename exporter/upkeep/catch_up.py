"""Catch-up: find the commits and tags whose export is incomplete, because lakeFS never retries a
post-hook (a receiver that was down, a 503, a dropped event).

One implementation for `lakefs-delta catch-up` and the workers' periodic task. It follows only
first parents, so after a merge the feature branch's commits are not exported under the
destination; it covers tags (every table); it skips exports whose status is a terminal `failed`
(re-queuing them would fail again), exports still in flight (queued, running or retrying, their
record changed within `catch_up.in_flight_seconds`) and commits outside the retention policy
(prune would delete their exports), and it queues at most `catch_up.max_per_run` commits a run.
With `iceberg.enabled` it also queues the Iceberg table of a complete export that still records it
pending after `catch_up.in_flight_seconds` (its task was lost, or its retries ran out).
Unless `catch_up.repositories` names them, it acts only on repositories whose installed action
calls this deployment (`public_url`): another deployment on the same lakeFS has its own catch-up.
"""

from __future__ import annotations

import fnmatch
import logging
import time
from dataclasses import dataclass, field

from exporter.config import Config
from exporter.errors import ExporterError
from exporter.branch_tables.table import follows, lagging_branch_tables
from exporter.export.commit import missing_exports
from exporter.export.manifest import ICEBERG
from exporter.lakefs.lake import Lake
from exporter.upkeep.retention import within_policy
from exporter.lakefs.installer import ACTION_PATH, branch_tables_kept, installed_action, webhook_urls
from exporter.lakefs.client import LakeFS
from exporter.progress import Progress, Step, counted, each, quiet
from exporter.state.status import COMMIT_RECORD, StatusStore

log = logging.getLogger("lakefs_delta.exporter")
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
    in_flight: list[str] = field(default_factory=list)  # exports a delivery is still working on
    skipped_repositories: list[str] = field(default_factory=list)  # no action installed, or unreadable
    truncated: bool = False  # the per-run bound was reached
    # (repository, branch, head commit, table): branch tables behind their branch's exported head
    appends: list[tuple[str, str, str, str]] = field(default_factory=list)
    # (repository, ref, commit, table): complete exports whose Iceberg table's task was lost or gave up
    icebergs: list[tuple[str, str, str, str]] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{len(self.queued)} commit(s) queued, {len(self.appends)} branch table append(s) queued, "
                f"{len(self.icebergs)} Iceberg table(s) queued, "
                f"{len(self.given_up)} terminal failure(s) not re-queued, {len(self.in_flight)} in flight left alone"
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


_IN_FLIGHT = ("queued", "running", "retrying")


def _in_flight(record: dict | None, now: float, config: Config) -> bool:
    """Queued, running or retrying, and its record changed recently: its message is not lost."""
    return bool(record) and record.get("state") in _IN_FLIGHT and \
        now - record.get("updated_at", 0) < config.catch_up.in_flight_seconds


def catch_up(lake: Lake, status: StatusStore, repositories: list[str] | None = None,
             progress: Progress = quiet) -> CatchUpPlan:
    config, lakefs = lake.config, lake.lakefs
    run = _Run(lake, status, CatchUpPlan())
    named = repositories or list(config.catch_up.repositories)  # named: acted on whatever their action calls
    checked = named or lakefs.list_repositories()
    for repository in each(checked, counted(progress, "catch-up", "lakeFS", "repositories checked", len(checked),
                                            "repositories")):
        followed = run.followed(repository, bool(named))
        if followed is None:
            continue
        branches, keeps_tables = followed
        now = time.time()
        logs = {branch: lakefs.log(repository, branch, amount=config.catch_up.depth, first_parent=True)
                for branch in branches}
        # what prune would delete is not exported again
        candidates = [(branch, commit.id, False) for branch, commits in logs.items()
                      for position, commit in enumerate(commits)
                      if within_policy(position, now - commit.creation_date, config.retention)]
        candidates += [(tag, commit_id, True) for tag, commit_id in lakefs.list_tags(repository, config.catch_up.depth)]
        for ref, commit_id, all_tables in each(candidates, counted(progress, "catch-up", repository, "commits checked",
                                                                   len(candidates), "commits")):
            if not run.commit(repository, ref, commit_id, all_tables, keeps_tables):  # the rest is the next run's
                queued = len(run.plan.queued)
                progress(Step("catch-up", repository, "stopped at catch_up.max_per_run", queued, queued, "commits queued"))
                return run.plan
        run.lagging_branch_tables(repository, logs, keeps_tables)
    return run.plan


@dataclass
class _Run:
    """One catch-up run over lakeFS, Redis's records and the plan it fills."""

    lake: Lake
    status: StatusStore
    plan: CatchUpPlan

    @property
    def config(self) -> Config:
        return self.lake.config

    @property
    def lakefs(self) -> LakeFS:
        return self.lake.lakefs

    def followed(self, repository: str, named: bool) -> tuple[list[str], list[str]] | None:
        """The branches the repository's exports follow and those keeping branch tables; None (the
        plan saying why) when the repository is skipped."""
        try:
            action = installed_action(self.lakefs, repository)
            branches = followed_branches(self.lakefs, repository, self.config, action)
            keeps_tables = branch_tables_kept(self.config, action)
        except ExporterError as exc:  # its own action or lakeFS: the other repositories are still caught up
            log.warning("catch-up skips repository %s: %s", repository, exc)
            self.plan.skipped_repositories.append(f"{repository}: {exc}")
            return None
        if branches is None:
            self.plan.skipped_repositories.append(f"{repository}: no {ACTION_PATH} on its default branch")
            return None
        urls = webhook_urls(action or {})
        if not named and action is not None and not any(self.config.calls_this_service(url) for url in urls):
            self.plan.skipped_repositories.append(f"{repository}: its action calls {', '.join(urls) or 'no webhook'}, "
                                                  f"not this deployment's public_url {self.config.public_url}")
            return None
        return branches, keeps_tables

    def commit(self, repository: str, ref: str, commit_id: str, all_tables: bool, keeps_tables: list[str]) -> bool:
        """Plan what one commit's exports under `ref` lack; False when the per-run bound is reached."""
        config, plan = self.config, self.plan
        gaps = missing_exports(self.lake, repository, ref, commit_id, all_tables=all_tables)
        missing, pending = gaps.missing, gaps.iceberg_pending if config.iceberg.enabled else []
        if not missing and not pending:
            return True
        records = self.status.tables(repository, commit_id, ref).get(ref, {})
        iceberg_failed = [t for t in pending if _failed_for_good((records.get(t) or {}).get(ICEBERG))]
        plan.given_up += [f"{repository} {ref} {commit_id} {t} (its Iceberg table)" for t in iceberg_failed]
        # an Iceberg table's task was queued when its export was done: left to it a while
        plan.icebergs += [(repository, ref, commit_id, t) for t in pending if t not in iceberg_failed
                          and time.time() - (records.get(t) or {}).get("updated_at", 0)
                          >= config.catch_up.in_flight_seconds]
        if not missing:
            return True
        # a table without a record of its own is the commit's while the commit's task is in flight
        record = {t: records.get(t) or records.get(COMMIT_RECORD) for t in missing}
        failed = [t for t in missing if _failed_for_good(record[t])]
        busy = [t for t in missing if t not in failed and _in_flight(record[t], time.time(), config)]
        plan.given_up += [f"{repository} {ref} {commit_id} {t}" for t in failed]
        plan.in_flight += [f"{repository} {ref} {commit_id} {t}" for t in busy]
        retry = tuple(t for t in missing if t not in failed and t not in busy)
        if not retry:
            return True
        if len(plan.queued) >= config.catch_up.max_per_run:
            plan.truncated = True
            return False
        plan.queued.append(MissingExport(repository, ref, commit_id, all_tables, retry,
                                         branch_table=not all_tables and follows(ref, keeps_tables)))
        return True

    def lagging_branch_tables(self, repository: str, logs: dict[str, list], keeps_tables: list[str]) -> None:
        """Plan the appends of branch tables behind their branch's head."""
        for branch, commits in logs.items():
            if not commits or not follows(branch, keeps_tables):
                continue
            records = self.status.tables(repository, commits[0].id, branch).get(branch, {})
            for table in lagging_branch_tables(self.lake, repository, branch, commits[0].id):
                if _failed_for_good((records.get(table) or {}).get("branch_table")):
                    self.plan.given_up.append(f"{repository} {branch} {commits[0].id} {table} (its branch table append)")
                else:
                    self.plan.appends.append((repository, branch, commits[0].id, table))
