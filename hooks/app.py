"""The HTTP service (FastAPI): lakeFS webhook receiver, export status, history diff, datasets,
the diff page and its sign-in, health, metrics. Request and answer models are in `hooks.models`;
the OpenAPI document at /openapi.json is made from them.

The receiver only validates and queues; the work happens in the workers. A 202 means the event is
in Redis; a 503 means it is not, so lakeFS records the hook run as failed (and catch-up finds it).
Who may read a repository is lakeFS's decision (`hooks.auth`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import httpx
import prometheus_client
import redis
from fastapi import FastAPI, Header, Query
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

import exporter
from exporter.config import Config
from exporter.export.branch_table import branch_table_versions, follows
from exporter.diff.datasets import DatasetsCache, resolve_dataset
from exporter.diff.table import DiffCache, diff_commits
from exporter.errors import BadRequest, ExporterError, NotFound
from exporter.export.commit import exports_in_store
from hooks.auth import (ALLOWED, FORBIDDEN, NO_REPOSITORY, SESSION_COOKIE, UNAUTHENTICATED, RepositoryAccess,
                        SignInRefused, Unauthenticated, caller_of, code_key, matching_token)
from hooks.metrics import WorkerMetrics
from hooks.models import (BranchTableVersions, RefsOverview, RowDiff, Dataset, Datasets, Computing, EventIgnored, EventQueued, ExportStatus, Health, Keys, LakeFSEvent, Problem,
                          Readiness, Session, SignInCode, SignInLink, TableDiff, validation_message)
from hooks.sharing import create_sharing_app
from hooks.paging import MAX_PER_PAGE, paginate, paginate_rows, row_pagination, row_start
from exporter.lakefs.client import LakeFS
from exporter.state.results import ResultCache
from exporter.diff.overview import OverviewCache
from exporter.storage.objectstore import ObjectStore
from exporter.diff.rows import RowDiffCache, key_part
from exporter.diff.rows_spark import rows_page
from exporter.state.status import COMMIT_RECORD, StatusStore

log = logging.getLogger("lakefs_delta.hooks")
MAX_BODY = 1024 * 1024
COMMIT_ID = re.compile(r"[0-9A-Za-z]{1,128}")  # lakeFS commit ids are hex; ASCII letters and digits only
TEMPLATES = Path(__file__).resolve().parent / "templates"
# the page runs only its own script and style, is never framed, and sends no referrer (its URL may hold a sign-in code)
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
QUEUED_EVENTS = {"post-commit", "post-merge", "post-create-tag"}
REF_FIELD = {"post-commit": "branch_id", "post-merge": "branch_id", "post-create-tag": "tag_id"}


class Refusal(Exception):
    """An answer other than success: its status and message (and headers), as a `Problem`."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


def refusal_of(exc: BaseException) -> "Refusal":
    """The one mapping of the library's errors (and Redis's) to HTTP answers."""
    if isinstance(exc, NotFound):
        return Refusal(404, str(exc))
    if isinstance(exc, BadRequest):
        return Refusal(400, str(exc))
    if isinstance(exc, ExporterError):
        return Refusal(422 if exc.permanent else 503, str(exc))
    return Refusal(503, f"Redis cannot be reached: {type(exc).__name__}")


def error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def unauthenticated(message: str) -> Refusal:
    return Refusal(401, message, {"WWW-Authenticate": 'Basic realm="lakeFS"'})


def problems(*statuses: int) -> dict:
    """OpenAPI `responses` entries for error answers."""
    return {status: {"model": Problem, "description": _MEANING[status]} for status in statuses}


_MEANING = {400: "bad input (the message says which)", 401: "no credentials, or lakeFS does not accept them",
            403: "the caller may not read this repository (lakeFS's decision, or the service token's list)",
            404: "no such repository, ref, table or path", 413: "body over 1 MiB", 415: "not application/json",
            422: "a required field is missing or invalid, or the table cannot be read",
            503: "a service this one needs (lakeFS, Redis, the object store) cannot be reached"}


async def read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise Refusal(413, f"body larger than {MAX_BODY} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise Refusal(413, f"body larger than {MAX_BODY} bytes")
    return bytes(body)


def parse_event(body: bytes) -> dict[str, Any]:
    """lakeFS's event payload (shared/reference/lakefs-contract.md §1), checked field by field."""
    try:
        event = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Refusal(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(event, dict):
        raise Refusal(400, "body must be a JSON object")
    for field in ("event_type", "repository_id"):
        if not isinstance(event.get(field), str) or not event[field].strip():
            raise Refusal(422, f"`{field}` is required and must be a non-empty string")
    if event["event_type"] in QUEUED_EVENTS:
        for field in (REF_FIELD[event["event_type"]], "commit_id"):
            if not isinstance(event.get(field), str) or not event[field].strip():
                raise Refusal(422, f"`{field}` is required for {event['event_type']} events")
        commit_id = event["commit_id"]
        if not COMMIT_ID.fullmatch(commit_id):
            raise Refusal(422, "`commit_id` must be a lakeFS commit id")
        for field in ("repository_id", REF_FIELD[event["event_type"]]):
            if "/" in event[field] or len(event[field]) > 256:
                raise Refusal(422, f"`{field}` is not a valid lakeFS name")
    return event


def create_app(config: Config) -> FastAPI:
    status = StatusStore(config.redis)
    registry = prometheus_client.CollectorRegistry()
    events_total = prometheus_client.Counter("lakefs_delta_events_total", "Webhook events received",
                                             ["event_type", "outcome"], registry=registry)
    answer_seconds = prometheus_client.Histogram("lakefs_delta_webhook_answer_seconds", "Time to answer a webhook",
                                                 registry=registry)
    diff_seconds = prometheus_client.Histogram("lakefs_delta_diff_seconds", "Time to answer a diff request",
                                               ["cached"], registry=registry)
    registry.register(WorkerMetrics(status.metrics))  # the workers' counters, kept in Redis
    from workers.app import configure  # the receiver only publishes, by task name; it never runs tasks

    queue = configure(config)
    diffs = DiffCache(config.redis, config.api.diff_cache_ttl_seconds)
    datasets_cache = DatasetsCache(config.redis, config.api.diff_cache_ttl_seconds)
    row_diffs = RowDiffCache(config.redis, config.api.diff_cache_ttl_seconds)
    overviews = OverviewCache(config.redis, config.api.diff_cache_ttl_seconds)
    # /readyz probes run on their own threads with a deadline: a hung dependency never takes the
    # threads that webhook publishing needs
    probes = ThreadPoolExecutor(2, thread_name_prefix="readyz")
    access = RepositoryAccess(config)
    if config.api.auth == "none":
        log.warning("api.auth is none: the API answers anyone who reaches it")

    app = FastAPI(title="lakefs-delta-exporter", version=exporter.__version__, docs_url=None, redoc_url=None,
                  description="Exports Delta tables in lakeFS for engines outside lakeFS, and diffs them.")
    app.add_middleware(NoStore)
    app.mount("/delta-sharing", create_sharing_app(config))  # recipients' bearer tokens, not lakeFS identities

    @app.exception_handler(Refusal)
    async def _refusal(request: Request, exc: Refusal) -> Response:
        headers = exc.headers
        if request.headers.get("x-requested-with"):  # the page: its own sign-in form, not the browser's dialog
            headers = {k: v for k, v in headers.items() if k.lower() != "www-authenticate"}
        return error(exc.status, str(exc), headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        return error(400, validation_message(exc.errors()))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        return error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    async def require_reader(request: Request, repository: str) -> None:
        """Returns when the caller may read `repository` (lakeFS decides); else raises the refusal."""
        if config.api.auth == "none":
            return
        try:
            caller = caller_of(request.headers.get("authorization", ""), config, request.cookies.get(SESSION_COOKIE))
        except Unauthenticated as exc:
            raise unauthenticated(str(exc)) from None
        decision = await access.check(caller, repository)
        if decision == UNAUTHENTICATED:
            raise unauthenticated("lakeFS does not accept these credentials")
        if decision == FORBIDDEN:
            raise Refusal(403, f"this identity may not read repository {repository!r}")
        if decision == NO_REPOSITORY:
            raise Refusal(404, f"no repository {repository!r}")
        if decision != ALLOWED:
            raise Refusal(503, "lakeFS, which decides who may read a repository, cannot be reached")

    async def from_lakefs(function, *args):
        """Run a library call on the threadpool; its errors as answers (lakeFS's 400 is the caller's)."""
        try:
            return await run_in_threadpool(function, *args)
        except (ExporterError, redis.RedisError) as exc:
            raise refusal_of(exc) from None

    # ------------------------------------------------------------ lakeFS's webhook

    @app.post("/webhooks/lakefs", status_code=202, response_model=EventQueued,
              summary="Receive a lakeFS action event and queue its export",
              responses={200: {"model": EventIgnored, "description": "an event type that is not exported"},
                         **problems(400, 401, 413, 415, 422, 503)},
              openapi_extra={"requestBody": {"required": True, "content": {
                  "application/json": {"schema": LakeFSEvent.model_json_schema()}}}})
    async def receive_event(request: Request, x_webhook_token: str | None = Header(None),
                            token: str | None = Query(None, description="the webhook token, when no header carries it"),
                            branch_tables: str = Query("", description="comma-separated branch patterns that keep "
                                                       "branch tables (the action `install-actions` writes sets it)")):
        """post-commit, post-merge and post-create-tag are queued (202); the token is compared in
        constant time. 503 means the event is not in the queue, so lakeFS records the hook as failed."""
        started = time.monotonic()
        try:
            response = await _receive(request, x_webhook_token or token,
                                      [p.strip() for p in branch_tables.split(",") if p.strip()])
        except Refusal as exc:
            events_total.labels("unknown", f"rejected_{exc.status}").inc()
            log.warning("event rejected status=%d reason=%s", exc.status, exc)
            response = error(exc.status, str(exc))
        answer_seconds.observe(time.monotonic() - started)
        return response

    async def _receive(request: Request, offered: str | None, branch_patterns: list[str]) -> Response:
        if matching_token(offered, config.webhook_tokens) is None:
            raise Refusal(401, "missing or wrong webhook token (header X-Webhook-Token or query parameter token)")
        content_type = request.headers.get("content-type", "")
        if content_type.split(";")[0].strip().lower() != "application/json":
            raise Refusal(415, f"content type must be application/json, not {content_type or 'missing'!r}")
        event = parse_event(await read_body(request))
        event_type = event["event_type"]
        if event_type not in QUEUED_EVENTS or event_type not in config.events:
            events_total.labels(event_type[:40], "ignored").inc()
            return JSONResponse({"status": "ignored", "event_type": event_type}, status_code=200)
        repository, ref, commit_id = event["repository_id"], event[REF_FIELD[event_type]], event["commit_id"]
        try:
            tag = event_type == "post-create-tag"
            branch_table = not tag and follows(ref, [*config.branch_tables, *branch_patterns])
            task = await run_in_threadpool(_publish, repository, ref, commit_id, tag, branch_table)
        except Exception as exc:  # kombu/redis raise many types when the broker is down
            events_total.labels(event_type, "unavailable").inc()
            log.error("event %s %s/%s ref=%s outcome=unavailable reason=%s", event_type, repository, commit_id, ref,
                      type(exc).__name__)
            return error(503, f"queue unavailable, event not accepted: {type(exc).__name__}")
        events_total.labels(event_type, "queued").inc()
        log.info("event %s %s/%s ref=%s outcome=queued task=%s", event_type, repository, commit_id, ref, task.id)
        return JSONResponse({"status": "queued", "task_id": task.id, "repository": repository, "ref": ref,
                             "commit_id": commit_id}, status_code=202)

    def _publish(repository: str, ref: str, commit_id: str, tag: bool, branch_table: bool):
        status.set_table(repository, ref, commit_id, COMMIT_RECORD, "queued")
        # a tag exports every table of its commit: the release must be readable as a whole
        return queue.send_task("lakefs_delta.export_commit", (repository, ref, commit_id, tag),
                               {"branch_table": branch_table}, retry=True,
                               retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.5})

    # ------------------------------------------------------------ reading (lakeFS decides who)

    @app.get("/exports/{repository}/{commit}", response_model=ExportStatus, summary="Export status of one commit",
             responses=problems(400, 401, 403, 404, 503))
    async def export_status(request: Request, repository: str, commit: str,
                            ref: str | None = Query(None, description="only this ref's exports")):
        """Per ref and table: queued, running, retrying, done (with its location) or failed (with
        the reason). Without a Redis record, answered from the manifests in the object store."""
        await require_reader(request, repository)
        try:
            records = await run_in_threadpool(status.tables, repository, commit, ref)
        except Exception as exc:
            records = {}
            log.warning("status store unavailable, answering from the manifests: %s", type(exc).__name__)
        if not records:  # Redis lost or never had it: the manifests in the store are the truth
            try:
                records = await from_lakefs(exports_in_store, config, repository, commit, ref)
            except Refusal as exc:
                if exc.status in (422, 503):
                    raise Refusal(503, f"status store and object store unavailable: {exc}") from None
                raise
        if not records:
            raise Refusal(404, f"no export known for commit {commit} in repository {repository}")
        refs = {name: {"commit": tables.pop(COMMIT_RECORD, None), "tables": tables} for name, tables in records.items()}
        return {"repository": repository, "commit_id": commit, "refs": refs}

    @app.get("/repositories/{repository}/branches/{branch}/tables/{table}/versions",
             response_model=BranchTableVersions, summary="A branch table's lakeFS commit <-> Delta version mapping",
             responses=problems(400, 401, 403, 404, 422, 503))
    async def branch_table(request: Request, repository: str, branch: str, table: str,
                           commit: str | None = Query(None, description="only this lakeFS commit's entry")):
        """The branch table of `table` on `branch`: its location (which never changes), head, offset
        and, for each lakeFS commit it followed, the version that reads as the table at that commit
        (`versionAsOf` on the location)."""
        await require_reader(request, repository)
        versions = await from_lakefs(branch_table_versions, config, None, repository, branch, table)
        if commit is not None:
            versions["commits"] = [entry for entry in versions["commits"] if entry["commit_id"] == commit]
            if not versions["commits"]:
                raise Refusal(404, f"the branch table of {table!r} on {branch!r} has no version for commit {commit}")
        return versions

    computing = {202: {"model": Computing, "description": "not computed yet: ask again after Retry-After"}}

    @app.get("/repositories/{repository}/otf/refs/{left_ref}/diff/{right_ref}", response_model=TableDiff,
             summary="How a Delta table changed from left_ref to right_ref",
             responses={**computing, **problems(400, 401, 403, 404, 422, 503)})
    async def table_diff(request: Request, repository: str, left_ref: str, right_ref: str,
                         table_path: str = Query(min_length=1, description="the table's path from the repository root"),
                         type: Literal["delta"] = Query("delta"),
                         after: str | None = Query(None, description="a result id: the page starts after it"),
                         amount: int = Query(100, ge=1, le=MAX_PER_PAGE)):
        """lakeFS's former OTF diff, extended: operations on the right not on the left (newest
        first, paged), schema changes, row count, files, properties and protocol changes. Answered
        from the cache; a diff not there yet is computed by a worker, waited for up to
        `api.diff_wait_seconds`, else 202."""
        await require_reader(request, repository)
        table_path = table_path.strip("/")
        if not table_path:
            raise Refusal(400, "table_path: names no table")
        started = time.monotonic()
        left_commit, right_commit = await from_lakefs(diff_commits, LakeFS(config.lakefs), repository, left_ref, right_ref)
        cached, diff = await from_workers(diffs, "lakefs_delta.compute_diff",
                                          (repository, left_commit, right_commit, table_path))
        if diff is None:
            return still_computing()
        if diff["versions"]["left"] is None and diff["versions"]["right"] is None:
            raise Refusal(404, f"no Delta table at {table_path!r} on {left_ref} or {right_ref}")
        try:
            page, pagination = paginate(diff["results"], after, amount)
        except ValueError as exc:
            raise Refusal(400, str(exc)) from None
        diff_seconds.labels(str(cached).lower()).observe(time.monotonic() - started)
        return {**diff, "results": page, "pagination": pagination, "cached": cached}

    @app.get("/repositories/{repository}/otf/refs/{left_ref}/diff/{right_ref}/rows", response_model=RowDiff,
             summary="Which rows of a Delta table differ from left_ref to right_ref",
             responses={**computing, **problems(400, 401, 403, 404, 422, 503)})
    async def row_diff(request: Request, repository: str, left_ref: str, right_ref: str,
                       table_path: str = Query(min_length=1, description="the table's path from the repository root"),
                       key: str = Query("", description="comma-separated key columns: rows removed and added with "
                                                        "the same key are one update"),
                       after: str | None = Query(None, description="a row id: the page starts after it"),
                       amount: int = Query(100, ge=1, le=MAX_PER_PAGE)):
        """Read only from the files that differ: rows of files on one side, the rows whose
        deletion-vector bits differ, equal rows cancelling out (a rewrite shows nothing). Counts
        per change and partition, the files, and the rows, paged. Computed by a worker and cached,
        like the history diff (202 while computing)."""
        await require_reader(request, repository)
        table_path = table_path.strip("/")
        if not table_path:
            raise Refusal(400, "table_path: names no table")
        columns = tuple(c.strip() for c in key.split(",") if c.strip())
        left_commit, right_commit = await from_lakefs(diff_commits, LakeFS(config.lakefs), repository, left_ref, right_ref)
        parts = (repository, left_commit, right_commit, table_path, key_part(columns))
        cached, diff = await from_workers(row_diffs, "lakefs_delta.compute_row_diff", parts)
        if diff is None:
            return still_computing(await run_in_threadpool(row_diffs.progress, *parts))
        try:
            if diff.get("rows_location"):  # the Spark job's answer: its rows are a Parquet file
                store = ObjectStore(config, await from_lakefs(LakeFS(config.lakefs).storage_namespace, repository))
                start = row_start(after)
                page, total = await from_lakefs(rows_page, store, diff["rows_location"], start, amount)
                pagination = row_pagination(page, start, amount, total)
            else:
                page, pagination = paginate_rows(diff["rows"], after, amount)
        except ValueError as exc:
            raise Refusal(400, str(exc)) from None
        return {**diff, "rows": page, "pagination": pagination, "cached": cached}

    @app.get("/repositories/{repository}/otf/refs/{left_ref}/diff/{right_ref}/tables", response_model=RefsOverview,
             summary="Every table that differs between two refs",
             responses={**computing, **problems(400, 401, 403, 404, 422, 503)})
    async def refs_overview(request: Request, repository: str, left_ref: str, right_ref: str):
        """Descriptors and detected Delta tables on either side whose objects changed, each with
        its diff type, row delta, files and a schema-change flag (from its history diff)."""
        await require_reader(request, repository)
        left_commit, right_commit = await from_lakefs(diff_commits, LakeFS(config.lakefs), repository, left_ref, right_ref)
        cached, overview = await from_workers(overviews, "lakefs_delta.compare_refs",
                                              (repository, left_commit, right_commit))
        if overview is None:
            return still_computing()
        return {**overview, "repository": repository, "left_ref": left_ref, "right_ref": right_ref, "cached": cached}

    async def from_workers(cache: ResultCache, task: str, parts: tuple) -> tuple[bool, Any]:
        """(was it cached, the result): from the cache, else queued on the workers (once, however
        many ask) and waited for up to `api.diff_wait_seconds`; the result is None when it is not there
        yet. A failure the worker recorded is the answer. Heavy work never runs in this process."""
        try:
            found = await run_in_threadpool(cache.get, *parts)
            if found is not None:
                return True, found
            if await run_in_threadpool(cache.claim, config.tasks.time_limit(task), *parts):
                await run_in_threadpool(lambda: queue.send_task(task, parts))
            deadline = time.monotonic() + config.api.diff_wait_seconds
            while True:
                found = await run_in_threadpool(cache.get, *parts)
                if found is not None:
                    return False, found
                failure = await run_in_threadpool(cache.failure, *parts)
                if failure is not None:
                    raise refusal_of(failure)
                if time.monotonic() >= deadline:
                    return False, None
                await asyncio.sleep(0.25)
        except redis.RedisError as exc:
            raise refusal_of(exc) from None

    def still_computing(progress: dict | None = None) -> Response:
        return JSONResponse({"status": "computing", "retry_after_seconds": 2, "progress": progress}, status_code=202,
                            headers={"Retry-After": "2"})

    async def datasets_at(repository: str, ref: str) -> list[dict] | None:
        commit_id = (await from_lakefs(LakeFS(config.lakefs).commit, repository, ref)).id
        return (await from_workers(datasets_cache, "lakefs_delta.list_datasets", (repository, commit_id)))[1]

    @app.get("/repositories/{repository}/refs/{ref}/datasets", response_model=Datasets,
             summary="The Delta tables at a ref", responses={**computing, **problems(400, 401, 403, 404, 422, 503)})
    async def datasets(request: Request, repository: str, ref: str):
        """From descriptors under `_lakefs_tables/`, and detected by their `_delta_log/`; listed by a
        worker once per commit and cached, like diffs."""
        await require_reader(request, repository)
        found = await datasets_at(repository, ref)
        if found is None:
            return still_computing()
        return {"repository": repository, "ref": ref, "results": found}

    @app.get("/repositories/{repository}/refs/{ref}/datasets/resolve", response_model=Dataset,
             summary="The most specific table a path belongs to",
             responses={**computing, **problems(400, 401, 403, 404, 422, 503)})
    async def resolve(request: Request, repository: str, ref: str,
                      path: str = Query(min_length=1, description="a path from the repository root")):
        await require_reader(request, repository)
        found = await datasets_at(repository, ref)
        if found is None:
            return still_computing()
        dataset = resolve_dataset(found, path)
        if dataset is None:
            raise Refusal(404, f"no dataset contains {path!r}")
        return dataset

    # ------------------------------------------------------------ the page's sign-in

    @app.post("/session", response_model=Session, summary="Sign the diff page in with lakeFS keys",
              responses=problems(400, 401, 503))
    async def sign_in(request: Request, keys: Keys):
        """lakeFS's login API exchanges the keys for a lakeFS token, which the answer sets as an
        HttpOnly, SameSite=Strict cookie; the secret is never stored."""
        try:
            token, expires = await access.login(keys.access_key_id, keys.secret_access_key)
        except SignInRefused as exc:
            raise Refusal(401, str(exc)) from None
        except httpx.HTTPError:
            raise Refusal(503, "lakeFS cannot be reached to sign in") from None
        return signed_in(request, token, expires)

    @app.delete("/session", response_model=Session, summary="Drop the session cookie")
    async def sign_out():
        response = JSONResponse({"signed_in": False})
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    @app.post("/session/links", response_model=SignInLink, summary="A one-time sign-in code for the diff page",
              responses=problems(401, 503))
    async def sign_in_link(request: Request):
        """For the lakeFS identity that asks (basic auth with lakeFS keys, or a lakeFS token): open
        `/diff?code=<code>&...` once, before it expires."""
        try:
            caller = caller_of(request.headers.get("authorization", ""), config, request.cookies.get(SESSION_COOKIE))
            token, expires = await access.token_of(caller)
        except (Unauthenticated, SignInRefused) as exc:
            raise unauthenticated(str(exc)) from None
        except httpx.HTTPError:
            raise Refusal(503, "lakeFS cannot be reached to sign in") from None
        code = secrets.token_urlsafe(24)
        lifetime = min(config.api.sign_in_link_seconds, expires - int(time.time()))
        if lifetime <= 0:
            raise unauthenticated("the lakeFS token has expired")
        try:
            await run_in_threadpool(status.redis.set, code_key(code), f"{expires} {token}", ex=lifetime)
        except Exception as exc:
            raise Refusal(503, f"Redis cannot be reached: {type(exc).__name__}") from None
        return {"code": code, "expires_in": lifetime}

    @app.post("/session/code", response_model=Session, summary="Trade a one-time sign-in code for the session cookie",
              responses=problems(400, 401, 503))
    async def sign_in_with_code(request: Request, body: SignInCode):
        try:
            found = await run_in_threadpool(status.redis.getdel, code_key(body.code))  # one use only
        except Exception as exc:
            raise Refusal(503, f"Redis cannot be reached: {type(exc).__name__}") from None
        if not found:
            raise Refusal(401, "this sign-in link is unknown, used or expired: ask for a new one")
        expires, _, token = found.decode().partition(" ")
        return signed_in(request, token, int(expires))

    def signed_in(request: Request, token: str, expires: int) -> Response:
        response = JSONResponse({"signed_in": True, "expires_at": expires})
        response.set_cookie(SESSION_COOKIE, token, max_age=max(0, expires - int(time.time())), path="/",
                            httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return response

    @app.get("/diff", include_in_schema=False)
    async def diff_page():
        return HTMLResponse((TEMPLATES / "diff.html").read_text(), headers=PAGE_HEADERS)

    @app.get("/docs", include_in_schema=False)
    async def docs_page():
        """The API reference, rendered from /openapi.json by the service's own script (no CDN)."""
        return HTMLResponse((TEMPLATES / "docs.html").read_text(), headers=PAGE_HEADERS)

    @app.get("/assets/{name}", include_in_schema=False)
    async def page_asset(name: str):
        media = {"diff.js": "text/javascript", "diff.css": "text/css", "docs.js": "text/javascript"}
        if name not in media:
            raise Refusal(404, f"no asset {name!r}")
        return Response((TEMPLATES / name).read_text(), media_type=media[name], headers=PAGE_HEADERS)

    # ------------------------------------------------------------ operations

    @app.get("/healthz", response_model=Health, summary="The process is up")
    async def healthz():
        return {"status": "ok"}

    @app.get("/readyz", response_model=Readiness, summary="Redis and lakeFS are reachable",
             responses={503: {"model": Readiness, "description": "a dependency is unreachable"}})
    async def readyz():
        loop = asyncio.get_running_loop()

        async def probe(check) -> bool:
            try:
                return await asyncio.wait_for(loop.run_in_executor(probes, check), timeout=3)
            except (asyncio.TimeoutError, RuntimeError):
                return False

        checks = {"redis": await probe(status.ping), "lakefs": await probe(LakeFS(config.lakefs).healthy)}
        warnings = ["api.auth is none: the API answers anyone who reaches it"] if config.api.auth == "none" else []
        return JSONResponse({"ready": all(checks.values()), "checks": checks, "warnings": warnings},
                            status_code=200 if all(checks.values()) else 503)

    @app.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics",
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}})
    async def metrics():
        """This process's, plus the workers' counters kept in Redis."""
        text = await run_in_threadpool(prometheus_client.generate_latest, registry)  # reads Redis
        return Response(text, media_type=prometheus_client.CONTENT_TYPE_LATEST)

    return app


class NoStore:
    """`Cache-Control: no-store` on every answer: status and diffs are per caller and change."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        async def send_no_store(message):
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"cache-control", b"no-store")]
            await send(message)

        await (self.app(scope, receive, send_no_store) if scope["type"] == "http" else self.app(scope, receive, send))
