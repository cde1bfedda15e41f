"""Events and tasks never lose, repeat or hang work: one config, honest state, tags, catch-up, time
limits, a durable queue.

Real lakeFS, MinIO and Redis; real `lakefs-delta serve` and `worker` processes. Tables are written
as Delta logs through lakeFS's API (no Spark: these tests are about delivery, not reading).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis

from exporter.lakefs.installer import action_files, install_actions
from exporter.config import load_config
from exporter.storage.layout import MANIFEST
from devtools import stack
from lakefs_delta.client import export_status, wait_for_exports
from tests.conftest import SERVICE_PORT
from tests.fakes import lake_of
from workers.app import configure

pytestmark = pytest.mark.integration
WEBHOOK = f"http://127.0.0.1:{SERVICE_PORT}/webhooks/lakefs"
PROTOCOL = '{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}'
METADATA = ('{"metaData":{"id":"t","format":{"provider":"parquet","options":{}},'
            '"schemaString":"{\\"type\\":\\"struct\\",\\"fields\\":[]}","partitionColumns":[],"configuration":{}}}')


def token() -> str:
    return os.environ["LAKEFS_DELTA_WEBHOOK_TOKENS"].split(",")[0]


def add_delta_version(lakefs, repository: str, branch: str, path: str, version: int) -> None:
    """One more version of a tiny Delta table (a placeholder data object: nothing here reads rows)."""
    data = f"part-{version:05d}.parquet"
    lakefs.upload_object(repository, branch, f"{path}/{data}", b"x")
    add = f'{{"add":{{"path":"{data}","partitionValues":{{}},"size":1,"modificationTime":0,"dataChange":true}}}}'
    header = f"{PROTOCOL}\n{METADATA}\n" if version == 0 else ""
    lakefs.upload_object(repository, branch, f"{path}/_delta_log/{version:020d}.json",
                         f'{{"commitInfo":{{"operation":"WRITE"}}}}\n{header}{add}\n'.encode())


def tables_repository(lakefs, repository: str, names: list[str], url: str = WEBHOOK, branches=("main",)) -> str:
    install_actions(lakefs, repository, "main", action_files(url, list(branches), {n: f"tables/{n}" for n in names}))
    for name in names:
        add_delta_version(lakefs, repository, "main", f"tables/{name}", 0)
    return lakefs.commit_branch(repository, "main", "tables")


def timed(request) -> tuple[int, float]:
    """(HTTP status, seconds) of a request."""
    started = time.monotonic()
    return request().status_code, time.monotonic() - started


def post_event(event: dict, url: str = WEBHOOK) -> httpx.Response:
    return httpx.post(url, json=event, headers={"X-Webhook-Token": token()}, timeout=30)


def commit_event(repository: str, commit_id: str, branch: str = "main") -> dict:
    return {"event_type": "post-commit", "repository_id": repository, "branch_id": branch, "commit_id": commit_id,
            "source_ref": branch, "hook_run_id": "x", "action_name": "delta-export", "hook_id": "delta_export"}


def tag_event(repository: str, commit_id: str, tag: str) -> dict:
    return {"event_type": "post-create-tag", "repository_id": repository, "tag_id": tag, "commit_id": commit_id,
            "source_ref": commit_id, "hook_run_id": "x", "action_name": "delta-export", "hook_id": "delta_export"}


def manifests(s3, repository: str) -> list[str]:
    """(ref segment, commit, table) of every complete export in the repository's namespace, from the store."""
    bucket = stack.BUCKET
    found, token_ = [], None
    while True:
        page = s3.list_objects_v2(Bucket=bucket, Prefix=f"{repository}/_lakefs/exported/",
                                  **({"ContinuationToken": token_} if token_ else {}))
        found += [item["Key"] for item in page.get("Contents", []) if item["Key"].endswith("/" + MANIFEST)]
        if not page.get("IsTruncated"):
            return ["/".join(k.split("/")[3:6]) for k in found]
        token_ = page["NextContinuationToken"]


# ---------------------------------------------------------------- one config, passed in


def test_serve_and_worker_use_the_redis_of_their_config_file(processes, lakefs, repository, stack_env, tmp_path):
    redis_url = stack_env["LAKEFS_DELTA_REDIS_URL"].rsplit("/", 1)[0] + "/5"
    config_file = tmp_path / "exporter.yaml"
    config_file.write_text(f"redis_url: {redis_url}\nworker_concurrency: 1\n")
    env = {"LAKEFS_DELTA_REDIS_URL": None}  # not in the processes' environment: the file decides
    port = SERVICE_PORT + 11
    commit_id = tables_repository(lakefs, repository, ["one"], url=f"http://127.0.0.1:{port}/nowhere")
    processes.start("worker-db5", ["worker", "--config", str(config_file), "--no-beat", "--name", "db5@%h"], env)
    url = processes.serve("service-db5", port, ["--config", str(config_file)], env)

    answer = post_event(commit_event(repository, commit_id), url=url + "/webhooks/lakefs")

    assert answer.status_code == 202, answer.text
    done = wait_for_exports(url, token(), repository, commit_id, "main", {"one"}, timeout=90)
    assert done["one"]["state"] == "done", done
    db5, db0 = redis.Redis.from_url(redis_url), redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/0")
    assert db5.exists(f"lakefs-delta:export:{repository}:{commit_id}")
    assert not db0.exists(f"lakefs-delta:export:{repository}:{commit_id}")


# ---------------------------------------------------------------- tags


def test_a_tag_on_a_commit_that_changed_no_table_exports_every_table(service, lakefs, repository, s3):
    commit_id = tables_repository(lakefs, repository, ["orders", "customers"])
    wait_for_exports(service, token(), repository, commit_id, "main", {"orders", "customers"})
    lakefs.upload_object(repository, "main", "docs/README.md", b"release notes")
    docs_commit = lakefs.commit_branch(repository, "main", "docs only")

    lakefs.create_tag(repository, "v1.0", docs_commit)

    tagged = wait_for_exports(service, token(), repository, docs_commit, "v1.0", {"orders", "customers"})
    assert {t: r["state"] for t, r in tagged.items()} == {"orders": "done", "customers": "done"}
    assert sorted(m for m in manifests(s3, repository) if m.startswith("v1.0/")) == \
        [f"v1.0/{docs_commit}/customers", f"v1.0/{docs_commit}/orders"]


def test_branch_and_tag_exports_of_one_commit_keep_their_own_records_through_a_lakefs_outage(
        service, lakefs, repository):
    commit_id = tables_repository(lakefs, repository, ["events"], url="http://127.0.0.1:1/nowhere")
    queue = configure(load_config())
    lakefs.create_tag(repository, "rc1", commit_id)
    seen: dict[str, set[str]] = {"main": set(), "rc1": set()}

    # lakeFS down longer than `tasks.retry.max_retries` quick retries last here (8, full jitter below 1, 2
    # and 4 s: 13.5 s expected): the tag's export once gave up within it and was never exported; an
    # outage is retried for `tasks.retry.outage_seconds` (60 s here)
    stack.stop_service("lakefs")
    try:
        queue.send_task("lakefs_delta.export_commit", (repository, "main", commit_id, False))
        queue.send_task("lakefs_delta.export_commit", (repository, "rc1", commit_id, True))
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        stack.up()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        states = {}
        for ref in seen:
            found = export_status(service, token(), repository, commit_id, ref) or {}
            for record in found.get("tables", {}).values():
                if record.get("location"):
                    seen[ref].add(record["location"])
            states[ref] = found.get("tables", {}).get("events", {}).get("state")
        if states == {"main": "done", "rc1": "done"}:
            break
        time.sleep(0.5)
    assert states == {"main": "done", "rc1": "done"}, states
    assert all(f"/exported/main/{commit_id}/" in location for location in seen["main"]), seen
    assert all(f"/exported/rc1/{commit_id}/" in location for location in seen["rc1"]), seen


# What the worker is asking lakeFS when a service restarts: its requests, seen by a proxy in front
# of lakeFS that holds the first one matching, while the test restarts lakeFS (or MinIO).
RESTARTS = {
    "lakefs, listing the descriptors": ("lakefs", lambda method, path: "/objects/ls" in path and "_lakefs_tables" in path),
    "lakefs, reading a descriptor": ("lakefs", lambda method, path: path.split("?")[0].endswith("/objects")
                                     and "_lakefs_tables" in path),
    "lakefs, listing the table": ("lakefs", lambda method, path: "/objects/ls" in path and "prefix=tables/events" in path),
    "minio, as the export reads and writes": ("minio", lambda method, path: "/objects/ls" in path
                                              and "prefix=tables/events" in path),
}


@pytest.mark.parametrize("moment", sorted(RESTARTS))
def test_a_branch_and_a_tag_are_exported_whatever_moment_lakefs_or_minio_restarts(processes, lakefs, repository,
                                                                                  stack_env, moment):
    """Issue 50: a service restarts while the worker is at a chosen step (its request held until the
    restart began); every answer it meets then (refused connections, a dropped request, 5xx) is
    retried within `tasks.retry.outage_seconds`, and both refs' exports complete."""
    from exporter.state.status import StatusStore
    from tests.integration.lakefs_policy import PrefixPolicies

    service, matches = RESTARTS[moment]
    redis_url = stack_env["LAKEFS_DELTA_REDIS_URL"].rsplit("/", 1)[0] + "/13"  # a queue no other worker reads
    commit_id = tables_repository(lakefs, repository, ["events"], url="http://127.0.0.1:1/nowhere")
    lakefs.create_tag(repository, "rc1", commit_id)
    status = StatusStore(redis_url)
    with PrefixPolicies(stack_env["LAKEFS_DELTA_LAKEFS_ENDPOINT"], SERVICE_PORT + 63) as proxy:
        proxy.hold(lambda method, path: repository in path and matches(method, path), seconds=3)
        worker = processes.worker("restarts", extra_env={"LAKEFS_DELTA_REDIS_URL": redis_url,
                                                         "LAKEFS_DELTA_LAKEFS_ENDPOINT": proxy.url})
        try:
            queue = configure(load_config(environ={**os.environ, "LAKEFS_DELTA_REDIS_URL": redis_url}))
            queue.send_task("lakefs_delta.export_commit", (repository, "main", commit_id, False))
            queue.send_task("lakefs_delta.export_commit", (repository, "rc1", commit_id, True))
            deadline = time.monotonic() + 60
            while not proxy.held and time.monotonic() < deadline:
                time.sleep(0.1)
            assert proxy.held, f"the worker never asked lakeFS what {moment!r} holds: {proxy.requests[-5:]}"
            stack.stop_service(service)  # while the held request waits: it goes on to a service that is down
            time.sleep(4)
            stack.up()
            processes.revive()
            deadline, states = time.monotonic() + 120, {}
            while time.monotonic() < deadline:
                states = {ref: (status.record(repository, ref, commit_id, "events") or {}).get("state")
                          for ref in ("main", "rc1")}
                if states == {"main": "done", "rc1": "done"}:
                    break
                time.sleep(0.5)
        finally:  # its proxy ends with the test
            processes.kill_worker(next(node for node, process in processes.workers.items() if process is worker))
    assert states == {"main": "done", "rc1": "done"}, (moment, states, [
        status.record(repository, ref, commit_id, name) for ref in ("main", "rc1") for name in ("events", "_commit")])


# ---------------------------------------------------------------- time limits


def test_a_frozen_lakefs_makes_the_task_retry_in_time_and_the_export_completes_after(service, lakefs, repository):
    commit_id = tables_repository(lakefs, repository, ["events"], url="http://127.0.0.1:1/nowhere")
    queue = configure(load_config())
    lakefs_pid = stack._running_pid(stack.STACK_DIR, "lakefs")
    os.kill(lakefs_pid, signal.SIGSTOP)  # accepts connections, never answers
    try:
        queue.send_task("lakefs_delta.export_table", (repository, "main", commit_id, "events", "tables/events"))
        # An attempt's start, by the retries before it: with a retry's countdown of 0 s (full jitter) the
        # record is `retrying` for milliseconds, and the first one seen may end a later attempt than
        # the first one seen running (it did on a loaded machine: 20 s, five attempts of 4 s)
        started, state, attempts = time.monotonic(), {}, {}
        while time.monotonic() - started < 40 and state.get("state") != "retrying":
            time.sleep(0.5)
            state = (export_status(service, token(), repository, commit_id, "main") or {}).get("tables", {}) \
                .get("events", {})
            if state.get("state") == "running":
                attempts.setdefault(state["retries"], state["updated_at"])
        # readiness probes on a hung lakeFS answer within their own deadline and never hold up webhooks
        with ThreadPoolExecutor(12) as pool:
            probes = [pool.submit(timed, lambda: httpx.get(service + "/readyz", timeout=60)) for _ in range(10)]
            hook = pool.submit(timed, lambda: post_event(commit_event(repository, commit_id)))
            probe_answers, hook_answer = [p.result() for p in probes], hook.result()
    finally:
        os.kill(lakefs_pid, signal.SIGCONT)
    assert {status for status, _ in probe_answers} == {503}, probe_answers
    assert max(seconds for _, seconds in probe_answers) < 8, probe_answers  # a 3 s deadline per check
    assert hook_answer[0] == 202 and hook_answer[1] < 3, hook_answer
    assert state.get("state") == "retrying", state
    assert state["retries"] - 1 in attempts, ("the attempt that retried was never seen running", attempts, state)
    ran = state["updated_at"] - attempts[state["retries"] - 1]
    assert ran < 12 + 5, ran  # within the task's time limit (conftest: 12 s), not hung
    assert "lakeFS" in state["reason"], state
    done = wait_for_exports(service, token(), repository, commit_id, "main", {"events"}, timeout=120)
    assert done["events"]["state"] == "done", done


# ---------------------------------------------------------------- a durable queue


@contextmanager
def held_fsync(pid: int, seconds: float):
    """Each fdatasync of process `pid` (Redis's append-only file) held `seconds`, as a busy disk holds
    it (strace's fault injection, attached to every thread until the process ends or the block does)."""
    tracer = subprocess.Popen(["strace", "-f", "-qq", "-o", "/dev/null", "-p", str(pid), "-e", "trace=fdatasync",
                               "-e", f"inject=fdatasync:delay_enter={int(seconds * 1e6)}"])
    try:
        deadline = time.monotonic() + 10
        while not all(_traced(status) for status in Path(f"/proc/{pid}/task").glob("*/status")):
            assert time.monotonic() < deadline and tracer.poll() is None, "strace did not attach"
            time.sleep(0.05)
        yield
    finally:
        tracer.kill()  # not SIGTERM: strace waits on a killed tracee's held call, and the tracee's port with it
        tracer.wait(timeout=30)


def _traced(status: Path) -> bool:
    try:
        return any(line.startswith("TracerPid:") and line.split()[1] != "0" for line in status.read_text().splitlines())
    except FileNotFoundError:  # a thread that ended
        return True


def test_events_answered_before_a_redis_crash_are_all_exported(processes, lakefs, repository, stack_env, s3):
    """The last event is answered while the disk holds Redis's fsync, and Redis is killed at once: an
    answered event is in the append-only file (`appendfsync always`), so it is exported after the
    restart. Under `everysec` Redis answers it first and the crash loses it (the CI run of stop 65)."""
    redis_url = stack_env["LAKEFS_DELTA_REDIS_URL"].rsplit("/", 1)[0] + "/7"  # a queue no other worker reads
    env = {"LAKEFS_DELTA_REDIS_URL": redis_url}
    port = SERVICE_PORT + 12
    names = [f"t{i}" for i in range(5)]
    commit_id = tables_repository(lakefs, repository, names, url="http://127.0.0.1:1/nowhere")
    url = processes.serve("service-db7", port, extra_env=env)
    events = [commit_event(repository, commit_id)] + [tag_event(repository, commit_id, f"r{i}") for i in range(4)]
    for i in range(4):
        lakefs.create_tag(repository, f"r{i}", commit_id)

    answers = [post_event(e, url=url + "/webhooks/lakefs").status_code for e in events[:-1]]
    with held_fsync(stack._running_pid(stack.STACK_DIR, "redis"), seconds=2.0):
        redis.Redis.from_url(redis_url).set("unsynced", 1)  # the AOF's next fsync starts within a second
        time.sleep(1.1)  # and is held: Redis under `everysec` would answer the next event before writing it
        answers.append(post_event(events[-1], url=url + "/webhooks/lakefs").status_code)
        stack.stop_service("redis")  # a crash (SIGKILL) while the disk still holds the fsync
    assert answers == [202] * 5
    stack.up()
    processes.revive()  # the session's other workers, as their supervisor would
    processes.worker("db7", extra_env=env)

    for ref in ["main"] + [f"r{i}" for i in range(4)]:
        done = wait_for_exports(url, token(), repository, commit_id, ref, set(names), timeout=180)
        assert {r["state"] for r in done.values()} == {"done"}, (ref, done)
    assert len(manifests(s3, repository)) == 5 * 5


# ---------------------------------------------------------------- large tables


def test_a_large_table_waits_on_its_own_queue_while_small_ones_export(processes, lakefs, repository, stack_env):
    """With `workers.large_table_files` at 2, a table whose checkpoint lists 2 files goes to the large queue:
    a worker of the default queue alone exports the small table and leaves the large one queued;
    a worker of the large queue then exports it."""
    import io

    import pyarrow.parquet as pq

    from bench.synthetic import synthetic_checkpoint

    env = {"LAKEFS_DELTA_REDIS_URL": stack_env["LAKEFS_DELTA_REDIS_URL"].rsplit("/", 1)[0] + "/6",
           "LAKEFS_DELTA_WORKERS_LARGE_TABLE_FILES": "2"}
    port = SERVICE_PORT + 13
    commit_id = tables_repository(lakefs, repository, ["small", "large"], url="http://127.0.0.1:1/nowhere")
    for name in ("small", "large"):  # the commit changes both tables
        add_delta_version(lakefs, repository, "main", f"tables/{name}", 1)
    sink = io.BytesIO()
    pq.write_table(synthetic_checkpoint(["part-00000.parquet", "part-00001.parquet"]), sink)
    lakefs.upload_object(repository, "main", f"tables/large/_delta_log/{1:020d}.checkpoint.parquet", sink.getvalue())
    lakefs.upload_object(repository, "main", "tables/large/_delta_log/_last_checkpoint",
                         b'{"version":1,"size":4,"numOfAddFiles":2}')
    commit_id = lakefs.commit_branch(repository, "main", "a checkpoint of 2 files")
    url = processes.serve("service-db6", port, extra_env=env)
    processes.worker("db6-default", ["--queues", "celery"], extra_env=env)

    assert post_event(commit_event(repository, commit_id), url=url + "/webhooks/lakefs").status_code == 202
    small = wait_for_exports(url, token(), repository, commit_id, "main", {"small"}, timeout=120)
    assert small["small"]["state"] == "done", small
    time.sleep(3)  # the default queue's worker is idle now: nothing it could take is left
    waiting = export_status(url, token(), repository, commit_id, "main")["tables"]["large"]
    assert waiting["state"] == "queued" and waiting["queue"] == "lakefs_delta.large", waiting

    processes.worker("db6-large", ["--queues", "lakefs_delta.large"], extra_env=env)
    large = wait_for_exports(url, token(), repository, commit_id, "main", {"large"}, timeout=120)
    assert large["large"]["state"] == "done", large


# ---------------------------------------------------------------- catch-up


def test_catch_up_exports_a_dropped_event_and_no_feature_commit_under_the_destination(service, lakefs, repository, s3):
    from lakefs_delta.cli import main as cli

    dead = "http://127.0.0.1:1/webhooks/lakefs"  # the service is down for this repository's hooks
    first = tables_repository(lakefs, repository, ["events"], url=dead)
    lakefs.create_branch(repository, "feature-x", "main")
    add_delta_version(lakefs, repository, "feature-x", "tables/events", 1)
    feature_commit = lakefs.commit_branch(repository, "feature-x", "feature work")
    merge_commit = lakefs.merge(repository, "feature-x", "main", "merge feature-x")
    lakefs.create_tag(repository, "v2", merge_commit)
    assert manifests(s3, repository) == []  # every event was dropped

    assert cli(["catch-up", "--repo", repository]) == 0

    for ref, commit_id in (("main", first), ("main", merge_commit), ("v2", merge_commit)):
        done = wait_for_exports(service, token(), repository, commit_id, ref, {"events"}, timeout=120)
        assert done["events"]["state"] == "done", (ref, done)
    exported = manifests(s3, repository)
    assert f"main/{feature_commit}/events" not in exported, exported  # first parents only
    assert not any(m.startswith("feature-x/") for m in exported)  # the action names main only


def test_with_a_public_url_catch_up_leaves_a_repository_whose_action_calls_another_deployment(lakefs, repository,
                                                                                               stack_env, config):
    """Two deployments on one lakeFS: a repository whose installed action calls the other one is
    theirs to catch up, though this worker's lakeFS user can read it; naming it takes it back."""
    from exporter.upkeep.catch_up import catch_up
    from exporter.lakefs.client import LakeFS
    from exporter.state.status import StatusStore

    theirs = f"{repository[:40]}-theirs"
    lakefs.create_repository(theirs, f"s3://{stack_env['LAKEFS_DELTA_STACK_BUCKET']}/{theirs}")
    mine_commit = tables_repository(lakefs, repository, ["events"], url="http://exporter-a.internal:8080/webhooks/lakefs")
    theirs_commit = tables_repository(lakefs, theirs, ["events"], url="http://exporter-b.internal:8080/webhooks/lakefs")
    here = config.model_copy(update={"public_url": "http://exporter-a.internal:8080",
                                     "catch_up": config.catch_up.model_copy(update={"repositories": ()})})
    client, status = LakeFS(here.lakefs), StatusStore(here.redis)

    plan = catch_up(lake_of(here, client), status, [])
    queued = {(m.repository, m.commit_id) for m in plan.queued}
    assert (repository, mine_commit) in queued, plan
    assert not any(m.repository == theirs for m in plan.queued), plan
    assert any(s.startswith(f"{theirs}: its action calls http://exporter-b.internal:8080/webhooks/lakefs")
               for s in plan.skipped_repositories), plan.skipped_repositories

    naming = here.model_copy(update={"catch_up": here.catch_up.model_copy(update={"repositories": (theirs,)})})
    named = catch_up(lake_of(naming, client), status)
    assert {(m.repository, m.commit_id) for m in named.queued} >= {(theirs, theirs_commit)}, named


def test_catch_up_does_not_requeue_a_permanent_failure(service, lakefs, repository, capsys):
    from lakefs_delta.cli import main as cli

    commit_id = tables_repository(lakefs, repository, ["events"], url="http://127.0.0.1:1/nowhere")
    lakefs.delete_object(repository, "main", "tables/events/part-00000.parquet")
    broken = lakefs.commit_branch(repository, "main", "lost a data file")
    assert cli(["catch-up", "--repo", repository]) == 0
    failed = wait_for_exports(service, token(), repository, broken, "main", {"events"})
    assert failed["events"]["state"] == "failed" and "part-00000.parquet" in failed["events"]["reason"]
    wait_for_exports(service, token(), repository, commit_id, "main", {"events"})
    capsys.readouterr()

    assert cli(["catch-up", "--repo", repository]) == 0

    printed = capsys.readouterr().out
    assert f"failed  {repository} main {broken} events" in printed and "0 commit(s) queued" in printed, printed


# ---------------------------------------------------------------- duplicates at scale


def test_two_hundred_deliveries_of_forty_events_give_one_export_each(service, lakefs, repository, s3):
    commit_id = tables_repository(lakefs, repository, ["a", "b"], url="http://127.0.0.1:1/nowhere")
    commits = [commit_id]
    for version in range(1, 20):
        add_delta_version(lakefs, repository, "main", f"tables/{'ab'[version % 2]}", (version + 1) // 2)
        commits.append(lakefs.commit_branch(repository, "main", f"commit {version}"))
    for i, commit in enumerate(commits):
        lakefs.create_tag(repository, f"t{i}", commit)
    events = [commit_event(repository, c) for c in commits] + [tag_event(repository, c, f"t{i}") for i, c in enumerate(commits)]
    before = _exports_run(service)

    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda e: post_event(e).status_code, events * 5))

    assert answers == [202] * 200
    expected = {f"main/{commits[0]}/a", f"main/{commits[0]}/b"}
    expected |= {f"main/{c}/{'ab'[v % 2]}" for v, c in enumerate(commits) if v}
    expected |= {f"t{i}/{c}/{t}" for i, c in enumerate(commits) for t in "ab"}
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and set(manifests(s3, repository)) != expected:
        time.sleep(1)
    found = manifests(s3, repository)
    assert sorted(found) == sorted(expected)  # one manifest per (ref, commit, table), no more, no less
    for ref, commit in [("main", c) for c in commits] + [(f"t{i}", c) for i, c in enumerate(commits)]:
        records = wait_for_exports(service, token(), repository, commit, ref, timeout=60)
        assert {r["state"] for r in records.values()} == {"done"}, (ref, records)
    time.sleep(3)  # duplicates still in flight would show up in the counter
    assert _exports_run(service) - before == len(expected)  # the export work itself ran once per export


def _exports_run(service: str) -> float:
    """Exports that ran (not skipped because their manifest existed), from the workers' counter."""
    text = httpx.get(service + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("lakefs_delta_export_seconds_count"):
            return float(line.split()[-1])
    return 0.0


# ---------------------------------------------------------------- guard rails


@contextmanager
def hanging_worker(processes, stack_env, db: int, **extra_env: str):
    """A worker on a queue of its own (Redis db `db`) whose object store accepts connections and
    never answers: its tasks hang when they first read an object (and no other worker's do).
    Yields the queue's Redis URL."""
    import socket

    redis_url = stack_env["LAKEFS_DELTA_REDIS_URL"].rsplit("/", 1)[0] + f"/{db}"
    black_hole = socket.socket()
    black_hole.bind(("127.0.0.1", 0))
    black_hole.listen(64)
    processes.worker(f"hanging{db}", extra_env={"LAKEFS_DELTA_REDIS_URL": redis_url,
                                                "LAKEFS_DELTA_OBJECT_STORE_ENDPOINT":
                                                    f"http://127.0.0.1:{black_hole.getsockname()[1]}", **extra_env})
    try:
        yield redis_url
    finally:
        black_hole.close()


def kill_pool_processes(processes, node: str) -> None:
    """What the kernel's OOM killer does to a worker's pool processes."""
    worker = processes.workers[node.split("@")[0]]
    children = subprocess.run(["pgrep", "-P", str(worker.pid)], capture_output=True, text=True).stdout
    for child in children.split():
        os.kill(int(child), signal.SIGKILL)


def test_an_export_that_kills_its_worker_is_failed_after_three_deliveries(processes, lakefs, repository, stack_env):
    from celery import Celery

    from exporter.state.status import StatusStore

    commit_id = tables_repository(lakefs, repository, ["events"], url="http://127.0.0.1:1/nowhere")
    kills, last_start = 0, 0
    with hanging_worker(processes, stack_env, 8) as redis_url:
        status = StatusStore(redis_url)
        Celery("test", broker=redis_url).send_task(
            "lakefs_delta.export_table", (repository, "main", commit_id, "events", "tables/events"))
        deadline = time.monotonic() + 180
        while kills < 3 and time.monotonic() < deadline:
            state = status.record(repository, "main", commit_id, "events") or {}
            if state.get("state") == "running" and state.get("starts", 0) > last_start:
                kill_pool_processes(processes, state["worker"])
                last_start, kills = state["starts"], kills + 1
            time.sleep(0.3)
    assert kills == 3

    deadline, state = time.monotonic() + 120, {}
    while time.monotonic() < deadline and state.get("state") != "failed":
        time.sleep(0.5)
        state = status.record(repository, "main", commit_id, "events") or {}

    assert state.get("state") == "failed" and state["permanent"], state
    assert "died 3 times" in state["reason"], state


def test_a_row_diff_that_kills_its_worker_is_answered_failed_after_three_deliveries(processes, lakefs, repository,
                                                                                     stack_env):
    """Every task kind counts its deliveries: a row diff whose worker is killed each time (for
    memory, say) ends as a cached failure the API answers, not a message looping through workers."""
    from celery import Celery

    from exporter.diff.rows.compute import RowDiffCache
    from exporter.errors import WorkerLost
    from exporter.state.connection import PREFIX, connection, length_prefixed

    left = tables_repository(lakefs, repository, ["events"], url="http://127.0.0.1:1/nowhere")
    add_delta_version(lakefs, repository, "main", "tables/events", 1)
    right = lakefs.commit_branch(repository, "main", "one more version")
    parts = (repository, left, right, "tables/events", "-")
    kills, deaths = 0, 0
    with hanging_worker(processes, stack_env, 9) as redis_url:
        started = connection(redis_url)
        Celery("test", broker=redis_url).send_task("lakefs_delta.compute_row_diff", parts)
        deadline = time.monotonic() + 180
        while kills < 3 and time.monotonic() < deadline:
            running = int(started.get(f"{PREFIX}:started:" + length_prefixed("compute_row_diff", *parts)) or 0)
            if running > deaths:  # this delivery started (and hangs in the object store): its worker dies
                kill_pool_processes(processes, next(n for n in processes.workers if n.startswith("hanging9")))
                deaths, kills = running, kills + 1
            time.sleep(0.3)
        assert kills == 3

        cache, deadline = RowDiffCache(redis_url, 3600), time.monotonic() + 120
        while time.monotonic() < deadline and cache.failure(*parts) is None:
            time.sleep(0.5)

    failure = cache.failure(*parts)
    assert isinstance(failure, WorkerLost) and "died 3 times" in str(failure), failure
    assert cache.get(*parts) is None


def test_a_row_diff_running_past_the_visibility_timeout_is_computed_once_and_answered(processes, lakefs, repository,
                                                                                      stack_env, tmp_path):
    """Issue 38 item 11: a row diff that runs longer than the visibility timeout (a Spark job of an
    hour, here one lakeFS listing held 40 s against a 15 s timeout) is delivered again by Redis while
    it runs. The copy finds the work held and ends: the listing is asked once, the diff is answered,
    and the copy is not counted as a worker that died."""
    from celery import Celery

    from exporter.diff.rows.compute import RowDiffCache
    from tests.conftest import ARTIFACTS
    from tests.integration.lakefs_policy import PrefixPolicies
    from tests.integration.test_where_work_meets import commit_table, ids

    left = commit_table(lakefs, repository, "tables/events", tmp_path, ids(1, 2))
    right = commit_table(lakefs, repository, "tables/events", tmp_path, ids(3))
    parts = (repository, left, right, "tables/events", "-")
    redis_url = stack_env["LAKEFS_DELTA_REDIS_URL"].rsplit("/", 1)[0] + "/12"
    logs = [ARTIFACTS / f"worker-long12{name}.log" for name in "ab"]
    seen = [log.stat().st_size if log.exists() else 0 for log in logs]
    with PrefixPolicies(stack_env["LAKEFS_DELTA_LAKEFS_ENDPOINT"], SERVICE_PORT + 62) as lakefs_proxy:
        lakefs_proxy.hold(lambda method, path: f"/refs/{right}/objects/ls" in path and "_delta_log" in path, 45)
        env = {"LAKEFS_DELTA_REDIS_URL": redis_url, "LAKEFS_DELTA_LAKEFS_ENDPOINT": lakefs_proxy.url,
               "LAKEFS_DELTA_LAKEFS_TIMEOUT_SECONDS": "60", "LAKEFS_DELTA_TASKS_TIME_LIMITS": "compute_row_diff=90",
               # a Spark job, were there one, must end within that limit: the worker refuses a config where it cannot
               "LAKEFS_DELTA_ROW_DIFF_SPARK_TIME_LIMIT_SECONDS": "60", "LAKEFS_DELTA_ROW_DIFF_SPARK_ATTEMPTS": "1"}
        processes.worker("long12a", extra_env=env)
        Celery("test", broker=redis_url).send_task("lakefs_delta.compute_row_diff", parts)
        deadline = time.monotonic() + 30
        while not lakefs_proxy.held and time.monotonic() < deadline:
            time.sleep(0.2)
        # A second worker: kombu scans for messages unacknowledged past the visibility timeout (15 s)
        # as it starts polling, then every 100 s; started past it, its first scan finds the running diff's.
        time.sleep(17)
        processes.worker("long12b", extra_env=env)
        cache, deadline = RowDiffCache(redis_url, 3600), time.monotonic() + 120
        while time.monotonic() < deadline and cache.get(*parts) is None and cache.failure(*parts) is None:
            time.sleep(0.5)
        answer, failure = cache.get(*parts), cache.failure(*parts)
        held = list(lakefs_proxy.held)

    assert failure is None and answer is not None, failure
    assert answer["counts"]["added"] == 1, answer["counts"]
    worker_logs = "".join(log.read_bytes()[start:].decode(errors="replace") for log, start in zip(logs, seen))
    assert "outcome=running-elsewhere" in worker_logs, worker_logs[-3000:]  # Redis did deliver it again
    assert len([1 for method, path in held if "_delta_log" in path]) == 1, held  # and it was computed once


def test_an_export_that_always_times_out_fails_for_good_and_catch_up_stops_queuing_it(processes, lakefs, repository,
                                                                                        stack_env, monkeypatch, capsys):
    """An export whose every attempt runs past its time limit: each catch-up run queues it again
    until its retries ran out `tasks.max_rounds` times (3); then it is `failed` for good and three
    more catch-up runs queue nothing, so its deliveries stop growing. While a round is in flight,
    catch-up leaves it to its delivery."""
    from lakefs_delta.cli import main as cli

    from exporter.state.status import StatusStore

    commit_id = tables_repository(lakefs, repository, ["events"], url="http://127.0.0.1:1/nowhere")
    with hanging_worker(processes, stack_env, 10, LAKEFS_DELTA_TASKS_TIME_LIMITS="export_table=5",
                        LAKEFS_DELTA_TASKS_RETRY_MAX_RETRIES="2") as redis_url:  # a round: 3 attempts, ~8 s
        monkeypatch.setenv("LAKEFS_DELTA_REDIS_URL", redis_url)  # the CLI's catch-up queues on that worker's queue
        status = StatusStore(redis_url)

        def catch_up() -> str:
            capsys.readouterr()
            assert cli(["catch-up", "--repo", repository]) == 0
            return capsys.readouterr().out

        def record() -> dict:
            return status.record(repository, "main", commit_id, "events") or {}

        def round_ends(rounds: int) -> dict:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and record().get("rounds", 0) < rounds:
                time.sleep(0.5)
            return record()

        queued = f"queued  {repository} main {commit_id}"  # (the install commit is queued too: it has no log)
        ends = []
        for round_number in (1, 2, 3):
            assert queued in catch_up()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and record().get("state") not in ("running", "retrying"):
                time.sleep(0.2)
            if round_number == 1:  # in flight: left to its delivery
                printed = catch_up()
                assert queued not in printed and f"busy    {repository} main {commit_id} events" in printed, printed
            ends.append(round_ends(round_number))
        attempts = status.record(repository, "main", commit_id, "events")["retries"]
        after = [catch_up() for _ in range(3)]
        time.sleep(3)
        final = record()

    assert [(e["state"], e["rounds"], e["permanent"]) for e in ends] == [
        ("failed", 1, False), ("failed", 2, False), ("failed", 3, True)], ends
    assert "timed out" in ends[-1]["reason"] and "(tasks.max_rounds)" in ends[-1]["reason"], ends[-1]
    assert all(queued not in printed and f"failed  {repository} main {commit_id} events" in printed
               for printed in after), after
    assert (final["state"], final["rounds"], final["retries"]) == ("failed", 3, attempts), final


def test_a_precomputed_diff_waits_behind_every_export_in_its_queue(processes, stack_env):
    """Redis priorities as the workers use them: a message at `BACKGROUND` (a diff precompute) queued
    first is taken after one at the default priority (an export) queued later."""
    from celery import Celery

    from workers.tasks import BACKGROUND

    redis_url = stack_env["LAKEFS_DELTA_REDIS_URL"].rsplit("/", 1)[0] + "/11"
    client = Celery("test", broker=redis_url, backend=redis_url)
    low = [client.send_task("lakefs_delta.ping", (f"low{i}",), priority=BACKGROUND) for i in range(3)]
    high = [client.send_task("lakefs_delta.ping", (f"high{i}",)) for i in range(3)]
    processes.worker("priority", ["--concurrency=1"], extra_env={"LAKEFS_DELTA_REDIS_URL": redis_url})

    done = {result.get(timeout=60): result.date_done for result in low + high}

    assert max(done[f"pong: high{i}"] for i in range(3)) < min(done[f"pong: low{i}"] for i in range(3)), done
