"""Merge gates at scale (issue 53), each measurement in its own process: time, lakeFS calls,
object requests and bytes read, peak RSS.

- the gate's answer for a branch that adds 10 files to a table of N files (the rules that read the
  logs: schema, rows, readers): cold, with no cache, and as the service answers once the workers
  have cached the source commit's diff against its parent (after its export), which is the whole
  change when the branch is one commit on the destination's head;
- the gate's answer for a branch that compacts 10 of those files into one (the same rows) under
  `rows: removed_at_most: 0`: the logs say only that up to the 10 files' rows may be gone, so the
  gate counts the changed rows (the 11 files), as the row diff does;
- a key rule over a branch that appends N rows (Spark-written) to a table of N rows: the gate in
  the worker and as the Spark job, beside the full scan a generic check takes (Spark reads the
  table whole and counts repeated keys).

    python -m bench --gate-sizes 100000 1000000 --gate-key-rows 1000000   (the other parts set to 0)
"""

from __future__ import annotations

import io
import itertools
import json
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from bench.isolated import measure
from bench.measure import driver_peak
from bench.synthetic import add_files, data_file, gateway_client, new_repository, running_stack, synthetic_table

RULES = "checks:\n  schema: true\n  rows:\n    removed_at_most: 5%\n    added_at_most: 10%\n  readers: [delta-sharing, duckdb]\n"
NEW_FILES = 10


def bench_gates(sizes: list[int]) -> list[dict]:
    state, _, lakefs = running_stack()
    gateway = gateway_client(state)
    rows = []
    for files in sizes:
        # data files that read (10 ids each, as the adds' stats say): the compaction's rows are counted
        repository, _ = synthetic_table(lakefs, gateway, "bench-gate", files, body=data_file())
        lakefs.upload_object(repository, "main", f"_lakefs_tables/t{files}.yaml",
                             f"name: t{files}\ntype: delta\npath: tables/t{files}\n{RULES}".encode())
        lakefs.commit_branch(repository, "main", "rules")
        lakefs.create_branch(repository, "change", "main")
        add_files(lakefs, gateway, repository, files, NEW_FILES, branch="change")
        found = passing_gate(repository, "change", f"t{files}")
        rows.append(gate_row(f"merge gate, a {NEW_FILES}-file change to a table of {files:,} files "
                             f"(schema, rows, readers; {_requests(found['requests'])})", found))
        precomputed = measure("precompute", repository, "change", f"tables/t{files}")
        found = passing_gate(repository, "change", f"t{files}", "diffs")
        rows.append(gate_row(f"merge gate, a {NEW_FILES}-file change to a table of {files:,} files, its diff cached by "
                             f"the workers after the commit's export ({precomputed['seconds']:.2f} s there; "
                             f"{_requests(found['requests'])})", found))
        compact_files(lakefs, gateway, repository, files, NEW_FILES)
        found = passing_gate(repository, "compaction", f"t{files}")
        rows.append(gate_row(f"merge gate, a compaction of {NEW_FILES} files into one on a table of {files:,} files "
                             f"under removed_at_most: 0 (the rows counted, none removed; "
                             f"{_requests(found['requests'])})", found))
    return rows


def passing_gate(repository: str, source: str, table: str, *options: str) -> dict:
    """The gate's answer for merging `source` into main (`bench.isolated gate`): `table` checked, no finding."""
    found = measure("gate", repository, source, "main", *options)
    assert found["tables"] == [table] and found["findings"] == [], found
    return found


def gate_row(label: str, found: dict) -> dict:
    """A gate's measurement as a row of the results table, printed as it is made."""
    row = {"benchmark": label, "seconds": found["seconds"], "files_per_s": None, "lakefs_calls": found["lakefs_calls"],
           "peak_rss_mib": found["peak_rss_mib"]}
    print(row, flush=True)
    return row


def compact_files(lakefs, gateway, repository: str, files: int, count: int) -> str:
    """A branch `compaction` off main whose one commit replaces `count` of the table's files by one
    holding their rows (OPTIMIZE's shape), its descriptor allowing no row removed."""
    prefix = f"tables/t{files}/"
    lakefs.create_branch(repository, "compaction", "main")
    replaced = [entry.path[len(prefix):] for entry in itertools.islice(
        (e for e in lakefs.list_objects(repository, "main", prefix) if e.path.endswith(".parquet")
         and "_delta_log/" not in e.path), count)]
    sink = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(list(range(10)) * count, pa.int64())}), sink)
    name = f"part-compacted-{uuid.uuid4().hex[:8]}.parquet"
    gateway.put_object(Bucket=repository, Key=f"compaction/{prefix}{name}", Body=sink.getvalue())
    actions = [{"commitInfo": {"operation": "OPTIMIZE"}},
               *({"remove": {"path": path, "deletionTimestamp": 0, "dataChange": False}} for path in replaced),
               {"add": {"path": name, "partitionValues": {}, "size": len(sink.getvalue()), "modificationTime": 0,
                        "dataChange": False, "stats": json.dumps({"numRecords": 10 * count})}}]
    lakefs.upload_object(repository, "compaction", f"{prefix}_delta_log/{52:020d}.json",
                         "".join(json.dumps(action) + "\n" for action in actions).encode())
    lakefs.upload_object(repository, "compaction", f"_lakefs_tables/t{files}.yaml",
                         f"name: t{files}\ntype: delta\npath: tables/t{files}\n"
                         f"checks:\n  rows:\n    removed_at_most: 0\n".encode())
    return lakefs.commit_branch(repository, "compaction", f"{count} files compacted into one")


def bench_key_rule(rows: int) -> list[dict]:
    """A table of `rows` rows (Spark: ids in contiguous ranges per file), a branch appending `rows`
    more with new ids and one repeated: the key rule in the gate, then the full scan."""
    from devtools.spark import stack_spark_session

    _, _, lakefs = running_stack()
    repository = new_repository(lakefs, f"bench-gate-keys-{rows}")
    print(f"writing {rows:,} rows in {repository}, then {rows:,} more on a branch ...", flush=True)
    spark = stack_spark_session(app_name="bench-gate-keys-writer")
    spark.range(rows).selectExpr("id", "id % 1000 AS v").write.format("delta").save(f"s3a://{repository}/main/tables/keyed")
    lakefs.upload_object(repository, "main", "_lakefs_tables/keyed.yaml",
                         b"name: keyed\ntype: delta\npath: tables/keyed\nchecks:\n  keys: [id]\n")
    lakefs.commit_branch(repository, "main", f"{rows} rows")
    lakefs.create_branch(repository, "append", "main")
    spark.range(rows, 2 * rows).union(spark.range(2 * rows - 1, 2 * rows)).selectExpr("id", "id % 1000 AS v") \
        .write.format("delta").mode("append").save(f"s3a://{repository}/append/tables/keyed")
    lakefs.commit_branch(repository, "append", f"{rows} more rows, one key twice")
    spark.stop()
    out = []
    for label, env in (("in the worker", {}), ("as the Spark job, local[2] (row_diff.max_rows 0)",
                                               {"LAKEFS_DELTA_ROW_DIFF_MAX_ROWS": "0"})):
        found = measure("gate", repository, "append", "main", env=env)
        assert [f["rule"] for f in found["findings"]] == ["keys"], found
        assert f"id={2 * rows - 1} (2 rows)" in found["findings"][0]["found"], found
        out.append({"benchmark": f"merge gate, key rule over {rows:,} appended rows on a {rows:,}-row table, {label} "
                                 f"(finds the one repeated key; {_requests(found['requests'])}; "
                                 f"{driver_peak(found.get('driver_peak_mib'))})",
                    "seconds": found["seconds"], "files_per_s": None, "lakefs_calls": found["lakefs_calls"],
                    "peak_rss_mib": found["peak_rss_mib"], "gate_key_rows": rows})
        print(out[-1], flush=True)
    theirs = measure("keyscan", repository, "append", "tables/keyed", "id")
    assert theirs["repeated"] == 1, theirs
    out.append({"benchmark": f"merge gate, key rule over {rows:,} appended rows on a {rows:,}-row table: alternative, "
                             f"Spark reads all {2 * rows + 1:,} rows and counts repeated keys (JVM peak as peak RSS)",
                "seconds": theirs["seconds"], "files_per_s": None, "lakefs_calls": "–",
                "peak_rss_mib": theirs["peak_rss_mib"], "gate_key_rows": rows})
    print(out[-1], flush=True)
    return out


def _requests(requests: dict) -> str:
    requests = dict(requests)
    read = requests.pop("bytes read", 0)
    if not requests:
        return "no object read"
    return (f"{read / 2**20:,.1f} MiB read in {sum(requests.values())} object requests: "
            + ", ".join(f"{n} {op}" for op, n in sorted(requests.items())))
