"""The workers' tasks: one retry policy (transient errors retried until the retries run out, then
recorded and cleaned up; permanent ones recorded at once), deliveries counted so a poison message
stops, one delivery per export at a time, and what each task records and queues.

Tasks run eagerly (`Task.apply`: a retry runs again at once); what they queue is captured at the
Celery app's `send_task`; Redis is in memory; lakeFS and the object store are the shared fakes.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import redis
from celery.exceptions import SoftTimeLimitExceeded

import workers.app
from exporter.config import Config, IcebergConfig
from exporter.errors import BranchTableRefused, ExporterError, NotFound, ServiceUnavailable, TableNotFound, WorkerLost
from exporter.branch_tables.append import AppendOutcome
from exporter.export.manifest import PENDING
from exporter.export.log_writer import ExportOutcome
from exporter.lakefs.installer import ACTION_PATH, render_action
from exporter.state.connection import length_prefixed
from exporter.state.results import ResultCache
from exporter.state.status import COMMIT_RECORD, StatusStore
from exporter.storage.layout import MANIFEST, export_location
from tests.fakes import FakeLakeFS
from tests.unit.source_tables import SourceTable
from tests.fakes import lake_of
from workers import answers, delivery, tasks

pytestmark = pytest.mark.unit

MAX_RETRIES = 2
DESCRIPTOR = b"name: %s\ntype: delta\npath: tables/%s\n"


@dataclasses.dataclass
class Sent:
    name: str
    args: tuple
    kwargs: dict
    options: dict


@pytest.fixture
def worker(monkeypatch, redis_url, fake_lakefs):
    """A worker process's world: its config, lakeFS, object store and Redis, and what it queued."""
    lakefs, store = fake_lakefs, fake_lakefs.store
    lakefs.create_repository("repo", "s3://lake/repo")
    config = Config(redis_url=redis_url, tasks={"max_deliveries": 2, "lock_ttl_seconds": 6,  # an outage: as many retries
                                                "retry": {"max_retries": MAX_RETRIES, "outage_seconds": 0}},
                    workers={"large_table_files": 3})
    monkeypatch.setattr(workers.app, "_config", config)
    monkeypatch.setattr(tasks, "_lake", lambda config: lake_of(config, lakefs))  # what a worker process builds once
    monkeypatch.setattr(answers, "_lake", lambda config: lake_of(config, lakefs))
    sent: list[Sent] = []
    monkeypatch.setattr(workers.app.app, "send_task",
                        lambda name, args=None, kwargs=None, **options: sent.append(Sent(name, tuple(args or ()),
                                                                                         kwargs or {}, options)))
    return SimpleNamespace(config=config, lakefs=lakefs, store=store, status=StatusStore(redis_url), sent=sent,
                           namespace=store.at("s3://lake/repo"))


def tasks_total(status: StatusStore, task: str, outcome: str) -> float:
    return status.metrics().get(f'lakefs_delta_tasks_total{{outcome="{outcome}",task="{task}"}}', 0)


# ---------------------------------------------------------------------------- the retry policy


@pytest.mark.parametrize("error, reason", [
    (ServiceUnavailable("lakeFS answered 503 to list"), "lakeFS answered 503 to list"),
    (redis.ConnectionError("connection refused"), "Redis error: connection refused"),
    (SoftTimeLimitExceeded(), "timed out: the task ran past its soft time limit"),
])
def test_transient_errors_are_retried_with_their_reason(monkeypatch, error, reason):
    config = Config(tasks={"retry": {"max_retries": 2, "outage_seconds": 60}})
    monkeypatch.setattr(workers.app, "_config", config)
    attempt = SimpleNamespace(request=SimpleNamespace(retries=0))
    with pytest.raises(delivery.Transient, match=reason) as retried:
        tasks.retry_if_transient(attempt, error, "export repo/main/c/events")
    assert retried.value.__cause__ is error
    outage = not isinstance(error, SoftTimeLimitExceeded)  # lakeFS, the store or Redis down
    assert attempt.override_max_retries == (config.tasks.retry.outage_retries() if outage else 2) and \
        config.tasks.retry.outage_retries() > 2
    attempt.request.retries = attempt.override_max_retries
    assert tasks.retry_if_transient(attempt, error, "line", last_attempt_records=True) is None  # it records instead


def test_an_outage_is_retried_for_its_time_and_anything_else_for_its_count():
    from exporter.config import RetryConfig

    shipped = RetryConfig()  # backoffs of 2, 4, 8, 16, 32, then 60 s: half of each expected
    assert shipped.outage_retries() == 24 and sum(min(60, 2 * 2 ** r) / 2 for r in range(24)) >= 600 > \
        sum(min(60, 2 * 2 ** r) / 2 for r in range(23))
    assert RetryConfig(outage_seconds=0, max_retries=5).outage_retries() == 5  # never fewer than max_retries
    assert RetryConfig(backoff_seconds=1, backoff_max_seconds=4, outage_seconds=60).outage_retries() == 32  # 0.5 + 1 + 30 x 2


@pytest.mark.parametrize("error", [TableNotFound("no table"), NotFound("no commit"), ExporterError("refused")])
def test_permanent_errors_are_not_retried(worker, error):
    assert tasks.retry_if_transient(SimpleNamespace(request=SimpleNamespace(retries=0)), error, "line") is None


def test_tables_with_many_checkpoint_files_go_to_their_own_queue(worker):
    assert tasks.export_queue(worker.config, 2) is None
    assert tasks.export_queue(worker.config, 3) == worker.config.workers.large_table_queue


# ---------------------------------------------------------------------------- export_commit


def commit_tables(lakefs: FakeLakeFS, files: dict[str, bytes]) -> str:
    return lakefs.commit_files("repo", "main", files)


def test_a_commit_fans_out_one_export_per_changed_table_and_records_refused_descriptors(worker):
    commit_tables(worker.lakefs, {"_lakefs_tables/users.yaml": DESCRIPTOR % (b"users", b"users"),
                                  "tables/users/_delta_log/00000000000000000000.json": b"{}"})
    commit = commit_tables(worker.lakefs, {
        "_lakefs_tables/events.yaml": DESCRIPTOR % (b"events", b"events"),
        "_lakefs_tables/big.yaml": DESCRIPTOR % (b"big", b"big"),
        "_lakefs_tables/broken.yaml": b"name: [",
        "tables/events/_delta_log/00000000000000000000.json": b"{}",
        "tables/big/_delta_log/_last_checkpoint": b'{"version": 9, "size": 9, "numOfAddFiles": 7}'})

    result = tasks.export_commit.apply(("repo", "main", commit))

    assert result.get() == ["big", "events"]
    parent = worker.lakefs.commit("repo", commit).parents[0]

    def changes(*paths: str) -> dict:  # the commit's parent and the table's changes, as found choosing the tables
        return {"parent": parent, "changes": [{"path": path, "type": "added"} for path in paths]}

    assert [(s.name, s.args, s.kwargs, s.options["queue"]) for s in worker.sent] == [
        ("lakefs_delta.export_table", ("repo", "main", commit, "big", "tables/big"),
         {"branch_table": False, "changes": changes("tables/big/_delta_log/_last_checkpoint")},
         "lakefs_delta.large"),  # 7 files in its newest checkpoint: the large tables' queue
        ("lakefs_delta.export_table", ("repo", "main", commit, "events", "tables/events"),
         {"branch_table": False, "changes": changes("tables/events/_delta_log/00000000000000000000.json")}, None)]
    records = worker.status.tables("repo", commit)["main"]
    assert (records["events"]["state"], records["events"]["table_path"]) == ("queued", "tables/events")
    assert records["big"]["queue"] == "lakefs_delta.large"
    refused = worker.status.record("repo", "main", commit, "_lakefs_tables/broken.yaml")
    assert refused["state"] == "failed" and refused["permanent"] and "not valid YAML" in refused["reason"]
    assert records[COMMIT_RECORD]["state"] == "done" and records[COMMIT_RECORD]["tables"] == ["big", "events"]
    assert "users" not in records  # unchanged by this commit
    assert tasks_total(worker.status, "export_commit", "succeeded") == 1


def test_a_commit_whose_tables_cannot_be_listed_is_retried_then_given_up(worker):
    commit = commit_tables(worker.lakefs, {"_lakefs_tables/events.yaml": DESCRIPTOR % (b"events", b"events")})
    worker.lakefs.unavailable["list_objects"] = ServiceUnavailable("lakeFS answered 503 to list")

    result = tasks.export_commit.apply(("repo", "main", commit))

    assert result.failed()
    record = worker.status.record("repo", "main", commit, COMMIT_RECORD)
    assert record["state"] == "failed" and record["permanent"] is False
    assert record["reason"] == f"gave up after {MAX_RETRIES} retries: lakeFS answered 503 to list"
    assert record["retries"] == MAX_RETRIES + 1  # each attempt recorded its retry
    assert tasks_total(worker.status, "export_commit", "retried") == MAX_RETRIES + 1
    assert tasks_total(worker.status, "export_commit", "failed") == 1
    assert worker.sent == []


def test_a_commit_lakefs_does_not_know_fails_at_once(worker):
    result = tasks.export_commit.apply(("repo", "main", "f" * 64))

    assert result.get() == []
    record = worker.status.record("repo", "main", "f" * 64, COMMIT_RECORD)
    assert record["state"] == "failed" and record["permanent"] and "not found" in record["reason"]
    assert record["retries"] == 0 and worker.sent == []


# ---------------------------------------------------------------------------- export_table


@pytest.fixture
def exports(worker, monkeypatch):
    """The export each attempt makes, scripted: the next outcome of `exports.outcomes` (or an error
    to raise); each call's arguments in `exports.calls`."""
    script = SimpleNamespace(outcomes=[], calls=[])

    def export_one_table(config, at, table, lakefs=None, copy_from=(), still_held=None, known=None):
        script.calls.append({"ref": at.ref, "table": table, "copy_from": copy_from, "still_held": still_held})
        outcome = script.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return dataclasses.replace(outcome, table=table.name, table_path=table.path)

    monkeypatch.setattr(tasks, "export_one_table", export_one_table)
    return script


DONE = ExportOutcome("events", "tables/events", ok=True, location="s3://lake/repo/x/", head_version=3, versions=2,
                     files_rewritten=4, seconds=0.5)
UNAVAILABLE = ExportOutcome("events", "tables/events", ok=False, error="lakeFS answered 503 to stat", permanent=False)
ARGS = ("repo", "main", "c" * 64, "events", "tables/events")


def test_a_completed_export_is_recorded_and_queues_its_diff_and_branch_table_append(worker, tmp_path):
    events = SourceTable(worker.lakefs, "repo", "events", tmp_path / "events")
    commit = events.append(1, 2).commit()

    result = tasks.export_table.apply(("repo", "main", commit, "events", "tables/events"), {"branch_table": True})

    assert result.get()["ok"] and result.get()["head_version"] == 0
    record = worker.status.record("repo", "main", commit, "events")
    location = worker.namespace.uri(export_location(worker.config, "main", commit, "events"))
    assert (record["state"], record["location"], record["head_version"], record["skipped"]) == ("done", location, 0, False)
    assert worker.namespace.exists(export_location(worker.config, "main", commit, "events") + MANIFEST)
    assert [(s.name, s.args, s.options.get("priority")) for s in worker.sent] == [
        ("lakefs_delta.export_iceberg", ("repo", "main", commit, "events"), 6),  # iceberg.enabled: on by default
        ("lakefs_delta.precompute_diff", ("repo", commit, "tables/events"), 9),  # behind every export waiting
        ("lakefs_delta.append_branch_table", ("repo", "main", commit, "events"), None)]
    assert tasks_total(worker.status, "export_table", "succeeded") == 1
    assert worker.status.metrics()["lakefs_delta_export_seconds_count"] == 1


def test_an_exports_iceberg_table_is_queued_after_it_behind_the_exports_then_recorded_and_counted(
        worker, tmp_path, monkeypatch):
    monkeypatch.setattr(workers.app, "_config", worker.config.model_copy(update={"iceberg": IcebergConfig(enabled=True)}))
    commit = SourceTable(worker.lakefs, "repo", "events", tmp_path / "events").append(1).commit()

    tasks.export_table.apply(("repo", "main", commit, "events", "tables/events"))

    record = worker.status.record("repo", "main", commit, "events")
    assert record["state"] == "done" and record["iceberg"] == PENDING  # done before its Iceberg table
    assert [(s.name, s.args, s.options.get("priority")) for s in worker.sent][:1] == [
        ("lakefs_delta.export_iceberg", ("repo", "main", commit, "events"), tasks.ICEBERG_STEP)]
    assert 0 < tasks.ICEBERG_STEP < tasks.BACKGROUND  # behind the exports, before the diffs
    assert list(worker.sent[0].kwargs["held"]) == [f"{0:020d}.json"]  # the commit it wrote, handed over
    reads_before = len(worker.namespace.reads)

    result = tasks.export_iceberg.apply(worker.sent[0].args, worker.sent[0].kwargs)

    record = worker.status.record("repo", "main", commit, "events")
    location = export_location(worker.config, "main", commit, "events")
    assert result.get()["ok"] and record["state"] == "done"
    log = worker.namespace.uri(location + "_delta_log/")
    assert [uri for uri in worker.namespace.reads[reads_before:] if uri.startswith(log)] == []  # not read back
    iceberg = record["iceberg"]
    assert iceberg == {"state": "written", "metadata_location": worker.namespace.uri(location + "metadata/v0.metadata.json"),
                       "snapshot_ids": {"0": iceberg["snapshot_ids"]["0"]}, "recorded_at": iceberg["recorded_at"]}
    assert record["updated_at"] <= iceberg["recorded_at"]
    assert worker.status.metrics()['lakefs_delta_iceberg_metadata_total{outcome="written"}'] == 1
    assert worker.status.metrics()["lakefs_delta_iceberg_seconds_count"] == 1
    worker.sent.clear()
    tasks.export_table.apply(("repo", "main", commit, "events", "tables/events"))  # the event again: nothing to write
    assert "lakefs_delta.export_iceberg" not in [s.name for s in worker.sent]


def test_with_same_task_a_light_iceberg_table_is_written_by_the_exports_task_and_none_is_queued(
        worker, tmp_path, monkeypatch):
    """`iceberg.same_task`: a small table's, then an incremental export's that continues the
    parent's table: both recorded with the export, counted, and no `export_iceberg` queued."""
    same = IcebergConfig(enabled=True, same_task=True)
    monkeypatch.setattr(workers.app, "_config", worker.config.model_copy(update={"iceberg": same}))
    events = SourceTable(worker.lakefs, "repo", "events", tmp_path / "events")
    first = events.append(1).commit()
    second = events.append(2).commit()

    for commit in (first, second):
        tasks.export_table.apply(("repo", "main", commit, "events", "tables/events"))

    records = [worker.status.record("repo", "main", commit, "events") for commit in (first, second)]
    assert [(r["state"], r["iceberg"]["state"], sorted(r["iceberg"]["snapshot_ids"])) for r in records] == [
        ("done", "written", ["0"]), ("done", "written", ["0", "1"])]
    assert all(r["iceberg"]["recorded_at"] >= r["updated_at"] - 1 for r in records)
    assert "lakefs_delta.export_iceberg" not in [s.name for s in worker.sent]
    assert worker.status.metrics()['lakefs_delta_iceberg_metadata_total{outcome="written"}'] == 2
    assert worker.namespace.exists(export_location(worker.config, "main", second, "events") + "metadata/v1.metadata.json")


def test_an_iceberg_table_is_queued_again_when_an_event_finds_its_export_still_pending(worker, tmp_path, monkeypatch):
    config = worker.config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
    monkeypatch.setattr(workers.app, "_config", config)
    commit = SourceTable(worker.lakefs, "repo", "events", tmp_path / "events").append(1).commit()
    tasks.export_table.apply(("repo", "main", commit, "events", "tables/events"))
    worker.sent.clear()  # the task was lost: its worker died before it ran

    tasks.export_table.apply(("repo", "main", commit, "events", "tables/events"))

    assert worker.status.record("repo", "main", commit, "events")["skipped"]
    assert [(s.name, s.args) for s in worker.sent if s.name.endswith("export_iceberg")] == [
        ("lakefs_delta.export_iceberg", ("repo", "main", commit, "events"))]


def test_an_iceberg_table_waits_while_its_export_is_locked_and_is_dropped_when_the_export_is_gone(
        worker, tmp_path, monkeypatch):
    monkeypatch.setattr(workers.app, "_config", worker.config.model_copy(update={"iceberg": IcebergConfig(enabled=True)}))
    commit = SourceTable(worker.lakefs, "repo", "events", tmp_path / "events").append(1).commit()
    tasks.export_table.apply(("repo", "main", commit, "events", "tables/events"))
    worker.sent.clear()

    with StatusStore(worker.config.redis).lock(StatusStore.export_lock("repo", "main", commit, "events"), 60):
        held = tasks.export_iceberg.apply(("repo", "main", commit, "events"))  # prune, or the export again
    assert held.get() == {"ok": None, "requeued": True}
    assert [(s.name, s.options.get("priority"), s.options.get("countdown")) for s in worker.sent] == [
        ("lakefs_delta.export_iceberg", tasks.ICEBERG_STEP, worker.config.tasks.lock_ttl_seconds / 3)]

    location = export_location(worker.config, "main", commit, "events")
    worker.namespace.delete(worker.namespace.list_keys(location))  # pruned meanwhile
    gone = tasks.export_iceberg.apply(("repo", "main", commit, "events"))
    assert gone.get() == {"ok": None} and worker.namespace.list_keys(location) == []  # nothing written back


def test_an_export_another_delivery_is_writing_is_requeued_without_spending_a_retry(worker, exports):
    holder = StatusStore(worker.config.redis)
    with holder.lock(StatusStore.export_lock("repo", "main", "c" * 64, "events"), 60):
        result = tasks.export_table.apply(ARGS, retries=1)

    assert result.get() == {"ok": None, "requeued": True}
    assert exports.calls == [] and worker.status.record("repo", "main", "c" * 64, "events") is None
    [again] = worker.sent
    assert (again.name, again.args, again.kwargs) == ("lakefs_delta.export_table", ARGS,
                                                      {"branch_table": False, "changes": None})
    assert again.options["countdown"] == worker.config.tasks.lock_ttl_seconds / 3 and again.options["retries"] == 1


DIED_TWICE = ("the worker running this task died 2 times (out of memory, past its time limit, or killed); "
              "not running it again (tasks.max_deliveries)")


def deaths(worker, *work: str) -> None:
    """`work` started max_deliveries times, and each time its worker was killed: no finish."""
    for _ in range(worker.config.tasks.max_deliveries):
        worker.status.started(length_prefixed(*work))


def test_an_export_whose_workers_died_max_deliveries_times_is_failed_not_run_again(worker, exports):
    deaths(worker, "export_table", "repo", "main", "c" * 64, "events")

    result = tasks.export_table.apply(ARGS)

    assert result.get()["ok"] is False and exports.calls == []
    record = worker.status.record("repo", "main", "c" * 64, "events")
    assert record["state"] == "failed" and record["permanent"] and record["reason"] == DIED_TWICE


def test_attempts_that_end_are_not_counted_as_deaths_and_transient_failures_retry_until_done(worker, exports):
    exports.outcomes = [UNAVAILABLE, ServiceUnavailable("object store answered 503"), DONE]

    result = tasks.export_table.apply(ARGS)

    assert result.get()["ok"] and len(exports.calls) == 3  # max_deliveries is 2: finished attempts do not count
    assert all(call["still_held"].__self__.held for call in exports.calls)  # each export checks the lock it runs under
    record = worker.status.record("repo", "main", "c" * 64, "events")
    assert (record["state"], record["retries"], record["starts"], record["location"]) == ("done", 2, 1, DONE.location)
    assert tasks_total(worker.status, "export_table", "retried") == 2


def test_when_retries_run_out_the_partial_export_is_removed_and_the_failure_recorded(worker, exports):
    partial = export_location(worker.config, "main", "c" * 64, "events")
    worker.namespace.put(partial + "_delta_log/00000000000000000001.json", b"{}")
    worker.namespace.put(partial + "_delta_log/00000000000000000000.json", b"{}")
    exports.outcomes = [UNAVAILABLE] * (MAX_RETRIES + 1)

    result = tasks.export_table.apply(ARGS)

    assert result.failed() and len(exports.calls) == MAX_RETRIES + 1
    assert worker.namespace.list_keys(partial) == []
    record = worker.status.record("repo", "main", "c" * 64, "events")
    assert record["state"] == "failed" and record["permanent"] is False
    assert record["reason"] == f"gave up after {MAX_RETRIES} retries: lakeFS answered 503 to stat"
    assert tasks_total(worker.status, "export_table", "failed") == 1


def test_an_export_whose_retries_ran_out_max_rounds_times_is_failed_for_good(worker, exports):
    """Each round queued again (by catch-up, say) ran out of retries: after `tasks.max_rounds` the
    failure is terminal, so catch-up stops queuing an export that always times out."""
    exports.outcomes = [ExportOutcome("events", "tables/events", ok=False, permanent=False,
                                      error="timed out: the task ran past its soft time limit")] * 3 * (MAX_RETRIES + 1)
    ends = []
    for _ in range(3):  # max_rounds is 3
        assert tasks.export_table.apply(ARGS).failed()
        ends.append(worker.status.record("repo", "main", "c" * 64, "events"))

    assert [(r["rounds"], r["permanent"]) for r in ends] == [(1, False), (2, False), (3, True)]
    assert ends[-1]["reason"] == (f"gave up after {MAX_RETRIES} retries: timed out: the task ran past its soft time "
                                  "limit; its retries ran out 3 times, it is not queued again (tasks.max_rounds)")


def test_giving_up_leaves_an_export_alone_while_another_delivery_writes_it(worker):
    partial = export_location(worker.config, "main", "c" * 64, "events")
    worker.namespace.put(partial + "_delta_log/00000000000000000000.json", b"{}")
    worker.status.set_table("repo", "main", "c" * 64, "events", "running", worker="other")
    holder = StatusStore(worker.config.redis)
    with holder.lock(StatusStore.export_lock("repo", "main", "c" * 64, "events"), 60):
        tasks.export_table.on_failure(delivery.Transient("timed out"), "task-id", ARGS, {}, None)

    assert worker.namespace.list_keys(partial) == [partial + "_delta_log/00000000000000000000.json"]
    assert worker.status.record("repo", "main", "c" * 64, "events")["state"] == "running"


def test_an_attempt_killed_at_its_hard_time_limit_is_recorded_though_its_lock_outlives_it(worker):
    """The killed attempt held the lock (until its TTL): before, the end was not recorded, the record
    stayed `running`, and catch-up queued the export forever."""
    from celery.exceptions import TimeLimitExceeded

    partial = export_location(worker.config, "main", "c" * 64, "events")
    worker.namespace.put(partial + "_delta_log/00000000000000000000.json", b"{}")
    worker.status.set_table("repo", "main", "c" * 64, "events", "running", worker="killed")
    with StatusStore(worker.config.redis).lock(StatusStore.export_lock("repo", "main", "c" * 64, "events"), 60):
        tasks.export_table.on_failure(TimeLimitExceeded(5), "task-id", ARGS, {}, None)

        tasks.export_table.on_failure(TimeLimitExceeded(5), "task-id", ARGS, {}, None)  # one round, ended twice

    record = worker.status.record("repo", "main", "c" * 64, "events")
    assert (record["state"], record["rounds"], record["permanent"]) == ("failed", 1, False)
    assert record["reason"] == ("gave up after 0 retries: killed at its hard time limit (5 s: tasks.time_limits, "
                                "tasks.time_limit_seconds)")
    assert worker.namespace.list_keys(partial)  # under the dead attempt's lock: left for the next delivery


def test_a_complete_export_is_kept_when_a_late_delivery_gives_up(worker):
    complete = export_location(worker.config, "main", "c" * 64, "events")
    worker.namespace.put(complete + "_delta_log/00000000000000000000.json", b"{}")
    worker.namespace.put(complete + MANIFEST, b"{}")
    worker.status.set_table("repo", "main", "c" * 64, "events", "done")

    tasks.export_table.on_failure(delivery.Transient("timed out"), "task-id", ARGS, {}, None)

    assert len(worker.namespace.list_keys(complete)) == 2
    assert worker.status.record("repo", "main", "c" * 64, "events")["state"] == "done"  # done is final


def test_a_permanent_failure_is_recorded_at_once(worker, exports):
    exports.outcomes = [ExportOutcome("events", "", ok=False, error="table 'events': 1 file(s) ... missing",
                                      permanent=True)]

    result = tasks.export_table.apply(ARGS)

    assert result.get() == {"ok": False, "error": "table 'events': 1 file(s) ... missing"} and len(exports.calls) == 1
    record = worker.status.record("repo", "main", "c" * 64, "events")
    assert (record["state"], record["permanent"], record["retries"]) == ("failed", True, 0)


def test_an_export_done_under_another_ref_is_copied(worker, exports):
    worker.status.set_table("repo", "main", "c" * 64, "events", "done")
    worker.status.set_table("repo", "nightly", "c" * 64, "events", "failed")
    worker.status.set_table("repo", "other", "c" * 64, "users", "done")
    exports.outcomes = [DONE]

    tasks.export_table.apply(("repo", "v1", "c" * 64, "events", "tables/events"))

    assert exports.calls[0]["ref"] == "v1" and exports.calls[0]["copy_from"] == ("main",)


# ---------------------------------------------------------------------------- catch_up, append_branch_table


def test_catch_up_queues_what_it_found_once_at_a_time(worker):
    commit = worker.lakefs.commit_files("repo", "main", {
        ACTION_PATH: render_action("http://x/webhook", ["main"], ["main"]),
        "_lakefs_tables/events.yaml": DESCRIPTOR % (b"events", b"events"),
        "tables/events/_delta_log/00000000000000000000.json": b"{}"})
    worker.status.set_table("repo", "main", commit, "events", "failed", reason="bad", permanent=True)
    worker.lakefs.commit_files("repo", "main", {"tables/events/_delta_log/00000000000000000001.json": b"{}"})
    head = worker.lakefs.commit("repo", "main").id

    with StatusStore(worker.config.redis).lock("catch-up", 60):
        assert tasks.catch_up.apply().get() == [] and worker.sent == []  # another worker's beat runs it

    assert tasks.catch_up.apply().get() == [f"repo:main:{head}"]
    assert [(s.name, s.args, s.kwargs) for s in worker.sent] == [
        ("lakefs_delta.export_commit", ("repo", "main", head, False), {"branch_table": True})]
    assert worker.status.metrics()["lakefs_delta_catch_up_terminal_failures_current"] == 1


def test_catch_up_queues_the_iceberg_tables_it_found_left_pending(worker, monkeypatch):
    from exporter.upkeep.catch_up import CatchUpPlan

    monkeypatch.setattr(tasks, "find_missing_exports", lambda *_: CatchUpPlan(icebergs=[("repo", "v1", "c" * 64, "events")]))

    tasks.catch_up.apply()

    assert [(s.name, s.args, s.options.get("priority")) for s in worker.sent] == [
        ("lakefs_delta.export_iceberg", ("repo", "v1", "c" * 64, "events"), tasks.ICEBERG_STEP)]


@pytest.fixture
def appends(monkeypatch):
    script = SimpleNamespace(outcome=None)

    def append_commit(lake, repository, branch, commit_id, table, still_held=None):
        script.still_held = still_held
        if isinstance(script.outcome, BaseException):
            raise script.outcome
        return script.outcome

    monkeypatch.setattr(tasks, "append_commit", append_commit)
    return script


def test_a_branch_table_append_is_noted_on_the_commits_record(worker, appends):
    worker.status.set_table("repo", "main", "c" * 64, "events", "done")
    appends.outcome = AppendOutcome("events", "s3://lake/repo/latest/events/", head_version=7, appended=[6, 7])

    assert tasks.append_branch_table.apply(("repo", "main", "c" * 64, "events")).get()["appended"] == [6, 7]

    noted = worker.status.record("repo", "main", "c" * 64, "events")["branch_table"]
    assert noted == {"state": "appended", "reason": "", "head_version": 7, "appended": [6, 7]}
    assert appends.still_held.__self__.name == "branch-table:repo:main:events"  # it checks the lock before its state


def test_an_append_whose_workers_died_max_deliveries_times_is_noted_failed_not_run_again(worker, appends):
    worker.status.set_table("repo", "main", "c" * 64, "events", "done")
    deaths(worker, "append_branch_table", "repo", "main", "c" * 64, "events")
    appends.outcome = AssertionError("not run")

    assert tasks.append_branch_table.apply(("repo", "main", "c" * 64, "events")).get()["ok"] is False
    assert worker.status.record("repo", "main", "c" * 64, "events")["branch_table"] == {
        "state": "failed", "reason": DIED_TWICE, "permanent": True}


def test_a_refused_append_is_noted_and_not_retried_and_a_busy_one_waits(worker, appends):
    worker.status.set_table("repo", "main", "c" * 64, "events", "done")
    appends.outcome = BranchTableRefused("commit c is not on the first-parent line of branch 'main'")

    assert tasks.append_branch_table.apply(("repo", "main", "c" * 64, "events")).get()["ok"] is False
    assert worker.status.record("repo", "main", "c" * 64, "events")["branch_table"] == {
        "state": "refused", "reason": "commit c is not on the first-parent line of branch 'main'", "permanent": True}
    assert tasks_total(worker.status, "append_branch_table", "failed") == 1

    with StatusStore(worker.config.redis).lock("branch-table:repo:main:events", 60):
        assert tasks.append_branch_table.apply(("repo", "main", "d" * 64, "events")).get()["requeued"]
    assert [(s.name, s.args, s.options["countdown"]) for s in worker.sent] == [
        ("lakefs_delta.append_branch_table", ("repo", "main", "d" * 64, "events"), 1)]


# ---------------------------------------------------------------------------- results for the API


@pytest.fixture
def diffs(worker, monkeypatch):
    """compute_diff's computation, scripted: the next of `diffs.answers` (or an error to raise)."""
    script = SimpleNamespace(answers=[], computed=0,
                             cache=ResultCache(worker.config.redis, 3600, tasks._services(worker.config)[1].kind))

    def diff_of(lake, repository, left, right, table_path):
        script.computed += 1
        answer = script.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    monkeypatch.setattr(answers, "diff_of", diff_of)
    return script


PARTS = ("repo", "a" * 64, "b" * 64, "tables/events")


def test_a_computed_answer_is_cached_once_and_the_claim_released(worker, diffs):
    diffs.cache.claim(60, *PARTS)
    diffs.answers = [{"versions": [1]}]

    assert answers.compute_diff.apply(PARTS).get() is True
    assert answers.compute_diff.apply(PARTS).get() is True  # cached meanwhile: not computed again

    assert diffs.cache.get(*PARTS) == {"versions": [1]} and diffs.computed == 1
    assert diffs.cache.claim(60, *PARTS)  # released


def test_an_answer_whose_workers_died_max_deliveries_times_is_a_failure_not_computed_again(worker, diffs):
    """A poison row diff (or diff, overview, datasets): the API answers why instead of queuing it again."""
    deaths(worker, "compute_diff", *PARTS)

    assert answers.compute_diff.apply(PARTS).get() is False

    failure = diffs.cache.failure(*PARTS)
    assert isinstance(failure, WorkerLost) and str(failure) == DIED_TWICE and diffs.computed == 0


def test_a_commit_whose_workers_died_max_deliveries_times_is_failed_not_run_again(worker):
    commit = commit_tables(worker.lakefs, {"_lakefs_tables/events.yaml": DESCRIPTOR % (b"events", b"events")})
    deaths(worker, "export_commit", "repo", "main", commit)

    assert tasks.export_commit.apply(("repo", "main", commit)).get() == [] and worker.sent == []
    record = worker.status.record("repo", "main", commit, COMMIT_RECORD)
    assert (record["state"], record["permanent"], record["reason"]) == ("failed", True, DIED_TWICE)


def test_why_there_is_no_answer_is_cached_for_the_api(worker, diffs):
    diffs.answers = [TableNotFound("no Delta table at tables/events")]
    assert answers.compute_diff.apply(PARTS).get() is False
    failure = diffs.cache.failure(*PARTS)
    assert isinstance(failure, TableNotFound) and str(failure) == "no Delta table at tables/events"
    assert diffs.computed == 1  # permanent: no retry

    other = ("repo", "a" * 64, "c" * 64, "tables/events")
    diffs.answers = [ServiceUnavailable("lakeFS answered 503")] * (MAX_RETRIES + 1)
    assert answers.compute_diff.apply(other).get() is False
    assert diffs.computed == 1 + MAX_RETRIES + 1  # retried while retries lasted
    failure = diffs.cache.failure(*other)
    assert isinstance(failure, ServiceUnavailable) and str(failure) == "lakeFS answered 503"


def test_catch_up_sends_every_kind_of_task_it_plans_and_says_so(worker):
    """The periodic task and `lakefs-delta catch-up` send through one function: the Iceberg table of a
    pending export too (the command once said it queued them, and sent none)."""
    from exporter.upkeep.catch_up import CatchUpPlan, MissingExport

    plan = CatchUpPlan(queued=[MissingExport("repo", "main", "c" * 64, False, ("events",))],
                       appends=[("repo", "main", "c" * 64, "events")], icebergs=[("repo", "v1", "c" * 64, "events")])
    lines = tasks.send_catch_up(plan)
    assert [s.name for s in worker.sent] == ["lakefs_delta.export_commit", "lakefs_delta.append_branch_table",
                                             "lakefs_delta.export_iceberg"]
    assert worker.sent[2].args == ("repo", "v1", "c" * 64, "events") and worker.sent[2].options["priority"] == tasks.ICEBERG_STEP
    assert len(lines) == 3 and "Iceberg table of events" in lines[2]


def test_every_task_kind_catch_up_sends_ends_failed_for_good_after_max_rounds(worker, tmp_path, monkeypatch):
    """One terminal rule: an export_commit, export_iceberg or append_branch_table whose retries run
    out `tasks.max_rounds` times (3) is failed for good, and catch-up runs after it queue none of them
    (before, only export_table counted rounds: the others were queued again on every run)."""
    from exporter.upkeep.catch_up import catch_up
    from exporter.export.commit import export_table as export_one_table
    from exporter.export.job import ExportAt

    config = worker.config.model_copy(update={
        "iceberg": IcebergConfig(enabled=True),
        "catch_up": worker.config.catch_up.model_copy(update={"in_flight_seconds": 0})})
    monkeypatch.setattr(workers.app, "_config", config)
    other = SourceTable(worker.lakefs, "repo", "other", tmp_path / "other").append(2)
    unlisted = other.commit(extra={ACTION_PATH: render_action("http://x/webhook", ["main"], ["main"])})
    events = SourceTable(worker.lakefs, "repo", "events", tmp_path / "events").append(1)
    exported = events.commit()  # the head: exported, its Iceberg table pending, its branch table not appended
    assert export_one_table(lake_of(config, worker.lakefs), ExportAt("repo", "main", exported), events.descriptor).ok
    worker.status.set_table("repo", "main", exported, "events", "done")

    first = catch_up(lake_of(config, worker.lakefs), worker.status)
    assert ("repo", "main", exported, "events") in first.icebergs and ("repo", "main", exported, "events") in first.appends
    assert any(q.commit_id == unlisted for q in first.queued)  # its export_commit never listed its tables

    for round_ in range(3):
        tasks.export_iceberg.on_failure(delivery.Transient("timed out"), f"iceberg-{round_}",
                                        ("repo", "main", exported, "events"), {}, None)
        tasks.export_commit.on_failure(delivery.Transient("lakeFS answered 503"), f"commit-{round_}",
                                       ("repo", "main", unlisted, False), {}, None)
        tasks.append_branch_table.on_failure(delivery.Transient("timed out"), f"append-{round_}",
                                             ("repo", "main", exported, "events"), {}, None)
    iceberg = worker.status.record("repo", "main", exported, "events")["iceberg"]
    commit_record = worker.status.record("repo", "main", unlisted, COMMIT_RECORD)
    assert (iceberg["state"], iceberg["rounds"], iceberg["permanent"]) == ("failed", 3, True)
    assert (commit_record["state"], commit_record["rounds"], commit_record["permanent"]) == ("failed", 3, True)
    assert "it is not queued again (tasks.max_rounds)" in iceberg["reason"]

    appended = worker.status.record("repo", "main", exported, "events")["branch_table"]
    assert (appended["state"], appended["rounds"], appended["permanent"]) == ("failed", 3, True)

    for _ in range(3):  # three later runs queue nothing of them, and say why
        plan = catch_up(lake_of(config, worker.lakefs), worker.status)
        assert plan.icebergs == [] and plan.appends == [] and plan.queued == []
        assert len(plan.given_up) == 3, plan.given_up


def test_a_row_diff_past_its_time_limit_fails_for_good_with_the_reason_not_started_again(worker, monkeypatch):
    """Issue 38 item 11: a row diff handed to Spark that meets its soft time limit is not a network
    blip: retried, it would start again from nothing. It fails once, with the limit in the reason."""
    from exporter.diff.rows.compute import RowDiffCache, RowDiffTooLarge

    runs = []

    def row_diff_of(*args, **kwargs):
        runs.append(1)
        raise SoftTimeLimitExceeded()

    monkeypatch.setattr(answers, "row_diff_of", row_diff_of)
    parts = (*PARTS, "-")

    assert answers.compute_row_diff.apply(parts).get() is False

    failure = RowDiffCache(worker.config.redis, 3600).failure(*parts)
    assert isinstance(failure, RowDiffTooLarge) and "ran past its time limit" in str(failure), failure
    assert len(runs) == 1  # not retried


def test_a_copy_delivered_while_a_row_diff_runs_ends_without_running_it_and_runs_once_its_holder_died(worker,
                                                                                                      monkeypatch):
    """Issue 38 item 11: Redis delivers an unacknowledged message again after the visibility timeout
    while its first delivery still runs (a Spark job of an hour). The copy waits out one claim TTL,
    finds the work still held and ends, neither computing nor counted as a death; a dead holder's
    claim lapses and the copy then runs it."""
    import threading

    from exporter.diff.rows.compute import RowDiffCache
    from exporter.state.connection import PREFIX

    parts, running, release, runs = (*PARTS, "-"), threading.Event(), threading.Event(), []
    key = length_prefixed("compute_row_diff", *parts)

    def row_diff_of(*args, **kwargs):
        runs.append(threading.current_thread().name)
        running.set()
        release.wait(30)
        return {"counts": {}, "rows": []}

    monkeypatch.setattr(answers, "row_diff_of", row_diff_of)
    short = worker.config.tasks.model_copy(update={"lock_ttl_seconds": 1})  # below the setting's minimum: a fast test
    monkeypatch.setattr(workers.app, "_config", worker.config.model_copy(update={"tasks": short}))
    first = threading.Thread(target=lambda: answers.compute_row_diff.apply(parts), name="first")
    first.start()
    assert running.wait(10)

    assert answers.compute_row_diff.apply(parts).get() is False  # the copy: ended after one TTL, the claim still held
    assert runs == ["first"] and worker.status.redis.get(f"{PREFIX}:started:{key}") == b"1"  # not counted a death
    release.set()
    first.join(10)
    assert RowDiffCache(worker.config.redis, 3600).get(*parts) is not None

    with delivery._sole_delivery(worker.status, "dead-holder", 1):  # a claim whose holder died lapses within its TTL
        pass
    worker.status.redis.set(f"{PREFIX}:lock:delivery:dead-holder", "a dead worker's token", ex=1)
    with delivery._sole_delivery(worker.status, "dead-holder", 1):
        assert worker.status.redis.get(f"{PREFIX}:lock:delivery:dead-holder") != b"a dead worker's token"
