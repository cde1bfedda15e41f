"""PyIceberg's full read through the catalog (issue 51), on the local stack: a table of N data files
(each a real 10-row parquet file, so a reader can read them) exported with its Iceberg table, then
read whole by PyIceberg through the service's catalog with the service's token and no bucket keys
(every object request signed by the catalog's signer), in a process of its own: loadTable, planning,
the whole read; the rows, the sign requests and the reader's peak memory.

    python -m bench --pyiceberg-read-files 100000   (with the other parts set to 0)
"""

from __future__ import annotations

import os

from bench.isolated import measure
from bench.synthetic import data_file, gateway_client, running_stack, synthetic_table

ROWS_PER_FILE = 10


def bench_pyiceberg_read(files: int) -> list[dict]:
    from bench.webhooks import PORT, service_client

    state, config, lakefs = running_stack()
    repository, head = synthetic_table(lakefs, gateway_client(state), "bench-pyiceberg", files,
                                       body=data_file(ROWS_PER_FILE))
    exported = measure("export", repository, "main", head, f"t{files}", env={"LAKEFS_DELTA_ICEBERG_ENABLED": "true"})
    assert exported["ok"] and exported["iceberg"]["state"] == "written", exported
    token = os.environ["LAKEFS_DELTA_API_TOKENS"].split("=", 1)[0]
    with service_client():
        read = measure("pyiceberg-read", f"http://127.0.0.1:{PORT}/iceberg", f"{repository}\x1fmain", f"t{files}",
                       env={"BENCH_CATALOG_TOKEN": token})
    print(f"PyIceberg read: {read}", flush=True)
    live = files + 50  # the checkpoint's files and the 50 commits' one each
    assert read["remote_signing"] and read["files"] == live and read["rows"] == live * ROWS_PER_FILE, read
    signs = ", ".join(f"{count:,} {method}" for method, count in sorted(read["sign_methods"].items()))
    return [{"benchmark": f"PyIceberg reads a {files:,}-file table whole through the catalog, no bucket keys: "
                          f"loadTable {read['load_seconds']:.2f} s, planning {read['plan_seconds']:.2f} s, "
                          f"{read['rows']:,} rows; {read['sign_requests']:,} sign requests ({signs}), "
                          f"{read['cpu_seconds']:.0f} s of the reader's CPU",
             "seconds": read["seconds"], "files_per_s": read["files"] / read["seconds"],
             "lakefs_calls": "–", "peak_rss_mib": read["peak_rss_mib"]}]
