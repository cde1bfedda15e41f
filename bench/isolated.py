"""One measured operation in a fresh process, so its peak RSS is its own (`ru_maxrss` is a
process-lifetime maximum: measured in the benchmark's own process, every row after the first would
report the largest so far).

    python -m bench.isolated export REPOSITORY REF COMMIT TABLE
    python -m bench.isolated rewrite CHECKPOINT_FILE ADDRESSES_FILE splice|whole
    python -m bench.isolated stream ADDRESSES_PARQUET CHECKPOINT_PART...
    python -m bench.isolated diff REPOSITORY LEFT_COMMIT RIGHT_COMMIT TABLE_PATH
    python -m bench.isolated gate REPOSITORY SOURCE DESTINATION
    python -m bench.isolated keyscan REPOSITORY REF TABLE_PATH KEY
    python -m bench.isolated rowdiff REPOSITORY LEFT_COMMIT RIGHT_COMMIT TABLE_PATH [KEY]
    python -m bench.isolated exceptall REPOSITORY LEFT_COMMIT RIGHT_COMMIT TABLE_PATH
    python -m bench.isolated append REPOSITORY BRANCH COMMIT TABLE
    python -m bench.isolated republish REPOSITORY BRANCH COMMIT TABLE
    python -m bench.isolated presign project|boto3 COUNT REAL_OBJECT_URI
    python -m bench.isolated livefiles TABLE_URI
    python -m bench.isolated sharing-lines COUNT parquet|delta [PROFILE_FILE]
    python -m bench.isolated iceberg-metadata COUNT fresh|incremental [PROFILE_FILE]
    python -m bench.isolated pyiceberg-read CATALOG_URI NAMESPACE TABLE   (the catalog's token in BENCH_CATALOG_TOKEN)
Each prints one JSON line: the measurement.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

from bench.measure import peak_rss_mib, thread_cpu_seconds

ROOT = Path(__file__).resolve().parent.parent


def measure(*args: str, env: dict[str, str] | None = None) -> dict:
    """Run one operation in a fresh interpreter and return what it measured; `env` is added to this
    process's environment for it (a setting changed for that run alone)."""
    done = subprocess.run([sys.executable, "-m", "bench.isolated", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise RuntimeError(f"bench.isolated {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _export(repository: str, ref: str, commit_id: str, table_name: str, after_one: str = "") -> dict:
    """The export; with `iceberg.enabled`, then its Iceberg table, as a worker's next task writes it
    (`iceberg_seconds`; `seconds` is the export's alone, what the status waits for), handed the log
    files the export's message carries (`held_for_message`). The object-store
    client is made before the clock starts, as a worker has it (a fresh one costs about 0.1 s).

    With `after_one`, measured in a process that has exported before, as a worker's is after its
    first task: the same table is exported first under `<ref>-first` (its Iceberg table too), and
    those seconds are `first_seconds` and `first_iceberg_seconds`. A new process's first export
    starts its threads and connections and reads its modules' first calls: at 10,000 files 0.16-0.19
    s where the next took 0.08-0.11 s."""
    from exporter.config import load_config
    from exporter.lakefs.client import LakeFS
    from exporter.storage.objectstore import ObjectStore
    from workers.delivery import keep_what_the_start_made

    config = load_config()
    lakefs = LakeFS(config.lakefs)
    ObjectStore(config, lakefs.storage_namespace(repository))  # a worker makes its client once, not per export
    keep_what_the_start_made()  # as a worker's process does once started
    first = _export_once(config, lakefs, repository, f"{ref}-first", commit_id, table_name) if after_one else {}
    measured = _export_once(config, lakefs, repository, ref, commit_id, table_name)
    if first:
        measured.update(first_seconds=first["seconds"], first_iceberg_seconds=first["iceberg_seconds"])
    return measured


def _export_once(config, lakefs, repository: str, ref: str, commit_id: str, table_name: str) -> dict:
    from exporter.export.commit import export_iceberg, export_table, find_table
    from exporter.export.job import ExportAt
    from exporter.export.manifest import PENDING
    from exporter.lakefs.lake import Lake, ObjectStores

    table = find_table(lakefs, repository, commit_id, table_name)
    outcome = export_table(Lake.connect(config), ExportAt(repository, ref, commit_id), table)
    iceberg_seconds, iceberg, requests, iceberg_cpu = 0.0, outcome.iceberg, {}, {}
    if outcome.ok and not outcome.skipped and outcome.iceberg == PENDING:
        from workers.delivery import held_for_message

        # the log files the export hands its Iceberg step's task in the message, as the worker does
        held = {name: text.encode() for name, text in held_for_message(outcome.held).items()}
        with _object_store_requests() as requests:
            stack_before, cpu, started = thread_cpu_seconds(), time.process_time(), time.monotonic()
            iceberg = export_iceberg(Lake(config, lakefs, ObjectStores(config)), repository, ref, commit_id, table_name,
                                     held=held)
            iceberg_seconds = time.monotonic() - started
            # the CPU the step took, here and in the stack's processes it called: its floor on this machine's cores
            iceberg_cpu = {"this process": time.process_time() - cpu,
                           **{part: seconds - stack_before.get(part, 0.0) for part, seconds in thread_cpu_seconds().items()}}
    return {"ok": outcome.ok, "error": outcome.error, "seconds": outcome.seconds, "lakefs_calls": outcome.lakefs_calls,
            "incremental": outcome.incremental, "skipped": outcome.skipped, "location": outcome.location,
            "iceberg_seconds": iceberg_seconds, "iceberg": iceberg, "iceberg_requests": requests,
            "iceberg_cpu": iceberg_cpu, "peak_rss_mib": peak_rss_mib()}


@contextmanager
def _object_store_requests():
    """The S3 requests this process makes meanwhile, by operation (GetObject, PutObject, ...)."""
    from botocore.client import BaseClient

    from exporter.storage.requests import SignedRequests

    counted: dict[str, int] = {}
    original, signed = BaseClient._make_api_call, SignedRequests.request

    def count(operation_name: str) -> None:
        counted[operation_name] = counted.get(operation_name, 0) + 1

    def counting(client, operation_name, api_params):
        count(operation_name)
        return original(client, operation_name, api_params)

    def counting_signed(requests, method, bucket, key, headers, body=b"", query=None):
        count("ListObjectsV2" if key is None else {"GET": "GetObject", "HEAD": "HeadObject"}.get(method)
              or ("CopyObject" if "x-amz-copy-source" in headers else "PutObject"))
        answer = signed(requests, method, bucket, key, headers, body, query)
        if method == "GET" and key is not None:
            counted["bytes read"] = counted.get("bytes read", 0) + len(answer.data)
        return answer

    BaseClient._make_api_call, SignedRequests.request = counting, counting_signed
    try:
        yield counted
    finally:
        BaseClient._make_api_call, SignedRequests.request = original, signed


def _iceberg(repository: str, ref: str, commit_id: str, table_name: str) -> dict:
    """The Iceberg metadata of a complete export (`iceberg.enabled`'s fresh write), over the export
    in the store, in this process: seconds, CPU and peak RSS of that step alone."""
    from exporter.config import load_config
    from exporter.export.iceberg_metadata import write_iceberg_metadata
    from exporter.export.manifest import ExportManifest
    from exporter.lakefs.client import LakeFS
    from exporter.storage.layout import export_location
    from exporter.storage.objectstore import ObjectStore

    config = load_config()
    store = ObjectStore(config, LakeFS(config.lakefs).storage_namespace(repository))
    location = export_location(config, ref, commit_id, table_name)
    manifest = ExportManifest.read(store, location)
    started, cpu = time.perf_counter(), time.process_time()
    record = write_iceberg_metadata(store, location, manifest.source_timestamps, log_files=manifest.log_files)
    return {"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu,
            "state": record["state"], "reason": record.get("reason", ""), "snapshots": len(record.get("snapshot_ids", {})),
            "peak_rss_mib": peak_rss_mib()}


def _iceberg_objects(repository: str, ref: str, commit_id: str, table_name: str) -> dict:
    """The floor of an export's Iceberg step in object writes: the files its Iceberg table wrote
    (manifests, manifest lists, path hashes, its metadata file), read first, then written again to a
    scratch folder as the step writes them (behind, `IO_THREADS` at once; the metadata file last, after
    the others) with nothing else to do: the seconds, this process's CPU and MinIO's meanwhile."""
    from exporter.config import load_config
    from exporter.export.iceberg_metadata import _ExportFiles
    from exporter.iceberg.files import WrittenBehind
    from exporter.lakefs.client import LakeFS
    from exporter.storage.layout import export_location, iceberg_files_location, iceberg_location
    from exporter.storage.objectstore import ObjectStore
    from exporter.threads import IO_THREADS

    config = load_config()
    store = ObjectStore(config, LakeFS(config.lakefs).storage_namespace(repository))
    location = export_location(config, ref, commit_id, table_name)
    keys = [name for folder in dict.fromkeys([iceberg_files_location(location), iceberg_location(location) + "metadata/"])
            for name, _, _ in store.list_objects(folder)]
    scratch = f"_bench-floor/{uuid.uuid4().hex}/"
    bodies = [(scratch + key.rsplit("/", 1)[-1], store.get(key)) for key in keys]
    *files, last = sorted(bodies, key=lambda kv: kv[0].endswith(".metadata.json"))
    before, started, cpu = thread_cpu_seconds(), time.perf_counter(), time.process_time()
    with WrittenBehind(_ExportFiles(store, ""), IO_THREADS) as behind:
        for key, body in files:
            behind.put(key, body)
        behind.flush()
    store.put(*last)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    minio = thread_cpu_seconds().get("MinIO", 0.0) - before.get("MinIO", 0.0)
    store.delete([key for key, _ in bodies])
    return {"objects": len(bodies), "bytes": sum(len(body) for _, body in bodies), "seconds": seconds,
            "cpu_seconds": cpu, "minio_cpu_seconds": minio}


def _rewrite(checkpoint_file: str, addresses_file: str, mode: str) -> dict:
    import pyarrow.parquet as pq

    from exporter.export.resolve import PathResolver
    from exporter.export.rewrite import rewrite_checkpoint, rewrite_checkpoint_file

    raw = Path(checkpoint_file).read_bytes()
    addresses = dict(line.split("\t") for line in Path(addresses_file).read_text().splitlines())
    started = time.perf_counter()
    if mode == "splice":
        count = rewrite_checkpoint_file("1.checkpoint.parquet", raw, PathResolver(addresses)).files_rewritten
    else:  # decode and re-encode the whole file, as the exporter did before
        table, count, _ = rewrite_checkpoint(pq.read_table(io.BytesIO(raw)), PathResolver(addresses))
        pq.write_table(table, io.BytesIO(), compression="snappy")
    return {"seconds": time.perf_counter() - started, "files": count, "peak_rss_mib": peak_rss_mib()}


class _FileSource:
    """A local file read by ranges, as the exporter reads an object by ranged GETs."""

    def __init__(self, path: str):
        self.file = open(path, "rb")
        self.size = Path(path).stat().st_size

    def read_range(self, start: int, end: int) -> bytes:
        self.file.seek(start)
        return self.file.read(end - start)


class _CountingSink:
    """Where a streamed rewrite goes: counted, not kept (an upload holds one part at most)."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)


def _stream(addresses_file: str, *parts: str) -> dict:
    """A multi-part checkpoint rewritten part by part, row group by row group, against a listing
    index loaded batch by batch: what a cold export does with each parquet file."""
    import pyarrow.parquet as pq

    from exporter.export.resolve import PathResolver
    from exporter.export.rewrite import rewrite_checkpoint_to
    from exporter.lakefs.addresses import AddressIndexBuilder

    started = time.perf_counter()
    builder = AddressIndexBuilder()
    for batch in pq.ParquetFile(addresses_file).iter_batches(batch_size=100_000):
        builder.add_arrays(batch.column("key"), batch.column("address"))
    index = builder.build()
    indexed = time.perf_counter()
    resolver = PathResolver(index)
    count = written = 0
    for part in parts:
        sink = _CountingSink()
        result = rewrite_checkpoint_to(Path(part).name, _FileSource(part), resolver, sink)
        count += result.files_rewritten
        written += sink.size
    return {"seconds": time.perf_counter() - started, "index_seconds": indexed - started, "files": count,
            "bytes_written": written, "index_mib": index.nbytes / 2**20, "peak_rss_mib": peak_rss_mib()}


def _diff(repository: str, left: str, right: str, table_path: str) -> dict:
    """A history diff computed cold (no cache): both sides' logs replayed, checkpoints included."""
    from exporter.config import load_config
    from exporter.diff.table import compute_diff
    from exporter.lakefs.client import LakeFS
    from exporter.lakefs.lake import Lake, ObjectStores

    config = load_config()
    lakefs = LakeFS(config.lakefs)
    started = time.perf_counter()
    diff = compute_diff(Lake(config, lakefs, ObjectStores(config)), repository, left, right, table_path)
    return {"seconds": time.perf_counter() - started, "lakefs_calls": lakefs.calls,
            "files": diff["files"]["right"]["count"] if diff["files"]["right"] else None,
            "rows": diff["row_count"]["right"], "peak_rss_mib": peak_rss_mib()}


def _gate(repository: str, source: str, destination: str, cache: str = "") -> dict:
    """The merge gate (`check_change`) of merging `source` into `destination`, cold: its time, lakeFS
    calls, object requests and bytes read; with `cache` ("diffs"), reading the diff cache first as
    the service does (`_precompute` filled it as the workers do), else with no cache."""
    from exporter.checks.gate import check_change
    from exporter.config import load_config
    from exporter.diff.table import DiffCache
    from exporter.lakefs.client import LakeFS
    from exporter.lakefs.lake import Lake, ObjectStores

    config = load_config()
    lakefs = LakeFS(config.lakefs)
    lake = Lake(config, lakefs, ObjectStores(config))
    lake.store(repository)  # the worker's client, made once
    diffs = DiffCache(config.redis, config.api.diff_cache_ttl_seconds) if cache == "diffs" else None
    with _jvm_peaks() as driver_peaks, _object_store_requests() as requests:
        started = time.perf_counter()
        report = check_change(lake, repository, source, destination, diffs=diffs)
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "lakefs_calls": lakefs.calls, "requests": requests, "tables": report.tables,
            "findings": [f.as_dict() for f in report.findings], "peak_rss_mib": peak_rss_mib(),
            "driver_peak_mib": max(driver_peaks, default=None)}


def _precompute(repository: str, ref: str, table_path: str) -> dict:
    """What a worker does after exporting a commit (`workers.answers.precompute_diff`): the table's
    diff of the commit `ref` names against its first parent, computed and cached."""
    from exporter.config import load_config
    from exporter.diff.table import DiffCache, cached_diff
    from exporter.lakefs.client import LakeFS, commit_id_of
    from exporter.lakefs.lake import Lake, ObjectStores

    config = load_config()
    lakefs = LakeFS(config.lakefs)
    commit_id = commit_id_of(lakefs, repository, ref)
    parents = lakefs.commit(repository, commit_id).parents
    started = time.perf_counter()
    _, cached = cached_diff(Lake(config, lakefs, ObjectStores(config)),
                            DiffCache(config.redis, config.api.diff_cache_ttl_seconds), repository,
                            parents[0] if parents else None, commit_id, table_path)
    return {"seconds": time.perf_counter() - started, "cached_before": cached, "peak_rss_mib": peak_rss_mib()}


def _rowdiff(repository: str, left: str, right: str, table_path: str, key: str = "") -> dict:
    """The row diff, cold: both snapshots compared, the differing files read (with `key`, the
    comma-separated key columns). A Spark job's driver peak (its JVM's VmHWM) is sampled while it runs."""
    from exporter.config import load_config
    from exporter.diff.rows.compute import RowDiffQuery, compute_row_diff
    from exporter.lakefs.client import LakeFS
    from exporter.lakefs.lake import Lake, ObjectStores

    config = load_config()
    lakefs = LakeFS(config.lakefs)
    with _jvm_peaks() as driver_peaks:
        started = time.perf_counter()
        diff = compute_row_diff(Lake(config, lakefs, ObjectStores(config)),
                                RowDiffQuery(repository, left, right, table_path, tuple(filter(None, key.split(",")))))
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "lakefs_calls": lakefs.calls, "counts": diff["counts"], "engine": diff["engine"],
            "bytes_read": diff.get("bytes_read"), "peak_rss_mib": peak_rss_mib(),
            "driver_peak_mib": max(driver_peaks, default=None)}


@contextmanager
def _jvm_peaks():
    """The VmHWM of this process's descendant JVMs (a Spark job's driver), sampled every half second
    while the block runs: a list, filled as it goes."""
    import threading

    from devtools.procs import jvms_below, memory_mib

    me, peaks, done = os.getpid(), [], threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            for pid in jvms_below(lambda pid, command: pid == me):
                peak = memory_mib(pid).get("VmHWM")
                if peak is not None:
                    peaks.append(peak)

    threading.Thread(target=sample, daemon=True).start()
    try:
        yield peaks
    finally:
        done.set()


def _session_peak_mib(spark) -> float:
    """A Spark session's JVM's peak resident memory so far (VmHWM), in MiB."""
    from devtools.procs import memory_mib

    return memory_mib(spark.sparkContext._gateway.proc.pid)["VmHWM"]


def _exceptall(repository: str, left: str, right: str, table_path: str) -> dict:
    """The full-scan way table-diff tools take: Spark reads both versions whole and runs `exceptAll`
    both ways. Timed from the reads (the session is up); peak memory is the JVM's (VmHWM)."""
    from devtools.spark import stack_spark_session

    spark = stack_spark_session(app_name="bench-exceptall")
    before = spark.read.format("delta").load(f"s3a://{repository}/{left}/{table_path}")
    after = spark.read.format("delta").load(f"s3a://{repository}/{right}/{table_path}")
    started = time.perf_counter()
    removed, added = before.exceptAll(after).count(), after.exceptAll(before).count()
    seconds = time.perf_counter() - started
    peak = _session_peak_mib(spark)
    spark.stop()
    return {"seconds": seconds, "counts": {"removed": removed, "added": added}, "peak_rss_mib": peak}


def _keyscan(repository: str, ref: str, table_path: str, key: str) -> dict:
    """The full-scan way a generic check takes a key rule: Spark reads the table whole at `ref` and
    counts its keys seen more than once or null. Timed from the read (the session is up); peak
    memory is the JVM's (VmHWM)."""
    from devtools.spark import stack_spark_session

    spark = stack_spark_session(app_name="bench-keyscan")
    table = spark.read.format("delta").load(f"s3a://{repository}/{ref}/{table_path}")
    started = time.perf_counter()
    repeated = table.groupBy(key).count().where(f"count > 1 OR {key} IS NULL").count()
    seconds = time.perf_counter() - started
    peak = _session_peak_mib(spark)
    spark.stop()
    return {"seconds": seconds, "repeated": repeated, "peak_rss_mib": peak}


def _append(repository: str, branch: str, commit_id: str, table_name: str) -> dict:
    """Bring the branch table to a commit's export (the first one creates it)."""
    from exporter.config import load_config
    from exporter.branch_tables.table import append_commit
    from exporter.lakefs.lake import Lake

    # the branch measured keeps branch tables, as a deployment's `branch_tables` says of the branches it follows
    config = load_config().model_copy(update={"branch_tables": (branch,)})
    outcome = append_commit(Lake.connect(config), repository, branch, commit_id, table_name)
    return {"seconds": outcome.seconds, "lakefs_calls": outcome.lakefs_calls, "appended": outcome.appended,
            "skipped": outcome.skipped, "peak_rss_mib": peak_rss_mib()}


def _republish(repository: str, branch: str, commit_id: str, table_name: str) -> dict:
    """The alternative to appending: copy a commit's whole export to a fixed location (server-side),
    as a table re-published at one path after every commit must."""
    from exporter.config import load_config
    from exporter.lakefs.client import LakeFS
    from exporter.storage.layout import MANIFEST, export_location
    from exporter.storage.objectstore import ObjectStore

    config = load_config()
    lakefs = LakeFS(config.lakefs)
    started = time.perf_counter()
    store = ObjectStore(config, lakefs.storage_namespace(repository))
    source = export_location(config, branch, commit_id, table_name)
    target = f"{config.export_prefix}/{branch}/republished/{table_name}/"
    keys = [k for k in store.list_keys(source) if not k.endswith(MANIFEST)]
    for key in keys:
        store.copy(key, target + key[len(source):])
    return {"seconds": time.perf_counter() - started, "lakefs_calls": lakefs.calls, "objects": len(keys),
            "peak_rss_mib": peak_rss_mib()}


def _presign(how: str, count: str, real_object: str) -> dict:
    """`count` presigned GET URLs for synthetic data-file addresses (as a Delta log holds them:
    URIs, in lakeFS imports' layout), by `exporter.storage.presign.Presigner` (one instance, as one query
    uses) or by boto3's `generate_presigned_url` (SigV4, path-style; bucket and key given split).
    `real_object`'s URL is made first, outside the timing, and fetched: it must answer 200."""
    import httpx

    from exporter.config import load_config
    from exporter.storage.objectstore import split_uri

    config = load_config()
    lifetime = config.sharing.url_lifetime_seconds
    uris = [f"s3://{split_uri(real_object)[0]}/bulk-import/{uuid.UUID(int=i // 50_000).hex}/p={i % 100:04d}/"
            f"part-{i:07d}-{uuid.UUID(int=i).hex[:8]}.parquet" for i in range(int(count))]
    if how == "project":
        from exporter.storage.presign import Presigner

        presigner = Presigner(config, lifetime)
        sign = lambda uri: presigner.presign(uri).url  # noqa: E731
        targets = uris
    else:
        import boto3
        from botocore.config import Config as BotoConfig

        store = config.object_store_for(real_object)
        client = boto3.client("s3", endpoint_url=store.endpoint or None, region_name=store.region,
                              aws_access_key_id=store.access_key_id,
                              aws_secret_access_key=store.secret_access_key.get_secret_value(),
                              config=BotoConfig(signature_version="s3v4", s3={"addressing_style": "path"}))
        sign = lambda target: client.generate_presigned_url(  # noqa: E731
            "get_object", Params={"Bucket": target[0], "Key": target[1]}, ExpiresIn=lifetime)
        targets = [split_uri(uri) for uri in uris]
        real_object = split_uri(real_object)
    checked = httpx.get(sign(real_object), timeout=30)  # warms up either signer too
    started = time.perf_counter()
    for target in targets:
        sign(target)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "urls": len(targets), "us_per_url": seconds / len(targets) * 1e6,
            "status": checked.status_code, "body": checked.content.decode(errors="replace")[:200],
            "peak_rss_mib": peak_rss_mib()}


def _livefiles(table_uri: str) -> dict:
    """The live files of a Delta table's latest snapshot as delta-rs reads them: the count a query's
    answer must hold, taken by another reader than the one the server uses."""
    import os

    import pyarrow as pa
    from deltalake import DeltaTable

    options = {"AWS_ENDPOINT_URL": os.environ["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"],
               "AWS_ACCESS_KEY_ID": os.environ["LAKEFS_DELTA_OBJECT_STORE_ACCESS_KEY_ID"],
               "AWS_SECRET_ACCESS_KEY": os.environ["LAKEFS_DELTA_OBJECT_STORE_SECRET_ACCESS_KEY"],
               "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    started = time.perf_counter()
    table = DeltaTable(table_uri, storage_options=options)
    files = pa.table(table.get_add_actions(flatten=True)).num_rows
    return {"seconds": time.perf_counter() - started, "version": table.version(), "files": files,
            "peak_rss_mib": peak_rss_mib()}


class _LocalStore:
    """`ObjectStore`'s reads over a local folder that stands for the storage namespace `namespace`."""

    def __init__(self, folder: Path, namespace: str):
        self.folder, self.namespace = folder, namespace.rstrip("/")

    def uri(self, relative: str) -> str:
        return f"{self.namespace}/{relative}"

    address = uri  # the namespace's addresses are its URIs (no percent-encoding in these keys)

    def get(self, relative: str) -> bytes:
        from exporter.errors import NotFound

        try:
            return (self.folder / relative).read_bytes()
        except FileNotFoundError:
            raise NotFound(relative) from None

    def get_uri(self, uri: str) -> bytes:
        return self.get(uri.removeprefix(self.namespace + "/"))

    def get_range(self, uri: str, start: int, end: int) -> bytes:
        with open(self.folder / uri.removeprefix(self.namespace + "/"), "rb") as file:
            file.seek(start)
            return file.read(end - start)

    def list_objects(self, relative: str, start_after: str = "", stop_at: str = "") -> list[tuple[str, int, float]]:
        found = sorted(str(path.relative_to(self.folder)) for path in (self.folder / relative).rglob("*") if path.is_file())
        return [(name, (self.folder / name).stat().st_size, 0.0) for name in found
                if name > start_after and (not stop_at or name < stop_at)]

    def list_sizes(self, relative: str) -> dict[str, int]:
        return {name: size for name, size, _ in self.list_objects(relative)}

    def list_keys(self, relative: str) -> list[str]:
        return [name for name, _, _ in self.list_objects(relative)]

    def put(self, relative: str, body: bytes, content_type: str = "") -> None:
        (self.folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (self.folder / relative).write_bytes(body)

    def copy(self, source_relative: str, relative: str) -> None:
        """A server-side copy: no bytes through the process (a hard link)."""
        (self.folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (self.folder / relative).unlink(missing_ok=True)
        os.link(self.folder / source_relative, self.folder / relative)

    def delete(self, relatives: list[str]) -> None:
        for relative in relatives:
            (self.folder / relative).unlink(missing_ok=True)


_LINES_NAMESPACE = "s3://lakefs-data/bench"
_PARENT, _CHILD = "_lakefs/exported/main/parent/t/", "_lakefs/exported/main/child/t/"  # export locations: ref, commit, table


def _sharing_table(count: str, folder: str) -> dict:
    """A table whose checkpoint (version 1) holds `count` adds of data files under an import's
    source (as `build_table` makes them), written to `folder`: made here so the 1M dicts
    `synthetic_checkpoint` takes never count in the measured process's memory."""
    import pyarrow.parquet as pq

    from bench.synthetic import METADATA, PROTOCOL, synthetic_checkpoint

    log = Path(folder) / "t" / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    names = [f"s3://lakefs-data/bulk-import/{uuid.UUID(int=i // 50_000).hex}/p={i % 100:04d}/"
             f"part-{i:07d}-{uuid.UUID(int=i).hex[:8]}.parquet" for i in range(int(count))]
    (log / f"{0:020d}.json").write_text("\n".join(json.dumps(action) for action in (PROTOCOL, METADATA)) + "\n")
    pq.write_table(synthetic_checkpoint(names), log / f"{1:020d}.checkpoint.parquet", row_group_size=65_536)
    (log / f"{1:020d}.json").write_text(json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n")
    return {"files": len(names)}


def _sharing_lines(count: str, fmt: str, profile: str = "") -> dict:
    """A snapshot query's whole answer (`query_lines` encoded by `encode_lines`, as `serve` streams
    it) for a table of `count` checkpointed files read from a local folder, in this process: the
    server's CPU and memory for the answer without HTTP. With `profile`, pyinstrument's report there
    (HTML for a `.html` name, else text)."""
    import tempfile

    from exporter.config import Config, ObjectStoreConfig
    from exporter.sharing.lines import encode_lines, query_lines
    from exporter.sharing.versions import SharedTable
    from exporter.storage.presign import Presigner
    from exporter.storage.scope import ReadScope

    folder = Path(tempfile.gettempdir()) / f"bench-sharing-lines-{count}"
    if not (folder / "t" / "_delta_log" / f"{1:020d}.json").exists():
        measure("sharing-table", count, str(folder))
    config = Config(object_store=ObjectStoreConfig(endpoint="http://127.0.0.1:19000", region="us-east-1",
                                                   access_key_id="AKIDEXAMPLE", secret_access_key="bench-secret"))
    table = SharedTable(_LocalStore(folder, _LINES_NAMESPACE), "t/", "t", 1,
                        scope=ReadScope(_LINES_NAMESPACE, allowed=("s3://lakefs-data/bulk-import",)))
    profiler = _profiler(profile)
    before = peak_rss_mib()
    started, cpu = time.perf_counter(), time.process_time()
    lines = size = 0
    first, counting = None, 0.0  # the count of lines is the reader's work: not the answer's CPU
    for chunk in encode_lines(query_lines(table.snapshot(), fmt, Presigner(config, 3600), versioned=False)):
        first = first or time.perf_counter()
        counted = time.process_time()
        lines += chunk.count(b"\n")
        size += len(chunk)
        counting += time.process_time() - counted
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu - counting
    if profiler is not None:
        profiler.stop()
        Path(profile).write_text(profiler.output_html() if profile.endswith(".html") else profiler.output_text())
    return {"format": fmt, "lines": lines, "bytes": size, "seconds": seconds, "cpu_seconds": cpu,
            "us_per_line": cpu / lines * 1e6, "first_chunk_seconds": (first or started) - started,
            "rss_before_mib": before, "peak_rss_mib": peak_rss_mib()}


_ICEBERG_NEW_FILES = 10  # the incremental case: one commit of this many files on the exported table


def _iceberg_table(count: str, folder: str) -> dict:
    """Two exports of a table in `folder` (the storage namespace `_LINES_NAMESPACE`): `_PARENT`, a
    checkpoint (version 1) of `count` adds as `build_table` makes them (absolute paths, stats of one
    long column), and `_CHILD`, the same log (hard links) and a commit of 10 new files (version 2).
    Made in its own process, so the dicts `synthetic_checkpoint` takes never count in the measured one."""
    import pyarrow.parquet as pq

    from bench.synthetic import METADATA, PROTOCOL, synthetic_checkpoint

    parent, child = Path(folder) / _PARENT / "_delta_log", Path(folder) / _CHILD / "_delta_log"
    parent.mkdir(parents=True, exist_ok=True)
    child.mkdir(parents=True, exist_ok=True)
    names = [f"s3://lakefs-data/bulk-import/{uuid.UUID(int=i // 50_000).hex}/p={i % 100:04d}/"
             f"part-{i:07d}-{uuid.UUID(int=i).hex[:8]}.parquet" for i in range(int(count))]
    (parent / f"{0:020d}.json").write_text("\n".join(json.dumps(action) for action in (PROTOCOL, METADATA)) + "\n")
    pq.write_table(synthetic_checkpoint(names), parent / f"{1:020d}.checkpoint.parquet", row_group_size=65_536)
    (parent / f"{1:020d}.json").write_text(json.dumps({"commitInfo": {"operation": "WRITE", "timestamp": 1}}) + "\n")
    (parent / "_last_checkpoint").write_text(json.dumps({"version": 1, "size": len(names) + 2}))
    for name in os.listdir(parent):
        os.link(parent / name, child / name)
    adds = [{"add": {"path": f"s3://lakefs-data/bulk-import/new/part-{i:07d}.parquet", "partitionValues": {},
                     "size": 100, "modificationTime": 0, "dataChange": True,
                     "stats": json.dumps({"numRecords": 10, "minValues": {"id": i}, "maxValues": {"id": i + 9},
                                          "nullCount": {"id": 0}})}} for i in range(_ICEBERG_NEW_FILES)]
    (child / f"{2:020d}.json").write_text("\n".join(json.dumps(action) for action in [
        {"commitInfo": {"operation": "WRITE", "timestamp": 2}}, *adds]) + "\n")
    return {"files": len(names)}


def _iceberg_metadata(count: str, mode: str, profile: str = "") -> dict:
    """The Iceberg metadata of an export of `count` checkpointed files, as `write_iceberg_metadata`
    writes it beside the export, in this process over a local folder standing for the object store
    (copies are hard links): `fresh` the parent export's table, `incremental` the child's (one commit
    of 10 files more), from the parent's table written before (in another process)."""
    import shutil
    import tempfile

    from exporter.export.iceberg_metadata import write_iceberg_metadata
    from exporter.storage.layout import iceberg_files_location

    folder = Path(tempfile.gettempdir()) / f"bench-iceberg-{count}"
    if not (folder / _CHILD / "_delta_log" / f"{2:020d}.json").exists():
        measure("iceberg-table", count, str(folder))
    location = _PARENT if mode == "fresh" else _CHILD
    for name in ("metadata", "data"):
        shutil.rmtree(folder / location / name, ignore_errors=True)
        shutil.rmtree(folder / iceberg_files_location(location) / name, ignore_errors=True)
    parent = None
    if mode == "incremental":
        parent = (_PARENT, measure("iceberg-metadata", count, "fresh")["record"])
    store = _LocalStore(folder, _LINES_NAMESPACE)
    profiler = _profiler(profile)
    before = peak_rss_mib()
    started, cpu = time.perf_counter(), time.process_time()
    record = _write_iceberg(write_iceberg_metadata, store, location, parent)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    if profiler is not None:
        profiler.stop()
        Path(profile).write_text(profiler.output_html() if profile.endswith(".html") else profiler.output_text())
    files = int(count) + (_ICEBERG_NEW_FILES if mode == "incremental" else 0)
    return {"mode": mode, "files": files, "seconds": seconds, "cpu_seconds": cpu, "us_per_file": cpu / files * 1e6,
            "snapshots": len(record.get("snapshot_ids", {})), "state": record["state"], "record": record,
            "rss_before_mib": before, "peak_rss_mib": peak_rss_mib()}


def _write_iceberg(write, store, location: str, parent: tuple[str, dict] | None) -> dict:
    import exporter
    from exporter.export.manifest import ICEBERG, ExportManifest

    derived_from = None if parent is None else \
        (parent[0], ExportManifest({ICEBERG: parent[1], "exporter_version": exporter.__version__}))
    return write(store, location, {}, derived_from=derived_from)



def _pyiceberg_read(uri: str, namespace: str, table_name: str) -> dict:
    """PyIceberg's full read of a table through the catalog at `uri`, as a reader without bucket keys
    runs it (remote signing, the catalog's token alone): loadTable, then `scan().to_arrow()`; the
    seconds of each, the rows, the sign requests PyIceberg sent and the files they were for."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        del os.environ[name]  # no bucket keys: every object request is signed by the catalog
    from collections import Counter

    from pyiceberg.catalog import load_catalog
    from pyiceberg.io import fsspec
    from s3fs import S3FileSystem

    # PyIceberg 0.12 makes a filesystem for each of its threads and, on each, unregisters and
    # registers the signer again; s3fs hands every thread the same cached instance, so a request
    # signed meanwhile on another thread goes out unsigned and MinIO answers 403 (apache/iceberg-python
    # #3896; here 2 of 7 reads of a 100-file table, the failing request never reaching the catalog's
    # signer). An instance per thread, as PyIceberg's per-thread cache means it to be.
    S3FileSystem.cachable = False
    signed: list[str] = []
    sign = fsspec.S3V4RestSigner.__call__

    def counted(self, request, **kwargs):
        signed.append(request.method)
        return sign(self, request, **kwargs)

    fsspec.S3V4RestSigner.__call__ = counted
    catalog = load_catalog("bench", **{"type": "rest", "uri": uri, "token": os.environ["BENCH_CATALOG_TOKEN"]})
    started = time.perf_counter()
    table = catalog.load_table((*namespace.split("\x1f"), table_name))
    loaded = time.perf_counter() - started
    scan = table.scan()
    started = time.perf_counter()
    files = sum(1 for _ in scan.plan_files())
    planned = time.perf_counter() - started
    started, cpu = time.perf_counter(), time.process_time()
    rows = scan.to_arrow().num_rows  # a reader's whole read: it plans again, then reads every file
    return {"load_seconds": loaded, "plan_seconds": planned, "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu, "files": files, "rows": rows, "sign_requests": len(signed),
            "sign_methods": dict(Counter(signed)),
            "remote_signing": "s3.signer.endpoint" in table.io.properties or "s3.signer.uri" in table.io.properties,
            "peak_rss_mib": peak_rss_mib()}


def _profiler(profile: str | None):
    """pyinstrument's profiler, started, when a profile is asked for; else None."""
    if not profile:
        return None
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.001)
    profiler.start()
    return profiler


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    print(json.dumps({"export": _export, "iceberg": _iceberg, "iceberg-objects": _iceberg_objects, "rewrite": _rewrite, "stream": _stream, "diff": _diff, "gate": _gate, "precompute": _precompute, "keyscan": _keyscan,
                      "append": _append, "republish": _republish, "rowdiff": _rowdiff, "exceptall": _exceptall,
                      "presign": _presign, "livefiles": _livefiles,
                      "sharing-table": _sharing_table, "sharing-lines": _sharing_lines,
                      "iceberg-table": _iceberg_table, "iceberg-metadata": _iceberg_metadata,
                      "pyiceberg-read": _pyiceberg_read}[command](*arguments)))
