"""Load: many commits arriving at once, each changing several tables, with 2 workers.

Measures what a user of the service sees: how fast lakeFS's webhook calls are answered (from
lakeFS's own hook run records), how long from a commit to its complete export (every changed
table `done`), exports per minute, and that nothing is lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx

from bench.measure import cpu_seconds, cpu_used, own_redis_database, peak_rss_mib, percentile
from bench.synthetic import METADATA, PROTOCOL, build_table, gateway_client, new_repository, running_stack
from exporter.state.status import COMMIT_RECORD, StatusStore

ROOT = Path(__file__).resolve().parent.parent
PORT = 18090  # not the demo's 18080, so a running demo does not take the events
TABLES = 3
DATABASE = 14  # Redis: the service's and workers' own database, emptied before each benchmark


def start_processes(env: dict[str, str], workers: int, concurrency: int = 1) -> list[subprocess.Popen]:
    logs = ROOT / "bench" / "results"
    logs.mkdir(exist_ok=True)
    started = [subprocess.Popen([sys.executable, "-m", "lakefs_delta.cli", "serve", "--port", str(PORT)], cwd=ROOT, env=env,
                                stdout=open(logs / "bench-service.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True)]
    for i in range(workers):
        started.append(subprocess.Popen([sys.executable, "-m", "lakefs_delta.cli", "worker", f"--concurrency={concurrency}", "--no-beat",
                                         "--name", f"bench{i}-{uuid.uuid4().hex[:4]}@%h"], cwd=ROOT, env=env,
                                        stdout=open(logs / f"bench-worker{i}.log", "ab"), stderr=subprocess.STDOUT,
                                        start_new_session=True))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{PORT}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        raise RuntimeError("bench service did not start; see bench/results/bench-service.log")
    if workers:
        wait_workers_ready(env["LAKEFS_DELTA_REDIS_URL"], workers, deadline + 30)
    return started


def wait_workers_ready(redis_url: str, workers: int, deadline: float) -> None:
    """Until every worker answers a ping: the load measured is the storm's, not the workers' start
    (3 s of imports each, on the cores the storm uses)."""
    from celery import Celery

    control = Celery("bench", broker=redis_url).control
    while time.monotonic() < deadline:
        if len(control.ping(timeout=1, limit=workers)) >= workers:  # back at the last reply, not after the second
            return
    raise RuntimeError(f"{workers} worker(s) did not answer a ping; see bench/results/bench-worker*.log")


@contextmanager
def service_client(timeout: float = 60) -> Iterator[httpx.Client]:
    """The service alone (its own process, no workers) and a client of it holding the stack's service
    token, as an automated caller asks; the service is stopped when the block ends."""
    token = os.environ["LAKEFS_DELTA_API_TOKENS"].split("=", 1)[0]
    processes = start_processes(dict(os.environ), workers=0)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", headers={"Authorization": f"Bearer {token}"},
                          timeout=timeout) as client:
            yield client
    finally:
        stop_processes(processes)


def stop_processes(processes: list[subprocess.Popen]) -> None:
    import signal

    for process in processes:
        os.killpg(process.pid, signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:  # a warm shutdown that hangs must not cost the run its figures
            print(f"process {process.pid} still running 30 s after SIGTERM: killed", flush=True)
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def seed_tables(lakefs, repository: str) -> None:
    for t in range(TABLES):
        lakefs.upload_object(repository, "main", f"tables/t{t}/_delta_log/{0:020d}.json",
                             (json.dumps({"commitInfo": {"operation": "CREATE TABLE"}}) + "\n" + json.dumps(PROTOCOL)
                              + "\n" + json.dumps(METADATA) + "\n").encode())
        lakefs.upload_object(repository, "main", f"_lakefs_tables/t{t}.yaml", f"name: t{t}\ntype: delta\npath: tables/t{t}\n".encode())


def commit_on_branch(lakefs, repository: str, branch: str, commits: int, version_start: int) -> list[tuple[str, float]]:
    """`commits` commits on one branch, each appending one Delta version with one data file to every table."""
    made = []
    for i in range(commits):
        version = version_start + i
        for t in range(TABLES):
            name = f"part-{branch}-{version:05d}.parquet"
            lakefs.upload_object(repository, branch, f"tables/t{t}/{name}", b"x")
            # with its row count, as Spark and delta-rs write stats (without, readers' metadata reads each file's footer)
            add = {"add": {"path": name, "partitionValues": {}, "size": 1, "modificationTime": 0, "dataChange": True,
                           "stats": json.dumps({"numRecords": 1})}}
            lakefs.upload_object(repository, branch, f"tables/t{t}/_delta_log/{version:020d}.json",
                                 (json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + json.dumps(add) + "\n").encode())
        made.append((lakefs.commit_branch(repository, branch, f"{branch} {version}"), time.time()))
    return made


def bench_commit_storm(commits: int = 200, branches: int = 20, workers: int = 2, concurrency: int | None = None,
                       iceberg: bool = False, same_task: bool = False) -> list[dict]:
    """`concurrency`: processes per worker, by default what a worker runs as shipped (`workers.concurrency`);
    `iceberg`: the service and workers run with `iceberg.enabled` (each export's Iceberg table written
    too), else with it off, whatever the default; `same_task`: `iceberg.same_task` (a light Iceberg
    table in the export's own task), else each by a task of its own, behind the exports waiting."""
    from exporter.config.sections import WorkersConfig
    from exporter.lakefs.installer import action_files, install_actions

    concurrency = concurrency or WorkersConfig().concurrency

    branches = max(1, min(branches, commits))  # a small storm (the CI smoke) still commits
    state, _, lakefs = running_stack()
    redis_url = own_redis_database(state.redis_url, DATABASE)  # no diffs an earlier run left queued
    env = {**os.environ, **state.environment(), "LAKEFS_DELTA_REDIS_URL": redis_url,
           "LAKEFS_DELTA_ICEBERG_ENABLED": "true" if iceberg else "false",
           "LAKEFS_DELTA_ICEBERG_SAME_TASK": "true" if same_task else "false"}
    setting = (ICEBERG_ON + (", iceberg.same_task" if same_task else "")) if iceberg else \
        ", iceberg.enabled off"
    repository = new_repository(lakefs, "bench-storm")
    seed_tables(lakefs, repository)
    install_actions(lakefs, repository, "main", action_files(f"http://127.0.0.1:{PORT}/webhooks/lakefs", ["storm-*"], {}))
    for b in range(branches):
        lakefs.create_branch(repository, f"storm-{b}", "main")
    per_branch = commits // branches
    alone = commits_alone_cpu(lakefs, branches, per_branch)
    processes = start_processes(env, workers, concurrency)
    try:
        print(f"{commits} commits on {branches} branches, {TABLES} tables each, {workers} workers "
              f"x {concurrency} processes ...", flush=True)
        cpu_before, started = cpu_seconds(), time.time()
        with ThreadPoolExecutor(branches) as pool:
            made = [c for batch in pool.map(lambda b: commit_on_branch(lakefs, repository, f"storm-{b}", per_branch, 1),
                                             range(branches)) for c in batch]
        committed = time.time()
        done_at = wait_all_exported(redis_url, repository, made)
        iceberg_at = wait_all_exported(redis_url, repository, made, iceberg=True) if iceberg else {}
        cpu, cpu_wall = cpu_used(cpu_before, cpu_seconds()), time.time() - started
    finally:
        stop_processes(processes)
    latencies = [done_at[c] - t for c, t in made if c in done_at]
    answers = hook_answer_seconds(lakefs, repository, [c for c, _ in made])
    finished = max(done_at.values()) if done_at else time.time()
    lost = len(made) - len(done_at)
    per_minute = len(done_at) * TABLES / ((finished - started) / 60)
    rows = [
        {"benchmark": f"webhook answer p50 ({len(answers)} hook runs)", "seconds": percentile(answers, 0.5)},
        {"benchmark": "webhook answer p99", "seconds": percentile(answers, 0.99)},
        {"benchmark": f"commit to complete export p50 ({TABLES} tables/commit, {workers} workers x {concurrency} "
                      f"processes{setting})", "seconds": percentile(latencies, 0.5),
         "target": ("≤ 6 s", percentile(latencies, 0.5) <= 6)},
        {"benchmark": f"commit to complete export p99 ({workers} workers x {concurrency} processes{setting})",
         "seconds": percentile(latencies, 0.99), "storm_latencies": latencies,
         "target": ("≤ 12 s", percentile(latencies, 0.99) <= 12)},
        {"benchmark": "commit to complete export, distribution: p10 / p25 / p50 / p75 / p90 / max "
                      + " / ".join(f"{percentile(latencies, q):.1f}" for q in (0.1, 0.25, 0.5, 0.75, 0.9))
                      + f" / {max(latencies, default=0):.1f} s{setting}", "seconds": percentile(latencies, 0.75)},
        {"benchmark": f"{len(made)} commits made in (client side)", "seconds": committed - started},
        {"benchmark": f"table exports per minute ({len(done_at) * TABLES} exports, {lost} commits lost{setting})",
         "seconds": finished - started, "files_per_s": per_minute,
         "target": ("≥ 2,500 a minute, none lost", not lost and per_minute >= 2500),
         "storm_groups": StormGroups(workers, per_minute, cores_busy(cpu, cpu_wall), setting)},
    ]
    rows += cpu_rows(cpu, alone, len(made), cpu_wall, setting)
    if iceberg:  # by a task of its own after each export, behind the exports waiting (or, same_task, in the export's)
        iceberg_latencies = [iceberg_at[c] - t for c, t in made if c in iceberg_at]
        # the storm's work is done no sooner than its CPU over the cores, and the last commit came when
        # the commits were made: the floor of the latest commit's wait on these cores, however it is scheduled
        window = committed - started
        floor = sum(cpu.values()) / (os.cpu_count() or 1) - window
        rows.append({"benchmark": "commit to its Iceberg tables, p50 / p99 / max "
                                  + " / ".join(f"{percentile(iceberg_latencies, q):.1f}" for q in (0.5, 0.99))
                                  + f" / {max(iceberg_latencies, default=0):.1f} s ({len(made) - len(iceberg_at)} "
                                  f"commits without; {workers} workers); the latest commit's no sooner than "
                                  f"{floor:.1f} s: the storm's CPU over {os.cpu_count()} cores less the {window:.1f} s "
                                  "its commits took", "seconds": percentile(iceberg_latencies, 0.5),
                     "target": ("p99 ≤ 15 s, none without" + (f" (the latest's floor {floor:.1f} s)" if floor > 15 else ""),
                                len(iceberg_at) == len(made) and percentile(iceberg_latencies, 0.99) <= 15)})
    for row in rows:
        row.setdefault("files_per_s", 0)
        row.update(lakefs_calls="-", peak_rss_mib=peak_rss_mib())
    return rows


@dataclass(frozen=True)
class StormGroups:
    """What one storm's run says of its worker groups: their number, the exports a minute they gave,
    how busy the machine's cores were, and the run's setting (`iceberg.enabled`, ...)."""

    workers: int
    per_minute: float
    busy: float  # the storm's CPU over its wall time and the cores
    setting: str


ICEBERG_ON = ", iceberg.enabled"  # the setting of a storm with Iceberg on, each table by a task of its own


def iceberg_storms(rows: list[dict]) -> list[StormGroups]:
    """The storms among `rows` with Iceberg on (as shipped), by worker groups."""
    return sorted((row["storm_groups"] for row in rows if "storm_groups" in row
                   and row["storm_groups"].setting == ICEBERG_ON), key=lambda run: run.workers)


def worker_groups_row(runs: list[StormGroups]) -> dict | None:
    """The storms side by side by worker groups (one more group: one more worker host, its own
    `--name`, the same Redis), on this machine's cores; None with fewer than two group counts."""
    runs = sorted(runs, key=lambda run: run.workers)
    if len({run.workers for run in runs}) < 2:
        return None
    listed = ", ".join(f"{run.workers} {'group' if run.workers == 1 else 'groups'} {run.per_minute:,.0f} "
                       f"({100 * run.busy:.0f}% of the cores busy)" for run in runs)
    fewest, most = runs[0], runs[-1]
    return {"benchmark": f"table exports a minute by worker groups on the same {os.cpu_count()} cores{runs[0].setting}: "
                         f"{listed}: a group more adds exports while the cores have room, none once they are busy",
            "seconds": 0, "files_per_s": most.per_minute, "lakefs_calls": "-", "peak_rss_mib": peak_rss_mib(),
            "target": ("grows with workers until the cores are busy", most.per_minute > fewest.per_minute)}


def commits_alone_cpu(lakefs, branches: int, per_branch: int) -> dict[str, float]:
    """CPU seconds the storm's commits cost the stack with nothing exporting them: the same commits
    on a repository with no actions. What is left of a storm's CPU is the exports' own."""
    repository = new_repository(lakefs, "bench-storm-alone")
    seed_tables(lakefs, repository)
    for b in range(branches):
        lakefs.create_branch(repository, f"storm-{b}", "main")
    before = cpu_seconds()
    with ThreadPoolExecutor(branches) as pool:
        list(pool.map(lambda b: commit_on_branch(lakefs, repository, f"storm-{b}", per_branch, 1), range(branches)))
    return cpu_used(before, cpu_seconds())


def cpu_rows(storm: dict[str, float], alone: dict[str, float], commits: int, seconds: float, setting: str) -> list[dict]:
    """Where a storm's CPU went, a table export's share of each part of the stack, and the exports a
    minute the machine's cores could give at that cost were they busy with nothing else."""
    exports = commits * TABLES
    parts = ("lakeFS", "MinIO", "Redis", "webhook service", "workers", "bench client", "other")
    own = {p: storm.get(p, 0.0) - alone.get(p, 0.0) for p in parts}
    total, export_cost = sum(storm.values()), sum(own.values())
    cores = os.cpu_count() or 1

    def listed(used: dict[str, float], per: int) -> str:
        return ", ".join(f"{p} {1000 * used.get(p, 0.0) / per:.0f}" for p in parts if abs(used.get(p, 0.0)) >= 0.005)

    ceiling = cores * 60 / (export_cost / exports) if export_cost > 0 else 0
    return [
        {"benchmark": f"storm CPU: {total:.0f} s over {seconds:.0f} s ({100 * cores_busy(storm, seconds):.0f}% of "
                      f"{cores} cores){setting}; ms a table export: {listed(storm, exports)}", "seconds": total},
        {"benchmark": f"the same commits with no actions (their own cost): ms a table commit: {listed(alone, exports)}",
         "seconds": sum(alone.values())},
        {"benchmark": f"a table export's own CPU (storm less the commits alone): {1000 * export_cost / exports:.0f} ms "
                      f"({listed(own, exports)}): at most {ceiling:,.0f} exports a minute on {cores} cores{setting}",
         "seconds": export_cost / exports, "files_per_s": ceiling,
         "target": ("room for ≥ 2,500 a minute", ceiling >= 2500)},
        one_more_worker_host(own, exports, cores, setting),
    ]


def cores_busy(cpu: dict[str, float], seconds: float) -> float:
    """How busy the machine's cores were: the CPU seconds used over `seconds` of wall time on them all."""
    return sum(cpu.values()) / (seconds * (os.cpu_count() or 1))


def one_more_worker_host(own: dict[str, float], exports: int, cores: int, setting: str) -> dict:
    """Projected, not measured (one machine here): the exports a minute with one more worker host of as
    many cores. The workers' CPU an export can run on either host; the rest (lakeFS, MinIO, Redis, the
    webhook service, any other process of the machine) stays on these cores. Both hosts busy: twice the
    cores over the export's CPU, at most what these cores give the rest alone."""
    workers = own.get("workers", 0.0) / exports
    services = sum(used for part, used in own.items() if part not in ("workers", "bench client")) / exports
    if workers + services <= 0:
        return {"benchmark": "one more worker host: nothing measured", "seconds": 0}
    one_host = cores * 60 / (workers + services)
    two_hosts = min(2 * cores * 60 / (workers + services), cores * 60 / services if services > 0 else float("inf"))
    return {"benchmark": f"one more worker host of {cores} cores, projected from this storm's CPU (one machine "
                         f"here): the workers' {1000 * workers:.0f} ms an export shared with it, the rest's "
                         f"{1000 * services:.0f} ms (lakeFS, MinIO, Redis, the service, any other process) kept on "
                         f"these cores: at most {two_hosts:,.0f} "
                         f"exports a minute where one host gives at most {one_host:,.0f}{setting}",
            "seconds": workers + services, "files_per_s": two_hosts}


def bench_idle_latency(files: int = 1_000, samples: int = 7) -> list[dict]:
    """On an idle stack: a commit to a 1,000-file table, to its complete export, one commit at a time."""
    from exporter.lakefs.installer import action_files, install_actions

    state, _, lakefs = running_stack()
    redis_url = own_redis_database(state.redis_url, DATABASE)
    env = {**os.environ, **state.environment(), "LAKEFS_DELTA_REDIS_URL": redis_url}
    repository = new_repository(lakefs, "bench-idle")
    gateway = gateway_client(state)
    build_table(lakefs, gateway, repository, files)
    install_actions(lakefs, repository, "main", action_files(f"http://127.0.0.1:{PORT}/webhooks/lakefs", ["main"], {}))
    processes = start_processes(env, 2)
    latencies = []
    try:
        for i in range(samples + 1):  # the first is a warm-up (workers connecting), not counted
            version = 52 + i  # build_table wrote versions 0..51
            name = f"part-idle-{i}.parquet"
            lakefs.upload_object(repository, "main", f"tables/t{files}/{name}", b"x")
            # with its row count, as Spark and delta-rs write stats (without, readers' metadata reads each file's footer)
            add = {"add": {"path": name, "partitionValues": {}, "size": 1, "modificationTime": 0, "dataChange": True,
                           "stats": json.dumps({"numRecords": 1})}}
            lakefs.upload_object(repository, "main", f"tables/t{files}/_delta_log/{version:020d}.json",
                                 (json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + json.dumps(add) + "\n").encode())
            started = time.time()
            commit_id = lakefs.commit_branch(repository, "main", f"idle {i}")
            done = wait_all_exported(redis_url, repository, [(commit_id, started)], tables=1)
            if i:
                latencies.append(done[commit_id] - started)
    finally:
        stop_processes(processes)
    return [{"benchmark": f"idle stack: commit to complete export p50 ({files:,}-file table, {samples} commits)",
             "seconds": percentile(latencies, 0.5), "files_per_s": 0, "lakefs_calls": "-", "peak_rss_mib": peak_rss_mib()},
            {"benchmark": "idle stack: commit to complete export max", "seconds": max(latencies), "files_per_s": 0,
             "lakefs_calls": "-", "peak_rss_mib": peak_rss_mib()}]


def wait_all_exported(redis_url: str, repository: str, made: list[tuple[str, float]], timeout: float = 900,
                      tables: int = TABLES, iceberg: bool = False) -> dict[str, float]:
    """commit id -> time its last table export was done (the record's `updated_at`, written by the
    worker, so how often this looks does not change the figure); with `iceberg`, the time its last
    table's Iceberg table was recorded (`iceberg.recorded_at`, written or failed).

    The records are read from Redis, all pending commits in one round trip a second: asking the
    HTTP API for each pending commit took a quarter of this 2-core machine from the workers."""
    def done_at(record: dict) -> float | None:
        if record["state"] != "done":
            return None
        if not iceberg:
            return record["updated_at"]
        return (record.get("iceberg") or {}).get("recorded_at")

    status = StatusStore(redis_url)
    pending, finished = [c for c, _ in made], {}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for commit_id, records in zip(list(pending), status.tables_of_commits(repository, pending)):
            # each commit here is on one branch: its tables, whichever ref
            times = [done_at(r) for ref in records.values() for t, r in ref.items() if t != COMMIT_RECORD]
            if len(times) == tables and None not in times:
                finished[commit_id] = max(times)
                pending.remove(commit_id)
        time.sleep(0.2 if len(pending) < 5 else 1)
    return finished


def hook_answer_seconds(lakefs, repository: str, commit_ids: list[str]) -> list[float]:
    """The webhook hook's duration as lakeFS recorded it (its call to this service)."""
    seconds = []
    for commit_id in commit_ids:
        for run in lakefs.action_runs(repository, commit_id):
            for hook in lakefs.hook_runs(repository, run["run_id"]):
                if hook.get("start_time") and hook.get("end_time"):
                    seconds.append(_time(hook["end_time"]) - _time(hook["start_time"]))
    return seconds


def _time(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
