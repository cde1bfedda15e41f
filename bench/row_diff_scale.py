"""The row diff at scale (issue 50): a narrow table of N rows overwritten on a branch with every row
changed (an `updated` row each, by key `id`), diffed four ways, each in its own process on one stack:
in the worker (its limits raised), as the Spark job on `local[2]`, as the Spark job on Spark's own
standalone cluster (`devtools.stack.spark_cluster`: a master and one worker of 1 core, 2g), and the
full scan table-diff tools take (Spark reads both versions whole, `exceptAll` both ways). Each row:
time, rows/s, the worker's peak RSS and the Spark driver's (its JVM's VmHWM).

    python -m bench --row-diff-scale 1000000 3000000 10000000   (with the other parts set to 0)
"""

from __future__ import annotations

from bench.isolated import measure
from bench.measure import driver_peak
from bench.synthetic import new_repository, running_stack

IN_PROCESS = {"LAKEFS_DELTA_ROW_DIFF_MAX_ROWS": str(10**10), "LAKEFS_DELTA_ROW_DIFF_MAX_BYTES": str(2**40),
              "LAKEFS_DELTA_ROW_DIFF_MAX_MEMORY_MIB": str(2**20)}
AS_JOB = {"LAKEFS_DELTA_ROW_DIFF_MAX_ROWS": "0"}


def bench_row_diff_scale(sizes: list[int]) -> list[dict]:
    from devtools import stack
    from devtools.spark import stack_spark_session

    _, _, lakefs = running_stack()
    cluster = stack.spark_cluster()
    rows_out = []
    for rows in sizes:
        repository = new_repository(lakefs, f"bench-rowscale-{rows}")
        print(f"writing {rows:,} rows in {repository}, then every row changed on a branch ...", flush=True)
        spark = stack_spark_session(app_name="bench-rowscale-writer")
        spark.range(rows).selectExpr("id", "id % 1000 AS v").repartition(4) \
            .write.format("delta").save(f"s3a://{repository}/main/tables/narrow")
        left = lakefs.commit_branch(repository, "main", f"{rows} rows")
        lakefs.create_branch(repository, "changed", "main")
        spark.range(rows).selectExpr("id", "id % 1000 + 1 AS v").repartition(4) \
            .write.format("delta").mode("overwrite").save(f"s3a://{repository}/changed/tables/narrow")
        right = lakefs.commit_branch(repository, "changed", "every row changed")
        spark.stop()
        args = (repository, left, right, "tables/narrow", "id")
        ways = [("in the worker (limits raised)", IN_PROCESS),
                ("Spark job, local[2]", AS_JOB),
                (f"Spark job, standalone cluster {cluster} (1 worker, 1 core)",
                 {**AS_JOB, "LAKEFS_DELTA_ROW_DIFF_SPARK_MASTER": cluster})]
        for label, env in ways:
            try:
                found = measure("rowdiff", *args, env=env)
            except RuntimeError as failed:
                rows_out.append({"benchmark": f"row diff, {rows:,} rows changed: {label}: failed "
                                              f"({str(failed).strip().splitlines()[-1][:160]})",
                                 "seconds": float("nan"), "lakefs_calls": "–", "peak_rss_mib": None})
                continue
            assert found["counts"] == {"added": 0, "removed": 0, "updated": rows}, found
            rows_out.append({"benchmark": f"row diff, {rows:,} rows changed: {label} ({found['engine']}; "
                                          f"{rows / found['seconds']:,.0f} rows/s; "
                                          f"{driver_peak(found.get('driver_peak_mib'))})",
                             "seconds": found["seconds"], "files_per_s": None, "lakefs_calls": found["lakefs_calls"],
                             "peak_rss_mib": found["peak_rss_mib"], "row_diff_rows": rows})
            print(rows_out[-1], flush=True)
        theirs = measure("exceptall", repository, left, right, "tables/narrow")
        assert theirs["counts"] == {"removed": rows, "added": rows}, theirs
        rows_out.append({"benchmark": f"row diff, {rows:,} rows changed: alternative, Spark reads both versions "
                                      f"whole and runs exceptAll both ways ({rows / theirs['seconds']:,.0f} rows/s; "
                                      "JVM peak as peak RSS)",
                         "seconds": theirs["seconds"], "files_per_s": None, "lakefs_calls": "–",
                         "peak_rss_mib": theirs["peak_rss_mib"], "row_diff_rows": rows})
        print(rows_out[-1], flush=True)
    return rows_out
