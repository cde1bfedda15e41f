"""Synthetic Delta tables in lakeFS for the benchmarks (and one test): valid logs, tiny data objects."""

from __future__ import annotations

import io
import json
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ADD_TYPE = pa.struct([("path", pa.string()), ("partitionValues", pa.map_(pa.string(), pa.string())),
                      ("size", pa.int64()), ("modificationTime", pa.int64()), ("dataChange", pa.bool_()),
                      ("stats", pa.string())])
PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
METADATA = {"metaData": {"id": "bench", "format": {"provider": "parquet", "options": {}}, "partitionColumns": [],
                         "schemaString": json.dumps({"type": "struct", "fields": [
                             {"name": "id", "type": "long", "nullable": True, "metadata": {}}]}),
                         "configuration": {}, "createdTime": 0}}


def data_file(rows: int = 10) -> bytes:
    """A data file of `build_table`'s schema: `rows` ids from 0 (the adds' stats say 10 records)."""
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(range(rows), pa.int64())}), sink)
    return sink.getvalue()


def synthetic_checkpoint(names: list[str], size: int = 100, stats_parsed: bool = False) -> pa.Table:
    """With `stats_parsed`, the adds carry the stats as a struct too, as Delta Spark writes them by
    default (`delta.checkpoint.writeStatsAsStruct`)."""
    # stats as writers record them (per-file bounds), so a checkpoint has a realistic size per add
    adds = pa.array([{"path": n, "partitionValues": [], "size": size, "modificationTime": 0, "dataChange": False,
                      "stats": f'{{"numRecords":10,"minValues":{{"id":{i * 10}}},"maxValues":{{"id":{i * 10 + 9}}},'
                               f'"nullCount":{{"id":0}}}}'} for i, n in enumerate(names)], type=ADD_TYPE)
    if stats_parsed:
        first = np.arange(len(names), dtype=np.int64) * 10

        def by_column(values: np.ndarray) -> pa.StructArray:
            return pa.StructArray.from_arrays([pa.array(values)], names=["id"])

        parsed = pa.StructArray.from_arrays([pa.array(np.full(len(names), 10, np.int64)), by_column(first),
                                             by_column(first + 9), by_column(np.zeros(len(names), np.int64))],
                                            names=["numRecords", "minValues", "maxValues", "nullCount"])
        adds = pa.StructArray.from_arrays([*adds.flatten(), parsed], names=[*ADD_TYPE.names, "stats_parsed"])
    protocol_type = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
    metadata_type = pa.struct([("id", pa.string()), ("schemaString", pa.string()),
                               ("partitionColumns", pa.list_(pa.string())),
                               ("format", pa.struct([("provider", pa.string()), ("options", pa.map_(pa.string(), pa.string()))])),
                               ("configuration", pa.map_(pa.string(), pa.string())), ("createdTime", pa.int64())])
    rows = len(names) + 2
    nulls = lambda t: pa.nulls(rows - 1, type=t)  # noqa: E731
    add_column = pa.concat_arrays([pa.nulls(2, type=adds.type), adds])
    protocol = pa.concat_arrays([pa.array([PROTOCOL["protocol"]], type=protocol_type), nulls(protocol_type)])
    meta = METADATA["metaData"]
    metadata = pa.concat_arrays([pa.nulls(1, type=metadata_type),
                                 pa.array([{**meta, "format": {"provider": "parquet", "options": []}, "configuration": []}],
                                          type=metadata_type), pa.nulls(rows - 2, type=metadata_type)])
    return pa.table({"protocol": protocol, "metaData": metadata, "add": add_column})


def build_table(lakefs, gateway, repository: str, files: int, commits_after: int = 50, partitions: int = 0,
                body: bytes = b"x", stats_parsed: bool = False) -> str:
    """N tiny data objects (imported: see `import_objects`; each `body`, a placeholder byte unless a
    reader must read them), a checkpoint of N adds at version 1, then 50 commits of one add each;
    with `partitions`, the files spread over `p=<k>/` folders; `stats_parsed`: `synthetic_checkpoint`'s."""
    prefix = f"tables/t{files}/"
    folder = (lambda i: f"p={i % partitions:04d}/") if partitions else (lambda i: "")
    names = [f"{folder(i)}part-{i:07d}-{uuid.uuid4().hex[:8]}.parquet" for i in range(files + commits_after)]
    import_objects(lakefs, repository, "main", prefix, names, body=body)
    log = prefix + "_delta_log/"
    lakefs.upload_object(repository, "main", log + f"{0:020d}.json",
                         (json.dumps({"commitInfo": {"operation": "CREATE TABLE"}}) + "\n" + json.dumps(PROTOCOL) + "\n"
                          + json.dumps(METADATA) + "\n").encode())
    sink = io.BytesIO()
    # row groups of 65,536 rows, about the 16 MiB Spark's checkpoints of such adds get
    readable = len(body) > 1  # a data file a reader may open: the adds give its size
    pq.write_table(synthetic_checkpoint(names[:files], len(body) if readable else 100, stats_parsed), sink,
                   row_group_size=65_536)
    lakefs.upload_object(repository, "main", log + f"{1:020d}.checkpoint.parquet", sink.getvalue())
    lakefs.upload_object(repository, "main", log + f"{1:020d}.json",
                         json.dumps({"commitInfo": {"operation": "WRITE"}}).encode() + b"\n")
    for v, name in enumerate(names[files:], start=2):
        add = {"add": {"path": name, "partitionValues": {}, "size": len(body), "modificationTime": 0, "dataChange": True,
                       "stats": '{"numRecords":10}'}}  # as writers record them (the placeholders have no footer)
        lakefs.upload_object(repository, "main", log + f"{v:020d}.json",
                             (json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + json.dumps(add) + "\n").encode())
    lakefs.upload_object(repository, "main", f"_lakefs_tables/t{files}.yaml",
                         f"name: t{files}\ntype: delta\npath: {prefix.rstrip('/')}\n".encode())
    return lakefs.commit_branch(repository, "main", f"bench table of {files} files")


def add_files(lakefs, gateway, repository: str, files: int, count: int, version: int = 52, branch: str = "main") -> str:
    """One more commit on `build_table`'s table (version 52 after its 0..51) on `branch`: `count` new data files."""
    prefix = f"tables/t{files}/"
    names = [f"part-new-{uuid.uuid4().hex[:8]}.parquet" for _ in range(count)]
    for name in names:
        gateway.put_object(Bucket=repository, Key=f"{branch}/{prefix}{name}", Body=b"x")
    adds = [json.dumps({"add": {"path": n, "partitionValues": {}, "size": 1, "modificationTime": 0, "dataChange": True,
                                "stats": '{"numRecords":10}'}}) for n in names]
    lakefs.upload_object(repository, branch, f"{prefix}_delta_log/{version:020d}.json",
                         "\n".join([json.dumps({"commitInfo": {"operation": "WRITE"}}), *adds, ""]).encode())
    return lakefs.commit_branch(repository, branch, f"{count} more files")


def build_history(lakefs, repository: str, versions: int, checkpoint_every: int = 10) -> str:
    """A table with `versions` commits (one add each), a checkpoint every 10, on a branch off main."""
    log = "tables/history/_delta_log/"
    lakefs.upload_object(repository, "main", log + f"{0:020d}.json",
                         (json.dumps({"commitInfo": {"operation": "CREATE TABLE", "timestamp": 1}}) + "\n"
                          + json.dumps(PROTOCOL) + "\n" + json.dumps(METADATA) + "\n").encode())
    lakefs.commit_branch(repository, "main", "create")
    lakefs.create_branch(repository, "topic", "main")
    names = []

    def upload(v: int) -> None:
        name = f"part-{v:07d}.parquet"
        names.append(name)
        add = {"add": {"path": name, "partitionValues": {}, "size": 1, "modificationTime": 0, "dataChange": True,
                       "stats": '{"numRecords":10}'}}
        info = {"commitInfo": {"operation": "WRITE", "timestamp": 1_700_000_000_000 + v,
                               "operationParameters": {"mode": "Append"}}}
        lakefs.upload_object(repository, "topic", log + f"{v:020d}.json",
                             (json.dumps(info) + "\n" + json.dumps(add) + "\n").encode())
        if v % checkpoint_every == 0:
            sink = io.BytesIO()
            pq.write_table(synthetic_checkpoint(list(names)), sink)
            lakefs.upload_object(repository, "topic", log + f"{v:020d}.checkpoint.parquet", sink.getvalue())

    for v in range(1, versions + 1):
        upload(v)
    return lakefs.commit_branch(repository, "topic", f"{versions} versions")


def running_stack():
    """The local stack (started if needed), this process pointed at it: (state, config, lakeFS client)."""
    import os

    from exporter.config import load_config
    from exporter.lakefs.client import LakeFS
    from devtools import stack

    state = stack.up()
    os.environ.update(state.environment())
    config = load_config()
    return state, config, LakeFS(config.lakefs)


def new_repository(lakefs, name_prefix: str) -> str:
    from devtools import stack

    repository = f"{name_prefix}-{uuid.uuid4().hex[:6]}"
    lakefs.create_repository(repository, f"s3://{stack.BUCKET}/{repository}")
    return repository


def gateway_client(state):
    """boto3 on lakeFS's S3 gateway (`<repository>/<branch>/<path>`), for writing many objects fast."""
    import boto3

    return boto3.client("s3", endpoint_url=state.lakefs_endpoint, region_name="us-east-1",
                        aws_access_key_id=state.lakefs_access_key_id, aws_secret_access_key=state.lakefs_secret_access_key)


def object_store_client():
    """boto3 straight to the stack's MinIO."""
    import os

    import boto3

    return boto3.client("s3", endpoint_url=os.environ["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"], region_name="us-east-1",
                        aws_access_key_id=os.environ["LAKEFS_DELTA_OBJECT_STORE_ACCESS_KEY_ID"],
                        aws_secret_access_key=os.environ["LAKEFS_DELTA_OBJECT_STORE_SECRET_ACCESS_KEY"])


def put_extracted(bucket: str, archive_key: str, objects) -> None:
    """`objects` ((key, body) pairs) into the stack's MinIO in one request: a tar that MinIO extracts
    (its snowball auto-extract: about 1,500 objects a second here, five times the rate of single PUTs)."""
    import tarfile

    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for key, body in objects:
            info = tarfile.TarInfo(key)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    object_store_client().put_object(Bucket=bucket, Key=archive_key, Body=archive.getvalue(),
                                     Metadata={"Snowball-Auto-Extract": "true"})


def import_objects(lakefs, repository: str, branch: str, destination: str, names: list[str], batch: int = 50_000,
                   body: bytes = b"x") -> None:
    """`names` (relative to `destination/`) as objects of `body` on `branch`, uncommitted, fast: MinIO
    extracts them from tar archives (`put_extracted`), then lakeFS imports the prefix in one job
    (metadata only)."""
    import time

    from devtools import stack

    source = f"bulk-import/{uuid.uuid4().hex}/"
    for start in range(0, len(names), batch):
        put_extracted(stack.BUCKET, f"{source}batch-{start}.tar",
                      ((source + name, body) for name in names[start:start + batch]))
    job = lakefs.import_prefix(repository, branch, f"s3://{stack.BUCKET}/{source}", destination.rstrip("/") + "/",
                               f"import {len(names):,} objects")
    while True:
        status = lakefs.import_status(repository, branch, job)
        if status["completed"]:
            return
        if status.get("error"):
            raise RuntimeError(f"lakeFS import of {len(names):,} objects failed: {status['error']['message']}")
        time.sleep(0.5)


def synthetic_table(lakefs, gateway, name_prefix: str, files: int, body: bytes = b"x",
                    stats_parsed: bool = False) -> tuple[str, str]:
    """A new repository holding `build_table`'s table of `files` files (each `body`, `stats_parsed`):
    (repository, commit id)."""
    repository = new_repository(lakefs, f"{name_prefix}-{files}")
    print(f"building a table of {files:,} files in {repository} ...", flush=True)
    return repository, build_table(lakefs, gateway, repository, files, partitions=100 if files >= 100_000 else 0,
                                   body=body, stats_parsed=stats_parsed)
