"""The one lakeFS client: a thin adapter over `lakefs-sdk` that maps errors to ours and counts calls.

The reads an export makes (listings, diffs, an object's stat, a commit) are the hot path: a commit
storm asks three or four of them per table export. They skip the SDK and go as plain GETs of
lakeFS's API on kept http.client connections (`_get`), their JSON parsed here: through the SDK (its
argument validation, its models, urllib3) a listing cost its caller 1.0-1.1 ms of CPU, so 0.4-0.5 ms.
"""

from __future__ import annotations

import base64
import json
import re
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Iterator
from urllib.parse import quote, urlsplit

import lakefs_sdk
import urllib3
from lakefs_sdk.exceptions import ApiException

from exporter.config import LakeFSConfig
from exporter.errors import BadRequest, CredentialsRefused, ExporterError, NotFound, ServiceUnavailable
from exporter.kept import Kept
from exporter.storage.requests import CONNECTION_ERRORS, Connections

PAGE_SIZE = 1000  # lakeFS caps `amount` at 1000
COMMIT_ID = re.compile(r"[0-9a-f]{64}")  # what lakeFS names a commit by: 64 lowercase hex digits
NAMESPACE_SECONDS = 60.0  # a repository's storage namespace is asked again after this (deleted and re-created)


@dataclass(frozen=True)
class Commit:
    id: str
    parents: list[str]
    creation_date: int
    message: str
    metadata: dict[str, str]


@dataclass(frozen=True)
class ObjectEntry:
    path: str
    physical_address: str
    size_bytes: int


class LakeFS:
    def __init__(self, config: LakeFSConfig):
        configuration = lakefs_sdk.Configuration(host=config.endpoint.rstrip("/") + "/api/v1",
                                                 username=config.access_key_id,
                                                 password=config.secret_access_key.get_secret_value())
        configuration.retries = urllib3.Retry(total=2, connect=2, read=0, backoff_factor=0.2, status=0)
        self.client = lakefs_sdk.ApiClient(configuration)
        self.endpoint = config.endpoint
        # (connect, read): a lakeFS that accepts connections but never answers fails the call in time
        self.timeout = (min(5.0, config.timeout_seconds), config.timeout_seconds)
        self.repositories = lakefs_sdk.RepositoriesApi(self.client)
        self.refs = lakefs_sdk.RefsApi(self.client)
        self.commits = lakefs_sdk.CommitsApi(self.client)
        self.objects = lakefs_sdk.ObjectsApi(self.client)
        self.branches = lakefs_sdk.BranchesApi(self.client)
        self.tags = lakefs_sdk.TagsApi(self.client)
        self.actions = lakefs_sdk.ActionsApi(self.client)
        origin = urlsplit(config.endpoint)
        self.connections = Connections(f"{origin.scheme}://{origin.netloc}", None, *self.timeout)
        self._api = origin.path.rstrip("/") + "/api/v1"
        self._headers = {"Accept": "application/json", "Authorization": "Basic " + base64.b64encode(
            f"{config.access_key_id}:{config.secret_access_key.get_secret_value()}".encode()).decode()}
        self.calls = 0
        self._commits: Kept[tuple[str, str], Commit] = Kept()  # commits are immutable: kept by id
        self._namespaces: Kept[str, str] = Kept(seconds=NAMESPACE_SECONDS)

    def _call(self, what: str, method, *args, **kwargs):
        self.calls += 1
        kwargs.setdefault("_request_timeout", self.timeout)
        try:
            return method(*args, **kwargs)
        except ApiException as exc:
            raise _refused(what, exc.status or 0, _error_message(exc.body, exc.reason)) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise ServiceUnavailable(f"lakeFS unreachable during {what}: {exc}") from None

    def _get(self, what: str, resource: str, **query: object) -> bytes:
        """The body of a GET of lakeFS's API (`resource` under /api/v1, its segments quoted by the caller;
        the `query` parameters that are not None), on a kept connection; errors as `_call` maps them.
        A connection refused or reset is tried again as the SDK's retries did (twice, 0.2 s apart,
        then 0.4 s); a timeout is not."""
        self.calls += 1
        parameters = "&".join(f"{name}={quote(str(value))}" for name, value in query.items() if value is not None)  # as the SDK
        target = self._api + resource + (f"?{parameters}" if parameters else "")
        for attempt in range(3):
            try:
                answer = self.connections.request("GET", target, None, self._headers)
                break
            except TimeoutError as exc:
                raise ServiceUnavailable(f"lakeFS unreachable during {what}: {exc}") from None
            except CONNECTION_ERRORS as exc:
                if attempt == 2:
                    raise ServiceUnavailable(f"lakeFS unreachable during {what}: {exc}") from None
                time.sleep(0.2 * 2 ** attempt)
        if not 200 <= answer.status < 300:
            raise _refused(what, answer.status, _error_message(
                answer.data, answer.data[:200].decode(errors="replace").strip() or f"HTTP {answer.status}"))
        return answer.data

    # ------------------------------------------------------------ reading

    def storage_namespace(self, repository: str) -> str:
        """Asked once a minute per repository: every export of a storm of commits needs it."""
        return self._namespaces.keep(repository, lambda: self._call(
            f"get repository {repository}", self.repositories.get_repository, repository).storage_namespace)

    def default_branch(self, repository: str) -> str:
        return self._call(f"get repository {repository}", self.repositories.get_repository, repository).default_branch

    def commit(self, repository: str, ref: str) -> Commit:
        """A commit by id is asked once (commits never change); a branch or tag is resolved each time."""
        cached = self._commits.get((repository, ref))
        if cached is not None:
            return cached
        found = json.loads(self._get(f"get commit {repository}@{ref}", f"/repositories/{_segment(repository)}/commits/"
                                                                        f"{_segment(ref)}"))
        commit = Commit(found["id"], list(found["parents"]), found["creation_date"], found["message"],
                        dict(found.get("metadata") or {}))
        if commit.id == ref:
            self._commits.put((repository, ref), commit)
        return commit

    def list_objects(self, repository: str, ref: str, prefix: str, delimiter: str | None = None,
                     after: str = "") -> Iterator[dict[str, Any]]:
        """Every entry under `prefix` (after the path `after`) with its physical address and checksum,
        one call per 1000."""
        while True:
            page = json.loads(self._get(f"list {repository}@{ref}/{prefix}",
                                        f"/repositories/{_segment(repository)}/refs/{_segment(ref)}/objects/ls",
                                        prefix=prefix, after=after, amount=PAGE_SIZE, delimiter=delimiter))
            yield from page["results"]
            if not page["pagination"]["has_more"]:
                return
            after = page["pagination"]["next_offset"]

    def physical_address(self, repository: str, ref: str, path: str) -> str | None:
        """One object's physical address (one call), None when there is no such object."""
        try:
            return json.loads(self._get(f"stat {repository}@{ref}/{path}", f"/repositories/{_segment(repository)}/refs/"
                                                                            f"{_segment(ref)}/objects/stat", path=path)
                              )["physical_address"]
        except NotFound:
            return None

    def get_object(self, repository: str, ref: str, path: str) -> bytes:
        return bytes(self._call(f"get object {repository}@{ref}/{path}", self.objects.get_object, repository, ref, path))

    def diff(self, repository: str, left: str, right: str, prefix: str = "", diff_type: str = "two_dot",
             amount: int = PAGE_SIZE) -> Iterator[dict]:
        """Changed entries; `amount` below 1000 asks for one short page (enough to learn "anything changed?")."""
        after = ""
        while True:
            page = json.loads(self._get(f"diff {repository} {left}..{right}",
                                        f"/repositories/{_segment(repository)}/refs/{_segment(left)}/diff/"
                                        f"{_segment(right)}", prefix=prefix, after=after, amount=amount, type=diff_type))
            yield from page["results"]
            if not page["pagination"]["has_more"] or amount < PAGE_SIZE:
                return
            after = page["pagination"]["next_offset"]

    def uncommitted(self, repository: str, branch: str, prefix: str = "", amount: int = PAGE_SIZE) -> Iterator[dict]:
        """A branch's uncommitted (staged) changes; `amount` below 1000 asks for one short page."""
        after = ""
        while True:
            page = json.loads(self._get(f"diff {repository}/{branch} uncommitted",
                                        f"/repositories/{_segment(repository)}/branches/{_segment(branch)}/diff",
                                        prefix=prefix, after=after, amount=amount))
            yield from page["results"]
            if not page["pagination"]["has_more"] or amount < PAGE_SIZE:
                return
            after = page["pagination"]["next_offset"]

    def merge_base(self, repository: str, source: str, destination: str) -> str:
        return self._call(f"merge base {repository} {source}/{destination}", self.refs.find_merge_base,
                          repository, source, destination).base_commit_id

    def log(self, repository: str, ref: str, amount: int = 100, first_parent: bool = False) -> list[Commit]:
        found = self._call(f"log {repository}@{ref}", self.refs.log_commits, repository, ref,
                           amount=amount, limit=True, first_parent=first_parent)
        return [Commit(c.id, list(c.parents), c.creation_date, c.message, dict(c.metadata or {})) for c in found.results]

    def first_parent_line(self, repository: str, branch: str, stop_at: str | None = None,
                          limit: int = PAGE_SIZE) -> tuple[list[Commit], bool]:
        """The branch's commits from its head back along first parents, newest first, down to
        `stop_at` (included when on the line), at most `limit`; and whether the walk ended (it
        reached `stop_at` or the first commit) before the limit."""
        line: list[Commit] = []
        after = ""
        while len(line) < limit:
            page = self._call(f"log {repository}@{branch}", self.refs.log_commits, repository, branch, after=after,
                              amount=min(PAGE_SIZE, limit - len(line)), first_parent=True, stop_at=stop_at)
            for c in page.results:
                line.append(Commit(c.id, list(c.parents), c.creation_date, c.message, dict(c.metadata or {})))
                if c.id == stop_at:
                    return line, True
            if not page.pagination.has_more:
                return line, True
            after = page.pagination.next_offset
        return line, False

    def list_repositories(self) -> list[str]:
        return list(self.storage_namespaces())

    def storage_namespaces(self) -> dict[str, str]:
        """Every repository's storage namespace, by repository id, from one paginated listing."""
        found, after = {}, ""
        while True:
            page = self._call("list repositories", self.repositories.list_repositories, after=after, amount=PAGE_SIZE)
            found.update((r.id, r.storage_namespace) for r in page.results)
            if not page.pagination.has_more:
                return found
            after = page.pagination.next_offset

    def list_branches(self, repository: str) -> list[str]:
        names, after = [], ""
        while True:
            page = self._call(f"list branches {repository}", self.branches.list_branches, repository, after=after,
                              amount=PAGE_SIZE)
            names += [b.id for b in page.results]
            if not page.pagination.has_more:
                return names
            after = page.pagination.next_offset

    def list_tags(self, repository: str, amount: int | None = None) -> list[tuple[str, str]]:
        """(tag, commit id) of up to `amount` tags (None: every tag)."""
        found, after = [], ""
        while True:
            page = self._call(f"list tags {repository}", self.tags.list_tags, repository, after=after,
                              amount=PAGE_SIZE if amount is None else min(amount - len(found), PAGE_SIZE))
            found += [(t.id, t.commit_id) for t in page.results]
            if not page.pagination.has_more or (amount is not None and len(found) >= amount):
                return found
            after = page.pagination.next_offset

    def action_runs(self, repository: str, commit_id: str) -> list[dict]:
        response = self._call(f"action runs {repository}@{commit_id}", self.actions.list_repository_runs_with_http_info,
                              repository, commit=commit_id, _preload_content=False)
        return json.loads(response.raw_data)["results"]

    def branch_runs(self, repository: str, branch: str) -> list[dict]:
        """The action runs of a branch, newest first (a blocked merge's or commit's has no commit)."""
        response = self._call(f"action runs {repository}/{branch}", self.actions.list_repository_runs_with_http_info,
                              repository, branch=branch, _preload_content=False)
        return json.loads(response.raw_data)["results"]

    def hook_output(self, repository: str, run_id: str, hook_run_id: str) -> str:
        """What a hook run recorded: for a webhook, its request and the answer's status and body."""
        return bytes(self._call(f"hook output {repository}/{run_id}/{hook_run_id}", self.actions.get_run_hook_output,
                                repository, run_id, hook_run_id)).decode(errors="replace")

    def hook_runs(self, repository: str, run_id: str) -> list[dict]:
        response = self._call(f"hook runs {repository}/{run_id}", self.actions.list_run_hooks_with_http_info,
                              repository, run_id, _preload_content=False)
        return json.loads(response.raw_data)["results"]

    # ------------------------------------------------------------ writing (CLI, tests, demo)

    def create_repository(self, name: str, storage_namespace: str, default_branch: str = "main") -> None:
        self._call(f"create repository {name}", self.repositories.create_repository,
                   lakefs_sdk.RepositoryCreation(name=name, storage_namespace=storage_namespace, default_branch=default_branch))

    def create_branch(self, repository: str, name: str, source: str) -> None:
        self._call(f"create branch {repository}/{name}", self.branches.create_branch, repository,
                   lakefs_sdk.BranchCreation(name=name, source=source))

    def create_tag(self, repository: str, tag: str, ref: str) -> str:
        return self._call(f"create tag {repository}/{tag}", self.tags.create_tag, repository,
                          lakefs_sdk.TagCreation(id=tag, ref=ref)).commit_id

    def upload_object(self, repository: str, branch: str, path: str, content: bytes) -> None:
        # the generated client uploads only from a file path
        with tempfile.NamedTemporaryFile(prefix="lakefs-delta-upload-") as staged:
            staged.write(content)
            staged.flush()
            self._call(f"upload {repository}/{branch}/{path}", self.objects.upload_object, repository, branch, path,
                       content=staged.name)

    def delete_object(self, repository: str, branch: str, path: str) -> None:
        self._call(f"delete {repository}/{branch}/{path}", self.objects.delete_object, repository, branch, path)

    def commit_branch(self, repository: str, branch: str, message: str, metadata: dict[str, str] | None = None) -> str:
        return self._call(f"commit {repository}/{branch}", self.commits.commit, repository, branch,
                          lakefs_sdk.CommitCreation(message=message, metadata=metadata or {})).id

    def merge(self, repository: str, source: str, destination: str, message: str = "") -> str:
        return self._call(f"merge {repository} {source} into {destination}", self.refs.merge_into_branch,
                          repository, source, destination, merge=lakefs_sdk.Merge(message=message)).reference

    def revert(self, repository: str, branch: str, commit_id: str) -> str:
        """Revert one commit on the branch (a new commit undoing it); the new head's id."""
        self._call(f"revert {repository}/{branch} {commit_id}", self.branches.revert_branch, repository, branch,
                   lakefs_sdk.RevertCreation(ref=commit_id, parent_number=0))
        return self.commit(repository, branch).id

    def healthy(self) -> bool:
        try:
            self._call("health check", lakefs_sdk.HealthCheckApi(self.client).health_check, _request_timeout=(1, 2))
            return True
        except ExporterError:
            return False


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
    """A path parameter (a repository, a ref) as the SDK sends it: every reserved character quoted."""
    return quote(value, safe="")


def commit_id_of(lakefs: "LakeFS", repository: str, ref: str) -> str:
    """The commit a ref names: a full commit id stands for itself; anything else is resolved by lakeFS."""
    return ref if COMMIT_ID.fullmatch(ref) else lakefs.commit(repository, ref).id
