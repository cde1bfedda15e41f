"""Export status in Redis: one record per (ref, commit, table), `done` final, retries counted;
deliveries counted until they finish; locks held by one caller, renewed, released only by their
holder; counters for /metrics."""

from __future__ import annotations

import time

import pytest
import redis

from exporter.errors import LockLost
from exporter.state.connection import key
from exporter.state.status import COMMIT_RECORD, RECORD_TTL_SECONDS, StatusStore

pytestmark = pytest.mark.unit

COMMIT = "c" * 64


@pytest.fixture
def status(redis_url) -> StatusStore:
    return StatusStore(redis_url)


def test_a_record_keeps_its_facts_and_counts_its_retries(status):
    assert status.set_table("repo", "main", COMMIT, "events", "queued", table_path="tables/events")
    assert status.set_table("repo", "main", COMMIT, "events", "retrying", reason="lakeFS answered 503")
    assert status.set_table("repo", "main", COMMIT, "events", "retrying", reason="timed out")
    assert status.set_table("repo", "main", COMMIT, "events", "running", worker="w1")

    record = status.record("repo", "main", COMMIT, "events")
    assert record["state"] == "running" and record["retries"] == 2
    assert (record["table_path"], record["reason"], record["worker"]) == ("tables/events", "timed out", "w1")
    assert (record["ref"], record["table"]) == ("main", "events")


def test_done_is_final_a_late_delivery_cannot_change_it(status):
    assert status.set_table("repo", "main", COMMIT, "events", "done", location="s3://b/x/")
    for late in ("queued", "running", "retrying", "failed"):
        assert not status.set_table("repo", "main", COMMIT, "events", late, reason="a late delivery")
    assert status.set_table("repo", "main", COMMIT, "events", "done", location="s3://b/y/")  # done again: accepted

    record = status.record("repo", "main", COMMIT, "events")
    assert (record["state"], record["location"], record["retries"]) == ("done", "s3://b/y/", 0)
    assert "reason" not in record


def test_facts_join_an_existing_record_only_and_keep_its_state_and_time(status):
    assert not status.add_facts("repo", "main", COMMIT, "events", branch_table={"state": "appended"})
    assert status.record("repo", "main", COMMIT, "events") is None  # no record made from facts alone

    status.set_table("repo", "main", COMMIT, "events", "done", location="s3://b/x/")
    done_at = status.record("repo", "main", COMMIT, "events")["updated_at"]
    time.sleep(0.01)
    assert status.add_facts("repo", "main", COMMIT, "events", branch_table={"state": "appended"})
    record = status.record("repo", "main", COMMIT, "events")
    assert (record["state"], record["location"], record["branch_table"]) == ("done", "s3://b/x/", {"state": "appended"})
    assert record["updated_at"] == done_at  # when it was done, not when a fact joined it


def test_an_iceberg_snapshot_id_is_kept_exact_and_the_api_reads_it_as_the_integer(status):
    """Snapshot ids are 63-bit: Lua's cjson, which merges the record, held them as doubles (an id
    came back as another id). They are kept as decimal strings, which the API's model reads back."""
    from hooks.models import IcebergOutcome

    ids = {"0": 2**63 - 1, "1": 6502209332405683862, "2": 7}
    status.set_table("repo", "main", COMMIT, "events", "done", iceberg={"state": "written", "snapshot_ids": ids})
    status.add_facts("repo", "main", COMMIT, "events", branch_table={"iceberg": {"state": "written", "snapshot_ids": ids}})

    record = status.record("repo", "main", COMMIT, "events")
    assert IcebergOutcome(**record["iceberg"]).snapshot_ids == ids
    assert IcebergOutcome(**record["branch_table"]["iceberg"]).snapshot_ids == ids
    assert record["iceberg"]["snapshot_ids"]["2"] == 7 and record["retries"] == 0  # small numbers stay numbers


def test_records_are_per_ref_and_expire(status):
    status.set_table("repo", "main", COMMIT, "events", "done")
    status.set_table("repo", "v1", COMMIT, "events", "queued")
    status.set_table("repo", "main", COMMIT, COMMIT_RECORD, "done", tables=["events"])
    status.set_table("repo", "main", "d" * 64, "users", "failed", reason="bad descriptor", permanent=True)

    tables = status.tables("repo", COMMIT)
    assert {ref: {t: r["state"] for t, r in found.items()} for ref, found in tables.items()} == \
        {"main": {"events": "done", COMMIT_RECORD: "done"}, "v1": {"events": "queued"}}
    assert list(status.tables("repo", COMMIT, ref="v1")) == ["v1"]
    assert status.tables("other-repo", COMMIT) == {}
    first, second, none = status.tables_of_commits("repo", [COMMIT, "d" * 64, "e" * 64])
    assert first == tables and second["main"]["users"]["reason"] == "bad descriptor" and none == {}
    # refs and tables holding `/` are kept whole: a tag `v1/rc`, a refused descriptor's record
    status.set_table("repo", "v1/rc", COMMIT, "events", "queued")
    status.set_table("repo", "main", COMMIT, "_lakefs_tables/broken.yaml", "failed", reason="not YAML", permanent=True)
    assert status.tables("repo", COMMIT, ref="v1/rc") == {"v1/rc": {"events": status.record("repo", "v1/rc", COMMIT, "events")}}
    assert status.tables("repo", COMMIT)["main"]["_lakefs_tables/broken.yaml"]["reason"] == "not YAML"
    assert set(status.tables("repo", COMMIT)) == {"main", "v1", "v1/rc"}
    assert 0 < status.redis.ttl(key("export", "repo", COMMIT)) <= RECORD_TTL_SECONDS


def test_starts_without_a_finish_add_up_and_a_finish_resets_them(status):
    assert [status.started("repo:main:c:events") for _ in range(3)] == [1, 2, 3]  # three workers died in it
    assert status.started("repo:main:c:users") == 1  # counted per work
    status.finished("repo:main:c:events")
    assert status.started("repo:main:c:events") == 1


def test_a_lock_has_one_holder_at_a_time_and_frees_itself_after_its_ttl(status, redis_url):
    other = StatusStore(redis_url)
    with status.lock("repo:main:c:events", 30) as held:
        assert held
        with other.lock("repo:main:c:events", 30) as also:
            assert not also
        with other.lock("repo:main:c:users", 30) as different:
            assert different
        assert 0 < status.redis.ttl(key("lock", "repo:main:c:events")) <= 30  # a dead holder's lock expires
    with other.lock("repo:main:c:events", 30) as after:
        assert after


def test_a_held_lock_is_renewed_and_never_taken_over_while_its_holder_lives(status, redis_url):
    with status.lock("catch-up", 1) as held:
        assert held
        time.sleep(1.5)  # longer than its ttl: only renewal keeps it
        with StatusStore(redis_url).lock("catch-up", 1) as other:
            assert not other


def test_releasing_an_expired_lock_leaves_the_new_holders_in_place(status, redis_url):
    second, third = StatusStore(redis_url), StatusStore(redis_url)
    first_lock = status.lock("prune", 30)
    assert first_lock.__enter__()
    status.redis.delete(key("lock", "prune"))  # expired while its holder was paused
    second_lock = second.lock("prune", 30)
    assert second_lock.__enter__()

    first_lock.__exit__(None, None, None)  # the first holder wakes up and releases

    with third.lock("prune", 30) as taken:
        assert not taken  # still the second's
    second_lock.__exit__(None, None, None)
    with third.lock("prune", 30) as taken:
        assert taken


def wait_until_lost(lock, seconds: float = 3.0) -> None:
    deadline = time.monotonic() + seconds
    while not lock.lost and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_lock_that_expired_and_was_taken_says_so_before_the_commit_point(status, redis_url):
    with status.lock("repo:main:c:events", 1) as held:
        held.still_held()  # held: nothing raised
        status.redis.set(key("lock", "repo:main:c:events"), "another delivery's token")  # expired and taken
        wait_until_lost(held)
        with pytest.raises(LockLost, match="expired and is no longer this worker's: stopped before writing"):
            held.still_held()
    assert status.redis.get(key("lock", "repo:main:c:events")) == b"another delivery's token"  # left to its holder


def test_a_holder_paused_past_its_ttl_finds_its_lock_taken_before_it_writes(status):
    with status.lock("repo:main:c:events", 30) as held:
        status.redis.set(key("lock", "repo:main:c:events"), "another delivery's token")  # paused, expired, taken
        with pytest.raises(LockLost, match="expired"):  # no renewal ran yet: still_held asks Redis itself
            held.still_held()


def test_a_lock_that_cannot_be_renewed_for_its_ttl_is_lost(status, monkeypatch):
    with status.lock("repo:main:c:events", 1) as held:
        real = status.redis.eval
        monkeypatch.setattr(status.redis, "eval", lambda *a: (_ for _ in ()).throw(redis.ConnectionError("refused")))
        wait_until_lost(held)
        with pytest.raises(LockLost, match=r"could not be renewed for 1 s \(refused\)"):
            held.still_held()
        monkeypatch.setattr(status.redis, "eval", real)


def test_counters_add_up_by_labels_and_gauges_are_replaced(status):
    status.count("lakefs_delta_tasks_total", {"task": "export_table", "outcome": "failed"})
    status.count("lakefs_delta_tasks_total", {"outcome": "failed", "task": "export_table"})
    status.count("lakefs_delta_tasks_total", {"task": "export_table", "outcome": 'su"cceeded'})
    status.count("lakefs_delta_files_rewritten_total", amount=7)
    status.observe("lakefs_delta_export_seconds", 1.5)
    status.observe("lakefs_delta_export_seconds", 2.5)
    status.set_gauge("lakefs_delta_catch_up_terminal_failures", 4)
    status.set_gauge("lakefs_delta_catch_up_terminal_failures", 1)

    assert status.metrics() == {
        'lakefs_delta_tasks_total{outcome="failed",task="export_table"}': 2.0,
        'lakefs_delta_tasks_total{outcome="succeeded",task="export_table"}': 1.0,
        "lakefs_delta_files_rewritten_total": 7.0,
        "lakefs_delta_export_seconds_sum": 4.0, "lakefs_delta_export_seconds_count": 2.0,
        "lakefs_delta_catch_up_terminal_failures_current": 1.0,
    }
    assert status.ping()


def test_a_one_time_code_is_taken_once_and_expires(status):
    status.put_once(key("code", "abc"), "alice", 60)
    assert 0 < status.redis.ttl(key("code", "abc")) <= 60
    assert status.take_once(key("code", "abc")) == "alice"
    assert status.take_once(key("code", "abc")) is None
    assert status.take_once(key("code", "never")) is None
