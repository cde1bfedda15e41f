"""A small client of the service's status API, for the demo, the benchmarks and the tests."""

from __future__ import annotations

import time
from urllib.parse import urlencode

import httpx

FINAL = ("done", "failed")


def lakefs_token(endpoint: str, key: str, secret: str) -> str:
    """A lakeFS session token (what a user's login gives): the Iceberg catalog's readers present it."""
    answer = httpx.post(f"{endpoint}/api/v1/auth/login", json={"access_key_id": key, "secret_access_key": secret},
                        timeout=30)
    answer.raise_for_status()
    return answer.json()["token"]


def export_status(url: str, token: str, repository: str, commit_id: str, ref: str) -> dict | None:
    """{"commit": record, "tables": {table: record}} of one ref's exports of a commit, or None."""
    answer = httpx.get(f"{url}/exports/{repository}/{commit_id}", params={"ref": ref},
                       headers={"Authorization": f"Bearer {token}"}, timeout=10)
    if answer.status_code != 200:
        return None
    return answer.json()["refs"].get(ref)


def wait_for_exports(url: str, token: str, repository: str, commit_id: str, ref: str,
                     tables: set[str] | None = None, timeout: float = 240) -> dict[str, dict]:
    """The tables' records once each is `done` or `failed`: those named, or all that the commit's
    task queued (its commit record is final)."""
    deadline = time.monotonic() + timeout
    found: dict | None = None
    while time.monotonic() < deadline:
        found = export_status(url, token, repository, commit_id, ref)
        if found is not None:
            records = found["tables"]
            commit = found.get("commit") or {}
            expected = tables if tables is not None else (set(commit.get("tables", [])) if commit.get("state") in FINAL
                                                          else None)
            if expected is not None and expected <= set(records) and \
                    all(records[t]["state"] in FINAL for t in expected):
                return records
        time.sleep(0.5)
    raise AssertionError(f"exports of {repository}/{ref}/{commit_id} not finished after {timeout}s: {found}")


def wait_for_branch_table(url: str, token: str, repository: str, branch: str, table: str, commit_id: str,
                          timeout: float = 120) -> dict:
    """The branch table's versions once it follows `commit_id` (its entry is in the mapping)."""
    deadline = time.monotonic() + timeout
    answer = None
    while time.monotonic() < deadline:
        answer = httpx.get(f"{url}/repositories/{repository}/branches/{branch}/tables/{table}/versions",
                           params={"commit": commit_id}, headers={"Authorization": f"Bearer {token}"}, timeout=10)
        if answer.status_code == 200:
            return answer.json()
        time.sleep(0.5)
    raise AssertionError(f"the branch table of {table} on {branch} does not follow {commit_id} after {timeout}s: "
                         f"{answer.text if answer is not None else ''}")


def sign_in_link(url: str, access_key_id: str, secret_access_key: str, page: dict[str, str]) -> str:
    """A one-time link that opens the diff page signed in as this lakeFS identity, on `page`'s
    query (repository, left, right, table_path). The code in it works once, for a short time."""
    answer = httpx.post(f"{url}/session/links", auth=(access_key_id, secret_access_key), timeout=30)
    if answer.status_code != 200:
        raise RuntimeError(f"the service refused a sign-in link ({answer.status_code}): {answer.text[:300]}")
    return f"{url}/diff?{urlencode({**page, 'code': answer.json()['code']})}"


def table_diff(url: str, headers: dict[str, str], repository: str, left: str, right: str, table_path: str,
               timeout: float = 300) -> dict:
    """The history diff from the API, asking again while a worker computes it (202)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = httpx.get(f"{url}/repositories/{repository}/otf/refs/{left}/diff/{right}",
                           params={"table_path": table_path, "type": "delta"}, headers=headers, timeout=60)
        answer.raise_for_status()
        if answer.status_code == 200:
            return answer.json()
        if time.monotonic() > deadline:
            raise AssertionError(f"diff {left}..{right} of {table_path} still computing after {timeout}s")
        time.sleep(float(answer.headers.get("Retry-After", "2")))
