"""The grant at scale (issue 49), on the local stack: a table of N files in F folders (`p=<k>/`).

- the folders of the table at a commit, read from its log (`exporter.lakefs.table_folders`): cold, and
  kept;
- lakeFS asked, with a caller's own credentials, about every folder (`RepositoryAccess.check_folders`):
  cold (F stats, 8 at a time), and the set's kept decision; beside the one stat of the table's
  `_delta_log/`, all the grant asked before;
- the signer on the table's Iceberg export (`IcebergCatalog.signed_url`): its first signature (it
  reads every manifest of the table once), then the next ones, p50 and p99;
- the catalog's loadTable of that export through the service, the first and the next ones, p50 and p99.

    python -m bench --grant-files 1000000 --grant-folders 10000   (with the other parts set to 0;
                                                                    --grant-repository R reuses R's table)
"""

from __future__ import annotations

import asyncio
import base64
import random
import time

from bench.isolated import measure
from bench.measure import peak_rss_mib, percentile
from bench.synthetic import build_table, gateway_client, new_repository, running_stack

SIGNATURES = 1000  # signatures after the first, for p50/p99
KEPT_ASKS = 200  # asks of a kept answer, for p50/p99
LOADS = 200  # loadTable answers after the first, for p50/p99


def bench_grant(files: int, folders: int, repository: str | None = None) -> list[dict]:
    """With `repository`, its `t<files>` on main (an earlier run's) is measured, not built again."""
    from exporter.lakefs.lake import Lake, ObjectStores
    from exporter.lakefs.table_folders import TableFolders, table_folders

    state, config, lakefs = running_stack()
    if repository is None:
        repository = new_repository(lakefs, f"bench-grant-{files}")
        print(f"building a table of {files:,} files in {folders:,} folders in {repository} ...", flush=True)
        head = build_table(lakefs, gateway_client(state), repository, files, partitions=folders)
    else:
        head = lakefs.commit(repository, "main").id
    name, path = f"t{files}", f"tables/t{files}"
    lake = Lake(config, lakefs, ObjectStores(config))
    rows = []

    calls, started = lakefs.calls, time.perf_counter()
    found = table_folders(lake, repository, head, path)
    seconds = time.perf_counter() - started
    assert len(found) == folders, len(found)
    rows.append({"benchmark": f"grant: the folders of a {files:,}-file table at a commit, read from its log "
                              f"({folders:,} folders), cold", "seconds": seconds, "files_per_s": files / seconds,
                 "lakefs_calls": lakefs.calls - calls, "peak_rss_mib": peak_rss_mib()})
    kept = TableFolders(lake)
    kept.of(repository, head, path)
    samples = _timed(lambda: kept.of(repository, head, path), KEPT_ASKS)
    rows.append({"benchmark": f"grant: the same folders, kept (p99 of {KEPT_ASKS})", "seconds": percentile(samples, 0.99),
                 "files_per_s": files / percentile(samples, 0.99), "lakefs_calls": 0, "peak_rss_mib": peak_rss_mib()})

    rows += asyncio.run(_lakefs_decisions(config, state, repository, head, path, found, files))
    rows += _signer(lake, config, repository, head, name, path, files)
    rows += _load_table(repository, name, files)
    return rows


async def _lakefs_decisions(config, state, repository: str, head: str, path: str, found: tuple[str, ...],
                            files: int) -> list[dict]:
    """lakeFS's decisions for a caller (the stack's user, by its own keys): the log alone, as before;
    every folder, cold; the kept decision."""
    from exporter.delta.log import log_folder
    from hooks.auth import ALLOWED, FOLDERS_AT_ONCE, Caller, RepositoryAccess

    keys = base64.b64encode(f"{state.lakefs_access_key_id}:{state.lakefs_secret_access_key}".encode()).decode()
    caller = Caller(key="bench-caller", authorization=f"Basic {keys}")
    access = RepositoryAccess(config)
    assert await access.verify(caller) == ALLOWED
    rows = []
    started = time.perf_counter()
    assert await access.check_path(caller, repository, head, log_folder(path)) == ALLOWED
    seconds = time.perf_counter() - started
    rows.append({"benchmark": "grant, alternative (before issue 49): lakeFS asked about the table's `_delta_log/` "
                              "alone, cold", "seconds": seconds, "files_per_s": files / seconds, "lakefs_calls": 1,
                 "peak_rss_mib": peak_rss_mib()})
    started = time.perf_counter()
    decision = await access.check_folders(caller, repository, head, path, found)
    seconds = time.perf_counter() - started
    assert decision == (ALLOWED, ""), decision
    rows.append({"benchmark": f"grant: lakeFS asked about each of {len(found):,} folders ({FOLDERS_AT_ONCE} at a time), cold",
                 "seconds": seconds, "files_per_s": files / seconds, "lakefs_calls": len(found),
                 "peak_rss_mib": peak_rss_mib()})
    samples = []
    for _ in range(KEPT_ASKS):
        started = time.perf_counter()
        await access.check_folders(caller, repository, head, path, found)
        samples.append(time.perf_counter() - started)
    rows.append({"benchmark": f"grant: the folder set's kept decision (p99 of {KEPT_ASKS})",
                 "seconds": percentile(samples, 0.99), "files_per_s": files / percentile(samples, 0.99),
                 "lakefs_calls": 0, "peak_rss_mib": peak_rss_mib()})
    await access.client.aclose()
    return rows


def _signer(lake, config, repository: str, head: str, name: str, path: str, files: int) -> list[dict]:
    """The table's Iceberg export, then the signer's first signature and the next ones."""
    from exporter.catalog.iceberg import IcebergCatalog

    exported = measure("export", repository, "main", head, name, env={"LAKEFS_DELTA_ICEBERG_ENABLED": "true"})
    print(f"exported with Iceberg: {exported}", flush=True)
    endpoint = config.object_store.endpoint.rstrip("/") + "/"
    urls = [entry.physical_address.replace("s3://", endpoint)
            for folder in ("p=0000/", "p=0001/") for entry in lake.lakefs.list_objects(repository, head, f"{path}/{folder}")]
    catalog = IcebergCatalog(lake)
    table = catalog.table(repository, "main", head, name)
    started = time.perf_counter()
    catalog.signed_url(table, "GET", urls[0])
    first = time.perf_counter() - started
    samples = _timed(lambda: catalog.signed_url(table, "GET", random.choice(urls)), SIGNATURES)
    rows = [{"benchmark": f"export of that {files:,}-file table + 50 commits (cold, with iceberg.enabled: the Delta log "
                          f"{exported['seconds']:.2f} s, then its Iceberg table {exported['iceberg_seconds']:.2f} s)",
             "seconds": exported["seconds"] + exported["iceberg_seconds"], "files_per_s": files / exported["seconds"],
             "lakefs_calls": exported["lakefs_calls"], "peak_rss_mib": exported["peak_rss_mib"],
             **({"target": ("the Delta log ≤ 8 s; ≤ 512 MiB (the process, both steps)",
                            exported["seconds"] <= 8 and exported["peak_rss_mib"] <= 512)} if files >= 1_000_000 else {})},
            {"benchmark": f"signer: the first signature on a {files:,}-file table (reads every manifest once)",
             "seconds": first, "files_per_s": files / first, "lakefs_calls": 0, "peak_rss_mib": peak_rss_mib()}]
    for label, q in (("p50", 0.5), ("p99", 0.99)):
        rows.append({"benchmark": f"signer: a later signature, {label} of {SIGNATURES:,}", "seconds": percentile(samples, q),
                     "files_per_s": 1 / percentile(samples, q), "lakefs_calls": 0, "peak_rss_mib": peak_rss_mib()})
    return rows


def _load_table(repository: str, name: str, files: int) -> list[dict]:
    """The catalog's loadTable of the table's export (`_signer` wrote its Iceberg table), as a reader
    asks it: `GET /iceberg/v1/namespaces/<repository>\x1fmain/tables/<name>` of the service (its own
    process, a service token), the first answer and `LOADS` more, p50 and p99."""
    from bench.webhooks import service_client

    with service_client() as client:
        path = f"/iceberg/v1/namespaces/{repository}%1Fmain/tables/{name}"

        def load() -> dict:
            answer = client.get(path)
            assert answer.status_code == 200, (answer.status_code, answer.text[:300])
            return answer.json()

        started = time.perf_counter()
        snapshots = len(load()["metadata"]["snapshots"])
        first = time.perf_counter() - started
        samples = _timed(load, LOADS)
    rows = [{"benchmark": f"catalog: loadTable of a {files:,}-file table's export ({snapshots} snapshots), the first",
             "seconds": first, "files_per_s": files / first, "lakefs_calls": "–", "peak_rss_mib": None}]
    for label, q in (("p50", 0.5), ("p99", 0.99)):
        rows.append({"benchmark": f"catalog: loadTable, {label} of {LOADS}", "seconds": percentile(samples, q),
                     "files_per_s": 1 / percentile(samples, q), "lakefs_calls": "–", "peak_rss_mib": None})
    return rows


def _timed(call, times: int) -> list[float]:
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples
