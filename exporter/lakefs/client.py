"""The one lakeFS client: lakeFS's REST API (`/api/v1`) as plain HTTP on kept connections, its JSON
parsed here, its errors mapped to ours, its calls counted.

No generated SDK: importing `lakefs-sdk` (its hundreds of validated models and API classes) cost every
process that talks to lakeFS 0.7 s of CPU at its start, a worker or a service the suite starts by the
hundred; and through it (its argument validation, its models, urllib3) a listing cost its caller
1.0-1.1 ms of CPU, against 0.4-0.5 ms as a plain GET. The commit storm asks three or four reads per
table export.
"""

from __future__ import annotations

import base64
import json
import re
import time
from dataclasses import dataclass
from typing import Any, Iterator
from urllib.parse import quote, urlsplit

import msgspec

from exporter.config import LakeFSConfig
from exporter.errors import BadRequest, CredentialsRefused, ExporterError, NotFound, ServiceUnavailable
from exporter.kept import Kept
from exporter.storage.requests import CONNECTION_ERRORS, Connections

PAGE_SIZE = 1000  # lakeFS caps `amount` at 1000
COMMIT_ID = re.compile(r"[0-9a-f]{64}")  # what lakeFS names a commit by: 64 lowercase hex digits
NAMESPACE_SECONDS = 60.0  # a repository's storage namespace is asked again after this (deleted and re-created)
HEALTH_TIMEOUT = (1.0, 2.0)  # (connect, read) of the health check: a readiness probe answers in time


@dataclass(frozen=True)
class Commit:
    id: str
    parents: list[str]
    creation_date: int
    message: str
    metadata: dict[str, str]


class ObjectStats(msgspec.Struct, frozen=True):
    """An entry of lakeFS's object listing (its `ObjectStats`), the fields read here: a page is parsed
    straight into these (its other fields, user metadata and content type, skipped unread). A page
    of 1000 entries cost 0.3 ms of CPU so, 1.2 ms as dicts (`json`): a million-file table is listed
    in 1000 pages."""

    path: str
    path_type: str = "object"  # or "common_prefix" (a listing with a delimiter)
    physical_address: str = ""
    checksum: str = ""
    size_bytes: int | None = None
    mtime: int = 0  # epoch seconds


class _Pagination(msgspec.Struct):
    has_more: bool
    next_offset: str = ""


class _ObjectsPage(msgspec.Struct):
    results: list[ObjectStats]
    pagination: _Pagination


_OBJECTS_PAGE = msgspec.json.Decoder(_ObjectsPage)


class LakeFS:
    def __init__(self, config: LakeFSConfig):
        self.endpoint = config.endpoint
        # (connect, read): a lakeFS that accepts connections but never answers fails the call in time
        self.timeout = (min(5.0, config.timeout_seconds), config.timeout_seconds)
        origin = urlsplit(config.endpoint)
        self.connections = Connections(f"{origin.scheme}://{origin.netloc}", None, *self.timeout)
        self._probes = Connections(f"{origin.scheme}://{origin.netloc}", None, *HEALTH_TIMEOUT)
        self._api = origin.path.rstrip("/") + "/api/v1"
        self._headers = {"Accept": "application/json", "Authorization": "Basic " + base64.b64encode(
            f"{config.access_key_id}:{config.secret_access_key.get_secret_value()}".encode()).decode()}
        self.calls = 0
        self._commits: Kept[tuple[str, str], Commit] = Kept()  # commits are immutable: kept by id
        self._namespaces: Kept[str, str] = Kept(seconds=NAMESPACE_SECONDS)

    def _request(self, what: str, method: str, resource: str, body: dict | bytes | None = None,
                 connections: Connections | None = None, **query: object) -> bytes:
        """The body of lakeFS's answer to `method` on `resource` (under /api/v1, its segments quoted by
        the caller) with the `query` parameters that are not None; `body` sent as JSON (a dict) or as
        the bytes of an object. On a kept connection. A connection refused is tried again twice (0.2 s,
        then 0.4 s apart), and for a GET a connection reset too; a timeout is not. An answer other than
        2xx raises the error a task retries or not (`_refused`). `connections`: others than the client's
        (with other time-outs)."""
        self.calls += 1
        parameters = "&".join(f"{name}={quote(_text(value))}" for name, value in query.items() if value is not None)
        target = self._api + resource + (f"?{parameters}" if parameters else "")
        headers = self._headers
        if body is not None:
            content_type = "application/octet-stream" if isinstance(body, bytes) else "application/json"
            body = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers = {**headers, "Content-Type": content_type}
        # a request that may have reached lakeFS is sent once more only when reading: a commit twice is two commits
        retried = CONNECTION_ERRORS if method == "GET" else (ConnectionRefusedError,)
        for attempt in range(3):
            try:
                answer = (connections or self.connections).request(method, target, body, headers)
                break
            except TimeoutError as exc:
                raise ServiceUnavailable(f"lakeFS unreachable during {what}: {exc}") from None
            except retried as exc:
                if attempt == 2:
                    raise ServiceUnavailable(f"lakeFS unreachable during {what}: {exc}") from None
                time.sleep(0.2 * 2 ** attempt)
            except CONNECTION_ERRORS as exc:
                raise ServiceUnavailable(f"lakeFS unreachable during {what}: {exc}") from None
        if not 200 <= answer.status < 300:
            raise _refused(what, answer.status, _error_message(
                answer.data, answer.data[:200].decode(errors="replace").strip() or f"HTTP {answer.status}"))
        return answer.data

    def _json(self, what: str, method: str, resource: str, body: dict | bytes | None = None, **query: object) -> Any:
        return json.loads(self._request(what, method, resource, body, **query))

    def _pages(self, what: str, resource: str, query: dict[str, object]) -> Iterator[dict]:
        """Every result of a paginated listing, a page per call from the offset `query["after"]`."""
        query = dict(query)
        while True:
            page = self._json(what, "GET", resource, **query)
            yield from page["results"]
            if not page["pagination"]["has_more"]:
                return
            query["after"] = page["pagination"]["next_offset"]

    # ------------------------------------------------------------ reading

    def _repository(self, repository: str) -> dict:
        return self._json(f"get repository {repository}", "GET", f"/repositories/{_segment(repository)}")

    def storage_namespace(self, repository: str) -> str:
        """Asked once a minute per repository: every export of a storm of commits needs it."""
        return self._namespaces.keep(repository, lambda: self._repository(repository)["storage_namespace"])

    def default_branch(self, repository: str) -> str:
        return self._repository(repository)["default_branch"]

    def commit(self, repository: str, ref: str) -> Commit:
        """A commit by id is asked once (commits never change); a branch or tag is resolved each time."""
        cached = self._commits.get((repository, ref))
        if cached is not None:
            return cached
        commit = _commit(self._json(f"get commit {repository}@{ref}", "GET",
                                    f"/repositories/{_segment(repository)}/commits/{_segment(ref)}"))
        if commit.id == ref:
            self._commits.put((repository, ref), commit)
        return commit

    def list_objects(self, repository: str, ref: str, prefix: str, delimiter: str | None = None,
                     after: str = "") -> Iterator[ObjectStats]:
        """Every entry under `prefix` (after the path `after`) with its physical address and checksum,
        one call per 1000."""
        for page in self.object_pages(repository, ref, prefix, delimiter, after):
            yield from page

    def object_pages(self, repository: str, ref: str, prefix: str, delimiter: str | None = None,
                     after: str = "") -> Iterator[list[ObjectStats]]:
        """`list_objects`, a page (a call) at a time, in path order."""
        what = f"list {repository}@{ref}/{prefix}"
        resource = f"/repositories/{_segment(repository)}/refs/{_segment(ref)}/objects/ls"
        while True:
            answer = self._request(what, "GET", resource, prefix=prefix, after=after, amount=PAGE_SIZE,
                                   delimiter=delimiter)
            try:
                page = _OBJECTS_PAGE.decode(answer)
            except msgspec.MsgspecError as exc:
                raise ServiceUnavailable(f"lakeFS answered {what} with what is not a listing: {exc}") from None
            yield page.results
            if not page.pagination.has_more:
                return
            after = page.pagination.next_offset

    def physical_address(self, repository: str, ref: str, path: str) -> str | None:
        """One object's physical address (one call), None when there is no such object."""
        try:
            return self._json(f"stat {repository}@{ref}/{path}", "GET", f"/repositories/{_segment(repository)}/refs/"
                                                                           f"{_segment(ref)}/objects/stat",
                              path=path)["physical_address"]
        except NotFound:
            return None

    def get_object(self, repository: str, ref: str, path: str) -> bytes:
        return self._request(f"get object {repository}@{ref}/{path}", "GET",
                             f"/repositories/{_segment(repository)}/refs/{_segment(ref)}/objects", path=path)

    def diff(self, repository: str, left: str, right: str, prefix: str = "", diff_type: str = "two_dot",
             amount: int = PAGE_SIZE) -> Iterator[dict]:
        """Changed entries; `amount` below 1000 asks for one short page (enough to learn "anything changed?")."""
        return self._changes(f"diff {repository} {left}..{right}",
                             f"/repositories/{_segment(repository)}/refs/{_segment(left)}/diff/{_segment(right)}",
                             {"prefix": prefix, "after": "", "amount": amount, "type": diff_type})

    def uncommitted(self, repository: str, branch: str, prefix: str = "", amount: int = PAGE_SIZE) -> Iterator[dict]:
        """A branch's uncommitted (staged) changes; `amount` below 1000 asks for one short page."""
        return self._changes(f"diff {repository}/{branch} uncommitted",
                             f"/repositories/{_segment(repository)}/branches/{_segment(branch)}/diff",
                             {"prefix": prefix, "after": "", "amount": amount})

    def _changes(self, what: str, resource: str, query: dict[str, object]) -> Iterator[dict]:
        """A diff's entries: every page, or the one short page a smaller `amount` asks for."""
        if query["amount"] >= PAGE_SIZE:
            yield from self._pages(what, resource, query)
        else:
            yield from self._json(what, "GET", resource, **query)["results"]

    def merge_base(self, repository: str, source: str, destination: str) -> str:
        return self._json(f"merge base {repository} {source}/{destination}", "GET",
                          f"/repositories/{_segment(repository)}/refs/{_segment(source)}/merge/"
                          f"{_segment(destination)}")["base_commit_id"]

    def log(self, repository: str, ref: str, amount: int = 100, first_parent: bool = False) -> list[Commit]:
        found = self._json(f"log {repository}@{ref}", "GET",
                           f"/repositories/{_segment(repository)}/refs/{_segment(ref)}/commits",
                           amount=amount, limit=True, first_parent=first_parent)
        return [_commit(c) for c in found["results"]]

    def first_parent_line(self, repository: str, branch: str, stop_at: str | None = None,
                          limit: int = PAGE_SIZE) -> tuple[list[Commit], bool]:
        """The branch's commits from its head back along first parents, newest first, down to
        `stop_at` (included when on the line), at most `limit`; and whether the walk ended (it
        reached `stop_at` or the first commit) before the limit."""
        line: list[Commit] = []
        after = ""
        while len(line) < limit:
            page = self._json(f"log {repository}@{branch}", "GET",
                              f"/repositories/{_segment(repository)}/refs/{_segment(branch)}/commits", after=after,
                              amount=min(PAGE_SIZE, limit - len(line)), first_parent=True, stop_at=stop_at)
            for found in page["results"]:
                line.append(_commit(found))
                if found["id"] == stop_at:
                    return line, True
            if not page["pagination"]["has_more"]:
                return line, True
            after = page["pagination"]["next_offset"]
        return line, False

    def list_repositories(self) -> list[str]:
        return list(self.storage_namespaces())

    def storage_namespaces(self) -> dict[str, str]:
        """Every repository's storage namespace, by repository id, from one paginated listing."""
        return {r["id"]: r["storage_namespace"]
                for r in self._pages("list repositories", "/repositories", {"after": "", "amount": PAGE_SIZE})}

    def list_branches(self, repository: str) -> list[str]:
        return [b["id"] for b in self._pages(f"list branches {repository}", f"/repositories/{_segment(repository)}/branches",
                                             {"after": "", "amount": PAGE_SIZE})]

    def list_tags(self, repository: str, amount: int | None = None) -> list[tuple[str, str]]:
        """(tag, commit id) of up to `amount` tags (None: every tag)."""
        found, after = [], ""
        while True:
            page = self._json(f"list tags {repository}", "GET", f"/repositories/{_segment(repository)}/tags",
                              after=after, amount=PAGE_SIZE if amount is None else min(amount - len(found), PAGE_SIZE))
            found += [(t["id"], t["commit_id"]) for t in page["results"]]
            if not page["pagination"]["has_more"] or (amount is not None and len(found) >= amount):
                return found
            after = page["pagination"]["next_offset"]

    def action_runs(self, repository: str, commit_id: str) -> list[dict]:
        """The action runs of a commit: one page, the newest first."""
        return self._json(f"action runs {repository}@{commit_id}", "GET",
                          f"/repositories/{_segment(repository)}/actions/runs", commit=commit_id)["results"]

    def branch_runs(self, repository: str, branch: str) -> list[dict]:
        """The action runs of a branch, newest first (a blocked merge's or commit's has no commit)."""
        return self._json(f"action runs {repository}/{branch}", "GET",
                          f"/repositories/{_segment(repository)}/actions/runs", branch=branch)["results"]

    def hook_output(self, repository: str, run_id: str, hook_run_id: str) -> str:
        """What a hook run recorded: for a webhook, its request and the answer's status and body."""
        return self._request(f"hook output {repository}/{run_id}/{hook_run_id}", "GET",
                             f"/repositories/{_segment(repository)}/actions/runs/{_segment(run_id)}/hooks/"
                             f"{_segment(hook_run_id)}/output").decode(errors="replace")

    def hook_runs(self, repository: str, run_id: str) -> list[dict]:
        return self._json(f"hook runs {repository}/{run_id}", "GET",
                          f"/repositories/{_segment(repository)}/actions/runs/{_segment(run_id)}/hooks")["results"]

    # ------------------------------------------------------------ writing (CLI, tests, demo)

    def create_repository(self, name: str, storage_namespace: str, default_branch: str = "main") -> None:
        self._request(f"create repository {name}", "POST", "/repositories",
                      {"name": name, "storage_namespace": storage_namespace, "default_branch": default_branch})

    def create_branch(self, repository: str, name: str, source: str) -> None:
        self._request(f"create branch {repository}/{name}", "POST", f"/repositories/{_segment(repository)}/branches",
                      {"name": name, "source": source})

    def create_tag(self, repository: str, tag: str, ref: str) -> str:
        return self._json(f"create tag {repository}/{tag}", "POST", f"/repositories/{_segment(repository)}/tags",
                          {"id": tag, "ref": ref})["commit_id"]

    def upload_object(self, repository: str, branch: str, path: str, content: bytes) -> None:
        self._request(f"upload {repository}/{branch}/{path}", "POST",
                      f"/repositories/{_segment(repository)}/branches/{_segment(branch)}/objects", bytes(content),
                      path=path)

    def import_prefix(self, repository: str, branch: str, source: str, destination: str, message: str) -> str:
        """lakeFS's import of every object under the store's prefix `source` (a URI) to `destination/` on
        `branch`, committed with `message`, in one job (metadata only: no object is copied); the job's
        id, for `import_status`."""
        return self._json(f"import {source} to {repository}/{branch}/{destination}", "POST",
                          f"/repositories/{_segment(repository)}/branches/{_segment(branch)}/import",
                          {"paths": [{"type": "common_prefix", "path": source, "destination": destination}],
                           "commit": {"message": message}})["id"]

    def import_status(self, repository: str, branch: str, job: str) -> dict:
        """An import job's status: `completed`, and `error` (with its `message`) when it failed."""
        return self._json(f"import status {repository}/{branch} {job}", "GET",
                          f"/repositories/{_segment(repository)}/branches/{_segment(branch)}/import", id=job)

    def delete_object(self, repository: str, branch: str, path: str) -> None:
        self._request(f"delete {repository}/{branch}/{path}", "DELETE",
                      f"/repositories/{_segment(repository)}/branches/{_segment(branch)}/objects", path=path)

    def commit_branch(self, repository: str, branch: str, message: str, metadata: dict[str, str] | None = None) -> str:
        return self._json(f"commit {repository}/{branch}", "POST",
                          f"/repositories/{_segment(repository)}/branches/{_segment(branch)}/commits",
                          {"message": message, "metadata": metadata or {}})["id"]

    def merge(self, repository: str, source: str, destination: str, message: str = "") -> str:
        return self._json(f"merge {repository} {source} into {destination}", "POST",
                          f"/repositories/{_segment(repository)}/refs/{_segment(source)}/merge/{_segment(destination)}",
                          {"message": message})["reference"]

    def revert(self, repository: str, branch: str, commit_id: str) -> str:
        """Revert one commit on the branch (a new commit undoing it); the new head's id."""
        self._request(f"revert {repository}/{branch} {commit_id}", "POST",
                      f"/repositories/{_segment(repository)}/branches/{_segment(branch)}/revert",
                      {"ref": commit_id, "parent_number": 0})
        return self.commit(repository, branch).id

    def healthy(self) -> bool:
        try:
            self._request("health check", "GET", "/healthcheck", connections=self._probes)
            return True
        except ExporterError:
            return False


def _commit(found: dict) -> Commit:
    return Commit(found["id"], list(found["parents"]), found["creation_date"], found["message"],
                  dict(found.get("metadata") or {}))


def _refused(what: str, status: int, message: str) -> ExporterError:
    """lakeFS's error answer to a call as the error a task retries or not."""
    if status == 404:
        return NotFound(f"lakeFS: {what}: {message}")
    # lakeFS answers 500 to some refs it cannot parse (`main~x`): that is bad input, not an outage
    if status == 400 or (status == 500 and message.endswith("validation error")):
        return BadRequest(f"lakeFS answered {status} to {what}: {message}")
    if status == 401:
        return CredentialsRefused(f"lakeFS answered 401 to {what}: {message}")
    if status == 429 or status >= 500:
        return ServiceUnavailable(f"lakeFS answered {status} to {what}: {message}")
    return ExporterError(f"lakeFS answered {status} to {what}: {message}")


def _error_message(body: str | bytes | None, otherwise: object) -> str:
    """The message of lakeFS's error answer (`{"message": ...}`), else `otherwise`."""
    try:
        return json.loads(body)["message"]
    except (TypeError, ValueError, KeyError):
        return str(otherwise)


def _segment(value: str) -> str:
    """A path parameter (a repository, a ref): every reserved character quoted."""
    return quote(value, safe="")


def _text(value: object) -> str:
    """A query parameter's text: a boolean as lakeFS's API writes one (`true`)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def commit_id_of(lakefs: "LakeFS", repository: str, ref: str) -> str:
    """The commit a ref names: a full commit id stands for itself; anything else is resolved by lakeFS."""
    return ref if COMMIT_ID.fullmatch(ref) else lakefs.commit(repository, ref).id
