"""lakeFS's own Delta exporter, measured on the same lakeFS, the same tables, in the same run.

How lakeFS v1.86.0 runs it (read from its sources, `pkg/actions/lua/...` and
`examples/hooks/delta_lake_S3_export.lua`):

- a `type: lua` hook whose script calls `require("lakefs/catalogexport/delta_exporter")
  .export_delta_log(action, table_defs, s3.put_object, delta_client, "_lakefs_tables")`;
- `formats.delta_client(lakefs_key, lakefs_secret, region)` reads the whole log, checkpoint
  included, with delta-go through lakeFS's own S3 gateway (its listen address, path style);
- then one `lakefs.stat_object` per add/remove/cdc line and per deletion vector: in-process API
  calls that lakeFS still counts in its Prometheus metrics (`api_request_duration_seconds_count`);
- `aws.s3_client(key, secret, region, endpoint)` writes the log: the fourth argument is the endpoint.
  There is no path-style switch, but aws-sdk-go-v2's endpoint rules address an IP-literal endpoint
  path style (`http://127.0.0.1:19000/<bucket>/<key>`), so the stack's MinIO is reachable with no
  lakeFS configuration beyond what `devtools.stack` already writes (`localhost` would not be:
  it becomes `<bucket>.localhost`). `aws` and `formats` are always loaded; `net_http_enabled` is
  not needed;
- output: `<namespace>/_lakefs/exported/<branch>/<first 6 of commit>/<table name>/_delta_log/`,
  versions renumbered from 0 with the checkpoint folded into version 0 (then `c.json` again as
  version 1), no checkpoint file, no `_last_checkpoint`. Only the latest snapshot can be compared.

What the runs here showed: adds that came from a checkpoint lose `partitionValues` when it is empty
(delta-go reads the empty map as nil, which marshals to null, which the Lua JSON round trip drops),
so delta-rs refuses the export ("unmasked nulls ... partitionValues") while Spark reads it; the
snapshot is then checked by replaying the JSON log (`read_back`). Every version is one string built
by `..` in a loop, so the time grows faster than linearly with the files in the checkpoint.

lakeFS records a run only once every hook ended, and a Lua hook has no timeout: a hook we stop
waiting for keeps running inside lakeFS until it ends (or lakeFS stops).

The action's args carry the stack's lakeFS and MinIO keys in clear: acceptable only because bench
repositories are throwaway ones on a loopback stack whose keys already sit in its stack directory.
"""

from __future__ import annotations

import ipaddress
import json
import re
import time
import urllib.request
from datetime import datetime
from urllib.parse import urlsplit

ACTION_PATH = "_lakefs_actions/lua_delta_export.yaml"
HOOK_ID = "lua_delta_export"
# Follows lakeFS's examples/hooks/delta_lake_S3_export.lua, with the object store's endpoint added.
SCRIPT = """\
local aws = require("aws")
local formats = require("formats")
local delta_exporter = require("lakefs/catalogexport/delta_exporter")

local s3 = aws.s3_client(args.aws.access_key_id, args.aws.secret_access_key, args.aws.region, args.aws.endpoint)
local delta_client = formats.delta_client(args.lakefs.access_key_id, args.lakefs.secret_access_key, args.aws.region)
local exported = delta_exporter.export_delta_log(action, args.table_defs, s3.put_object, delta_client, "_lakefs_tables")
for name, details in pairs(exported) do
  print("exported " .. name .. " to " .. details.path)
end
"""
# What SCRIPT can call: lakefs.stat_object per file and lakefs.get_object for the table descriptor, in
# process, and delta-go through the S3 gateway. lakeFS's counters are global: anything else counted
# while the hook ran is reported apart; other operations than the bench's own mean the stack was
# shared during the run, and the counts above may then include someone else's calls too.
HOOK_OPERATIONS = ("api:StatObject", "api:GetObject", "gateway:")
BENCH_OPERATIONS = {"api:Commit", "api:ListRepositoryRuns"}
METRIC = re.compile(r'^(api|gateway)_request_duration_seconds_count\{([^}]*)\}\s+(\S+)$')
POLL_SECONDS = 0.25


def action_yaml(state, table_name: str) -> str:
    """The action, post-commit on main; JSON strings are YAML strings, so every value is quoted safely."""
    host = urlsplit(state.minio_endpoint).hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"the Lua S3 client addresses {state.minio_endpoint} virtual-hosted style; "
                         "it reaches MinIO only through an IP-literal endpoint") from None
    script = "\n".join("        " + line if line else "" for line in SCRIPT.splitlines())
    q = json.dumps
    return f"""name: lua delta export
on:
  post-commit:
    branches: ["main"]
hooks:
  - id: {HOOK_ID}
    type: lua
    properties:
      script: |
{script}
      args:
        aws:
          access_key_id: {q(state.minio_user)}
          secret_access_key: {q(state.minio_password)}
          region: "us-east-1"
          endpoint: {q(state.minio_endpoint)}
        lakefs:
          access_key_id: {q(state.lakefs_access_key_id)}
          secret_access_key: {q(state.lakefs_secret_access_key)}
        table_defs: [{q(table_name)}]
"""


def lakefs_request_counts(lakefs_endpoint: str) -> dict[str, float]:
    """lakeFS's own request counters by operation: `api:StatObject`, `gateway:get_object`, ..."""
    with urllib.request.urlopen(f"{lakefs_endpoint}/metrics", timeout=10) as response:
        text = response.read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        found = METRIC.match(line)
        if found:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', found.group(2)))
            name = f"{found.group(1)}:{labels.get('operation', '?')}"
            counts[name] = counts.get(name, 0) + float(found.group(3))
    return counts


def calls_between(before: dict[str, float], after: dict[str, float]) -> tuple[dict[str, int], dict[str, int]]:
    """(the hook's calls, every other call counted in the same window) by operation."""
    calls = {name: int(after[name] - before.get(name, 0)) for name in sorted(after)}
    hook = {name: n for name, n in calls.items() if n > 0 and name.startswith(HOOK_OPERATIONS)}
    return hook, {name: n for name, n in calls.items() if n > 0 and name not in hook}


def lakefs_rss_mib() -> float | None:
    """The lakeFS process's resident memory (the Lua VM runs inside it), None when not ours to see."""
    from devtools import stack

    pid = stack._running_pid(stack.STACK_DIR, "lakefs")
    if pid is None:
        return None
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def seconds_between(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def read_back(state, location: str, project_location: str | None) -> dict:
    """What the hook wrote in MinIO, and its latest snapshot: delta-rs's, or our replay when delta-rs refuses."""
    import boto3
    import pyarrow as pa
    from deltalake import DeltaTable

    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    s3 = boto3.client("s3", endpoint_url=state.minio_endpoint, region_name="us-east-1",
                      aws_access_key_id=state.minio_user, aws_secret_access_key=state.minio_password)
    written = [o for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
               for o in page.get("Contents", [])]
    found = {"objects": len(written), "bytes": sum(o["Size"] for o in written)}
    options = {"AWS_ENDPOINT_URL": state.minio_endpoint, "AWS_ACCESS_KEY_ID": state.minio_user,
               "AWS_SECRET_ACCESS_KEY": state.minio_password, "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}

    def snapshot(uri: str) -> tuple[int, dict[str, int | None]]:
        """delta-rs's latest snapshot: version, and each add's path with its `numRecords`."""
        table = DeltaTable(uri, storage_options=options)
        adds = pa.table(table.get_add_actions(flatten=True))
        records = (adds.column("num_records").to_pylist() if "num_records" in adds.column_names
                   else [None] * adds.num_rows)
        return table.version(), dict(zip(adds.column("path").to_pylist(), records))

    def replay() -> tuple[int, dict[str, int | None]]:
        """The same, by replaying the JSON commits ourselves (the Lua export writes no checkpoint)."""
        live: dict[str, int | None] = {}
        logs = sorted(o["Key"] for o in written if o["Key"].endswith(".json") and "/_delta_log/" in o["Key"])
        for key in logs:
            for line in s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode().splitlines():
                action = json.loads(line) if line.strip() else {}
                if "add" in action:
                    stats = json.loads(action["add"].get("stats") or "{}")
                    live[action["add"]["path"]] = stats.get("numRecords")
                elif "remove" in action:
                    live.pop(action["remove"]["path"], None)
        return int(logs[-1].rsplit("/", 1)[1].split(".")[0]), live

    def summary(adds: dict[str, int | None]) -> dict:
        known = [n for n in adds.values() if n is not None]
        return {"adds": len(adds), "rows_from_stats": sum(known), "adds_without_stats": len(adds) - len(known)}

    try:
        found["version"], adds = snapshot(location)
        found["reader"] = "delta-rs"
    except Exception as exc:  # a reader's refusal is a result to report, not a bench failure
        found["read_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        found["version"], adds = replay()
        found["reader"] = "our replay of its JSON log"
    found.update(summary(adds))
    if project_location:
        found["project_version"], project_adds = snapshot(project_location)
        found["project"] = summary(project_adds)
        found["same_adds_as_project"] = set(adds) == set(project_adds)
        found["adds_only_in_lua"] = len(set(adds) - set(project_adds))
        found["adds_only_in_project"] = len(set(project_adds) - set(adds))
    return found


def bench_lua_export(lakefs, state, repository: str, files: int, commit_id: str,
                     project_location: str | None = None, timeout: float = 600.0) -> dict:
    """Install the Lua action on main (its commit is the trigger), wait for the run, measure, read back.

    `commit_id` is the table's commit that this project's exporter exported; the trigger commit only
    adds the action file, so the Lua hook exports the same table. Returns a bench row with a `lua`
    dict of details; on timeout the row says so and the hook is still running inside lakeFS.
    """
    table_name = f"t{files}"
    label = f"lakeFS Lua exporter, {files:,}-file table + 50 commits"
    lakefs.upload_object(repository, "main", ACTION_PATH, action_yaml(state, table_name).encode())
    before = lakefs_request_counts(state.lakefs_endpoint)
    rss_before = lakefs_rss_mib()
    rss = [rss_before] if rss_before is not None else []
    started = time.perf_counter()
    trigger = lakefs.commit_branch(repository, "main", f"install the Lua Delta exporter for {table_name}")
    runs: list[dict] = []
    while time.perf_counter() - started < timeout:
        runs = [r for r in lakefs.action_runs(repository, trigger) if r["status"] in ("completed", "failed")]
        rss += [r for r in [lakefs_rss_mib()] if r is not None]
        if runs:
            break
        time.sleep(POLL_SECONDS)
    observed = time.perf_counter() - started
    calls, other_calls = calls_between(before, lakefs_request_counts(state.lakefs_endpoint))
    assert lakefs.commit(repository, trigger).parents == [commit_id], "the trigger commit must sit on the exported one"
    details: dict = {"trigger_commit": trigger, "observed_seconds": observed, "calls": calls,
                     "other_calls": other_calls, "shared": bool(set(other_calls) - BENCH_OPERATIONS),
                     "lakefs_rss_before_mib": rss_before,
                     "lakefs_rss_peak_mib": max(rss) if rss else None}
    row = {"benchmark": label, "lakefs_calls": sum(calls.values()), "peak_rss_mib": details["lakefs_rss_peak_mib"],
           "lua": details}
    if not runs:
        details["status"] = "timeout"
        return {**row, "benchmark": f"{label} (timeout after {timeout:.0f} s; still running in lakeFS)",
                "seconds": observed, "files_per_s": (files + 50) / observed, "timeout": True}
    run = runs[0]
    hook = next(h for h in lakefs.hook_runs(repository, run["run_id"]) if h["hook_id"] == HOOK_ID)
    details.update(status=run["status"], run_id=run["run_id"],
                   output=lakefs.hook_output(repository, run["run_id"], hook["hook_run_id"]).strip())
    seconds = seconds_between(hook["start_time"], hook["end_time"])
    details["hook_seconds"] = seconds
    if run["status"] != "completed":
        return {**row, "benchmark": f"{label} (failed)", "seconds": seconds, "files_per_s": 0.0, "failed": True}
    namespace = lakefs.storage_namespace(repository).rstrip("/")
    details["location"] = f"{namespace}/_lakefs/exported/main/{trigger[:6]}/{table_name}"
    details["read_back"] = read_back(state, details["location"], project_location)
    return {**row, "seconds": seconds, "files_per_s": (files + 50) / seconds}
