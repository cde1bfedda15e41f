"""Catch-up: the commits and tags whose export is incomplete are found and queued, following first
parents of the followed branches, skipping terminal failures, exports retention would prune and
repositories without the action, at most `max_per_run` a run; lagging branch tables are appended."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from exporter.config import Config
from exporter.errors import ServiceUnavailable
from exporter.upkeep.catch_up import MissingExport, catch_up
from exporter.export.manifest import PENDING
from exporter.lakefs.installer import ACTION_PATH, render_action
from exporter.state.status import COMMIT_RECORD, StatusStore
from exporter.storage.layout import MANIFEST, STATE, branch_table_location, export_location
from tests.fakes import FakeLakeFS
from tests.fakes import lake_of

pytestmark = pytest.mark.unit

CONFIG = Config()
HOUR = 3600


@pytest.fixture
def lakefs(fake_lakefs) -> FakeLakeFS:
    return fake_lakefs


@pytest.fixture
def status(redis_url) -> StatusStore:
    return StatusStore(redis_url)


def repository(lakefs: FakeLakeFS, name: str = "repo", branches: list[str] | None = ["main"],
               branch_tables: tuple[str, ...] = (), created: int | None = None) -> str:
    """A repository with the tables `events` and `users`; the action installed unless `branches` is None."""
    lakefs.create_repository(name, f"s3://lake/{name}")
    files = {f"_lakefs_tables/{t}.yaml": f"name: {t}\ntype: delta\npath: tables/{t}\n".encode() for t in ("events", "users")}
    if branches is not None:
        files[ACTION_PATH] = render_action("http://exporter:8080/webhook", branches, list(branch_tables))
    return lakefs.commit_files(name, "main", files, "install", creation_date=created)


def change(lakefs: FakeLakeFS, *tables: str, branch: str = "main", repo: str = "repo", created: int | None = None) -> str:
    """A commit on `branch` that changes each of `tables` (or, with none, nothing exported)."""
    files = {f"tables/{t}/_delta_log/{time.monotonic_ns()}.json": b"{}" for t in tables} or {"README.md": b"hello"}
    return lakefs.commit_files(repo, branch, files, f"change {','.join(tables)}", creation_date=created)


def mark_exported(lakefs: FakeLakeFS, ref: str, commit_id: str, table: str, repo: str = "repo") -> None:
    store = lakefs.store.at(lakefs.storage_namespace(repo))
    store.put(export_location(CONFIG, ref, commit_id, table) + MANIFEST, json.dumps({"table": table}).encode())


def queued(plan) -> list[tuple]:
    return [(m.repository, m.ref, m.commit_id, m.all_tables, m.tables, m.branch_table) for m in plan.queued]


def test_commits_of_followed_branches_and_tags_whose_tables_have_no_complete_export_are_queued(lakefs, status):
    install = repository(lakefs, branches=["main"])
    mark_exported(lakefs, "main", install, "events")  # its descriptors are new: both tables changed
    first = change(lakefs, "events")
    mark_exported(lakefs, "main", first, "events")
    second = change(lakefs, "events", "users")
    mark_exported(lakefs, "main", second, "users")
    change(lakefs)  # no table changed
    lakefs.create_tag("repo", "v1", first)
    lakefs.create_branch("repo", "dev", "main")  # not a branch the action follows
    change(lakefs, "events", branch="dev")

    plan = catch_up(lake_of(CONFIG, lakefs), status)

    assert queued(plan) == [("repo", "main", second, False, ("events",), False),
                            ("repo", "main", install, False, ("users",), False),
                            ("repo", "v1", first, True, ("events", "users"), False)]  # a tag: every table
    assert (plan.given_up, plan.skipped_repositories, plan.truncated, plan.appends) == ([], [], False, [])
    assert plan.summary() == ("3 commit(s) queued, 0 branch table append(s) queued, 0 Iceberg table(s) queued, "
                              "0 terminal failure(s) not re-queued, 0 in flight left alone")


def test_after_a_merge_only_the_first_parent_line_is_exported_under_the_branch(lakefs, status):
    repository(lakefs, branches=["main"])
    lakefs.create_branch("repo", "feature", "main")
    on_feature = change(lakefs, "events", branch="feature")
    merged = lakefs.merge("repo", "feature", "main")

    plan = catch_up(lake_of(Config(catch_up={"repositories": ["repo"]}), lakefs), status)

    commits = [m.commit_id for m in plan.queued]
    assert merged in commits and on_feature not in commits


def test_repositories_without_the_action_or_unreadable_are_skipped_saying_why(lakefs, status):
    repository(lakefs, "bare", branches=None)
    change(lakefs, "events", repo="bare")
    repository(lakefs, "down")

    lakefs.unavailable["default_branch"] = ServiceUnavailable("lakeFS answered 503 to get repository down")
    plan = catch_up(lake_of(CONFIG, lakefs), status, repositories=["down"])
    assert plan.skipped_repositories == ["down: lakeFS answered 503 to get repository down"]

    del lakefs.unavailable["default_branch"]
    plan = catch_up(lake_of(CONFIG, lakefs), status, repositories=["bare"])
    assert plan.queued == [] and plan.skipped_repositories == [f"bare: no {ACTION_PATH} on its default branch"]


def test_with_a_public_url_only_repositories_whose_action_calls_it_are_caught_up(lakefs, status):
    """A second deployment (a demo left running, staging) on the same lakeFS: its repositories' actions
    call another URL, and this deployment's catch-up leaves them to it."""
    for name in ("repo", "theirs"):
        repository(lakefs, name)  # the action calls http://exporter:8080/webhook
        change(lakefs, "events", repo=name)
    lakefs.commit_files("theirs", "main", {ACTION_PATH: render_action("http://staging:9090/webhooks/lakefs", ["main"])})
    mine = Config(public_url="http://exporter:8080/")

    plan = catch_up(lake_of(mine, lakefs), status)

    assert {m.repository for m in plan.queued} == {"repo"}
    assert plan.skipped_repositories == ["theirs: its action calls http://staging:9090/webhooks/lakefs, not this "
                                         "deployment's public_url http://exporter:8080"]
    assert {m.repository for m in catch_up(lake_of(Config(), lakefs), status).queued} == {"repo",
                                           "theirs"}  # no public_url
    named = Config(public_url="http://exporter:8080", catch_up={"repositories": ["theirs"]})
    assert {m.repository for m in catch_up(lake_of(named, lakefs), status).queued} == {"theirs"}  # named: acted on
    assert not Config(public_url="http://exporter:80").calls_this_service("http://exporter:8080/webhook")


def test_terminal_failures_are_given_up_and_exports_whose_retries_ran_out_are_queued_again(lakefs, status):
    install = repository(lakefs)
    for table in ("events", "users"):
        mark_exported(lakefs, "main", install, table)
    commit = change(lakefs, "events", "users")
    status.set_table("repo", "main", commit, "events", "failed", reason="bad descriptor", permanent=True)
    status.set_table("repo", "main", commit, "users", "failed", reason="gave up after 5 retries", permanent=False)

    plan = catch_up(lake_of(CONFIG, lakefs), status)

    assert queued(plan) == [("repo", "main", commit, False, ("users",), False)]
    assert plan.given_up == [f"repo main {commit} events"]


def test_exports_in_flight_are_left_to_their_delivery_until_their_record_is_old(lakefs, status):
    install = repository(lakefs)
    for table in ("events", "users"):
        mark_exported(lakefs, "main", install, table)
    running, queued_commit, lost = change(lakefs, "events", "users"), change(lakefs, "events"), change(lakefs, "users")
    status.set_table("repo", "main", running, "events", "running")
    status.set_table("repo", "main", running, "users", "retrying", reason="lakeFS answered 503")
    status.set_table("repo", "main", queued_commit, COMMIT_RECORD, "queued")  # the webhook's: tables not listed yet
    status.set_table("repo", "main", lost, "users", "queued")
    record = status.record("repo", "main", lost, "users")
    status.redis.hset(status._key("repo", lost), "main/users",  # queued two hours ago: the message was lost
                      json.dumps({**record, "updated_at": time.time() - 2 * HOUR}))

    plan = catch_up(lake_of(CONFIG, lakefs), status)

    assert queued(plan) == [("repo", "main", lost, False, ("users",), False)]
    assert sorted(plan.in_flight) == sorted([f"repo main {running} events", f"repo main {running} users",
                                             f"repo main {queued_commit} events"])


def test_commits_retention_would_prune_are_not_exported_again(lakefs, status):
    old = int(time.time()) - 5 * HOUR
    install = repository(lakefs, created=old)
    for table in ("events", "users"):
        mark_exported(lakefs, "main", install, table)
    too_old = change(lakefs, "events", created=old)
    old_but_among_the_newest = change(lakefs, "events", created=old)
    young = change(lakefs)  # the head: young, changes no table
    config = Config(retention={"keep_last": 2, "keep_hours": 1})

    plan = catch_up(lake_of(config, lakefs), status)

    assert [m.commit_id for m in plan.queued] == [old_but_among_the_newest]  # positions 0 (young) and 1 are kept
    assert too_old not in [m.commit_id for m in plan.queued] and young not in [m.commit_id for m in plan.queued]


def test_a_run_queues_at_most_max_per_run_and_says_more_is_left(lakefs, status):
    install = repository(lakefs)
    for table in ("events", "users"):
        mark_exported(lakefs, "main", install, table)
    commits = [change(lakefs, "events") for _ in range(3)]

    plan = catch_up(lake_of(Config(catch_up={"max_per_run": 2}), lakefs), status)

    assert [m.commit_id for m in plan.queued] == commits[:0:-1]  # the newest two
    assert plan.truncated and plan.summary().endswith(", more left for the next run")


def test_configured_branch_patterns_replace_the_actions_and_depth_bounds_the_log(lakefs, status):
    install = repository(lakefs, branches=["main"])
    for table in ("events", "users"):
        mark_exported(lakefs, "main", install, table)
    lakefs.create_branch("repo", "release-1", "main")
    mark_exported(lakefs, "release-1", install, "events")
    mark_exported(lakefs, "release-1", install, "users")
    change(lakefs, "events", branch="main")
    older, newer = change(lakefs, "users", branch="release-1"), change(lakefs, "events", branch="release-1")

    plan = catch_up(lake_of(Config(catch_up={"branches": ["release-*"]}), lakefs), status)
    assert [(m.ref, m.commit_id) for m in plan.queued] == [("release-1", newer), ("release-1", older)]

    plan = catch_up(lake_of(Config(catch_up={"branches": ["release-*"], "depth": 1}), lakefs), status)
    assert [(m.ref, m.commit_id) for m in plan.queued] == [("release-1", newer)]


def test_branches_that_keep_branch_tables_queue_appends_and_lagging_branch_tables_are_caught_up(lakefs, status):
    install = repository(lakefs, branches=["main"], branch_tables=("main",))
    for table in ("events", "users"):
        mark_exported(lakefs, "main", install, table)
    head = change(lakefs, "events", "users")
    mark_exported(lakefs, "main", head, "events")  # exported; its branch-table append was lost
    mark_exported(lakefs, "main", head, "users")
    store = lakefs.store.at(lakefs.storage_namespace("repo"))
    store.put(branch_table_location(CONFIG, "main", "users") + STATE, json.dumps({"last_commit": head}).encode())
    lakefs.create_tag("repo", "v1", head)

    plan = catch_up(lake_of(CONFIG, lakefs), status)

    assert plan.appends == [("repo", "main", head, "events")]  # users' branch table follows the head already
    assert queued(plan) == [("repo", "v1", head, True, ("events", "users"), False)]  # a tag appends to none
    later = change(lakefs, "events")
    assert MissingExport("repo", "main", later, False, ("events",), branch_table=True) in \
        catch_up(lake_of(CONFIG, lakefs), status).queued


def test_with_iceberg_on_a_complete_exports_iceberg_table_left_pending_is_queued_once_its_record_is_old(lakefs, status):
    iceberg, off = Config(iceberg={"enabled": True}), Config(iceberg={"enabled": False})
    install = repository(lakefs)
    store = lakefs.store.at(lakefs.storage_namespace("repo"))
    for table in ("events", "users"):  # complete exports whose Iceberg table is still to write
        store.put(export_location(iceberg, "main", install, table) + MANIFEST,
                  json.dumps({"table": table, "iceberg": PENDING}).encode())
        status.set_table("repo", "main", install, table, "done")
    record = status.record("repo", "main", install, "users")
    status.redis.hset(status._key("repo", install), "main/users",  # done two hours ago: its task was lost
                      json.dumps({**record, "updated_at": time.time() - 2 * HOUR}))

    plan = catch_up(lake_of(iceberg, lakefs), status)

    assert queued(plan) == [] and plan.icebergs == [("repo", "main", install, "users")]
    assert "1 Iceberg table(s) queued" in plan.summary()
    assert catch_up(lake_of(off, lakefs), status).icebergs == []  # iceberg.enabled turned off: left as they are


@pytest.mark.parametrize("malformed, field", [
    ({"branch_tables": [1]}, "hooks[0].properties.query_params.branch_tables[0]"),
    ({"hooks": [1]}, "hooks[0]"),
    ({"hooks": "delta_export"}, "hooks"),
    ({"on": {"post-commit": {"branches": [None]}}}, "on.post-commit.branches[0]"),
    ({"on": ["post-commit"]}, "on"),
])
def test_a_malformed_action_skips_its_repository_saying_which_file_and_field_and_the_others_are_caught_up(
        lakefs, status, caplog, malformed, field):
    """lakeFS accepts an action file whose fields have other shapes than it documents (`branch_tables: [1]`)."""
    repository(lakefs, "bad")
    action = yaml.safe_load(render_action("http://exporter:8080/webhook", ["main"]))
    if "branch_tables" in malformed:
        action["hooks"][0]["properties"]["query_params"]["branch_tables"] = malformed["branch_tables"]
    else:
        action.update(malformed)
    lakefs.commit_files("bad", "main", {ACTION_PATH: yaml.safe_dump(action).encode()})
    change(lakefs, "events", repo="bad")
    repository(lakefs, "good")
    good = change(lakefs, "events", repo="good")

    plan = catch_up(lake_of(CONFIG, lakefs), status)

    assert ("good", "main", good) in [(m.repository, m.ref, m.commit_id) for m in plan.queued]
    assert {m.repository for m in plan.queued} == {"good"}
    [skipped] = plan.skipped_repositories
    assert skipped.startswith(f"bad: {ACTION_PATH}: `{field}` must be "), skipped
    assert any("bad" in record.getMessage() and ACTION_PATH in record.getMessage() for record in caplog.records)
