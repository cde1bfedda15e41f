"""Benchmarks: `python -m bench` (or `make bench`) against the local stack. Prints a markdown table
and writes it to bench/results/<date>.md.

1. checkpoint rewrite throughput: a synthetic checkpoint of N add actions, rewritten in memory;
2. end-to-end export of synthetic tables in lakeFS (a checkpoint of N adds + 50 JSON commits after
   it), cold (first export) and warm (the manifest exists: a no-op), with lakeFS calls and peak memory,
   beside lakeFS's own Lua Delta exporter run as a post-commit hook on the same table (bench/lua_exporter.py);
3. history diff of a table with N versions (checkpoint every 10): cold, and cached p50/p99;
4. a commit storm (bench/webhooks.py): 200 commits at once, 3 tables each, 2 workers.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from exporter.paths import PathResolver
from exporter.rewrite import rewrite_checkpoint

RESULTS = Path(__file__).resolve().parent / "results"
ADD_TYPE = pa.struct([("path", pa.string()), ("partitionValues", pa.map_(pa.string(), pa.string())),
                      ("size", pa.int64()), ("modificationTime", pa.int64()), ("dataChange", pa.bool_()),
                      ("stats", pa.string())])
PROTOCOL = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
METADATA = {"metaData": {"id": "bench", "format": {"provider": "parquet", "options": {}}, "partitionColumns": [],
                         "schemaString": json.dumps({"type": "struct", "fields": [
                             {"name": "id", "type": "long", "nullable": True, "metadata": {}}]}),
                         "configuration": {}, "createdTime": 0}}


def synthetic_checkpoint(names: list[str]) -> pa.Table:
    adds = pa.array([{"path": n, "partitionValues": [], "size": 100, "modificationTime": 0, "dataChange": False,
                      "stats": '{"numRecords":10}'} for n in names], type=ADD_TYPE)
    protocol_type = pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])
    metadata_type = pa.struct([("id", pa.string()), ("schemaString", pa.string()),
                               ("partitionColumns", pa.list_(pa.string())),
                               ("format", pa.struct([("provider", pa.string()), ("options", pa.map_(pa.string(), pa.string()))])),
                               ("configuration", pa.map_(pa.string(), pa.string())), ("createdTime", pa.int64())])
    rows = len(names) + 2
    nulls = lambda t: pa.nulls(rows - 1, type=t)  # noqa: E731
    add_column = pa.concat_arrays([pa.nulls(2, type=ADD_TYPE), adds])
    protocol = pa.concat_arrays([pa.array([PROTOCOL["protocol"]], type=protocol_type), nulls(protocol_type)])
    meta = METADATA["metaData"]
    metadata = pa.concat_arrays([pa.nulls(1, type=metadata_type),
                                 pa.array([{**meta, "format": {"provider": "parquet", "options": []}, "configuration": []}],
                                          type=metadata_type), pa.nulls(rows - 2, type=metadata_type)])
    return pa.table({"protocol": protocol, "metaData": metadata, "add": add_column})


def bench_checkpoint_rewrite(actions: int) -> dict:
    names = [f"part-{i:07d}-{uuid.UUID(int=i).hex}.snappy.parquet" for i in range(actions)]
    table = synthetic_checkpoint(names)
    resolver = PathResolver({n: f"s3://bucket/ns/data/g{i // 1000:05d}/c{i:08d}" for i, n in enumerate(names)})
    started = time.perf_counter()
    rewritten, count, missing = rewrite_checkpoint(table, resolver)
    seconds = time.perf_counter() - started
    assert count == actions and not missing
    return {"benchmark": f"checkpoint rewrite, {actions:,} adds", "seconds": seconds, "files_per_s": actions / seconds,
            "lakefs_calls": 0, "peak_rss_mib": peak_rss_mib()}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build_table(lakefs, gateway, repository: str, files: int, commits_after: int = 50) -> str:
    """N tiny data objects through the gateway, a checkpoint of N adds at version 1, then 50 commits."""
    prefix = f"tables/t{files}/"
    names = [f"part-{i:07d}-{uuid.uuid4().hex[:8]}.parquet" for i in range(files + commits_after)]
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda n: gateway.put_object(Bucket=repository, Key=f"main/{prefix}{n}", Body=b"x"), names))
    log = prefix + "_delta_log/"
    lakefs.upload_object(repository, "main", log + f"{0:020d}.json",
                         (json.dumps({"commitInfo": {"operation": "CREATE TABLE"}}) + "\n" + json.dumps(PROTOCOL) + "\n"
                          + json.dumps(METADATA) + "\n").encode())
    sink = io.BytesIO()
    pq.write_table(synthetic_checkpoint(names[:files]), sink)
    lakefs.upload_object(repository, "main", log + f"{1:020d}.checkpoint.parquet", sink.getvalue())
    lakefs.upload_object(repository, "main", log + f"{1:020d}.json",
                         json.dumps({"commitInfo": {"operation": "WRITE"}}).encode() + b"\n")
    for v, name in enumerate(names[files:], start=2):
        add = {"add": {"path": name, "partitionValues": {}, "size": 1, "modificationTime": 0, "dataChange": True}}
        lakefs.upload_object(repository, "main", log + f"{v:020d}.json",
                             (json.dumps({"commitInfo": {"operation": "WRITE"}}) + "\n" + json.dumps(add) + "\n").encode())
    lakefs.upload_object(repository, "main", f"_lakefs_tables/t{files}.yaml",
                         f"name: t{files}\ntype: delta\npath: {prefix.rstrip('/')}\n".encode())
    return lakefs.commit_branch(repository, "main", f"bench table of {files} files")


def bench_exports(sizes: list[int], lua: bool = True, lua_timeout: float = 600.0) -> list[dict]:
    import boto3

    from bench.lua_exporter import bench_lua_export

    from exporter.config import load_config
    from exporter.export import export_table, find_table
    from exporter.lakefs import LakeFS
    from lakefs_delta import stack

    state = stack.up()
    os.environ.update(state.environment())
    config = load_config()
    lakefs = LakeFS(config.lakefs)
    gateway = boto3.client("s3", endpoint_url=state.lakefs_endpoint, region_name="us-east-1",
                           aws_access_key_id=state.lakefs_access_key_id, aws_secret_access_key=state.lakefs_secret_access_key)
    rows = []
    for files in sizes:
        repository = f"bench-{files}-{uuid.uuid4().hex[:6]}"
        lakefs.create_repository(repository, f"s3://{stack.BUCKET}/{repository}")
        print(f"building a table of {files:,} files in {repository} ...", flush=True)
        commit_id = build_table(lakefs, gateway, repository, files)
        table = find_table(lakefs, repository, commit_id, f"t{files}")
        project_rows, location = [], None
        for run in ("cold", "warm"):
            outcome = export_table(config, repository, "main", commit_id, table, lakefs=LakeFS(config.lakefs))
            assert outcome.ok, outcome.error
            location = location or outcome.location
            project_rows.append({"benchmark": f"export {files:,}-file table + 50 commits ({run})",
                                 "seconds": outcome.seconds, "files_per_s": (files + 50) / outcome.seconds,
                                 "lakefs_calls": outcome.lakefs_calls, "peak_rss_mib": peak_rss_mib()})
        rows += project_rows
        if not lua:
            continue
        print(f"running lakeFS's Lua Delta exporter on {repository} ...", flush=True)
        lua_row = bench_lua_export(lakefs, state, repository, files, commit_id, location, lua_timeout)
        if not lua_row.get("failed"):
            lua_row["vs_lua"] = 1.0
            for row in project_rows:  # a timeout makes the ratio an upper bound
                row["vs_lua"], row["vs_lua_bound"] = row["seconds"] / lua_row["seconds"], bool(lua_row.get("timeout"))
        rows.append(lua_row)
        if lua_row.get("timeout"):
            print("the Lua hook is still running inside lakeFS: no further Lua runs", flush=True)
            lua = False
    return rows


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


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_diffs(versions_list: list[int]) -> list[dict]:
    from exporter.config import load_config
    from exporter.diff import DiffCache, cached_diff, compute_diff
    from exporter.lakefs import LakeFS
    from lakefs_delta import stack

    state = stack.up()
    os.environ.update(state.environment())
    config = load_config()
    lakefs = LakeFS(config.lakefs)
    cache = DiffCache(config.redis_url, 600)
    rows = []
    for versions in versions_list:
        repository = f"bench-diff-{versions}-{uuid.uuid4().hex[:6]}"
        lakefs.create_repository(repository, f"s3://{stack.BUCKET}/{repository}")
        print(f"building a table with {versions:,} versions in {repository} ...", flush=True)
        build_history(lakefs, repository, versions)
        left, right = lakefs.commit(repository, "main").id, lakefs.commit(repository, "topic").id
        calls = lakefs.calls
        started = time.perf_counter()
        diff = compute_diff(config, lakefs, repository, left, right, "tables/history")
        cold = time.perf_counter() - started
        assert len(diff["results"]) == versions, len(diff["results"])
        rows.append({"benchmark": f"cold diff, {versions:,} versions (checkpoint every 10)", "seconds": cold,
                     "files_per_s": versions / cold, "lakefs_calls": lakefs.calls - calls, "peak_rss_mib": peak_rss_mib()})
        cached_diff(config, lakefs, cache, repository, "main", "topic", "tables/history")
        samples = []
        for _ in range(200):
            started = time.perf_counter()
            cached_diff(config, lakefs, cache, repository, "main", "topic", "tables/history")
            samples.append(time.perf_counter() - started)
        for name, q in (("p50", 0.5), ("p99", 0.99)):
            rows.append({"benchmark": f"cached diff {name} (refs resolved to commits, then Redis), {versions:,} versions",
                         "seconds": percentile(samples, q), "files_per_s": 1 / percentile(samples, q),
                         "lakefs_calls": 2, "peak_rss_mib": peak_rss_mib()})
    return rows


def markdown(rows: list[dict]) -> str:
    def rss(r: dict) -> str:
        if r["peak_rss_mib"] is None:
            return "–"
        return f"{r['peak_rss_mib']:,.0f}" + (" (lakeFS)" if "lua" in r else "")

    def ratio(r: dict) -> str:
        if "vs_lua" not in r:
            return "–"
        return ("< " if r.get("vs_lua_bound") else "") + f"{r['vs_lua']:.3g}"

    lines = ["| benchmark | seconds | files/s | lakeFS calls | peak RSS MiB | project/Lua |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['benchmark']} | {r['seconds']:.3f} | {r['files_per_s']:,.0f} | {r['lakefs_calls']} | "
              f"{rss(r)} | {ratio(r)} |" for r in rows]
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
    parser.add_argument("--sizes", type=int, nargs="*", default=[1_000, 10_000], help="table sizes to export")
    parser.add_argument("--diff-versions", type=int, nargs="*", default=[1_000], help="table histories to diff")
    parser.add_argument("--storm", type=int, default=200, help="commits arriving at once (0: skip)")
    parser.add_argument("--no-lua", action="store_true", help="skip lakeFS's Lua Delta exporter")
    parser.add_argument("--lua-timeout", type=float, default=600.0, help="seconds to wait for one Lua hook run")
    args = parser.parse_args()
    rows = [bench_checkpoint_rewrite(args.actions)]
    rows += bench_exports(args.sizes, not args.no_lua, args.lua_timeout) if args.sizes else []
    rows += bench_diffs(args.diff_versions) if args.diff_versions else []
    if args.storm:
        from bench.webhooks import bench_commit_storm

        rows += bench_commit_storm(args.storm)
    table = markdown(rows)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{date.today().isoformat()}.md"
    out.write_text(f"# Benchmarks {date.today().isoformat()}\n\nMachine: {os.cpu_count()} cores.\n\n{table}\n")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
