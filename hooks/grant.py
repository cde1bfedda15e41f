"""One grant per request: what the caller may read in one repository, asked by every door of the API
and the Iceberg catalog (diffs, rows, overview, export status, datasets, branch-table versions,
namespaces, tables, loadTable, the signer). No door decides on its own.

A grant is made once a request's credentials are known to lakeFS and open the repository; it holds
each ref the request names resolved to its commit id (once: every answer of the request is about
those commits, whatever the branch does meanwhile), and answers whether the caller may read a table
there: lakeFS's decision about the table's `_delta_log/` and about every folder its files live in
(`exporter.lakefs.table_folders`: a policy may refuse a partition's folder) at the commit id, for every
path the versions it hands out came from (a branch table re-pointed to another path reaches both).
A table is read whole or not at all: a door that hands out its files or rows (the signer, loadTable,
the row and history diffs, datasets) never hands out part of one. Listings, paging and error texts
keep to what it allows (`readable`, before paging).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from exporter.delta.log import log_folder
from exporter.errors import ExporterError
from exporter.lakefs.client import commit_id_of
from exporter.lakefs.table_folders import TableFolders
from hooks.auth import (ALLOWED, FORBIDDEN, NO_REPOSITORY, SESSION_COOKIE, UNAUTHENTICATED, Caller,
                        RepositoryAccess, Unauthenticated, caller_of)
from hooks.errors import Refusal, unauthenticated

Item = TypeVar("Item")


@dataclass
class Grant:
    """What `caller` may read in `repository`: every table (`caller` None: `api.auth` is `none`; a
    service token naming the repository), or what lakeFS lets the caller read, path by path."""

    access: RepositoryAccess
    folders: TableFolders
    caller: Caller | None
    repository: str
    commits: dict[str, str] = field(default_factory=dict)  # each ref the request names -> its commit id

    @property
    def whole(self) -> bool:
        """Whether every table of the repository is readable (no lakeFS identity to ask about paths)."""
        return self.caller is None or self.caller.service_token is not None

    def commit(self, ref: str) -> str:
        return self.commits[ref]

    async def may_read(self, commit_id: str, table_paths: Iterable[str]) -> bool:
        """Whether the caller may read each table path at the commit: its log and every folder its
        files live in; 401 or 503 raised."""
        return await self.refused(commit_id, table_paths) is None

    async def require(self, commit_id: str, table_paths: Iterable[str], what: str) -> None:
        """Returns when `may_read`, else the 403 refusal naming `what` (which the caller named) and,
        when lakeFS refused a folder inside the table, that folder."""
        refused = await self.refused(commit_id, table_paths)
        if refused is not None:
            raise Refusal(403, f"this identity may not read {what}" + (f": {refused}" if refused else ""))

    async def refused(self, commit_id: str, table_paths: Iterable[str]) -> str | None:
        """None when the caller may read each table path at the commit; else why not: "" when
        lakeFS refuses a table's log, else the folder inside a table it refuses. 401 or 503 raised;
        a log the caller may read but that cannot be read for its folders raises its error (the
        door answers it as reading the table would: 422 with the reason)."""
        if self.whole:
            return None
        paths = list(dict.fromkeys(table_paths))
        if not await self._may_read_objects(commit_id, [log_folder(path) for path in paths]):
            return ""
        unreadable: ExporterError | None = None  # raised once every other path's folders were asked about
        for path in paths:
            try:
                folders = await run_in_threadpool(self.folders.of, self.repository, commit_id, path)
            except ExporterError as failed:
                if not failed.permanent:
                    raise
                unreadable = failed
                continue
            decision, folder = await self.access.check_folders(self.caller, self.repository, commit_id, path, folders)
            if decision not in (ALLOWED, FORBIDDEN):
                _refuse_unless_allowed(decision, f"repository {self.repository!r}")
            if decision == FORBIDDEN:
                return f"lakeFS refuses it the folder {folder!r}"
        if unreadable is not None:
            raise unreadable
        return None

    async def may_read_object(self, commit_id: str, path: str) -> bool:
        return await self._may_read_objects(commit_id, [path])

    async def readable(self, items: Sequence[Item], commit_ids: Callable[[Item], Iterable[str]],
                       table_paths: Callable[[Item], Iterable[str]]) -> list[Item]:
        """The items whose table paths the caller may read at each of their commits, in order."""
        if self.whole:
            return list(items)
        allowed = await asyncio.gather(*(self._all(commit_ids(item), table_paths(item)) for item in items))
        return [item for item, may in zip(items, allowed) if may]

    async def _all(self, commit_ids: Iterable[str], table_paths: Iterable[str]) -> bool:
        """Whether every path is readable at every commit. A table whose log the caller may read but
        that cannot be read for its folders (a corrupt log) is listed: a listing hands out no file or
        row of it, and each door that would answers why it cannot."""
        paths = list(table_paths)
        for commit_id in commit_ids:
            try:
                if not await self.may_read(commit_id, paths):
                    return False
            except ExporterError as failed:
                if not failed.permanent:
                    raise
        return True

    async def _may_read_objects(self, commit_id: str, paths: list[str]) -> bool:
        if self.whole:
            return True
        decisions = await asyncio.gather(*(self.access.check_path(self.caller, self.repository, commit_id, path)
                                           for path in dict.fromkeys(paths)))
        for decision in decisions:
            if decision not in (ALLOWED, FORBIDDEN):
                _refuse_unless_allowed(decision, f"repository {self.repository!r}")
        return all(decision == ALLOWED for decision in decisions)


async def grant_for(request: Request, repository: str, refs: Iterable[str | None] = ()) -> Grant:
    """The request's grant in `repository`, its `refs` resolved to commit ids (a commit id stands
    for itself); else the refusal: 401 (no or unknown credentials), 403 (the repository is closed to
    the caller, existing or not), 404 (no such ref), 503 (lakeFS cannot be reached). Called first in
    a route's body, so that invalid parameters are refused before credentials."""
    services = request.app.state.services
    caller = await require_caller(request)
    if caller is not None:
        _refuse_unless_allowed(await services.access.check(caller, repository), f"repository {repository!r}")
    grant = Grant(services.access, services.folders, caller, repository)
    wanted = [ref for ref in dict.fromkeys(refs) if ref]
    if wanted:
        lakefs = services.lakefs()
        resolved = await asyncio.gather(*(run_in_threadpool(commit_id_of, lakefs, repository, ref) for ref in wanted))
        grant.commits.update(zip(wanted, resolved))
    return grant


async def require_caller(request: Request) -> Caller | None:
    """The caller the request's credentials name, known to lakeFS (None when `api.auth` is `none`);
    else the 401 refusal (503 when lakeFS cannot be reached to tell)."""
    services = request.app.state.services
    if services.config.api.auth == "none":
        return None
    try:
        caller = caller_of(request.headers.get("authorization", ""), services.config,
                           request.cookies.get(SESSION_COOKIE))
    except Unauthenticated as exc:
        raise unauthenticated(str(exc)) from None
    _refuse_unless_allowed(await services.access.verify(caller), "who the caller is")
    return caller


async def may_open(request: Request, repository: str) -> bool:
    """Whether the (verified) caller may read `repository`: what a listing of repositories keeps."""
    try:
        await grant_for(request, repository)
    except Refusal as refused:
        if refused.status not in (403, 404):
            raise
        return False
    return True


def _refuse_unless_allowed(decision: int, what: str) -> None:
    if decision == UNAUTHENTICATED:
        raise unauthenticated("lakeFS does not accept these credentials")
    if decision == FORBIDDEN:
        raise Refusal(403, f"this identity may not read {what}")
    if decision == NO_REPOSITORY:
        raise Refusal(404, f"no {what}")
    if decision != ALLOWED:
        raise Refusal(503, f"lakeFS, which decides who may read {what}, cannot be reached")
