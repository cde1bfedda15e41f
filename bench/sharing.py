"""The Delta Sharing server under a big table: one snapshot query through the real HTTP server
(`lakefs-delta serve` in its own process, on a free port), its answer read as a stream.

Measured from the client: time to the response headers, to the first body byte and to the last,
lines and bytes received; from the server process: its peak RSS (`VmHWM`, /proc) before and after
the query, its RSS sampled every half second while the answer arrives, and the CPU time the query
took. The first and last file URLs of the answer are fetched
(GET from MinIO, 200), so the lines are of working URLs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx

from bench.measure import own_redis_database
from devtools.procs import memory_mib

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "bench" / "results" / "bench-sharing.log"
SHARE = "bench"
CAPABILITIES = {"parquet": None, "delta": "responseformat=delta"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`lakefs-delta serve` (uvicorn in that process: its PID is the server's) and its URL once it answers."""
    LOG.parent.mkdir(exist_ok=True)
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "lakefs_delta.cli", "serve", "--port", str(port)], cwd=ROOT,
                               env=env, stdout=open(LOG, "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.3)
    stop_server(process)
    raise RuntimeError(f"the sharing server did not start; see {LOG}")


def stop_server(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_by_quarter(samples: list[tuple[int, float]], lines: int) -> list[float | None]:
    """The server's largest RSS sampled in each quarter of the answer (by lines received): flat when
    the answer is streamed, rising when it is held."""
    quarters = [[rss for sent, rss in samples if q * lines / 4 <= sent < (q + 1) * lines / 4] for q in range(4)]
    return [max(q) if q else None for q in quarters]


def file_url(line: dict, fmt: str) -> str:
    """The presigned URL of one file line of a query's answer."""
    return line["file"]["deltaSingleAction"]["add"]["path"] if fmt == "delta" else line["file"]["url"]


def query_through_server(config, repository: str, branch: str, table: str, fmt: str,
                         allowed_locations: tuple[str, ...] = ()) -> dict:
    """A new server sharing `table` of `branch` (share `bench`), a new recipient, one
    `POST .../query` with body `{}` in `fmt` (parquet or delta), read as a stream.
    `allowed_locations`: where the table's data lies outside the repository's storage namespace
    (`sharing.allowed_locations`; a lakeFS import's source)."""
    from exporter.state.recipients import Recipients

    recipients = Recipients(config.redis)
    recipient, token = recipients.create(f"bench-{uuid.uuid4().hex[:8]}", [SHARE],
                                         datetime.now(timezone.utc) + timedelta(days=1))
    env = {**os.environ, "LAKEFS_DELTA_SHARING_SHARES": f"{SHARE}={repository}:{branch}:{table}",
           "LAKEFS_DELTA_SHARING_ALLOWED_LOCATIONS": ",".join(allowed_locations)}
    process, url = start_server(env)
    try:
        headers = {"Authorization": f"Bearer {token}"}
        if CAPABILITIES[fmt]:
            headers["delta-sharing-capabilities"] = CAPABILITIES[fmt]
        with httpx.Client(base_url=url + "/delta-sharing", headers=headers, timeout=httpx.Timeout(900.0)) as client:
            listed = client.get(f"/shares/{SHARE}/schemas/{branch}/tables")  # the token works, the table is offered
            assert listed.status_code == 200 and [t["name"] for t in listed.json()["items"]] == [table], listed.text
            idle, cpu_before = memory_mib(process.pid), cpu_seconds(process.pid)
            head, tail, lines, received = b"", b"", 0, 0
            samples = []  # (lines received, server VmRSS MiB), about every half second
            started = time.perf_counter()
            sampled = started
            with client.stream("POST", f"/shares/{SHARE}/schemas/{branch}/tables/{table}/query", json={}) as response:
                answered = time.perf_counter()
                if response.status_code != 200:
                    raise RuntimeError(f"query answered {response.status_code}: {response.read().decode()[:2000]}")
                first_byte = None
                try:
                    for chunk in response.iter_raw():
                        if first_byte is None and chunk:
                            first_byte = time.perf_counter()
                        lines += chunk.count(b"\n")
                        received += len(chunk)
                        if head.count(b"\n") < 3:
                            head += chunk
                        tail = (tail + chunk)[-65_536:]
                        if time.perf_counter() - sampled >= 0.5:
                            samples.append((lines, memory_mib(process.pid)["VmRSS"]))
                            sampled = time.perf_counter()
                except httpx.RemoteProtocolError as broken:  # a 200 whose body the server could not finish
                    raise RuntimeError(f"{fmt} query: status 200, then the answer broke off after {lines:,} lines "
                                       f"({broken}); the server's log: {LOG}") from None
                finished = time.perf_counter()
                version, returned = response.headers.get("Delta-Table-Version"), \
                    response.headers.get("delta-sharing-capabilities")
            peak, cpu_after = memory_mib(process.pid), cpu_seconds(process.pid)
        first = [json.loads(line) for line in head.split(b"\n")[:3]]
        last = json.loads(tail.rstrip(b"\n").rsplit(b"\n", 1)[-1])
        assert "protocol" in first[0] and "metaData" in first[1], first[:2]
        assert returned == f"responseformat={fmt}", returned
        if fmt == "delta":
            assert "deltaProtocol" in first[0]["protocol"] and "deltaMetadata" in first[1]["metaData"], first[:2]
        fetched = [httpx.get(file_url(line, fmt), timeout=30).status_code for line in (first[2], last)]
    finally:
        stop_server(process)
        recipients.revoke(recipient.name)
    return {"format": fmt, "seconds": finished - started, "headers_seconds": answered - started,
            "first_byte_seconds": (first_byte or finished) - started, "lines": lines, "bytes": received,
            "version": version, "file_url_status": fetched, "server_idle_rss_mib": idle["VmRSS"],
            "server_idle_peak_mib": idle["VmHWM"], "server_peak_rss_mib": peak["VmHWM"],
            "server_rss_after_mib": peak["VmRSS"], "server_cpu_seconds": cpu_after - cpu_before,
            "server_rss_by_quarter_mib": rss_by_quarter(samples, lines),
            "first_file_line": first[2]}


def webhooks_under_queries(config, repository: str, branch: str, table: str, allowed_locations: tuple[str, ...],
                           commit_id: str, queries: int = 60, webhooks: int = 200) -> dict:
    """Webhook answers while `queries` Delta Sharing snapshot queries of `table` stream from the same
    server (`lakefs-delta serve`, one process): the queries start first and are read slowly (a
    chunk a second each, as a busy consumer reads), then `webhooks` post-commit events are posted one
    after another, each timed to its answer. The server's Redis is a database of its own (db 13,
    emptied before and after), so the events queue no export."""
    import threading

    import redis as redis_client

    from exporter.state.recipients import Recipients

    redis_url = own_redis_database(config.redis, 13)
    recipients = Recipients(redis_url)
    _, token = recipients.create(f"bench-{uuid.uuid4().hex[:8]}", [SHARE], datetime.now(timezone.utc) + timedelta(days=1))
    webhook_token = os.environ["LAKEFS_DELTA_WEBHOOK_TOKENS"].split(",")[0]
    env = {**os.environ, "LAKEFS_DELTA_REDIS_URL": redis_url,
           "LAKEFS_DELTA_SHARING_SHARES": f"{SHARE}={repository}:{branch}:{table}",
           "LAKEFS_DELTA_SHARING_ALLOWED_LOCATIONS": ",".join(allowed_locations)}
    process, url = start_server(env)
    stop, answered, lines = threading.Event(), [], []

    def query() -> None:
        read = 0
        with httpx.Client(base_url=url + "/delta-sharing", headers={"Authorization": f"Bearer {token}"},
                          timeout=httpx.Timeout(900.0)) as client:
            with client.stream("POST", f"/shares/{SHARE}/schemas/{branch}/tables/{table}/query", json={}) as response:
                answered.append(response.status_code)
                for chunk in response.iter_raw():
                    read += chunk.count(b"\n")
                    if stop.wait(1.0):
                        break
        lines.append(read)

    readers = [threading.Thread(target=query, daemon=True) for _ in range(queries)]
    # lakeFS posts from its own process with its connections open: this client's set-up (TLS context,
    # connection) is made before the readers hold this process's GIL, and is not timed
    hooks = httpx.Client(base_url=url, headers={"X-Webhook-Token": webhook_token}, timeout=30)
    hooks.get("/healthz")
    try:
        for reader in readers:
            reader.start()
        deadline = time.monotonic() + 120
        while len(answered) < queries and time.monotonic() < deadline:
            time.sleep(0.2)
        in_flight = len(answered)
        event = {"event_type": "post-commit", "repository_id": repository, "branch_id": branch, "commit_id": commit_id,
                 "source_ref": branch, "hook_run_id": "bench", "action_name": "delta-export", "hook_id": "delta_export"}
        seconds, statuses = [], []
        for _ in range(webhooks):
            started = time.perf_counter()
            statuses.append(hooks.post("/webhooks/lakefs", json=event).status_code)
            seconds.append(time.perf_counter() - started)
            time.sleep(0.05)
    finally:
        hooks.close()
        stop.set()
        for reader in readers:
            reader.join(timeout=60)
        stop_server(process)
        redis_client.Redis.from_url(redis_url).flushdb()
    ordered = sorted(seconds)
    return {"queries": queries, "queries_answering": in_flight, "query_statuses": sorted(set(answered)),
            "webhooks": webhooks, "webhook_statuses": sorted(set(statuses)),
            "p50": ordered[len(ordered) // 2], "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            "max": ordered[-1], "over_1s": sum(s > 1 for s in seconds), "lines_read": sum(lines),
            "slowest": sorted(range(len(seconds)), key=seconds.__getitem__)[-3:]}  # which events (0: the first)
