"""The Spark job's runner (`exporter.diff.rows.spark.run_job`): its own time budget, no job left
running whatever stops the caller, and progress counted over every Spark job it ran. The job
itself is a stand-in process here (a real one runs in tests/integration/test_row_diff.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from exporter.config import Config
from exporter.diff.rows import spark as rows_spark
from exporter.diff.rows.spark import SparkJobTimedOut, progress_line, run_job

pytestmark = pytest.mark.unit

SLEEPER = "import time; print('PROGRESS {\"engine\": \"spark\", \"phase\": \"reading\"}', flush=True); time.sleep(60)"


@pytest.fixture
def started(monkeypatch) -> list[subprocess.Popen]:
    """Each job run_job starts is a process that reports once and then sleeps a minute."""
    jobs: list[subprocess.Popen] = []
    popen = subprocess.Popen

    def stand_in(args, **kwargs):
        jobs.append(popen([sys.executable, "-c", SLEEPER], **kwargs))
        return jobs[-1]

    monkeypatch.setattr(rows_spark.subprocess, "Popen", stand_in)
    return jobs


def budget(seconds: float) -> Config:
    config = Config(row_diff={"spark": {"master": "local[1]"}})
    spark = config.row_diff.spark.model_copy(update={"time_limit_seconds": seconds})  # below the 60 s floor
    return config.model_copy(update={"row_diff": config.row_diff.model_copy(update={"spark": spark})})


def test_a_job_past_its_budget_is_stopped_and_fails_for_good_with_the_budget(started):
    seen = []
    begun = time.monotonic()
    with pytest.raises(SparkJobTimedOut, match=r"time budget \(1 s: row_diff.spark.time_limit_seconds\)") as caught:
        run_job(budget(1), None, {}, "rows", progress=seen.append)
    assert time.monotonic() - begun < 20
    assert caught.value.permanent
    assert started[0].poll() is not None  # stopped
    assert seen[0] == {"engine": "spark", "phase": "starting"} and seen[1]["phase"] == "reading"


def test_whatever_stops_the_caller_no_job_is_left_running(started):
    class Stopped(Exception):
        pass

    def stop(_):  # as the task's soft time limit raises in the caller while the job runs
        raise Stopped()

    with pytest.raises(Stopped):
        run_job(budget(600), None, {}, "rows", progress=stop)
    assert started[0].poll() is not None


def test_progress_counts_every_spark_job_not_only_the_stages_running_now():
    stage = lambda done, tasks: SimpleNamespace(numCompletedTasks=done, numTasks=tasks)  # noqa: E731
    stages = {1: stage(8, 8), 2: stage(8, 8), 3: stage(3, 200), 4: stage(0, 50)}  # 4: skipped, never run
    jobs = [SimpleNamespace(stageIds=[1, 2], status="SUCCEEDED"), SimpleNamespace(stageIds=[4], status="SUCCEEDED"),
            SimpleNamespace(stageIds=[3], status="RUNNING")]
    tracker = SimpleNamespace(getJobIdsForGroup=lambda group: [0, 1, 2], getJobInfo=jobs.__getitem__,
                              getStageInfo=stages.get, getActiveStageIds=lambda: [3])
    assert progress_line(tracker, "reading", 12.4, {}) == {
        "engine": "spark", "phase": "reading", "seconds": 12, "active_stages": 1, "stages": 3, "stages_done": 2,
        "tasks": 216, "tasks_done": 19}


def test_a_stage_a_later_spark_job_reuses_keeps_what_it_did():
    """A Spark job may list a stage an earlier one ran, and Spark's status store may then show that
    stage afresh (0 tasks done, then skipped): the count never goes back."""
    stage = lambda done, tasks: SimpleNamespace(numCompletedTasks=done, numTasks=tasks)  # noqa: E731
    stages = {1: stage(8, 8)}
    jobs = [SimpleNamespace(stageIds=[1], status="SUCCEEDED")]
    tracker = SimpleNamespace(getJobIdsForGroup=lambda group: list(range(len(jobs))), getJobInfo=jobs.__getitem__,
                              getStageInfo=stages.get, getActiveStageIds=lambda: [])
    ran: dict = {}
    first = progress_line(tracker, "reading", 1, ran)
    jobs.append(SimpleNamespace(stageIds=[1, 2], status="RUNNING"))  # stage 1 reused, shown afresh
    stages.update({1: stage(0, 8), 2: stage(1, 2)})
    second = progress_line(tracker, "reading", 2, ran)
    jobs[1].status = "SUCCEEDED"
    stages.update({2: stage(2, 2)})
    third = progress_line(tracker, "reading", 3, ran)
    assert [line["tasks_done"] for line in (first, second, third)] == [8, 9, 10]
    assert (third["stages"], third["stages_done"], third["tasks"]) == (2, 2, 10)


@pytest.mark.parametrize("exit_with, runs, reason", [
    ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 2, r"died 2 time\(s\) \(row_diff.spark.attempts: 2\)"),
    ("import sys; sys.stderr.write('py4j.protocol.Py4JNetworkError: Answer from Java side is empty'); sys.exit(1)", 2,
     r"died 2 time\(s\).*Py4JNetworkError"),
    ("import sys; sys.stderr.write('AnalysisException: no column x'); sys.exit(1)", 1,
     r"exited with 1: AnalysisException: no column x"),
    # the JVM said it ran out of memory before the Python traceback, whose exception does not say so
    ("import sys; sys.stderr.write('java.lang.OutOfMemoryError: Java heap space\\nTraceback (most recent call last):\\n"
     "  File \\'job.py\\', line 1\\npy4j.protocol.Py4JError: An error occurred while calling o9.collect\\n'); sys.exit(1)", 2,
     r"died 2 time\(s\).*Py4JError: An error occurred while calling o9.collect"),
])
def test_a_job_whose_jvm_died_runs_again_as_many_times_as_its_attempts_and_one_that_failed_does_not(
        monkeypatch, exit_with, runs, reason):
    """Issue 50: a job killed (a signal) or whose driver lost its JVM runs again from nothing, twice
    in all by default; then the diff fails for good with the reason. Any other failure would recur:
    it fails at once, never looping."""
    popen, jobs = subprocess.Popen, []
    monkeypatch.setattr(rows_spark.subprocess, "Popen",
                        lambda args, **kwargs: jobs.append(popen([sys.executable, "-c", exit_with], **kwargs)) or jobs[-1])
    seen = []
    with pytest.raises(rows_spark.SparkJobFailed, match=reason) as caught:
        run_job(Config(row_diff={"spark": {"master": "local[1]"}}), None, {}, "rows", progress=seen.append)
    assert caught.value.permanent and len(jobs) == runs
    assert [p for p in seen if p["phase"] == "starting"] == [{"engine": "spark", "phase": "starting"},
                                                             {"engine": "spark", "phase": "starting", "attempt": 2}][:runs]


def test_the_jobs_partitions_follow_the_rows_it_reads():
    """8 for a small diff (each task more is overhead), one per 50,000 rows above (the driver holds one
    partition of the answer at a time: 6M rows read, 120), at most 2,000; 200 when not counted."""
    assert [rows_spark.shuffle_partitions(rows) for rows in (1000, 400_000, 6_000_000, 10**9, None)] == \
        [8, 8, 120, 2000, 200]


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]"])
def test_local_jars_go_on_the_drivers_class_path_in_local_mode(master):
    assert rows_spark.jar_settings(master, "/ivy/a.jar,/ivy/b.jar") == {"spark.driver.extraClassPath": "/ivy/a.jar:/ivy/b.jar"}


@pytest.mark.parametrize("master, jars", [("spark://127.0.0.1:7077", "/ivy/a.jar,/ivy/b.jar"),
                                          ("yarn", "/ivy/a.jar"),
                                          ("local[2]", "/ivy/a.jar,https://repo.example/b.jar")])
def test_jars_for_a_cluster_or_given_as_urls_stay_spark_jars(master, jars):
    assert rows_spark.jar_settings(master, jars) == {"spark.jars": jars}


def test_a_failed_jobs_reason_is_its_python_exception_not_the_jvms_shutdown_traces_after_it():
    """CI, 2026-12-02: a job exited with 1 and the message held only the last 15 lines, Spark's
    shutdown hook's NullPointerException (printed once Python had exited), not why it failed."""
    errors = ["26/12/02 04:30:01 WARN NativeCodeLoader: Unable to load native-hadoop library\n",
              "Traceback (most recent call last):\n", '  File "<frozen runpy>", line 198, in _run_module_as_main\n',
              '  File "/x/exporter/diff/rows/spark.py", line 230, in _job\n', "    rows = spark.read.parquet(path)\n",
              "           ^^^^^^^^^^^^^^^^^^^^^^^^\n",
              "py4j.protocol.Py4JJavaError: An error occurred while calling o52.parquet.\n",
              ": java.io.FileNotFoundException: No such file or directory: s3a://bucket/a.parquet\n",
              "\tat org.apache.hadoop.fs.s3a.S3AFileSystem.s3GetFileStatus(S3AFileSystem.java:3866)\n",
              *["\tat org.apache.spark.util.SparkShutdownHookManager.runAll(ShutdownHookManager.scala:205)\n"] * 20,
              'Caused by: java.lang.NullPointerException: Cannot invoke "org.apache.spark.SparkEnv.conf()"\n']
    reason = rows_spark.failure(errors)
    assert reason.startswith("py4j.protocol.Py4JJavaError: An error occurred while calling o52.parquet.")
    assert "FileNotFoundException: No such file or directory: s3a://bucket/a.parquet" in reason
    assert "SparkEnv" not in reason


def test_a_failed_job_without_a_traceback_is_told_by_its_last_lines():
    errors = [f"line {n}\n" for n in range(40)]
    assert rows_spark.failure(errors) == "".join(errors[-15:]).strip()


def _parquet(table, spark_schema: bytes | None = None) -> bytes:
    import io

    import pyarrow.parquet as pq

    if spark_schema is not None:
        table = table.replace_schema_metadata({b"org.apache.spark.sql.parquet.row.metadata": spark_schema})
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def test_files_are_grouped_by_the_schema_spark_would_infer_from_their_footers():
    """One Spark schema inference per distinct footer, not per file: files whose parquet schema and
    stored Spark schema are the same share a number; a type, a name or a Spark schema apart do not."""
    import pyarrow as pa

    from exporter.diff.rows.spark import schema_groups
    from tests.fakes import MemoryStore

    ints = pa.table({"id": pa.array([1, 2], pa.int32()), "name": ["a", "b"]})
    bodies = {"a": _parquet(ints), "b": _parquet(ints.slice(1)), "widened": _parquet(ints.cast(pa.schema(
        [("id", pa.int64()), ("name", pa.string())]))), "renamed": _parquet(ints.rename_columns(["key", "name"])),
        "written by spark": _parquet(ints, b'{"type":"struct","fields":[]}'), "c": _parquet(ints)}
    store = MemoryStore({f"s3://bucket/t/{name}.parquet": body for name, body in bodies.items()})
    files = [{"address": f"s3://bucket/t/{name}.parquet", "path": f"{name}.parquet", "size": len(body), "side": "added"}
             for name, body in bodies.items()]

    grouped = schema_groups(store, files)

    assert [entry["schema"] for entry in grouped] == [0, 0, 1, 2, 3, 0]
    assert [{k: v for k, v in entry.items() if k != "schema"} for entry in grouped] == files  # the rest as planned
