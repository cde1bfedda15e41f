"""The row diff as a Spark job, for differing data above `row_diff.max_bytes`.

`row_diff.compute_row_diff` decides what differs (which files, and which rows of each by their
deletion vectors) and hands that plan to this job, run as its own process with PySpark
(`python -m exporter.diff.rows.spark PLAN SUMMARY ROWS`, master `row_diff.spark.master`). The job
reads those rows by `_metadata.row_index`, cancels equal rows as multisets over the common columns
(per group: the first min(removed, added) of each side), pairs updates by key, and streams the
result to the rows file (`exporter.diff.rows.file`), which the caller uploads next to the exports:
the API pages from it. It prints `PROGRESS {...}` lines (Spark's status tracker)
while it runs. Object-store credentials reach it through the environment, never through files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from exporter.config import Config
from exporter.diff.rows.file import ROWS_PER_GROUP, upload_rows, write_rows
from exporter.errors import ExporterError
from exporter.parquet.splice import open_parquet
from exporter.storage.objectstore import ObjectSource, ObjectStore
from exporter.threads import prefetched


class SparkJobFailed(ExporterError):
    """The Spark job exited with an error (its last lines are the message): for good, once its JVM
    died `row_diff.spark.attempts` times, or at once when it failed otherwise (it would again)."""


# What a Python driver prints when its JVM died under it (killed, out of memory, a lost gateway)
_JVM_DIED = ("Py4JNetworkError", "Answer from Java side is empty", "Connection refused",
             "java.lang.OutOfMemoryError", "SparkContext was shut down", "Error while receiving")


class SparkJobTimedOut(ExporterError):
    """The Spark job ran past `row_diff.spark.time_limit_seconds`: stopped, and not started again."""


def run_job(config: Config, store: ObjectStore, plan: dict, rows_location: str | None,
            progress: Callable[[dict], None] | None = None) -> dict:
    """Run the job on `plan`; upload its rows to `rows_location` (relative to the namespace) and
    return its summary (counts, partitions, per-file rows; a merge gate's plan, with `checks`: what
    its rules found, and no rows). A job whose JVM died is run again from
    nothing, `row_diff.spark.attempts` times in all; then, or when it failed otherwise, SparkJobFailed."""
    spark = config.row_diff.spark
    environment = {**os.environ, "LAKEFS_DELTA_JOB_S3_ENDPOINT": config.object_store.endpoint,
                   "LAKEFS_DELTA_JOB_S3_REGION": config.object_store.region,
                   "LAKEFS_DELTA_JOB_S3_ACCESS_KEY_ID": config.object_store.access_key_id,
                   "LAKEFS_DELTA_JOB_S3_SECRET_ACCESS_KEY": config.object_store.secret_access_key.get_secret_value(),
                   "LAKEFS_DELTA_JOB_MASTER": spark.master, "LAKEFS_DELTA_JOB_PACKAGES": spark.packages,
                   "LAKEFS_DELTA_JOB_JARS": spark.jars,
                   "LAKEFS_DELTA_JOB_IVY_DIR": spark.ivy_dir, "LAKEFS_DELTA_JOB_DRIVER_MEMORY": spark.driver_memory,
                   "LAKEFS_DELTA_JOB_PARTITION_BYTES": spark.partition_bytes}
    if plan.get("files"):
        plan = {**plan, "files": schema_groups(store, plan["files"])}
    with tempfile.TemporaryDirectory(prefix="lakefs-delta-rowdiff-") as folder:
        plan_file, summary_file, rows_file = (Path(folder) / name for name in ("plan.json", "summary.json", "rows.parquet"))
        plan_file.write_text(json.dumps(plan))
        for attempt in range(1, spark.attempts + 1):
            returncode, errors = _run_once(spark.time_limit_seconds, environment, (plan_file, summary_file, rows_file),
                                           progress, attempt)
            if returncode == 0:
                break
            tail, last = failure(errors), "".join(errors[-15:])  # its exception; its last lines, as before
            died = returncode < 0 or any(sign in tail or sign in last for sign in _JVM_DIED)
            if not died:
                raise SparkJobFailed(f"the row diff's Spark job exited with {returncode}: {tail[-1500:]}")
            if attempt == spark.attempts:
                raise SparkJobFailed(f"the row diff's Spark job died {attempt} time(s) (row_diff.spark.attempts: "
                                     f"{spark.attempts}), each run from nothing; the last exited with {returncode}: "
                                     f"{tail[-1200:]}")
        if rows_location is not None:
            upload_rows(store, rows_file, rows_location)
        return json.loads(summary_file.read_text())


# What Spark reads a file's schema from besides its parquet schema: the schema a Spark writer stored
_SPARK_SCHEMA = b"org.apache.spark.sql.parquet.row.metadata"


def schema_groups(store: ObjectStore, files: list[dict]) -> list[dict]:
    """The plan's files, each with `schema`: which of the plan's distinct footer schemas it has (its
    parquet schema, and the Spark schema a Spark writer stored beside it: what Spark infers a
    file's schema from). The job asks Spark for one file's schema of each and reads the others of
    it with that schema: asked for each file, Spark ran a job per file (8 files: 3-4.5 s; a diff of
    thousands of files, thousands of jobs). Footers read here on threads, two small reads a file."""
    def footer(entry: dict) -> str:
        parquet = open_parquet(ObjectSource(store, entry["address"], entry["size"]), entry["path"])
        described = str(parquet.schema).split("\n", 1)[1]  # its first line names the Python object
        return described + (parquet.metadata.metadata or {}).get(_SPARK_SCHEMA, b"").decode()

    numbers: dict[str, int] = {}
    return [{**entry, "schema": numbers.setdefault(key, len(numbers))}
            for entry, key in zip(files, prefetched(footer, files))]


def failure(errors: list[str]) -> str:
    """What a failed job said: the exception of its Python traceback (with a Java exception's first
    lines under it), else its last lines. The traceback comes first: once Python exits, the JVM's
    shutdown hooks print their own stack traces after it (an NPE in ShuffleBlockPusher stopping
    Spark), which would bury it."""
    starts = [n for n, line in enumerate(errors) if line.startswith("Traceback (most recent call last)")]
    if starts:
        block = errors[starts[-1] + 1:]
        raised = next((n for n, line in enumerate(block) if line.strip() and not line.startswith((" ", "\t"))), None)
        if raised is not None:
            return "".join(block[raised:raised + 12]).strip()
    return "".join(errors[-15:]).strip()


def _run_once(seconds: int, environment: dict, files: tuple[Path, Path, Path],
              progress: Callable[[dict], None] | None, attempt: int) -> tuple[int, list[str]]:
    """One run of the job: its exit code (negative: killed by a signal) and its last lines of stderr
    (`failure` reads them); past `seconds` it is stopped and SparkJobTimedOut raised (never run again)."""
    job = subprocess.Popen([sys.executable, "-m", "exporter.diff.rows.spark", *map(str, files)], env=environment,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timed_out = threading.Event()
    timer = threading.Timer(seconds, lambda: (timed_out.set(), job.kill()))  # its own budget
    errors: deque[str] = deque(maxlen=2000)  # Spark's warnings too: bounded
    reader = threading.Thread(target=lambda: errors.extend(job.stderr), daemon=True)
    try:
        timer.start()
        reader.start()
        if progress is not None:
            progress({"engine": "spark", "phase": "starting", **({"attempt": attempt} if attempt > 1 else {})})
        for line in job.stdout:
            if line.startswith("PROGRESS ") and progress is not None:
                progress(json.loads(line[len("PROGRESS "):]))
        job.wait()
    finally:  # whatever stops the caller (its time limit, a lost worker), no job is left running
        timer.cancel()
        if job.poll() is None:
            job.kill()
            job.wait()
    reader.join(timeout=5)
    if timed_out.is_set():
        raise SparkJobTimedOut(f"the row diff's Spark job ran past its time budget ({seconds} s: "
                               "row_diff.spark.time_limit_seconds) and was stopped")
    return job.returncode, list(errors)


# ---------------------------------------------------------------- the job (its own process)


def _session():
    from pyspark.sql import SparkSession

    env = os.environ
    # The answer streams to the driver a partition at a time (`toLocalIterator`), each partition
    # serialized whole as its task's result: partitions are kept near `partition_bytes` however many
    # rows differ (`shuffle_partitions`; adaptive execution coalesces small ones), and the driver's
    # heap is set. With 8 partitions and Java's default heap, 3M changed rows ran it out of memory
    # (OutOfMemoryError in Executor.TaskRunner serializing a result, then Spark's uncaught-exception
    # handler ended the JVM).
    builder = (SparkSession.builder.master(env["LAKEFS_DELTA_JOB_MASTER"]).appName("lakefs-delta-row-diff")
               .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "8")
               .config("spark.sql.adaptive.advisoryPartitionSizeInBytes", env["LAKEFS_DELTA_JOB_PARTITION_BYTES"])
               .config("spark.driver.memory", env["LAKEFS_DELTA_JOB_DRIVER_MEMORY"]))
    if env.get("LAKEFS_DELTA_JOB_JARS"):  # `row_diff.spark.jars`: the jars themselves, nothing to resolve
        builder = builder.config(map=jar_settings(env["LAKEFS_DELTA_JOB_MASTER"], env["LAKEFS_DELTA_JOB_JARS"]))
    else:
        builder = builder.config("spark.jars.packages", env["LAKEFS_DELTA_JOB_PACKAGES"])
        if env.get("LAKEFS_DELTA_JOB_IVY_DIR"):
            builder = builder.config("spark.jars.ivy", env["LAKEFS_DELTA_JOB_IVY_DIR"])
    hadoop = {"fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem", "fs.s3a.path.style.access": "true",
              "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
              "fs.s3a.endpoint.region": env["LAKEFS_DELTA_JOB_S3_REGION"],
              "fs.s3a.access.key": env["LAKEFS_DELTA_JOB_S3_ACCESS_KEY_ID"],
              "fs.s3a.secret.key": env["LAKEFS_DELTA_JOB_S3_SECRET_ACCESS_KEY"]}
    if env.get("LAKEFS_DELTA_JOB_S3_ENDPOINT"):
        endpoint = env["LAKEFS_DELTA_JOB_S3_ENDPOINT"]
        hadoop.update({"fs.s3a.endpoint": endpoint,
                       "fs.s3a.connection.ssl.enabled": str(endpoint.startswith("https")).lower()})
    for key, value in hadoop.items():
        builder = builder.config(f"spark.hadoop.{key}", value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def jar_settings(master: str, jars: str) -> dict[str, str]:
    """The Spark settings that give a JVM `jars` (Spark's `spark.jars` form, comma-separated). In
    local mode the tasks run in the driver's JVM: local jars go on its class path when it starts, not
    in `spark.jars`, which Spark copies into each application's files folder (671 MiB of Delta, S3A
    and the AWS SDK here) and loads again through a class loader of its own. A session with Delta
    started in 4.9-5.5 s and 19-22 s of JVM CPU that way, 7.6-8.4 s and 24.5-25.7 s with `spark.jars`
    (3 runs each, a Delta write and read of 1,000 rows). Elsewhere (a cluster's executors need them),
    or given URLs, `spark.jars`."""
    paths = [jar for jar in jars.split(",") if jar]
    if master.startswith("local") and not any("://" in jar for jar in paths):
        return {"spark.driver.extraClassPath": os.pathsep.join(paths)}
    return {"spark.jars": jars}


def _report_progress(spark, stop: threading.Event, phase: list[str]) -> None:
    tracker = spark.sparkContext.statusTracker()
    started, ran = time.monotonic(), {}
    while not stop.wait(1.0):
        print("PROGRESS " + json.dumps(progress_line(tracker, phase[-1], time.monotonic() - started, ran)), flush=True)


def progress_line(tracker, phase: str, seconds: float, ran: dict[int, tuple[int, int]]) -> dict:
    """What the job has done so far, counted over every Spark job it ran (not only the stages
    running now, which are none between two jobs): stages and tasks done of those known, without
    the stages an ended Spark job skipped (their output was there already) and never ran.

    Each stage once, with the most it was seen to have done (`ran`, by stage id, kept between
    calls): a Spark job may list a stage another job already ran (adaptive execution's jobs
    overlap), and Spark's status store may then show that stage afresh, 0 tasks done, which made
    the count go back (once in a CI run)."""
    known = {}
    for job in tracker.getJobIdsForGroup(None):
        if (info := tracker.getJobInfo(job)) is None:
            continue
        for stage in info.stageIds:
            if (s := tracker.getStageInfo(stage)) is not None and (info.status == "RUNNING" or s.numCompletedTasks):
                known[stage] = (s.numTasks, s.numCompletedTasks)
    for stage, (tasks, done) in known.items():
        if done:
            ran[stage] = max(ran.get(stage, (0, 0)), (tasks, done))
    stages = {**known, **ran}
    return {"engine": "spark", "phase": phase, "seconds": round(seconds),
            "active_stages": len(tracker.getActiveStageIds()), "stages": len(stages),
            "stages_done": sum(done == tasks for tasks, done in stages.values()),
            "tasks": sum(tasks for tasks, _ in stages.values()), "tasks_done": sum(done for _, done in stages.values())}


def _spark_path(address: str) -> str:
    return address.replace("s3://", "s3a://", 1)


def _schemas(spark, files: list[dict]) -> dict[int, object]:
    """Each of the plan's footer schemas (`schema_groups`) as Spark infers it, from one file of it."""
    first: dict[int, str] = {}
    for entry in files:
        first.setdefault(entry["schema"], entry["address"])
    return {number: spark.read.parquet(_spark_path(address)).schema for number, address in first.items()}


def _file_rows(spark, entry: dict, side: dict, schema):
    """One file's rows the plan names, read with its footer's `schema`: as text columns to match on,
    the row as JSON, its partition."""
    from pyspark.sql import functions as F

    frame = spark.read.schema(schema).parquet(_spark_path(entry["address"])).select("*", "_metadata.row_index")
    if entry["rows"]:  # `only` these rows (deletion-vector bits that differ), or all `except` them (deleted)
        chosen = spark.createDataFrame([(int(r),) for r in entry["rows"]], "row_index long")
        frame = frame.join(chosen, "row_index", "left_semi" if entry["mode"] == "only" else "left_anti")
    present = set(frame.columns)
    columns = {}
    for column in side["columns"]:
        physical = side["physical"][column]
        if column in side["partition_columns"]:
            columns[column] = F.lit(entry["partition"].get(column)).cast("string")
        elif physical in present:
            columns[column] = F.col(f"`{physical}`")
        else:
            columns[column] = F.lit(None).cast("string")
    values = (F.to_json(F.struct(*[value.alias(name) for name, value in columns.items()]), {"ignoreNullFields": "false"})
              if side.get("values", True) else F.lit(None).cast("string"))  # a gate on an append reads none
    matched = [F.coalesce(F.to_json(F.array(columns[c])), F.lit("null")).alias(f"m_{i}")
               for i, c in enumerate(side["common"])]
    # a merge gate's checked columns, each as the JSON of a one-value array ('[null]' for null)
    checked = [F.to_json(F.array(columns[c])).alias(f"c_{i}") for c, i in side.get("checked", {}).items()]
    return frame.select(*matched, *checked, values.alias("values"), F.lit(entry["label"]).alias("partition"),
                        F.lit(entry["side"]).alias("side"), F.lit(entry["address"]).alias("file"))


ROWS_PER_PARTITION = 50_000  # about 10 MiB of a narrow table's rows as JSON: what the driver holds at once


def shuffle_partitions(rows: int | None) -> int:
    """Partitions for a job reading `rows` (None: not counted): 8 for small diffs, where each task
    more is overhead, one per ROWS_PER_PARTITION above, at most 2,000."""
    return 200 if rows is None else max(8, min(2000, -(-rows // ROWS_PER_PARTITION)))


def _job(plan: dict, summary_path: str, rows_path: str) -> None:
    from functools import reduce

    from pyspark import StorageLevel

    spark = _session()
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(plan.get("rows"))))
    stop, phase = threading.Event(), ["reading"]
    threading.Thread(target=_report_progress, args=(spark, stop, phase), daemon=True).start()
    try:
        if "checks" in plan:
            Path(summary_path).write_text(json.dumps(_checks(spark, plan)))
            return
        schemas = _schemas(spark, plan["files"])
        parts = [_file_rows(spark, entry, {**plan["sides"][entry["side"]], "common": plan["common"]},
                            schemas[entry["schema"]]) for entry in plan["files"]]
        rows = reduce(lambda a, b: a.unionByName(b), parts).persist(StorageLevel.DISK_ONLY)  # read twice, held on disk
        file_rows = {r["file"] + "|" + r["side"]: r["count"] for r in rows.groupBy("file", "side").count().collect()}
        result = _changes(rows, plan)
        phase.append("writing rows")
        counts, partitions = _write_rows(result, rows_path)
        Path(summary_path).write_text(json.dumps({"counts": counts, "partitions": partitions, "file_rows": file_rows}))
    finally:
        stop.set()
        spark.stop()


def _cancelled(rows, match: list[str]):
    """The rows left once equal rows (by the `match` columns) cancel: of each group, the rows past
    min(removed, added) on its side."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not match:
        return rows
    side_is = lambda name: F.when(F.col("side") == name, 1).otherwise(0)  # noqa: E731
    group = Window.partitionBy(*match)
    return (rows.withColumn("removed_n", F.sum(side_is("removed")).over(group))
            .withColumn("added_n", F.sum(side_is("added")).over(group))
            .withColumn("rn", F.row_number().over(Window.partitionBy(*match, "side").orderBy("values", "file")))
            .filter(F.col("rn") > F.least("removed_n", "added_n")))


def _checks(spark, plan: dict) -> dict:
    """A merge gate's key and column rules (`exporter.checks.rows`) over the plan's files: removed and
    added as the row diff reads them, and `kept` files' key columns. What they found, in the shape
    `exporter.checks.rows.findings_of` reads."""
    from functools import reduce

    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    checks, shown = plan["checks"], plan["checks"]["shown"]  # values of each kind a finding names
    checked = {column: i for i, column in enumerate(checks["checked"])}
    keys = [f"c_{checked[k]}" for k in checks["keys"]]
    # Without removed rows no added row cancels: the rows are read for their checked columns alone,
    # neither matched nor written out as JSON
    cancelling = any(entry["side"] == "removed" for entry in plan["files"])
    common = plan["common"] if cancelling else []

    def described(side: str) -> dict:
        if side == "removed":
            return {**plan["sides"][side], "common": common}
        if side == "added":
            return {**plan["sides"][side], "common": common, "checked": checked, "values": cancelling}
        return {**plan["sides"][side], "common": [], "checked": {k: checked[k] for k in checks["keys"]},
                "values": False}

    schemas = _schemas(spark, plan["files"])
    parts = [_file_rows(spark, entry, described(entry["side"]), schemas[entry["schema"]]) for entry in plan["files"]]
    rows = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), parts).persist(StorageLevel.DISK_ONLY)
    moving = _cancelled(rows.filter(F.col("side") != "kept"), [f"m_{i}" for i in range(len(common))])
    changed = moving.filter(F.col("side") == "added")
    found: dict = {"columns": {}}
    written_when, changed_when = {}, {}  # the rows each finding is about: (kind -> condition) on written, changed rows
    if keys:
        null_key = reduce(lambda a, b: a | b, [F.col(k) == "[null]" for k in keys])
        # added keys against each other and against kept ones in one grouping (one shuffle of the rows,
        # not one per question); the keys it finds are few, held for the counts and the ones shown
        grouped = (rows.filter(F.col("side").isin("added", "kept") & ~null_key)
                   .groupBy(*keys).agg(F.sum((F.col("side") == "added").cast("long")).alias("count"),
                                       F.max((F.col("side") == "kept").cast("int")).alias("kept"))
                   .filter("count > 1 OR (count > 0 AND kept > 0)").persist())
        repeated = grouped.filter("count > 1").orderBy(*keys)
        clashes = grouped.filter("count > 0 AND kept > 0").select(*keys).orderBy(*keys)
        named_repeated, named_clashes = repeated.limit(shown).collect(), clashes.limit(shown).collect()
        found.update(null_keys=changed.filter(null_key).count(),
                     repeated=(repeated.count(), [([_value(r[k]) for k in keys], r["count"]) for r in named_repeated]),
                     clashes=(clashes.count(), [[_value(r[k]) for k in keys] for r in named_clashes]))
        if found["null_keys"]:
            changed_when["null_keys"] = null_key
        for kind, named in (("repeated", named_repeated), ("clashes", named_clashes)):
            if named:
                written_when[kind] = reduce(lambda a, b: a | b, [reduce(lambda a, b: a & b, [F.col(k) == r[k] for k in keys])
                                                                for r in named])
    for column, rule in checks["columns"].items():
        value = F.col(f"c_{checked[column]}")
        seen = {"nulls": changed.filter(value == "[null]").count()}
        if rule["not_null"] and seen["nulls"]:
            changed_when[f"nulls:{column}"] = value == "[null]"
        if rule["accepted"] is not None:
            not_accepted = (value != "[null]") & ~value.isin(rule["accepted"])
            outside = changed.filter(not_accepted).groupBy(value.alias("v")).count()
            seen["outside"] = (outside.agg(F.sum("count")).first()[0] or 0,
                               [(_value(r["v"]), r["count"]) for r in outside.orderBy(F.desc("count")).limit(shown).collect()])
            if seen["outside"][0]:
                changed_when[f"outside:{column}"] = not_accepted
        found["columns"][column] = seen
    if written_when or changed_when:
        if cancelling:  # the rows were read with their values
            frames = [(rows.filter(F.col("side") == "added"), written_when), (changed, changed_when)]
        else:  # an append, read without them: its added rows again, now with them (only when a rule found some)
            again = [_file_rows(spark, entry, {**described("added"), "values": True}, schemas[entry["schema"]])
                     for entry in plan["files"] if entry["side"] == "added"]
            frames = [(reduce(lambda a, b: a.unionByName(b), again), {**written_when, **changed_when})]
        found["rows"] = _offending(frames, plan["checks"]["rows_shown"])
    return found


def _offending(frames: list, rows_shown: int) -> dict[str, list[str]]:
    """The rows each finding is about, at most `rows_shown` of each kind (the first by their JSON),
    as JSON texts, in one Spark job: `frames` pairs a frame of rows with `values` with the kinds'
    conditions on it."""
    from functools import reduce

    from pyspark.sql import Window
    from pyspark.sql import functions as F

    labelled = reduce(lambda a, b: a.unionByName(b), [
        frame.select("values", F.explode(F.array(*[F.when(condition, F.lit(kind)) for kind, condition in when.items()]))
                     .alias("kind"))
        for frame, when in frames if when]).filter(F.col("kind").isNotNull())
    picked = labelled.withColumn("n", F.row_number().over(Window.partitionBy("kind").orderBy("values"))) \
        .filter(F.col("n") <= rows_shown)
    rows: dict[str, list[str]] = {}
    for row in picked.collect():
        rows.setdefault(row["kind"], []).append(row["values"])
    return rows


def _value(text: str):
    """A checked column's value from its one-value JSON array."""
    return json.loads(text)[0]


def _changes(rows, plan: dict):
    """The changed rows, ordered as the answer lists them: equal rows on both sides cancel, and with
    key columns a removed and an added row of the same key are one update."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rows = _cancelled(rows, [f"m_{i}" for i in range(len(plan["common"]))])
    key = [f"m_{plan['common'].index(k)}" for k in plan["key"] if k in plan["common"]]
    if key:  # a removed and an added row with the same key are one update
        numbered = rows.withColumn("krn", F.row_number().over(Window.partitionBy(*key, "side").orderBy("values")))
        removed = numbered.filter(F.col("side") == "removed").select(*key, "krn", F.col("values").alias("before"),
                                                                     F.col("partition").alias("before_partition"))
        added = numbered.filter(F.col("side") == "added").select(*key, "krn", "values", "partition")
        joined = removed.join(added, [*key, "krn"], "full_outer")
        result = joined.select(
            F.when(F.col("before").isNull(), "added").when(F.col("values").isNull(), "removed")
            .otherwise("updated").alias("change"),
            F.coalesce("partition", "before_partition").alias("partition"),
            F.coalesce("values", "before").alias("values"),
            F.when(F.col("before").isNotNull() & F.col("values").isNotNull(), F.col("before")).alias("before"))
    else:
        result = rows.select(F.col("side").alias("change"), "partition", "values", F.lit(None).cast("string")
                             .alias("before"))
    order = F.when(F.col("change") == "removed", 0).when(F.col("change") == "added", 1).otherwise(2)
    return result.orderBy(order, "partition", "values")


def _write_rows(result, rows_path: str) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """The rows file, streamed from the job a row group at a time; the counts, in all and per partition."""
    counts = {"added": 0, "removed": 0, "updated": 0}
    partitions: dict[str, dict[str, int]] = {}

    def batches():
        batch: list[dict] = []
        for number, row in enumerate(result.toLocalIterator()):
            change = row["change"]
            counts[change] += 1
            per = partitions.setdefault(row["partition"], {"added": 0, "removed": 0, "updated": 0})
            per[change] += 1
            batch.append({"id": number, "change": change, "partition": row["partition"], "values": row["values"],
                          "before": row["before"]})
            if len(batch) == ROWS_PER_GROUP:
                yield batch
                batch = []
        yield batch

    write_rows(rows_path, batches())
    return counts, partitions


if __name__ == "__main__":
    _job(json.loads(Path(sys.argv[1]).read_text()), sys.argv[2], sys.argv[3])
