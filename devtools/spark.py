"""A SparkSession with Delta and S3A set up for a lakeFS stack.

The default S3A endpoint and keys are lakeFS's S3 gateway (`s3a://<repo>/<ref>/<path>`); per-bucket
settings send the object store's own bucket to MinIO, so an exported table's absolute physical
paths (`s3://<bucket>/...`) resolve without lakeFS in the path.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"  # newest delta-spark_4.2 on Maven Central
HADOOP_AWS_PACKAGE = "org.apache.hadoop:hadoop-aws:3.5.0"  # the Hadoop bundled in pyspark 4.2
# Keep Spark's own copies of these; Delta's transitive ones are older and would shadow them.
EXCLUDED_PACKAGES = ",".join([
    "org.apache.hadoop:hadoop-client-api", "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.parquet:parquet-column", "org.apache.parquet:parquet-common", "org.apache.parquet:parquet-encoding",
    "org.apache.parquet:parquet-format-structures", "org.apache.parquet:parquet-hadoop",
    "org.apache.parquet:parquet-jackson", "com.fasterxml.jackson.core:jackson-core",
    "com.fasterxml.jackson.core:jackson-databind", "com.fasterxml.jackson.core:jackson-annotations",
    "org.apache.logging.log4j:log4j-api", "org.apache.logging.log4j:log4j-core",
    "org.apache.logging.log4j:log4j-slf4j2-impl", "org.slf4j:slf4j-api",
    "org.xerial.snappy:snappy-java", "com.github.luben:zstd-jni",
])
IVY_DIR = Path(os.environ.get("LAKEFS_DELTA_IVY_DIR", Path.home() / ".cache" / "lakefs-delta-exporter" / "ivy"))


def resolved_jars(packages: str, excludes: str = "") -> str:
    """`packages` (Maven coordinates, comma-separated) as the local jars Ivy resolves them to, in
    Spark's `spark.jars` form. Resolved once into IVY_DIR and recorded beside the jars: a JVM given
    `spark.jars` does no Ivy resolution, which took about 1.8 s of CPU at every Spark JVM's start
    here (a session's JVM started in 8.2 s of CPU with `spark.jars.packages`, 6.4 s with the jars,
    on an idle machine; 14.5 s and 10.8 s beside a test run)."""
    record = IVY_DIR / f"resolved-{hashlib.sha256(f'{packages}|{excludes}'.encode()).hexdigest()[:16]}.txt"
    if record.exists():
        jars = record.read_text().strip()
        if jars and all(Path(jar.removeprefix("file:")).exists() for jar in jars.split(",")):
            return jars
    import pyspark

    # spark-submit resolves the packages, then runs this script with its configuration (spark.jars:
    # the resolved jars) and no SparkContext
    script = ("from pyspark import SparkConf, SparkContext\nSparkContext._ensure_initialized()\n"
              "print('JARS=' + SparkConf().get('spark.jars', ''))\n")
    with tempfile.TemporaryDirectory(prefix="lakefs-delta-jars-") as folder:
        (Path(folder) / "resolve.py").write_text(script)
        done = subprocess.run([str(Path(pyspark.__file__).parent / "bin" / "spark-submit"), "--packages", packages,
                               *(["--exclude-packages", excludes] if excludes else []),
                               "--conf", f"spark.jars.ivy={IVY_DIR}", str(Path(folder) / "resolve.py")],
                              capture_output=True, text=True, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    jars = next((line[len("JARS="):] for line in done.stdout.splitlines() if line.startswith("JARS=")), "")
    if done.returncode != 0 or not jars:
        raise RuntimeError(f"resolving {packages} with Ivy failed: {done.stderr[-2000:]}")
    IVY_DIR.mkdir(parents=True, exist_ok=True)
    partial = record.with_suffix(f".{os.getpid()}")
    partial.write_text(jars + "\n")
    partial.replace(record)  # whole or absent, whichever process wrote it
    return jars


def session_jars() -> str:
    """Delta and S3A for this project's sessions, as local jars (`resolved_jars`)."""
    return resolved_jars(f"{DELTA_PACKAGE},{HADOOP_AWS_PACKAGE}", EXCLUDED_PACKAGES)


@dataclass(frozen=True)
class S3Endpoint:
    endpoint: str
    access_key_id: str
    secret_access_key: str


def spark_session(gateway: S3Endpoint | None, buckets: dict[str, S3Endpoint] | None = None,
                  app_name: str = "lakefs-delta", extra_conf: dict[str, str] | None = None):
    """`gateway` is the default S3A endpoint (lakeFS); `buckets` override it per bucket (MinIO).

    With `gateway=None` the session has no default endpoint: only the per-bucket ones resolve,
    which proves a read does not go through lakeFS.
    """
    from pyspark.sql import SparkSession

    from exporter.diff.rows.spark import jar_settings

    master = "local[2]"
    builder = (
        SparkSession.builder.master(master).appName(app_name)
        .config(map=jar_settings(master, session_jars()))  # Delta, S3A: resolved once, on the class path
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")  # local mode runs the tasks in the driver (default 1g)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.databricks.delta.snapshotPartitions", "2")  # small tables: 50 tasks per read is all overhead
        # VACUUM lists the table in a stage of this many tasks (default 10,000): on a 3-file table it
        # took 64 s of the JVM's CPU (38 s) with the default, 2.7-4.2 s with 2
        .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    )
    hadoop = {
        "fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",  # exported logs hold s3:// URIs
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.endpoint.region": "us-east-1",
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3a.change.detection.mode": "none",  # lakeFS's gateway ETags differ from MinIO's
        "fs.s3a.attempts.maximum": "3",
        "fs.s3a.retry.limit": "3",
    }
    if gateway is not None:
        hadoop.update({"fs.s3a.endpoint": gateway.endpoint, "fs.s3a.access.key": gateway.access_key_id,
                       "fs.s3a.secret.key": gateway.secret_access_key})
    else:
        hadoop.update({"fs.s3a.endpoint": "http://127.0.0.1:9", "fs.s3a.access.key": "none",
                       "fs.s3a.secret.key": "none"})
    for bucket, target in (buckets or {}).items():
        hadoop.update({f"fs.s3a.bucket.{bucket}.endpoint": target.endpoint,
                       f"fs.s3a.bucket.{bucket}.access.key": target.access_key_id,
                       f"fs.s3a.bucket.{bucket}.secret.key": target.secret_access_key})
    for key, value in hadoop.items():
        builder = builder.config(f"spark.hadoop.{key}", value)
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def stack_spark_session(environ: dict[str, str] | None = None, through_lakefs: bool = True, app_name: str = "lakefs-delta"):
    """A session for the local stack, from the variables `python -m devtools.stack env` prints."""
    env = os.environ if environ is None else environ
    lakefs = S3Endpoint(env["LAKEFS_DELTA_LAKEFS_ENDPOINT"], env["LAKEFS_DELTA_LAKEFS_ACCESS_KEY_ID"],
                        env["LAKEFS_DELTA_LAKEFS_SECRET_ACCESS_KEY"])
    minio = S3Endpoint(env["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"], env["LAKEFS_DELTA_OBJECT_STORE_ACCESS_KEY_ID"],
                       env["LAKEFS_DELTA_OBJECT_STORE_SECRET_ACCESS_KEY"])
    return spark_session(lakefs if through_lakefs else None, {env["LAKEFS_DELTA_STACK_BUCKET"]: minio}, app_name)


# Iceberg's Spark runtimes for Spark 3.5 (the newest Spark each of 1.10-1.12 is built for, 1.10 none
# for 4.x beyond 4.0): the catalog's Spark readers run in a virtualenv of their own with this pyspark
ICEBERG_PYSPARK = "3.5.8"
ICEBERG_RUNTIMES = ("1.10.1", "1.11.0", "1.12.0")


def iceberg_spark_python() -> Path:
    """The Python of a virtualenv with pyspark `ICEBERG_PYSPARK` (made once, under ~/.cache)."""
    import subprocess
    import sys

    home = Path.home() / ".cache" / "lakefs-delta-exporter" / "venvs" / f"pyspark-{ICEBERG_PYSPARK}"
    python = home / "bin" / "python"
    ready = home / ".installed"
    if not ready.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"pyspark=={ICEBERG_PYSPARK}"], check=True)
        ready.touch()
    return python


# A class data sharing archive (JDK's AppCDS) of the classes a session loads: a JVM started with it
# maps them instead of reading, parsing and verifying them from 300 jars. A session with Delta that
# writes and reads 1,000 rows took 13.7-13.8 s of JVM CPU with it, 18.5-20.5 s without (2 runs each,
# interleaved). A JVM maps it only when its class path starts as the archive's did (the sessions'
# and, in the stack, the row diff jobs' too: `devtools.stack` gives them the sessions' jars) and its
# JVM options match; any other JVM (the cluster's, the Iceberg readers') goes on without it, silently.
# No directory on the class path may hold files: hence the tests' Spark settings are Java system
# properties (scripts/test.sh), not a SPARK_CONF_DIR.
ARCHIVE_DIR = IVY_DIR.parent / "class-archives"
ARCHIVE_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # a JVM that cannot map it says nothing


def class_archive(java_options: str) -> Path:
    """The archive for sessions started with `java_options` (JAVA_TOOL_OPTIONS, without the archive's
    own): made once by a session that loads what the tests' sessions load (`_load_classes`), kept
    beside the jars under a name from everything a JVM checks before mapping it."""
    import pyspark

    jars = session_jars()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    spark_jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    key = hashlib.sha256("|".join([java, jars, pyspark.__version__, *spark_jars, java_options]).encode()).hexdigest()[:16]
    archive = ARCHIVE_DIR / f"session-{key}.jsa"
    if archive.exists():
        return archive
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    env = {**os.environ, "JAVA_TOOL_OPTIONS": f"{java_options} -XX:ArchiveClassesAtExit={partial} {ARCHIVE_QUIET}".strip(),
           "PYSPARK_PYTHON": sys.executable}
    env.pop("SPARK_CONF_DIR", None)
    done = subprocess.run([sys.executable, "-c", "from devtools.spark import _load_classes; _load_classes()"],
                          capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parent.parent)
    jvm = next((int(line[len("JVM="):]) for line in done.stdout.splitlines() if line.startswith("JVM=")), None)
    while jvm is not None and Path(f"/proc/{jvm}").exists():  # the JVM writes the archive as it exits, after Python
        time.sleep(0.2)
    if done.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"making the class archive failed: {done.stderr[-2000:]}")
    partial.replace(archive)  # whole or absent
    for stale in ARCHIVE_DIR.glob("session-*.jsa"):  # 200 MiB each; a JVM mapping one keeps its copy
        if stale != archive:
            stale.unlink(missing_ok=True)
    return archive


def _load_classes() -> None:
    """What the tests' sessions do, on a local table: Delta's commands, a checkpoint, time travel, row
    indexes (the row diff job's reads), and S3A's file system."""
    with tempfile.TemporaryDirectory(prefix="lakefs-delta-classes-") as folder:
        spark = spark_session(None, {}, "class-archive")
        table = f"delta.`{folder}/t`"
        spark.sql(f"CREATE TABLE {table} (id BIGINT, v STRING, d DATE) USING delta PARTITIONED BY (d) "
                  "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true', 'delta.checkpointInterval' = '3')")
        spark.range(1000).selectExpr("id", "CAST(id % 7 AS STRING) AS v", "DATE'2026-01-01' AS d") \
            .write.format("delta").mode("append").save(f"{folder}/t")
        spark.sql(f"INSERT INTO {table} VALUES (5000, 'x', DATE'2026-01-02')")
        spark.sql(f"UPDATE {table} SET v = 'u' WHERE id < 10")
        spark.sql(f"DELETE FROM {table} WHERE id % 100 = 1")
        spark.sql(f"MERGE INTO {table} t USING (SELECT 1 AS id, 'm' AS v) s ON t.id = s.id "
                  "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT (id, v, d) VALUES (s.id, s.v, DATE'2026-01-03')")
        spark.sql(f"OPTIMIZE {table}")
        spark.sql(f"DESCRIBE HISTORY {table}").collect()
        spark.read.format("delta").option("versionAsOf", 1).load(f"{folder}/t").groupBy("v").count().collect()
        spark.read.parquet(*[str(p) for p in Path(folder, "t").rglob("*.parquet") if "_delta_log" not in p.parts][:2]) \
            .select("id", "_metadata.row_index").where("id > 3").collect()
        jvm = spark.sparkContext._jvm  # S3A's client, made without a request (not VACUUM's listing: 52 s here)
        jvm.org.apache.hadoop.fs.FileSystem.newInstance(jvm.java.net.URI("s3a://no-such-bucket/"),
                                                        spark.sparkContext._jsc.hadoopConfiguration()).close()
        print(f"JVM={jvm.java.lang.ProcessHandle.current().pid()}", flush=True)
        spark.stop()


if __name__ == "__main__":  # set-up: the jars every Spark JVM of the stack starts with, resolved once
    if sys.argv[1:] == ["class-archive"]:  # scripts/test.sh: JVM options that map the archive for JAVA_TOOL_OPTIONS as they are
        print(f"-XX:SharedArchiveFile={class_archive(os.environ.get('JAVA_TOOL_OPTIONS', ''))} {ARCHIVE_QUIET}")
    else:
        print(f"sessions and row diff jobs: {len(session_jars().split(','))} jars, in {IVY_DIR}")
