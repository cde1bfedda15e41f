"""lakeFS calls the service on commit, merge and tag; workers export; failures are survived.

Real lakeFS runs the installed action and POSTs to the real service; real Celery worker processes
consume from the real Redis.
"""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from exporter.config import load_config
from devtools import stack
from workers.app import configure
from lakefs_delta.client import export_status, wait_for_exports
from tests.conftest import SERVICE_ENV, SERVICE_PORT
from tests.integration.deltatables import read_version, rows, table_uri
from tests.fakes import lake_of

pytestmark = pytest.mark.integration
WEBHOOK = f"http://127.0.0.1:{SERVICE_PORT}/webhooks/lakefs"


def token() -> str:
    return os.environ["LAKEFS_DELTA_WEBHOOK_TOKENS"].split(",")[0]


def api(service: str, path: str) -> httpx.Response:
    return httpx.get(service + path, headers={"Authorization": f"Bearer {token()}"}, timeout=10)


def wait_for_export(service: str, repository: str, commit_id: str, tables: set[str], timeout: float = 120,
                    ref: str = "main") -> dict:
    return wait_for_exports(service, token(), repository, commit_id, ref, tables, timeout)


def table_status(service: str, repository: str, commit_id: str, table: str, ref: str = "main") -> dict:
    found = export_status(service, token(), repository, commit_id, ref)
    return (found or {}).get("tables", {}).get(table, {})


def wait_for_action_run(lakefs, repository: str, commit_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [r for r in lakefs.action_runs(repository, commit_id) if r["status"] in ("completed", "failed")]
        if runs:
            return runs[0]
        time.sleep(0.5)
    raise AssertionError(f"no finished action run for {commit_id}")


def setup_repository(lakefs, spark, repository: str, branches: list[str]) -> str:
    """Install the action and a descriptor, and write a small Delta table on main; returns the commit."""
    from exporter.lakefs.installer import action_files, install_actions

    install_actions(lakefs, repository, "main", action_files(WEBHOOK, branches, {"events": "tables/events"}))
    uri = table_uri(repository, "main", "tables/events")
    spark.createDataFrame([(1, "open"), (2, "close")], "id INT, kind STRING").write.format("delta").save(uri)
    return lakefs.commit_branch(repository, "main", "events table", {"pipeline": "test"})


def test_commit_merge_and_tag_are_exported_under_their_ref(service, lakefs, spark, repository):
    commit_id = setup_repository(lakefs, spark, repository, ["main", "feature-*"])

    assert wait_for_action_run(lakefs, repository, commit_id)["status"] == "completed"
    done = wait_for_export(service, repository, commit_id, {"events"})["events"]
    assert done["state"] == "done", done
    assert done["location"].endswith(f"/_lakefs/exported/main/{commit_id}/events/")
    assert rows(read_version(spark, done["location"])) == [(1, "open"), (2, "close")]

    lakefs.create_branch(repository, "feature-x", "main")
    spark.createDataFrame([(3, "reopen")], "id INT, kind STRING").write.format("delta").mode("append") \
        .save(table_uri(repository, "feature-x", "tables/events"))
    feature_commit = lakefs.commit_branch(repository, "feature-x", "reopen")
    feature = wait_for_export(service, repository, feature_commit, {"events"}, ref="feature-x")["events"]
    assert feature["location"].endswith(f"/_lakefs/exported/feature-x/{feature_commit}/events/")

    merge_commit = lakefs.merge(repository, "feature-x", "main", "merge feature-x")
    merged = wait_for_export(service, repository, merge_commit, {"events"})["events"]
    assert merged["state"] == "done" and merged["location"].endswith(f"/exported/main/{merge_commit}/events/")
    assert len(rows(read_version(spark, merged["location"]))) == 3

    tag_commit = lakefs.create_tag(repository, "v1", "main")
    tagged = wait_for_export(service, repository, tag_commit, {"events"}, timeout=60, ref="v1")
    # a tag points at an exported commit; its export is filed under the tag
    assert tagged["events"]["location"].endswith(f"/exported/v1/{tag_commit}/events/")


def test_wrong_token_is_refused_and_nothing_is_queued(service):
    event = {"event_type": "post-commit", "repository_id": "nope", "branch_id": "main", "commit_id": "a" * 64}
    for headers in ({"X-Webhook-Token": "wrong"}, {}):
        answer = httpx.post(WEBHOOK, json=event, headers=headers, timeout=10)
        assert answer.status_code == 401, answer.text
    assert api(service, f"/exports/nope/{'a' * 64}").status_code == 404
    assert httpx.get(service + f"/exports/nope/{'a' * 64}", timeout=10).status_code == 401  # API needs its token


GOOD = {"event_type": "post-commit", "event_time": "2026-01-01T00:00:00Z", "action_name": "a", "hook_id": "h",
        "repository_id": "repo", "branch_id": "main", "commit_id": "c" * 64}
MALFORMED = [
    ("not json", b"{not json", "application/json", 400),
    ("empty body", b"", "application/json", 400),
    ("json array", b"[1,2]", "application/json", 400),
    ("json string", b'"post-commit"', "application/json", 400),
    ("json null", b"null", "application/json", 400),
    ("invalid utf-8", b'{"event_type": "\xff"}', "application/json", 400),
    ("text/plain", json.dumps(GOOD).encode(), "text/plain", 415),
    ("form", b"event_type=post-commit", "application/x-www-form-urlencoded", 415),
    ("no content type", json.dumps(GOOD).encode(), "", 415),
    ("over 1 MiB", json.dumps({**GOOD, "commit_message": "x" * (1024 * 1024)}).encode(), "application/json", 413),
    ("no event_type", json.dumps({k: v for k, v in GOOD.items() if k != "event_type"}).encode(), "application/json", 422),
    ("event_type number", json.dumps({**GOOD, "event_type": 7}).encode(), "application/json", 422),
    ("empty event_type", json.dumps({**GOOD, "event_type": " "}).encode(), "application/json", 422),
    ("no repository", json.dumps({k: v for k, v in GOOD.items() if k != "repository_id"}).encode(), "application/json", 422),
    ("repository list", json.dumps({**GOOD, "repository_id": ["r"]}).encode(), "application/json", 422),
    ("no commit_id", json.dumps({k: v for k, v in GOOD.items() if k != "commit_id"}).encode(), "application/json", 422),
    ("commit_id object", json.dumps({**GOOD, "commit_id": {"id": 1}}).encode(), "application/json", 422),
    ("commit_id with slash", json.dumps({**GOOD, "commit_id": "../../etc"}).encode(), "application/json", 422),
    ("commit_id not ascii", json.dumps({**GOOD, "commit_id": "cafés"}).encode(), "application/json", 422),
    ("no branch_id", json.dumps({k: v for k, v in GOOD.items() if k != "branch_id"}).encode(), "application/json", 422),
    ("tag without tag_id", json.dumps({**GOOD, "event_type": "post-create-tag"}).encode(), "application/json", 422),
    ("merge branch null", json.dumps({**GOOD, "event_type": "post-merge", "branch_id": None}).encode(), "application/json", 422),
    ("branch with slash", json.dumps({**GOOD, "branch_id": "a/b"}).encode(), "application/json", 422),
]


@pytest.mark.parametrize("body, content_type, expected", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_events_get_a_4xx_with_a_message(service, body, content_type, expected):
    headers = {"X-Webhook-Token": token()}
    if content_type:
        headers["Content-Type"] = content_type
    answer = httpx.post(WEBHOOK, content=body, headers=headers, timeout=10)
    assert answer.status_code == expected, answer.text
    assert answer.json()["error"]
    assert httpx.get(service + "/healthz", timeout=5).status_code == 200  # still serving


def test_other_event_types_are_acknowledged_and_ignored(service):
    answer = httpx.post(WEBHOOK, json={**GOOD, "event_type": "pre-commit"}, headers={"X-Webhook-Token": token()})
    assert answer.status_code == 200 and answer.json()["status"] == "ignored"


def test_same_event_five_times_at_once_exports_once(service, lakefs, spark, repository):
    commit_id = setup_repository(lakefs, spark, repository, ["none-*"])  # the action skips main: we deliver
    event = {**GOOD, "repository_id": repository, "branch_id": "main", "commit_id": commit_id}
    with ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(lambda _: httpx.post(WEBHOOK, json=event, headers={"X-Webhook-Token": token()},
                                                      timeout=30), range(5)))
    assert [a.status_code for a in answers] == [202] * 5
    done = wait_for_export(service, repository, commit_id, {"events"})["events"]
    assert done["state"] == "done", done
    time.sleep(3)  # let the duplicate deliveries finish too
    final = table_status(service, repository, commit_id, "events")
    assert final["state"] == "done" and not final["reason"]
    metrics = httpx.get(service + "/metrics").text
    assert 'lakefs_delta_events_total{event_type="post-commit",outcome="queued"}' in metrics


def test_killed_worker_task_is_finished_by_another_worker(service, processes, lakefs, spark, repository, s3):
    commit_id = setup_repository(lakefs, spark, repository, ["none-*"])
    processes.worker("spare")  # whichever worker takes the task is killed; another one must finish it
    minio = stack._running_pid(stack.STACK_DIR, "minio")
    os.kill(minio, signal.SIGSTOP)  # freeze the object store so the export hangs mid-way
    try:
        app = configure(load_config())
        app.send_task("lakefs_delta.export_table", (repository, "main", commit_id, "events"))
        deadline, state = time.monotonic() + 60, {}
        while time.monotonic() < deadline and state.get("state") != "running":
            time.sleep(0.2)
            state = table_status(service, repository, commit_id, "events")
        assert state.get("state") == "running", state
        running = time.monotonic()
        node = state["worker"].split("@")[0]
        processes.kill_worker(node)
    finally:
        os.kill(minio, signal.SIGCONT)
    # kombu hands a message unacknowledged past the visibility timeout back to the queue when a worker
    # starts polling, then every 100 s: the workers alive now started before it passed (the killed
    # one's replacement at once), so one started past it does, instead of the next scan (the test
    # took 30-118 s by when that fell)
    visibility_timeout = int(SERVICE_ENV["LAKEFS_DELTA_TASKS_VISIBILITY_TIMEOUT_SECONDS"])
    time.sleep(max(0.0, running + visibility_timeout + 1 - time.monotonic()))
    processes.worker("late")
    done = wait_for_export(service, repository, commit_id, {"events"}, timeout=180)["events"]
    assert done["state"] == "done", done
    assert done["worker"].split("@")[0] != node
    bucket, _, key = done["location"].removeprefix("s3://").partition("/")
    assert s3.list_objects_v2(Bucket=bucket, Prefix=key + "_lakefs_export.json")["KeyCount"] == 1


def wait_until_idle(timeout: float = 60) -> None:
    """Until no worker runs or holds a task (Celery's own inspection, through the broker)."""
    inspect = configure(load_config()).control.inspect(timeout=1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = [t for answer in (inspect.active() or {}, inspect.reserved() or {}) for tasks in answer.values() for t in tasks]
        if not busy:
            return
        time.sleep(0.2)
    raise AssertionError(f"workers still busy after {timeout} s")


def test_redis_outage_answers_503_and_catch_up_exports_the_missed_commit(service, processes, lakefs, spark, repository,
                                                                         s3):
    from exporter.export.commit import missing_exports

    commit_id = setup_repository(lakefs, spark, repository, ["main"])
    wait_for_export(service, repository, commit_id, {"events"})
    wait_until_idle()  # the export's follow-up tasks (its diff) finished: Redis stops between tasks, not under one
    stack.stop_service("redis")
    try:
        spark.createDataFrame([(9, "lost")], "id INT, kind STRING").write.format("delta").mode("append") \
            .save(table_uri(repository, "main", "tables/events"))
        missed = lakefs.commit_branch(repository, "main", "commit while the queue is down")
        run = wait_for_action_run(lakefs, repository, missed)
        assert run["status"] == "failed"  # lakeFS got the 503 and recorded it
        direct = httpx.post(WEBHOOK, json={**GOOD, "repository_id": repository, "commit_id": missed},
                            headers={"X-Webhook-Token": token()}, timeout=30)
        assert direct.status_code == 503, direct.text
    finally:
        stack.up()
        processes.revive()  # as the workers' supervisor would
    config = load_config()
    assert missing_exports(lake_of(config, lakefs), repository, "main", missed).missing == ["events"]

    from lakefs_delta.cli import main as cli

    assert cli(["catch-up", "--repo", repository]) == 0
    done = wait_for_export(service, repository, missed, {"events"}, timeout=120)["events"]
    assert done["state"] == "done", done
    assert missing_exports(lake_of(config, lakefs), repository, "main", missed).missing == []


def test_lakefs_outage_mid_task_is_retried_until_it_succeeds(service, lakefs, spark, repository):
    commit_id = setup_repository(lakefs, spark, repository, ["none-*"])
    app = configure(load_config())
    stack.stop_service("lakefs")
    try:
        app.send_task("lakefs_delta.export_table", (repository, "main", commit_id, "events"))
        deadline = time.monotonic() + 60
        state = {}
        while time.monotonic() < deadline:
            state = table_status(service, repository, commit_id, "events") \
                if api(service, f"/exports/{repository}/{commit_id}").status_code == 200 else {}
            if state.get("state") == "retrying":
                break
            time.sleep(0.3)
        assert state.get("state") == "retrying", state
        assert "lakeFS" in state["reason"]
    finally:
        stack.up()
    done = wait_for_export(service, repository, commit_id, {"events"}, timeout=120)["events"]
    assert done["state"] == "done" and done["retries"] >= 1, done


def test_health_readiness_and_openapi(service):
    assert httpx.get(service + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(service + "/readyz", timeout=10)
    assert ready.status_code == 200 and ready.json()["checks"] == {"redis": True, "lakefs": True}
    spec = httpx.get(service + "/openapi.json").json()
    assert {"/webhooks/lakefs", "/exports/{repository}/{commit}",
            "/repositories/{repository}/otf/refs/{left_ref}/diff/{right_ref}"} <= set(spec["paths"])
