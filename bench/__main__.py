"""Benchmarks: `python -m bench` (or `make bench`) against the local stack. Prints a markdown table
and writes it to bench/results/<date>.md.

1. checkpoint rewrite throughput: a synthetic checkpoint of N add actions, rewritten in memory;
2. end-to-end export of synthetic tables in lakeFS (a checkpoint of N adds + 50 JSON commits after
   it), cold (first export) and warm (the manifest exists: a no-op), with lakeFS calls and peak memory,
   beside lakeFS's own Lua Delta exporter run as a post-commit hook on the same table (bench/lua_exporter.py);
3. history diff of a table with N versions (checkpoint every 10): cold, and cached p50/p99;
4. a commit storm (bench/webhooks.py): 200 commits at once, 3 tables each, 2 workers, with where its
   CPU went (each part of the stack, a table export's share, the same commits with no actions beside);
5. Delta Sharing: presigning URLs (exporter.storage.presign beside boto3's `generate_presigned_url`), and a
   snapshot query of an N-file branch table through the real server (bench/sharing.py), in both
   response formats: time to first byte and to the last, lines and bytes, the server's peak RSS;
6. the grant at scale (bench/grant.py): a table's folders and lakeFS's decision about each, and the
   Iceberg signer's first and later signatures, on a table of 1M files in 10,000 folders;
7. single-object requests to MinIO (PUT, GET, copy, HEAD): CPU and wall a request, signed in-process
   (exporter.storage.requests) beside boto3's client.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path


from bench.isolated import measure
from bench.measure import peak_rss_mib, percentile, wait_until_quiet
from bench.synthetic import (build_history, build_table, gateway_client, new_repository, running_stack,
                             synthetic_checkpoint, synthetic_table)

RESULTS = Path(__file__).resolve().parent / "results"
REPEATS = 5  # runs of a short single-process measurement, of which the median is reported
def bench_checkpoint_rewrite(actions: int) -> list[dict]:
    """A parquet checkpoint file of N adds to its rewritten file: the splice the exporter does (only the
    path column chunks re-encoded) beside decoding and re-encoding the whole file, as before; each in
    its own process, so each peak RSS is that rewrite's."""
    import io
    import tempfile

    import pyarrow.parquet as pq

    names = [f"part-{i:07d}-{uuid.UUID(int=i).hex}.snappy.parquet" for i in range(actions)]
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        checkpoint, addresses = Path(scratch) / "checkpoint.parquet", Path(scratch) / "addresses.tsv"
        sink = io.BytesIO()
        pq.write_table(synthetic_checkpoint(names), sink)
        checkpoint.write_bytes(sink.getvalue())
        addresses.write_text("\n".join(f"{n}\ts3://bucket/ns/data/g{i // 1000:05d}/c{i:08d}" for i, n in enumerate(names)))
        for mode, label in (("splice", "splice path columns (exporter)"), ("whole", "decode + re-encode whole file (before)")):
            runs = [measure("rewrite", str(checkpoint), str(addresses), mode) for _ in range(REPEATS)]
            assert all(run["files"] == actions for run in runs)
            seconds = sorted(run["seconds"] for run in runs)
            median = seconds[len(seconds) // 2]  # the machine is shared: the median of a few runs, and their spread
            rows.append({"benchmark": f"checkpoint file rewrite, {actions:,} adds: {label} "
                                      f"(median of {REPEATS} runs, {seconds[0]:.2f} to {seconds[-1]:.2f} s)",
                         "seconds": median, "files_per_s": actions / median, "lakefs_calls": 0,
                         "peak_rss_mib": max(run["peak_rss_mib"] for run in runs)})
    return rows


def bench_streaming_checkpoint(actions: int, parts: int = 10, path_order: bool = True) -> list[dict]:
    """A multi-part checkpoint of N adds (parts of N/parts rows, row groups of 262,144) rewritten
    streaming against a listing index of N objects, in its own process: seconds and peak RSS.
    In path order each row group is probed against its slice of the listing; in random order
    (`path_order=False`) against all of it."""
    import random

    import tempfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.synthetic import ADD_TYPE

    if not actions:
        return []
    with tempfile.TemporaryDirectory() as scratch:
        addresses_file = Path(scratch) / "addresses.parquet"
        part_files = []
        per_part = -(-actions // parts)
        with pq.ParquetWriter(addresses_file, pa.schema([("key", pa.string()), ("address", pa.string())])) as listing:
            for part in range(parts):
                first, last = part * per_part, min(actions, (part + 1) * per_part)
                names = [f"part-{i:08d}-{uuid.UUID(int=i).hex}.snappy.parquet" for i in range(first, last)]
                listing.write_table(pa.table({"key": names, "address": [
                    f"s3://bucket/ns/data/g{i // 1000:06d}/c{i:08d}" for i in range(first, last)]}))
                if not path_order:  # the part's rows in random order, so every row group spans the part
                    random.Random(part).shuffle(names)
                count = len(names)
                adds = pa.StructArray.from_arrays([
                    pa.array(names, pa.string()),
                    pa.MapArray.from_arrays(pa.array([0] * (count + 1), pa.int32()), pa.array([], pa.string()),
                                            pa.array([], pa.string())),
                    pa.array([100] * count, pa.int64()), pa.array([0] * count, pa.int64()),
                    pa.array([False] * count), pa.array(['{"numRecords":10}'] * count)], fields=list(ADD_TYPE))
                path = Path(scratch) / f"{10:020d}.checkpoint.{part + 1:010d}.{parts:010d}.parquet"
                pq.write_table(pa.table({"add": adds}), path, row_group_size=262_144)
                part_files.append(str(path))
                del names, adds
        measured = measure("stream", str(addresses_file), *part_files)
    assert measured["files"] == actions, measured
    order = "in path order" if path_order else "each part in random order"
    return [{"benchmark": f"streaming rewrite of a {parts}-part checkpoint, {actions:,} adds {order} "
                          f"(listing index {measured['index_mib']:.0f} MiB, built in {measured['index_seconds']:.1f} s)",
             "seconds": measured["seconds"], "files_per_s": actions / measured["seconds"], "lakefs_calls": 0,
             "peak_rss_mib": measured["peak_rss_mib"]}]


# Issue 25's targets for the cold export beside lakeFS's Lua exporter: Lua's time over this project's
LUA_RATIO_TARGETS = {10_000: 30, 100_000: 300, 1_000_000: 150}  # issue 51's, at 10,000 and 100,000 files
# Each export's setting, whatever the default: the Delta log alone (what Lua writes), or with Iceberg metadata
DELTA_ONLY, WITH_ICEBERG = ({"LAKEFS_DELTA_ICEBERG_ENABLED": on} for on in ("false", "true"))


def bench_exports(sizes: list[int], lua_sizes: Collection[int] = (), lua_timeout: float = 600.0,
                  built: dict[int, tuple[str, str]] | None = None, rows: list[dict] | None = None,
                  stats_parsed: bool = False, *, quiet_wait: float) -> list[dict]:
    """Each export in its own process (its own peak RSS): cold (the Delta log alone, as shipped and
    what Lua writes; then with `iceberg.enabled`), warm (a no-op: the manifest exists), and
    incremental after a commit that adds 10 files (both ways); lakeFS's Lua exporter beside the cold
    one at the `lua_sizes`. lakeFS is restarted after a Lua hook's run on 10,000 files or more (one
    that outlives its time-out is stopped so), so nothing after it shares the machine with it or with
    the 1-5 GB its run left lakeFS holding (the next table's cold exports took 0.53-0.58 s after one,
    0.40-0.46 s without). `built` gets each table's repository and exported head commit, by size;
    `rows` (returned) each table's rows as they are measured. `stats_parsed`: the tables' checkpoints
    carry them beside the stats JSON, as Delta Spark writes them by default. `quiet_wait`: the most
    seconds each cold export waits for a quiet machine (`wait_until_quiet`; 0: none)."""
    state, config, lakefs = running_stack()
    gateway = gateway_client(state)
    rows = [] if rows is None else rows
    for files in sizes:
        repository, commit_id = synthetic_table(lakefs, gateway, "bench", files, stats_parsed=stats_parsed)
        table_rows, head = bench_table_exports(state, lakefs, gateway, repository, files, commit_id, files in lua_sizes,
                                               lua_timeout, stats_parsed=stats_parsed, quiet_wait=quiet_wait)
        if built is not None:
            built[files] = repository, head
        rows += table_rows
        if any(row.get("timeout") for row in table_rows):
            print("the Lua hook is still running inside lakeFS: restarting lakeFS to stop it", flush=True)
            restart_lakefs()
        elif files in lua_sizes and files >= 10_000:  # its hook left lakeFS holding 1-5 GB
            print("restarting lakeFS after the Lua hook's run", flush=True)
            restart_lakefs()
    return rows


def restart_lakefs(wait: float = 180.0) -> None:
    """Stop lakeFS (and a Lua hook running in it) and start it again, once its port is free: a
    process of many GB holds its socket for a while after it is killed."""
    from devtools import stack

    stack.stop_service("lakefs")
    deadline = time.monotonic() + wait
    while True:
        try:
            stack.up()
            return
        except stack.StackError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


S3_VERBS = {"GetObject": "GET", "PutObject": "PUT", "CopyObject": "COPY", "HeadObject": "HEAD",
            "ListObjectsV2": "LIST", "DeleteObjects": "DELETE"}


def split(measured: dict) -> str:
    """An export with its Iceberg table: the two steps' seconds (the export is complete after the first);
    a median of cold exports: each one's seconds."""
    requests = measured.get("iceberg_requests") or {}
    counted = ", ".join(f"{count} {S3_VERBS.get(operation, operation)}" for operation, count in sorted(requests.items()))
    requested = f"; the Iceberg step's requests: {counted}" if counted else ""
    if measured.get("samples"):
        first = f"; each the process's second export, its first {measured['first']} s" if measured.get("first") else ""
        return f"; median of {measured['samples']} s{first}{requested}"
    if not measured["iceberg_seconds"]:
        return ""
    return f": {measured['seconds']:.2f} s + {measured['iceberg_seconds']:.2f} s{requested}"


COLD_SAMPLES = 3  # cold exports (each way) set beside Lua's and each other: the median of this many, each under a ref of its own


def _samples(runs: list[dict], export: str, iceberg: str) -> str:
    return " / ".join(f"{m[export]:.2f}" + (f" + {m[iceberg]:.2f}" if m[iceberg] else "") for m in runs)


def cold_export(repository: str, ref: str, commit_id: str, files: int, env: dict, samples: int,
                quiet_wait: float) -> dict:
    """The table's cold export under `ref`, and with `samples` > 1 under `<ref>-cold-<i>` too (a ref
    has one cold export): the median one, its label naming every sample's seconds, its peak RSS the
    highest; with an Iceberg step, the median of each step's seconds (`seconds`, `iceberg_seconds`),
    each sample named as both. One sample on this shared 2-core machine ranged 0.60-0.98 s at 10,000 files.
    Each is its process's second export, as a worker's running process exports (`_export`'s
    `after_one`); its first, the same table's under another ref, is named beside it. Each starts on
    a quiet machine, waiting at most `quiet_wait` seconds for one (`wait_until_quiet`)."""
    runs = []
    for i in range(samples):
        _quiet(quiet_wait)
        measured = measure("export", repository, ref if i == 0 else f"{ref}-cold-{i + 1}", commit_id, f"t{files}",
                           "after-one", env=env)
        assert measured["ok"] and not measured["skipped"], measured.get("error") or measured
        runs.append(measured)
    median = sorted(runs, key=lambda m: m["seconds"] + m["iceberg_seconds"])[len(runs) // 2]
    if samples > 1:
        def middle(values: Iterable[float]) -> float:
            return sorted(values)[len(runs) // 2]

        parts = dict.fromkeys(part for m in runs for part in m["iceberg_cpu"])
        median = {**median, "peak_rss_mib": max(m["peak_rss_mib"] for m in runs),
                  "seconds": middle(m["seconds"] for m in runs),
                  "iceberg_seconds": middle(m["iceberg_seconds"] for m in runs),
                  "iceberg_cpu": {part: middle(m["iceberg_cpu"].get(part, 0.0) for m in runs) for part in parts},
                  "samples": _samples(runs, "seconds", "iceberg_seconds"),
                  "first": _samples(runs, "first_seconds", "first_iceberg_seconds")}
    return median


def cpu_floor(measured: dict) -> tuple[str, float]:
    """The Iceberg step's CPU in this process and the stack's parts it called (medians of the
    samples), as a label, and the floor it sets on this machine: no fewer seconds than that CPU over
    its cores, however well the parts overlap."""
    used = measured.get("iceberg_cpu") or {}
    floor = sum(used.values()) / (os.cpu_count() or 1)
    parts = ", ".join(f"{part} {seconds * 1000:.0f} ms" for part, seconds in used.items())
    return f"; the Iceberg step's CPU: {parts}, at least {floor:.3f} s on {os.cpu_count()} cores", floor


def _quiet(most_seconds: float) -> None:
    """`wait_until_quiet`, saying so when the machine kept it waiting."""
    waited = wait_until_quiet(most_seconds)  # at once for 0
    if waited > 1:
        print(f"waited {waited:.1f} s for a quiet machine", flush=True)


def bench_table_exports(state, lakefs, gateway, repository: str, files: int, commit_id: str, lua: bool = True,
                        lua_timeout: float = 600.0, ref: str = "main", new_version: int = 52,
                        stats_parsed: bool = False, *, quiet_wait: float) -> tuple[list[dict], str]:
    """The rows of `bench_exports` for one table `build_table` made (`t<files>` at `commit_id`),
    exported under `ref` (and with Iceberg metadata under `<ref>-iceberg`), and the 10-file commit
    after it (exported both ways; it writes `new_version`). `stats_parsed`: its checkpoint has them
    (the rows say so)."""
    from bench.lua_exporter import bench_lua_export
    from bench.synthetic import add_files

    table = f"{files:,}-file table" + (" (stats_parsed in its checkpoint)" if stats_parsed else "")

    with_iceberg = f"{ref}-iceberg"
    ways = ((ref, DELTA_ONLY, "the Delta log alone: what Lua writes"),
            (with_iceberg, WITH_ICEBERG, "with iceberg.enabled: the export, then its Iceberg table"))
    cold_rows = []
    for at, env, label in ways:
        measured = cold_export(repository, at, commit_id, files, env, samples=COLD_SAMPLES, quiet_wait=quiet_wait)
        cold_rows.append({"benchmark": f"export {table} + 50 commits (cold, {label}{split(measured)})",
                          "seconds": measured["seconds"] + measured["iceberg_seconds"],
                          "files_per_s": (files + 50) / (measured["seconds"] + measured["iceberg_seconds"]),
                          "lakefs_calls": measured["lakefs_calls"], "peak_rss_mib": measured["peak_rss_mib"]})
        if env is WITH_ICEBERG:  # issue 51's: the Iceberg step at most half the export it follows
            cpu, floor = cpu_floor(measured)
            cold_rows[-1]["benchmark"] = cold_rows[-1]["benchmark"][:-1] + cpu + ")"
            half = measured["seconds"] / 2
            cold_rows[-1]["target"] = ("Iceberg step ≤ ½ of the export" + (
                f" (its CPU's floor {floor:.3f} s > ½ of the export {half:.3f} s)" if floor > half else ""),
                                       measured["iceberg_seconds"] <= half)
            cold_rows[-1]["iceberg_step"] = measured["iceberg_seconds"]  # plotted (`plot_exports`)
        print(cold_rows[-1], flush=True)
    # the floor of its Iceberg step in object writes: the same files written again, nothing else done
    _quiet(quiet_wait)
    floor = measure("iceberg-objects", repository, with_iceberg, commit_id, f"t{files}")
    floor_row = {"benchmark": f"the Iceberg step's files alone ({table}): its {floor['objects']} "
                              f"objects ({floor['bytes']:,} bytes) written again as it writes them, nothing else "
                              f"done; CPU: this process {floor['cpu_seconds'] * 1000:.0f} ms, MinIO "
                              f"{floor['minio_cpu_seconds'] * 1000:.0f} ms",
                 "seconds": floor["seconds"], "files_per_s": floor["objects"] / floor["seconds"],
                 "lakefs_calls": "–", "peak_rss_mib": None}
    print(floor_row, flush=True)
    if files == 1_000_000:
        cold_rows[0]["target"] = ("≤ 8 s, ≤ 512 MiB",
                                  cold_rows[0]["seconds"] <= 8 and cold_rows[0]["peak_rss_mib"] <= 512)
    measured = measure("export", repository, ref, commit_id, f"t{files}")
    assert measured["ok"] and measured["skipped"], measured
    warm_row = {"benchmark": f"export {table} + 50 commits (warm: exported before, skipped)", "seconds": measured["seconds"],
                "files_per_s": (files + 50) / measured["seconds"], "lakefs_calls": measured["lakefs_calls"],
                "peak_rss_mib": measured["peak_rss_mib"]}
    print(warm_row, flush=True)
    child = add_files(lakefs, gateway, repository, files, 10, version=new_version)
    incremental_rows, locations = [], []
    for at, env, label in ways:
        measured = measure("export", repository, at, child, f"t{files}", env=env)
        assert measured["ok"] and measured["incremental"], measured
        locations.append(measured["location"])
        incremental_rows.append({
            "benchmark": f"export {table} after a 10-file commit (incremental, {label.split(':')[0]}"
                         f"{split(measured)})",
            "seconds": measured["seconds"] + measured["iceberg_seconds"],
            "files_per_s": 10 / (measured["seconds"] + measured["iceberg_seconds"]),
            "lakefs_calls": measured["lakefs_calls"], "peak_rss_mib": measured["peak_rss_mib"]})
        if env is WITH_ICEBERG:  # issue 51's: appending a 10-file commit's snapshot
            incremental_rows[-1]["target"] = ("Iceberg step ≤ 0.1 s", measured["iceberg_seconds"] <= 0.1)
        print(incremental_rows[-1], flush=True)
    head_location = locations[0]  # the Delta-only export: what the Lua hook exports too (its trigger commit adds only the action)
    # the Iceberg step alone, in its own process, over the Delta-only export: its CPU and peak memory
    measured = measure("iceberg", repository, ref, commit_id, f"t{files}")
    assert measured["state"] == "written", measured
    iceberg_row = {"benchmark": f"Iceberg metadata of the cold export above ({table}, "
                                f"{measured['snapshots']} snapshots), alone: {measured['cpu_seconds']:.2f} s of CPU",
                   "seconds": measured["seconds"], "files_per_s": (files + 50) / measured["seconds"],
                   "lakefs_calls": 1, "peak_rss_mib": measured["peak_rss_mib"]}
    print(iceberg_row, flush=True)
    rows = cold_rows + [floor_row, warm_row, iceberg_row, *incremental_rows]
    measured = measure("diff", repository, commit_id, child, f"tables/t{files}")
    rows.append({"benchmark": f"history diff of the 10-file commit against its parent, {table} (cold)",
                 "seconds": measured["seconds"], "files_per_s": measured["files"] / measured["seconds"],
                 "lakefs_calls": measured["lakefs_calls"], "peak_rss_mib": measured["peak_rss_mib"]})
    print(rows[-1], flush=True)
    if not lua:
        return rows, child
    print(f"running lakeFS's Lua Delta exporter on {repository} ...", flush=True)
    # on the branch head (the 10-file commit): the Lua hook's trigger commit must sit on what it exports
    lua_row = bench_lua_export(lakefs, state, repository, files, child, head_location, lua_timeout)
    print({key: value for key, value in lua_row.items() if key != "lua"}, flush=True)
    if not lua_row.get("failed"):
        for row in cold_rows:  # a time-out makes Lua's time, and so the ratio, a lower bound
            row["vs_lua"], row["vs_lua_bound"] = lua_row["seconds"] / row["seconds"], bool(lua_row.get("timeout"))
        if files in LUA_RATIO_TARGETS:
            wanted = LUA_RATIO_TARGETS[files]
            text, met = cold_rows[0].get("target", ("", True))
            cold_rows[0]["target"] = (f"{text + ', ' if text else ''}≥ {wanted}× Lua",
                                      met and cold_rows[0]["vs_lua"] >= wanted)
    return rows + [lua_row], child


def bench_row_diff(rows: int) -> list[dict]:
    """A table of `rows` rows in 20 files; an UPDATE of 1% of them (in one or two files, deletion
    vectors on); the row diff beside Spark reading both versions whole and running `exceptAll`
    both ways (the full scan table-diff tools do). Each in its own process."""
    from devtools.spark import stack_spark_session

    state, config, lakefs = running_stack()
    repository = new_repository(lakefs, "bench-rowdiff")
    print(f"writing a table of {rows:,} rows in {repository} ...", flush=True)
    spark = stack_spark_session(app_name="bench-rowdiff-writer")
    uri = f"s3a://{repository}/main/tables/rows"
    spark.range(rows).selectExpr("id", "concat('value-', id) AS v", "id / 7.0 AS x").repartitionByRange(20, "id") \
        .write.format("delta").save(uri)
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    before = lakefs.commit_branch(repository, "main", f"{rows} rows")
    changed = rows // 100
    spark.sql(f"UPDATE delta.`{uri}` SET v = concat(v, '!') WHERE id < {changed}")
    after = lakefs.commit_branch(repository, "main", f"update {changed} rows")
    spark.stop()
    ours = measure("rowdiff", repository, before, after, "tables/rows")
    theirs = measure("exceptall", repository, before, after, "tables/rows")
    assert ours["counts"]["removed"] == ours["counts"]["added"] == changed == theirs["counts"]["added"], (ours, theirs)
    faster = theirs["seconds"] / ours["seconds"]
    result = [{"benchmark": f"row diff, {rows:,}-row table, {changed:,} rows updated (1%): {faster:.1f}x faster "
                            f"than the full scan, {ours['bytes_read']:,} bytes read", "seconds": ours["seconds"],
               "lakefs_calls": ours["lakefs_calls"], "peak_rss_mib": ours["peak_rss_mib"]},
              {"benchmark": "alternative: Spark reads both versions whole, exceptAll both ways (JVM peak)",
               "seconds": theirs["seconds"], "lakefs_calls": "–", "peak_rss_mib": theirs["peak_rss_mib"]}]
    for row in result:
        print(row, flush=True)
    return result


def bench_branch_tables(sizes: list[int]) -> list[dict]:
    """The branch table of an N-file table: created from the cold export, then one 10-file commit
    appended, beside copying that commit's whole export to a fixed location (the alternative)."""
    from bench.synthetic import add_files

    state, config, lakefs = running_stack()
    gateway = gateway_client(state)
    rows = []
    for files in sizes:
        repository, commit_id = synthetic_table(lakefs, gateway, "bench-branch", files)
        assert measure("export", repository, "main", commit_id, f"t{files}")["ok"]
        created = measure("append", repository, "main", commit_id, f"t{files}")
        rows.append({"benchmark": f"branch table of a {files:,}-file table: created from the export (52 versions)",
                     "seconds": created["seconds"], "lakefs_calls": created["lakefs_calls"],
                     "peak_rss_mib": created["peak_rss_mib"]})
        child = add_files(lakefs, gateway, repository, files, 10)
        exported = measure("export", repository, "main", child, f"t{files}")
        assert exported["ok"] and exported["incremental"], exported
        rows.append({"benchmark": f"export of that 10-file commit, {files:,}-file table (incremental)",
                     "seconds": exported["seconds"], "lakefs_calls": exported["lakefs_calls"],
                     "peak_rss_mib": exported["peak_rss_mib"]})
        appended = measure("append", repository, "main", child, f"t{files}")
        assert appended["appended"] == [52], appended
        rows.append({"benchmark": f"branch table of a {files:,}-file table: append a 10-file commit",
                     "seconds": appended["seconds"], "lakefs_calls": appended["lakefs_calls"],
                     "peak_rss_mib": appended["peak_rss_mib"]})
        copied = measure("republish", repository, "main", child, f"t{files}")
        rows.append({"benchmark": f"alternative: copy that commit's whole export ({copied['objects']} objects) "
                                  "to a fixed location", "seconds": copied["seconds"],
                     "lakefs_calls": copied["lakefs_calls"], "peak_rss_mib": copied["peak_rss_mib"]})
        for row in rows[-4:]:
            print(row, flush=True)
        rows += bench_branch_table_revert(lakefs, repository, files, child)
    return rows


def bench_branch_table_revert(lakefs, repository: str, files: int, child: str) -> list[dict]:
    """A lakeFS revert of the 10-file commit: its export is cold, and the branch table gets one
    synthetic version (both snapshots of the N-file table compared)."""
    reverted = lakefs.revert(repository, "main", child)
    exported = measure("export", repository, "main", reverted, f"t{files}")
    assert exported["ok"], exported
    synced = measure("append", repository, "main", reverted, f"t{files}")
    assert synced["appended"] == [53], synced
    row = {"benchmark": f"branch table of a {files:,}-file table: a revert of that commit (one synthetic version)",
           "seconds": synced["seconds"], "lakefs_calls": synced["lakefs_calls"], "peak_rss_mib": synced["peak_rss_mib"]}
    print(row, flush=True)
    return [row]


def bench_presign(urls: int) -> list[dict]:
    """`urls` presigned GET URLs by `exporter.storage.presign.Presigner` and by boto3's `generate_presigned_url`
    (SigV4, path-style), each in its own process; one URL of each is fetched from MinIO (must be 200)."""
    from devtools import stack
    from bench.synthetic import object_store_client

    running_stack()
    s3 = object_store_client()
    key = f"bench-presign/{uuid.uuid4().hex}/part-0000000-{uuid.uuid4().hex[:8]}.parquet"
    s3.put_object(Bucket=stack.BUCKET, Key=key, Body=b"x")
    try:
        measured = {how: measure("presign", how, str(urls), f"s3://{stack.BUCKET}/{key}") for how in ("project", "boto3")}
    finally:
        s3.delete_object(Bucket=stack.BUCKET, Key=key)
    for how, found in measured.items():
        assert found["status"] == 200 and found["body"] == "x", (how, found)
    faster = measured["boto3"]["seconds"] / measured["project"]["seconds"]
    rows = [{"benchmark": f"presign {urls:,} GET URLs: {label}, {measured[how]['us_per_url']:.1f} µs/URL"
                          + (f", {faster:.0f}x faster" if how == "project" else "") + " (one fetched from MinIO: 200)",
             "seconds": measured[how]["seconds"], "files_per_s": urls / measured[how]["seconds"], "lakefs_calls": 0,
             "peak_rss_mib": measured[how]["peak_rss_mib"]}
            for how, label in (("project", "exporter.storage.presign.Presigner"),
                               ("boto3", "alternative: boto3 generate_presigned_url (s3v4, path-style)"))]
    for row in rows:
        print(row, flush=True)
    return rows


def bench_object_requests(requests: int) -> list[dict]:
    """`requests` of each single-object request the exports make (PUT, GET, server-side copy, HEAD) to
    MinIO: as the exporter sends them (`exporter.storage.requests`, signed in-process, on http.client's
    kept connections) beside the same requests sent on urllib3's pool (as they were before) and boto3's
    client (as it was used before that); CPU and wall time a request."""
    import copy

    from devtools import stack
    from exporter.config import load_config
    from exporter.storage.objectstore import ObjectStore

    running_stack()
    store = ObjectStore(load_config(), f"s3://{stack.BUCKET}/bench-requests/{uuid.uuid4().hex}")
    on_urllib3 = copy.copy(store)
    on_urllib3.requests = copy.copy(store.requests)
    on_urllib3.requests.connections = Urllib3Connections(store.requests.origin)
    body = b"{}" * 500  # a commit file's size
    ways = {
        "exporter.storage.requests.SignedRequests": {
            "PUT": lambda i: store.put(f"a/{i}.json", body), "GET": lambda i: store.get(f"a/{i}.json"),
            "copy": lambda i: store.copy(f"a/{i}.json", f"b/{i}.json"), "HEAD": lambda i: store.exists(f"b/{i}.json")},
        "alternative: the same requests on urllib3's pool": {
            "PUT": lambda i: on_urllib3.put(f"e/{i}.json", body), "GET": lambda i: on_urllib3.get(f"e/{i}.json"),
            "copy": lambda i: on_urllib3.copy(f"e/{i}.json", f"f/{i}.json"),
            "HEAD": lambda i: on_urllib3.exists(f"f/{i}.json")},
        "alternative: boto3's client": {
            "PUT": lambda i: store.client.put_object(Bucket=store.bucket, Key=store.key(f"c/{i}.json"), Body=body),
            "GET": lambda i: store.client.get_object(Bucket=store.bucket, Key=store.key(f"c/{i}.json"))["Body"].read(),
            "copy": lambda i: store.client.copy_object(Bucket=store.bucket, Key=store.key(f"d/{i}.json"), CopySource={
                "Bucket": store.bucket, "Key": store.key(f"c/{i}.json")}),
            "HEAD": lambda i: store.client.head_object(Bucket=store.bucket, Key=store.key(f"d/{i}.json"))}}
    rows = []
    for operation in ("PUT", "GET", "copy", "HEAD"):
        for way, calls in ways.items():
            cpu, wall = time.process_time(), time.monotonic()
            for i in range(requests):
                calls[operation](i)
            cpu, wall = (time.process_time() - cpu) / requests, (time.monotonic() - wall) / requests
            rows.append({"benchmark": f"object request, {operation} ({requests:,}, 1 KB): {way}: {1000 * cpu:.2f} ms CPU, "
                                      f"{1000 * wall:.2f} ms wall a request", "seconds": wall * requests,
                         "files_per_s": 1 / wall, "lakefs_calls": 0, "peak_rss_mib": peak_rss_mib()})
            print(rows[-1], flush=True)
    store.delete(store.list_keys(""))
    return rows


class Urllib3Connections:
    """`exporter.storage.requests.Connections` as it was: the signed requests sent on urllib3's pool."""

    def __init__(self, origin: str):
        import urllib3

        self.origin, self.pool = origin, urllib3.PoolManager(maxsize=32, retries=False)

    def request(self, method: str, target: str, body: bytes | None, headers: dict[str, str]):
        from exporter.storage.requests import Answer

        answer = self.pool.request(method, self.origin + target, body=body, headers=headers)
        return Answer(answer.status, answer.data)


def bench_sharing(sizes: list[int], repository: str | None = None, queries: int = 60) -> list[dict]:
    """A Delta Sharing snapshot query (`POST .../query`, body `{}`) of the branch table of an N-file
    table (`synthetic_table`, exported, then its branch table created; or `repository`'s, reused),
    through `lakefs-delta serve` in its own process, once per response format; the answer's lines
    are checked against the live files delta-rs reads from the branch table. Then (`queries`) the
    webhook's answer times while that many such queries stream from the same server."""
    from exporter.lakefs.lake import Lake, ObjectStores
    from devtools import stack
    from exporter.branch_tables.table import branch_table_versions
    from bench.sharing import query_through_server, webhooks_under_queries

    state, config, lakefs = running_stack()
    gateway = gateway_client(state)
    rows = []
    for files in sizes:
        table = f"t{files}"
        if repository is None:
            built, commit_id = synthetic_table(lakefs, gateway, "bench-sharing", files)
            assert measure("export", built, "main", commit_id, table)["ok"]
            assert measure("append", built, "main", commit_id, table)["appended"]
        else:
            built = repository
            print(f"reusing the branch table of {table} in {built}", flush=True)
        location = branch_table_versions(Lake(config, lakefs, ObjectStores(config)), built, "main", table)["location"]
        live = measure("livefiles", location)
        if repository is None:
            assert live["files"] == files + 50, live  # build_table's checkpoint, then 50 one-file commits
        print(f"{live['files']:,} live files at version {live['version']} (delta-rs)", flush=True)
        for fmt in ("parquet", "delta"):
            # build_table's data files are a lakeFS import's, outside the repository's storage namespace
            measured = query_through_server(config, built, "main", table, fmt, (f"s3://{stack.BUCKET}/bulk-import/",))
            assert measured["lines"] == live["files"] + 2, (measured["lines"], live)  # protocol, metaData, files
            assert measured["file_url_status"] == [200, 200], measured
            quarters = " / ".join("–" if rss is None else f"{rss:.0f}" for rss in measured["server_rss_by_quarter_mib"])
            rows.append({"benchmark": f"Delta Sharing query, {live['files']:,}-file branch table, {fmt} format: "
                                      f"{measured['lines']:,} lines, {measured['bytes'] / 2**20:,.0f} MiB streamed, "
                                      f"first byte after {measured['first_byte_seconds']:.2f} s, server CPU "
                                      f"{measured['server_cpu_seconds']:.1f} s; server RSS "
                                      f"{measured['server_idle_rss_mib']:.0f} MiB before, largest in each quarter "
                                      f"of the answer {quarters}",
                         "seconds": measured["seconds"], "files_per_s": live["files"] / measured["seconds"],
                         "lakefs_calls": "–", "peak_rss_mib": measured["server_peak_rss_mib"],
                         "sharing": measured})
            if live["files"] >= 1_000_000:
                rows[-1]["target"] = ("≤ 8 s to the last byte", measured["seconds"] <= 8)
            print({k: v for k, v in measured.items() if k != "first_file_line"}, flush=True)
        if queries:
            commit_id = lakefs.commit(built, "main").id
            loaded = webhooks_under_queries(config, built, "main", table, (f"s3://{stack.BUCKET}/bulk-import/",),
                                            commit_id, queries=queries, webhooks=max(10, queries * 3))
            assert loaded["webhook_statuses"] == [202] and loaded["query_statuses"] == [200], loaded
            rows.append({"benchmark": f"webhook answers while {loaded['queries_answering']} Delta Sharing queries of "
                                      f"the {live['files']:,}-file branch table stream from the same server: "
                                      f"{loaded['webhooks']} events, p50 {loaded['p50'] * 1000:.0f} ms, p99 "
                                      f"{loaded['p99'] * 1000:.0f} ms, max {loaded['max'] * 1000:.0f} ms, "
                                      f"{loaded['over_1s']} over 1 s (target: none)",
                         "seconds": loaded["p99"], "files_per_s": None, "lakefs_calls": "–", "peak_rss_mib": None,
                         "sharing_load": loaded, "target": ("none over 1 s", loaded["over_1s"] == 0)})
            print(loaded, flush=True)
    return rows


def bench_diffs(versions_list: list[int]) -> list[dict]:
    from exporter.lakefs.lake import Lake, ObjectStores
    from exporter.diff.table import DiffCache, cached_diff, compute_diff

    _, config, lakefs = running_stack()
    cache = DiffCache(config.redis, 600)
    rows = []
    for versions in versions_list:
        repository = new_repository(lakefs, f"bench-diff-{versions}")
        print(f"building a table with {versions:,} versions in {repository} ...", flush=True)
        build_history(lakefs, repository, versions)
        left, right = lakefs.commit(repository, "main").id, lakefs.commit(repository, "topic").id
        calls = lakefs.calls
        started = time.perf_counter()
        diff = compute_diff(Lake(config, lakefs, ObjectStores(config)), repository, left, right, "tables/history")
        cold = time.perf_counter() - started
        assert len(diff["results"]) == versions, len(diff["results"])
        rows.append({"benchmark": f"cold diff, {versions:,} versions (checkpoint every 10)", "seconds": cold,
                     "files_per_s": versions / cold, "lakefs_calls": lakefs.calls - calls, "peak_rss_mib": peak_rss_mib()})
        cached_diff(Lake(config, lakefs, ObjectStores(config)), cache, repository, "main", "topic", "tables/history")
        samples = []
        for _ in range(200):
            started = time.perf_counter()
            cached_diff(Lake(config, lakefs, ObjectStores(config)), cache, repository, "main", "topic",
                        "tables/history")
            samples.append(time.perf_counter() - started)
        for name, q in (("p50", 0.5), ("p99", 0.99)):
            rows.append({"benchmark": f"cached diff {name} (refs resolved to commits, then Redis), {versions:,} versions",
                         "seconds": percentile(samples, q), "files_per_s": 1 / percentile(samples, q),
                         "lakefs_calls": 2, "peak_rss_mib": peak_rss_mib()})
        rows += cached_diff_answers(repository, versions)
    return rows


def cached_diff_answers(repository: str, versions: int, samples: int = 400) -> list[dict]:
    """The cached diff as a caller gets it: `GET .../diff/...` of the service (its own process, a
    service token), one page of 100 operations, answered from the cache `bench_diffs` filled."""
    from bench.webhooks import service_client

    with service_client(timeout=30) as client:
        path = f"/repositories/{repository}/otf/refs/main/diff/topic"
        query = {"table_path": "tables/history", "amount": 100}
        first = client.get(path, params=query)
        assert first.status_code == 200 and first.json()["cached"], (first.status_code, first.text[:300])
        time.sleep(2)  # the service's warm-up is done
        answers = []
        for _ in range(samples):
            started = time.perf_counter()
            answer = client.get(path, params=query)
            answers.append(time.perf_counter() - started)
            assert answer.status_code == 200 and answer.json()["cached"], answer.status_code
    return [{"benchmark": f"cached diff through the API {name} (GET of the service, a page of 100 operations), "
                          f"{versions:,} versions; max {max(answers) * 1000:.0f} ms of {samples}",
             "seconds": percentile(answers, q), "files_per_s": 1 / percentile(answers, q), "lakefs_calls": 2,
             "peak_rss_mib": None, **({"target": ("≤ 20 ms", percentile(answers, q) <= 0.020)} if name == "p99" else {})}
            for name, q in (("p50", 0.5), ("p99", 0.99))]


def markdown(rows: list[dict]) -> str:
    def seconds(value: float) -> str:
        return f"{value:.3f}" if value != value or value >= 0.01 else f"{value:.6f}"  # NaN: it failed

    def rss(r: dict) -> str:
        if r["peak_rss_mib"] is None:
            return "–"
        return f"{r['peak_rss_mib']:,.0f}" + (" (lakeFS)" if "lua" in r else "")

    def ratio(r: dict) -> str:
        if "vs_lua" not in r:
            return "–"
        return ("> " if r.get("vs_lua_bound") else "") + f"{r['vs_lua']:,.1f}×"

    def target(r: dict) -> str:
        if "target" not in r:
            return "–"
        text, met = r["target"]
        return f"{text}: {'met' if met else '**not met**'}"

    lines = ["| benchmark | seconds | files/s | lakeFS calls | peak RSS MiB | Lua's time / this | target |",
             "|---|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r['benchmark']} | {seconds(r['seconds'])} | "
              + (f"{r['files_per_s']:,.0f}" if r.get("files_per_s") is not None else "–")
              + f" | {r.get('lakefs_calls', '–')} | {rss(r)} | {ratio(r)} | {target(r)} |" for r in rows]
    notes = [lua_note(r) for r in rows if "lua" in r]
    return "\n".join(lines) + ("\n\nlakeFS Lua exporter runs:\n\n" + "\n".join(notes) if notes else "")


def lua_note(row: dict) -> str:
    """Where the Lua hook wrote, its timings, the calls lakeFS counted for it and what delta-rs read back."""
    lua = row["lua"]
    def listed(calls: dict[str, int]) -> str:
        return ", ".join(f"{name} {n:,}" for name, n in calls.items()) or "none"

    timing = (f"no run listed {lua['observed_seconds']:.0f} s after the commit call" if lua["status"] == "timeout" else
              f"hook {lua['hook_seconds']:.2f} s by lakeFS's clock, {lua['observed_seconds']:.2f} s from the commit "
              "call to the run being listed")
    note = [f"- {row['benchmark']}: {lua['status']}, trigger commit {lua['trigger_commit'][:12]}; {timing}",
            f"  - the hook's lakeFS calls (lakeFS's own counters): {listed(lua['calls'])}; not counted, seen in the "
            f"same window (the bench's commit and polling, other users of the stack): {listed(lua['other_calls'])}"
            + ("; **the stack was shared during this run: timings and counts are not clean**" if lua["shared"] else ""),
            f"  - lakeFS process RSS: {lua['lakefs_rss_before_mib'] or 0:,.0f} MiB before, "
            f"{lua['lakefs_rss_peak_mib'] or 0:,.0f} MiB peak (sampled every 0.25 s)"]
    if "location" in lua:
        back = lua["read_back"]
        note.append(f"  - wrote {back['objects']} objects ({back['bytes']:,} bytes) under {lua['location']}")
        if "read_error" in back:
            note.append(f"  - delta-rs refuses it: {back['read_error']}")
        project = back.get("project", {})
        note.append(f"  - latest snapshot ({back['reader']}): version {back['version']}, {back['adds']:,} adds, "
                    f"{back['rows_from_stats']:,} rows from stats + {back['adds_without_stats']} adds without stats; "
                    f"this project's export (delta-rs): version {back.get('project_version', '?')}, "
                    f"{project.get('adds', 0):,} adds, {project.get('rows_from_stats', 0):,} rows from stats; "
                    f"same add paths: {back.get('same_adds_as_project', '?')} (only in Lua "
                    f"{back.get('adds_only_in_lua', '?')}, only in this project's {back.get('adds_only_in_project', '?')})")
    if lua["status"] == "failed":
        note.append("  - hook output: " + lua.get("output", "")[-1500:].replace("\n", " / "))
    return "\n".join(note)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--actions", type=int, default=1_000_000, help="adds in the synthetic checkpoint")
    parser.add_argument("--stream-actions", type=int, default=10_000_000,
                        help="adds in the multi-part checkpoint rewritten streaming (0: skip)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000, 10_000], help="table sizes to export")
    parser.add_argument("--diff-versions", type=int, nargs="*", default=[1_000], help="table histories to diff")
    parser.add_argument("--row-diff-rows", type=int, default=1_000_000,
                        help="rows of the table whose 1%% update is row-diffed (0: skip)")
    parser.add_argument("--branch-table-sizes", type=int, nargs="*", default=[10_000],
                        help="tables whose branch table is created and appended to")
    parser.add_argument("--storm", type=int, default=200, help="commits arriving at once (0: skip)")
    parser.add_argument("--storm-iceberg", action="store_true",
                        help="the storm again with iceberg.enabled (each export writes its Iceberg metadata too)")
    parser.add_argument("--storm-iceberg-same-task", action="store_true",
                        help="the storm with iceberg.enabled again, a light Iceberg table written in the export's "
                             "own task (iceberg.same_task)")
    parser.add_argument("--storm-workers", type=int, nargs="*", default=[],
                        help="the storm with iceberg.enabled again with this many worker groups (one more worker "
                             "host: its own --name, the same Redis)")
    parser.add_argument("--presign-urls", type=int, default=100_000,
                        help="URLs presigned by exporter.storage.presign and by boto3 (0: skip)")
    parser.add_argument("--object-requests", type=int, default=300,
                        help="single-object requests to MinIO of each kind, signed in-process and by boto3 (0: skip)")
    parser.add_argument("--sharing-sizes", type=int, nargs="*", default=[1_000_000],
                        help="tables whose branch table is queried through the Delta Sharing server")
    parser.add_argument("--sharing-repository",
                        help="reuse this repository's branch table of t<N> on main (one --sharing-sizes N) "
                             "instead of building one")
    parser.add_argument("--sharing-queries", type=int, default=60,
                        help="concurrent sharing queries the webhook's answer times are measured under (0: skip)")
    parser.add_argument("--grant-files", type=int, default=1_000_000,
                        help="files of the table whose folders the grant checks, and whose export the signer signs for (0: skip)")
    parser.add_argument("--grant-folders", type=int, default=10_000, help="folders those files are spread over")
    parser.add_argument("--grant-repository", help="reuse this repository's table of --grant-files files (an earlier "
                                                   "run's) instead of building one")
    parser.add_argument("--pyiceberg-read-files", type=int, default=100_000,
                        help="files of the table PyIceberg reads whole through the catalog, remote signing (0: skip)")
    parser.add_argument("--row-diff-scale", type=int, nargs="*", default=[1_000_000, 3_000_000, 10_000_000],
                        help="rows changed in the tables row-diffed four ways: in the worker, Spark local, "
                             "Spark standalone, exceptAll")
    parser.add_argument("--gate-sizes", type=int, nargs="*", default=[100_000, 1_000_000],
                        help="tables whose merge gate answers for a 10-file change")
    parser.add_argument("--gate-key-rows", type=int, default=1_000_000,
                        help="rows appended on a branch whose key rule the gate checks, beside a full scan (0: skip)")
    parser.add_argument("--no-lua", action="store_true", help="skip lakeFS's Lua Delta exporter")
    parser.add_argument("--stats-parsed", action="store_true",
                        help="the --sizes tables' checkpoints carry stats_parsed beside the stats JSON, as Delta "
                             "Spark writes them by default")
    parser.add_argument("--lua-sizes", type=int, nargs="*",
                        help="the --sizes Lua's exporter runs beside (default: every one; at 1,000,000 files it "
                             "runs past any time-out worth waiting)")
    parser.add_argument("--out", help="results file (default: bench/results/<date>.md, plot beside it)")
    parser.add_argument("--lua-timeout", type=float, default=600.0, help="seconds to wait for one Lua hook run")
    parser.add_argument("--quiet-wait", type=float, default=60.0,
                        help="the most seconds each cold export waits for the machine to be quiet first (0: none; "
                             "the smoke test's, on a machine busy with the other tests)")
    args = parser.parse_args()
    if args.sharing_repository and len(args.sharing_sizes) != 1:
        parser.error("--sharing-repository reuses one table: give one --sharing-sizes")
    rows: list[dict] = []
    out = Path(args.out) if args.out else RESULTS / f"{date.today().isoformat()}.md"
    try:
        measure_all(args, rows)
    finally:  # what was measured is kept, whatever stopped the run
        table = markdown(rows)
        print(table)
        out.parent.mkdir(parents=True, exist_ok=True)  # a folder not made yet: the rows measured are not lost
        out.write_text(f"# Benchmarks {date.today().isoformat()}\n\nMachine: {os.cpu_count()} cores.\n\n{table}\n")
        print(f"written to {out}")
    plotted = [plot_exports(rows, out.with_name(out.stem + "-export-time.png")),
               plot_storm(rows, out.with_name(out.stem + "-storm.png")),
               plot_worker_groups(rows, out.with_name(out.stem + "-worker-groups.png")),
               plot_row_diff_scale(rows, out.with_name(out.stem + "-row-diff-scale.png")),
               plot_grant(rows, out.with_name(out.stem + "-grant.png")),
               plot_object_requests(rows, out.with_name(out.stem + "-object-requests.png")),
               plot_gates(rows, out.with_name(out.stem + "-gates.png"))]
    for path in filter(None, plotted):
        print(f"plot: {path}")


def measure_all(args: argparse.Namespace, rows: list[dict]) -> None:
    """Every part `main`'s arguments ask for, in order, each part's rows added to `rows` as it ends;
    each part's wall time printed as it ends (where a run's time goes)."""
    if args.actions:
        with part("checkpoint rewrite"):
            rows += bench_checkpoint_rewrite(args.actions)
    if args.stream_actions:
        with part("streaming checkpoint rewrite"):
            rows += bench_streaming_checkpoint(args.stream_actions)
            rows += bench_streaming_checkpoint(args.stream_actions, path_order=False)
    built: dict[int, tuple[str, str]] = {}
    if args.sizes:
        with part("exports"):
            lua_sizes = [] if args.no_lua else args.sizes if args.lua_sizes is None else args.lua_sizes
            bench_exports(args.sizes, lua_sizes, args.lua_timeout, built, rows, args.stats_parsed,
                          quiet_wait=args.quiet_wait)
    if args.diff_versions:
        with part("history diffs"):
            rows += bench_diffs(args.diff_versions)
    if args.branch_table_sizes:
        with part("branch tables"):
            rows += bench_branch_tables(args.branch_table_sizes)
    if args.row_diff_rows:
        with part("row diff"):
            rows += bench_row_diff(args.row_diff_rows)
    if args.presign_urls:
        with part("presign"):
            rows += bench_presign(args.presign_urls)
    if args.object_requests:
        with part("object requests"):
            rows += bench_object_requests(args.object_requests)
    for size in args.sharing_sizes:  # a table the exports above built is queried, not built again
        with part(f"Delta Sharing, {size:,} files"):
            if args.sharing_repository or size not in built:
                rows += bench_sharing([size], args.sharing_repository, args.sharing_queries)
                continue
            repository, head = built[size]
            assert measure("append", repository, "main", head, f"t{size}")["appended"]  # its branch table
            rows += bench_sharing([size], repository, args.sharing_queries)
    if args.row_diff_scale:
        from bench.row_diff_scale import bench_row_diff_scale

        with part("row diff at scale"):
            rows += bench_row_diff_scale(args.row_diff_scale)
    if args.gate_sizes or args.gate_key_rows:
        from bench.gates import bench_gates, bench_key_rule

        with part("merge gates"):
            rows += bench_gates(args.gate_sizes)
            rows += bench_key_rule(args.gate_key_rows) if args.gate_key_rows else []
    if args.grant_files:
        from bench.grant import bench_grant

        with part("grant and signer"):
            rows += bench_grant(args.grant_files, args.grant_folders, args.grant_repository)
    if args.pyiceberg_read_files:
        from bench.pyiceberg_read import bench_pyiceberg_read

        with part("PyIceberg's full read through the catalog"):
            rows += bench_pyiceberg_read(args.pyiceberg_read_files)
    if args.storm:
        from bench.webhooks import bench_commit_storm, bench_idle_latency, iceberg_storms, worker_groups_row

        with part("idle latency"):
            rows += bench_idle_latency()
        with part("storm"):
            rows += bench_commit_storm(args.storm)
        if args.storm_iceberg:
            with part("storm, iceberg.enabled"):
                rows += bench_commit_storm(args.storm, iceberg=True)
        if args.storm_iceberg_same_task:
            with part("storm, iceberg.enabled, iceberg.same_task"):
                rows += bench_commit_storm(args.storm, iceberg=True, same_task=True)
        for workers in args.storm_workers:
            with part(f"storm, {workers} worker groups"):
                rows += bench_commit_storm(args.storm, workers=workers, iceberg=True)
        if args.storm_workers:  # beside the storm with iceberg.enabled: the groups, side by side
            rows += [row for row in [worker_groups_row(iceberg_storms(rows))] if row]


@contextmanager
def part(name: str) -> Iterator[None]:
    """A part of the run, its wall time printed when it ends (however it ends)."""
    start = time.monotonic()
    try:
        yield
    finally:
        print(f"[bench] {name}: {time.monotonic() - start:.1f} s", flush=True)


def plot_storm(rows: list[dict], path: Path) -> Path | None:
    """The storm's commit-to-complete-export latencies: their distribution (each commit's, sorted)."""
    latencies = next((row["storm_latencies"] for row in rows if "storm_latencies" in row), None)
    if not latencies:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ordered = sorted(latencies)
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot(ordered, [100 * (i + 1) / len(ordered) for i in range(len(ordered))], drawstyle="steps-post")
    for target, label in ((6, "p50 target"), (12, "p99 target")):
        axes.axvline(target, linestyle="--", color="grey")
        axes.text(target, 2, f" {label}", color="grey")
    axes.set(xlabel="seconds from commit to complete export", ylabel="% of commits",
             title=f"Commit storm: {len(ordered)} commits, 3 tables each")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return path


def plot_worker_groups(rows: list[dict], path: Path) -> Path | None:
    """Table exports a minute by worker groups (storms with iceberg.enabled), with how busy the
    cores were in each run."""
    from bench.webhooks import iceberg_storms

    runs = iceberg_storms(rows)
    if len({run.workers for run in runs}) < 2:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    labels = [f"{run.workers} group{'s' if run.workers > 1 else ''}\n{100 * run.busy:.0f}% of cores busy" for run in runs]
    bars = axes.bar(range(len(runs)), [run.per_minute for run in runs], color="tab:blue")
    axes.bar_label(bars, labels=[f"{run.per_minute:,.0f}" for run in runs])
    axes.axhline(2500, linestyle="--", color="grey")
    axes.text(-0.4, 2550, "target: 2,500 a minute", color="grey")
    axes.set_xticks(range(len(runs)), labels)
    axes.set(ylabel="table exports a minute", title=f"Commit storm with Iceberg by worker groups, {os.cpu_count()} cores")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return path


def plot_exports(rows: list[dict], path: Path) -> Path | None:
    """Export time against table size, this project (cold) beside lakeFS's Lua exporter; with
    Iceberg, its step beside half the export (issue 51's target) and the step's files alone."""
    import re

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[int, float]]] = {"lakefs-delta-exporter (cold)": [], "lakeFS Lua exporter": [],
                                                  "½ of that export": [], "its Iceberg step (cold)": [],
                                                  "the Iceberg step's files alone": []}
    bounds: list[tuple[int, float]] = []  # Lua runs stopped at their time-out: lower bounds
    for row in rows:
        size = re.search(r"([\d,]+)[- ]file", row["benchmark"])
        if not size or not isinstance(row["seconds"], (int, float)):
            continue
        files = int(size.group(1).replace(",", ""))
        if row["benchmark"].startswith("export") and "(cold, the Delta log alone" in row["benchmark"]:
            series["lakefs-delta-exporter (cold)"].append((files, row["seconds"]))
            series["½ of that export"].append((files, row["seconds"] / 2))
        elif "iceberg_step" in row:
            series["its Iceberg step (cold)"].append((files, row["iceberg_step"]))
        elif row["benchmark"].startswith("the Iceberg step's files alone"):
            series["the Iceberg step's files alone"].append((files, row["seconds"]))
        elif row["benchmark"].startswith("lakeFS Lua exporter"):
            series["lakeFS Lua exporter"].append((files, row["seconds"]))
            if row.get("timeout"):
                bounds.append((files, row["seconds"]))
    if not any(series.values()):
        return None
    if not series["its Iceberg step (cold)"]:
        series["½ of that export"] = []
    figure, axes = plt.subplots(figsize=(7, 4.5))
    styles = {"lakefs-delta-exporter (cold)": {"color": "tab:blue"}, "lakeFS Lua exporter": {"color": "tab:orange"},
              "½ of that export": {"linestyle": "--", "marker": "_", "markersize": 14, "color": "tab:blue"},
              "its Iceberg step (cold)": {"color": "tab:green"},
              "the Iceberg step's files alone": {"linestyle": ":", "marker": "s", "color": "tab:red"}}
    for label, points in series.items():
        if points:
            axes.plot(*zip(*sorted(points)), label=label, **{"marker": "o", **styles[label]})
    for files, seconds in bounds:
        axes.plot([files], [seconds], marker="^", markersize=10, color="tab:orange")  # a lower bound
        axes.annotate(f"time-out at {seconds:,.0f} s:\nLua still running", (files, seconds), xytext=(-10, -8),
                      textcoords="offset points", ha="right", va="top")
    axes.set(xscale="log", yscale="log", xlabel="data files in the table", ylabel="seconds to export",
             title="Cold export time vs table size")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return path


def plot_row_diff_scale(rows: list[dict], path: Path) -> Path | None:
    """Row-diff time against rows changed, each way side by side."""
    import re

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        if "row_diff_rows" in row and row["seconds"] == row["seconds"]:
            way = re.sub(r" \(.*", "", row["benchmark"].split(": ", 1)[1]).split(" spark://")[0]
            series.setdefault(way, []).append((row["row_diff_rows"], row["seconds"]))
    if not series:
        return None
    figure, axes = plt.subplots(figsize=(7, 4))
    for label, points in series.items():
        axes.plot(*zip(*sorted(points)), marker="o", label=label)
    axes.set(xscale="log", yscale="log", xlabel="rows changed", ylabel="seconds", title="Row diff time vs rows changed")
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return path


def plot_grant(rows: list[dict], path: Path) -> Path | None:
    """The grant's, the signer's and the catalog's costs on the big table, cold and kept, beside the
    log-only check."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [(row["benchmark"].split(": ", 1)[1][:70], max(row["seconds"], 1e-6)) for row in rows
                if row["benchmark"].startswith(("grant", "signer", "catalog"))]
    if not measured:
        return None
    figure, axes = plt.subplots(figsize=(8, 4))
    axes.barh([label for label, _ in measured][::-1], [seconds for _, seconds in measured][::-1])
    axes.set(xscale="log", xlabel="seconds (log)", title="The grant, the signer and the catalog on a 1M-file table")
    axes.tick_params(axis="y", labelsize=6)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return path


def plot_object_requests(rows: list[dict], path: Path) -> Path | None:
    """CPU a single-object request, the exporter's own requests beside the ways they were sent before, per request kind."""
    import re

    measured: dict[str, dict[str, float]] = {}
    for row in rows:
        found = re.match(r"object request, (\w+) .*?: (.*?): ([\d.]+) ms CPU", row["benchmark"])
        if found:
            measured.setdefault(found.group(2), {})[found.group(1)] = float(found.group(3))
    if not measured:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    operations = list(next(iter(measured.values())))
    figure, axes = plt.subplots(figsize=(6, 4))
    width = 0.8 / len(measured)
    for i, (way, cpu) in enumerate(measured.items()):
        axes.bar([x + width * i for x in range(len(operations))], [cpu.get(o, 0) for o in operations], width, label=way)
    axes.set_xticks([x + width * (len(measured) - 1) / 2 for x in range(len(operations))], operations)
    axes.set(ylabel="ms of CPU a request", title="Single-object requests to MinIO")
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return path


def plot_gates(rows: list[dict], path: Path) -> Path | None:
    """The merge gate's answers: seconds for each table size, and the key rule each way beside the full scan."""
    import re

    def label(benchmark: str) -> str:
        shown = benchmark.removeprefix("merge gate, ").split(" (")[0].replace(" appended rows on a", "\nrows onto")
        return re.sub(r": alternative, Spark reads all .*", ",\nalternative: Spark's full scan", shown)

    measured = [(label(row["benchmark"]), row["seconds"]) for row in rows if row["benchmark"].startswith("merge gate, ")]
    if not measured:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 0.6 * len(measured) + 1.5))
    axes.barh(range(len(measured)), [seconds for _, seconds in measured])
    axes.set_yticks(range(len(measured)), [label for label, _ in measured], fontsize=7)
    axes.set_xscale("log")
    axes.invert_yaxis()
    axes.set(xlabel="seconds (log scale)", title="Merge gates")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return path


if __name__ == "__main__":
    main()
