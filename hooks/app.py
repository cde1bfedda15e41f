"""The HTTP service: lakeFS webhook receiver, export status, health, metrics.

The receiver only validates and queues; the work happens in the workers. A 202 means the event is
in Redis; a 503 means it is not, so lakeFS records the hook run as failed (and catch-up finds it).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import prometheus_client
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.schemas import SchemaGenerator

from exporter.config import Config
from exporter.datasets import list_datasets, resolve_dataset
from exporter.diff import DiffCache, cached_diff
from exporter.errors import BadRequest, ExporterError, NotFound
from exporter.export import exports_in_store
from hooks.auth import (ALLOWED, FORBIDDEN, NO_REPOSITORY, SESSION_COOKIE, UNAUTHENTICATED, RepositoryAccess,
                        SignInRefused, Unauthenticated, caller_of, code_key, lakefs_login, lakefs_token_of)
from hooks.paging import paginate
from exporter.lakefs import LakeFS
from exporter.status import COMMIT_RECORD, StatusStore

log = logging.getLogger("lakefs_delta.hooks")
MAX_BODY = 1024 * 1024
COMMIT_ID = re.compile(r"[0-9A-Za-z]{1,128}")  # lakeFS commit ids are hex; ASCII letters and digits only
TEMPLATES = Path(__file__).resolve().parent / "templates"
# the page runs only its own script and style, is never framed, and sends no referrer (its URL may hold a sign-in code)
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
QUEUED_EVENTS = {"post-commit", "post-merge", "post-create-tag"}
REF_FIELD = {"post-commit": "branch_id", "post-merge": "branch_id", "post-create-tag": "tag_id"}
schemas = SchemaGenerator({"openapi": "3.0.0", "info": {"title": "lakefs-delta-exporter", "version": "0.1.0"}})


class BadEvent(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def unauthenticated(message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=401, headers={"WWW-Authenticate": 'Basic realm="lakeFS"'})


def token_matches(offered: str | None, tokens: tuple[SecretStr, ...]) -> bool:
    if not offered:
        return False
    # compare against every token, in constant time, so timing tells nothing about which matched
    return any([hmac.compare_digest(offered.encode(), token.get_secret_value().encode()) for token in tokens])


async def read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise BadEvent(413, f"body larger than {MAX_BODY} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise BadEvent(413, f"body larger than {MAX_BODY} bytes")
    return bytes(body)


def parse_event(body: bytes) -> dict[str, Any]:
    """lakeFS's event payload (shared/reference/lakefs-contract.md §1), checked field by field."""
    try:
        event = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadEvent(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(event, dict):
        raise BadEvent(400, "body must be a JSON object")
    for field in ("event_type", "repository_id"):
        if not isinstance(event.get(field), str) or not event[field].strip():
            raise BadEvent(422, f"`{field}` is required and must be a non-empty string")
    if event["event_type"] in QUEUED_EVENTS:
        for field in (REF_FIELD[event["event_type"]], "commit_id"):
            if not isinstance(event.get(field), str) or not event[field].strip():
                raise BadEvent(422, f"`{field}` is required for {event['event_type']} events")
        commit_id = event["commit_id"]
        if not COMMIT_ID.fullmatch(commit_id):
            raise BadEvent(422, "`commit_id` must be a lakeFS commit id")
        for field in ("repository_id", REF_FIELD[event["event_type"]]):
            if "/" in event[field] or len(event[field]) > 256:
                raise BadEvent(422, f"`{field}` is not a valid lakeFS name")
    return event


def create_app(config: Config) -> Starlette:
    status = StatusStore(config.redis)
    registry = prometheus_client.CollectorRegistry()
    events_total = prometheus_client.Counter("lakefs_delta_events_total", "Webhook events received",
                                             ["event_type", "outcome"], registry=registry)
    answer_seconds = prometheus_client.Histogram("lakefs_delta_webhook_answer_seconds", "Time to answer a webhook",
                                                 registry=registry)
    from workers.app import configure  # the receiver only publishes, by task name; it never runs tasks

    queue = configure(config)
    # /readyz probes run on their own threads with a deadline: a hung dependency never takes the
    # threads that webhook publishing needs
    probes = ThreadPoolExecutor(2, thread_name_prefix="readyz")

    async def receive_event(request: Request) -> Response:
        """
        summary: Receive a lakeFS action event (post-commit, post-merge, post-create-tag) and queue its export.
        responses:
          202: {description: queued; body has the task id}
          200: {description: event type ignored}
          400: {description: malformed body}
          401: {description: missing or wrong token}
          413: {description: body over 1 MiB}
          415: {description: not application/json}
          422: {description: a required field is missing or invalid}
          503: {description: the queue cannot be reached; lakeFS records the hook as failed}
        """
        started = time.monotonic()
        try:
            response = await _receive(request)
        except BadEvent as exc:
            events_total.labels("unknown", f"rejected_{exc.status}").inc()
            log.warning("event rejected status=%d reason=%s", exc.status, exc)
            response = error(exc.status, str(exc))
        answer_seconds.observe(time.monotonic() - started)
        return response

    async def _receive(request: Request) -> Response:
        offered = request.headers.get("x-webhook-token") or request.query_params.get("token")
        if not token_matches(offered, config.webhook_tokens):
            raise BadEvent(401, "missing or wrong webhook token (header X-Webhook-Token or query parameter token)")
        content_type = request.headers.get("content-type", "")
        if content_type.split(";")[0].strip().lower() != "application/json":
            raise BadEvent(415, f"content type must be application/json, not {content_type or 'missing'!r}")
        event = parse_event(await read_body(request))
        event_type = event["event_type"]
        if event_type not in QUEUED_EVENTS or event_type not in config.events:
            events_total.labels(event_type[:40], "ignored").inc()
            return JSONResponse({"status": "ignored", "event_type": event_type}, status_code=200)
        repository, ref, commit_id = event["repository_id"], event[REF_FIELD[event_type]], event["commit_id"]
        try:
            task = await run_in_threadpool(_publish, repository, ref, commit_id, event_type == "post-create-tag")
        except Exception as exc:  # kombu/redis raise many types when the broker is down
            events_total.labels(event_type, "unavailable").inc()
            log.error("event %s %s/%s ref=%s outcome=unavailable reason=%s", event_type, repository, commit_id, ref,
                      type(exc).__name__)
            return error(503, f"queue unavailable, event not accepted: {type(exc).__name__}")
        events_total.labels(event_type, "queued").inc()
        log.info("event %s %s/%s ref=%s outcome=queued task=%s", event_type, repository, commit_id, ref, task.id)
        return JSONResponse({"status": "queued", "task_id": task.id, "repository": repository, "ref": ref,
                             "commit_id": commit_id}, status_code=202)

    def _publish(repository: str, ref: str, commit_id: str, tag: bool):
        status.set_table(repository, ref, commit_id, COMMIT_RECORD, "queued")
        # a tag exports every table of its commit: the release must be readable as a whole
        return queue.send_task("lakefs_delta.export_commit", (repository, ref, commit_id, tag), retry=True,
                               retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.5})

    access = RepositoryAccess(config)
    if config.api_auth == "none":
        log.warning("api_auth is none: the API answers anyone who reaches it")

    async def refused(request: Request, repository: str) -> Response | None:
        """None when the caller may read `repository` (lakeFS decides); else the answer to give."""
        if config.api_auth == "none":
            return None
        try:
            caller = caller_of(request.headers.get("authorization", ""), config, request.cookies.get(SESSION_COOKIE))
        except Unauthenticated as exc:
            return unauthenticated(str(exc))
        decision = await access.check(caller, repository)
        if decision == ALLOWED:
            return None
        if decision == UNAUTHENTICATED:
            return unauthenticated("lakeFS does not accept these credentials")
        if decision == FORBIDDEN:
            return error(403, f"this identity may not read repository {repository!r}")
        if decision == NO_REPOSITORY:
            return error(404, f"no repository {repository!r}")
        return error(503, "lakeFS, which decides who may read a repository, cannot be reached")

    async def export_status(request: Request) -> Response:
        """
        summary: Export status of one commit, per ref and table (queued, running, retrying, done, failed).
        responses:
          200: {description: "refs: {ref: {commit: record, tables: {table: record}}}"}
          401: {description: no credentials, or lakeFS does not accept them}
          403: {description: the caller's lakeFS identity (or service token) may not read the repository}
          404: {description: nothing known about this commit}
        """
        repository, commit_id = request.path_params["repository"], request.path_params["commit"]
        if answer := await refused(request, repository):
            return answer
        ref = request.query_params.get("ref")
        try:
            records = await run_in_threadpool(status.tables, repository, commit_id, ref)
        except Exception as exc:
            records = {}
            log.warning("status store unavailable, answering from the manifests: %s", type(exc).__name__)
        if not records:  # Redis lost or never had it: the manifests in the store are the truth
            try:
                records = await run_in_threadpool(exports_in_store, config, repository, commit_id, ref)
            except NotFound as exc:
                return error(404, str(exc))
            except BadRequest as exc:
                return error(400, str(exc))
            except ExporterError as exc:
                return error(503, f"status store and object store unavailable: {exc}")
        if not records:
            return error(404, f"no export known for commit {commit_id} in repository {repository}")
        refs = {name: {"commit": tables.pop(COMMIT_RECORD, None), "tables": tables} for name, tables in records.items()}
        return JSONResponse({"repository": repository, "commit_id": commit_id, "refs": refs})

    async def healthz(request: Request) -> Response:
        """
        summary: The process is up.
        """
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> Response:
        """
        summary: Redis and lakeFS are reachable.
        responses:
          200: {description: ready}
          503: {description: a dependency is unreachable}
        """
        loop = asyncio.get_running_loop()

        async def probe(check) -> bool:
            try:
                return await asyncio.wait_for(loop.run_in_executor(probes, check), timeout=3)
            except (asyncio.TimeoutError, RuntimeError):
                return False

        checks = {"redis": await probe(status.ping), "lakefs": await probe(LakeFS(config.lakefs).healthy)}
        warnings = ["api_auth is none: the API answers anyone who reaches it"] if config.api_auth == "none" else []
        return JSONResponse({"ready": all(checks.values()), "checks": checks, "warnings": warnings},
                            status_code=200 if all(checks.values()) else 503)

    async def metrics(request: Request) -> Response:
        """
        summary: Prometheus metrics (this process's, plus the workers' counters kept in Redis).
        """
        text = prometheus_client.generate_latest(registry).decode()
        try:
            shared = await run_in_threadpool(status.metrics)
        except Exception:
            shared = {}
        for series, value in sorted(shared.items()):
            text += f"{series} {value}\n"
        return Response(text, media_type=prometheus_client.CONTENT_TYPE_LATEST)

    diffs = DiffCache(config.redis, config.diff_cache_ttl_seconds)
    diff_seconds = prometheus_client.Histogram("lakefs_delta_diff_seconds", "Time to answer a diff request",
                                               ["cached"], registry=registry)

    async def table_diff(request: Request) -> Response:
        """
        summary: How a Delta table changed from left_ref to right_ref (lakeFS's former OTF diff, extended).
        parameters:
          - {name: table_path, in: query, required: true, schema: {type: string}}
          - {name: type, in: query, schema: {type: string, enum: [delta]}}
          - {name: after, in: query, schema: {type: string}}
          - {name: amount, in: query, schema: {type: integer, maximum: 1000}}
        responses:
          200: {description: "diff_type, results (operations newest first), schema_changes, row_count, files, history_truncated, pagination"}
          400: {description: missing table_path, unsupported type, bad paging}
          401: {description: no credentials, or lakeFS does not accept them}
          403: {description: the caller's lakeFS identity (or service token) may not read the repository}
          404: {description: unknown repository, ref or table path}
        """
        repository, left, right = (request.path_params[k] for k in ("repository", "left_ref", "right_ref"))
        if answer := await refused(request, repository):
            return answer
        params = request.query_params
        table_path = params.get("table_path", "").strip("/")
        if not table_path:
            return error(400, "query parameter table_path is required")
        if params.get("type", "delta") != "delta":
            return error(400, f"unsupported table type {params.get('type')!r}; only delta")
        try:
            amount = int(params.get("amount", "100"))
            if not 1 <= amount <= 1000:
                raise ValueError
        except ValueError:
            return error(400, "amount must be an integer from 1 to 1000")
        started = time.monotonic()
        try:
            diff, cached = await run_in_threadpool(cached_diff, config, LakeFS(config.lakefs), diffs, repository,
                                                   left, right, table_path)
        except NotFound as exc:
            return error(404, str(exc))
        except BadRequest as exc:
            return error(400, str(exc))
        except ExporterError as exc:
            return error(503 if not exc.permanent else 422, str(exc))
        if diff["versions"]["left"] is None and diff["versions"]["right"] is None:
            return error(404, f"no Delta table at {table_path!r} on {left} or {right}")
        try:
            page, pagination = paginate(diff["results"], params.get("after"), amount)
        except ValueError as exc:
            return error(400, str(exc))
        diff_seconds.labels(str(cached).lower()).observe(time.monotonic() - started)
        return JSONResponse({**diff, "results": page, "pagination": pagination, "cached": cached})

    async def datasets(request: Request) -> Response:
        """
        summary: The Delta tables at a ref, from descriptors and detected by their _delta_log.
        responses:
          200: {description: datasets with name, path, source (descriptor or detected) and latest_version}
          404: {description: unknown repository or ref}
        """
        repository, ref = request.path_params["repository"], request.path_params["ref"]
        if answer := await refused(request, repository):
            return answer
        try:
            found = await run_in_threadpool(list_datasets, LakeFS(config.lakefs), repository, ref)
        except NotFound as exc:
            return error(404, str(exc))
        except BadRequest as exc:
            return error(400, str(exc))
        except ExporterError as exc:
            return error(503 if not exc.permanent else 422, str(exc))
        if request.url.path.endswith("/resolve"):
            path = request.query_params.get("path", "")
            if not path:
                return error(400, "query parameter path is required")
            dataset = resolve_dataset(found, path)
            return JSONResponse(dataset) if dataset else error(404, f"no dataset contains {path!r}")
        return JSONResponse({"repository": repository, "ref": ref, "results": found})

    async def sign_in(request: Request) -> Response:
        """
        summary: Sign the diff page in with lakeFS keys; the answer sets the session cookie (a lakeFS token, never the secret).
        responses:
          200: {description: signed in; the session cookie is set}
          400: {description: body is not a JSON object with access_key_id and secret_access_key}
          401: {description: lakeFS does not accept the keys}
          503: {description: lakeFS cannot be reached}
        """
        try:
            body = json.loads(await read_body(request))
            key_id, secret = body["access_key_id"], body["secret_access_key"]
            if not (isinstance(key_id, str) and isinstance(secret, str) and key_id and secret):
                raise TypeError
        except (BadEvent, ValueError, KeyError, TypeError):
            return error(400, "send a JSON object with access_key_id and secret_access_key")
        try:
            token, expires = await lakefs_login(config, access.client, key_id, secret)
        except SignInRefused as exc:
            return error(401, str(exc))
        except httpx.HTTPError:
            return error(503, "lakeFS cannot be reached to sign in")
        return signed_in(request, token, expires)

    async def sign_in_link(request: Request) -> Response:
        """
        summary: A one-time sign-in code for the diff page, for the lakeFS identity that asks (basic auth or a lakeFS token).
        responses:
          200: {description: "code and expires_in: open /diff?code=<code>&... once, before it expires"}
          401: {description: no lakeFS identity, or lakeFS does not accept it}
          503: {description: lakeFS or Redis cannot be reached}
        """
        try:
            caller = caller_of(request.headers.get("authorization", ""), config, request.cookies.get(SESSION_COOKIE))
            token, expires = await lakefs_token_of(caller, config, access.client)
        except (Unauthenticated, SignInRefused) as exc:
            return unauthenticated(str(exc))
        except httpx.HTTPError:
            return error(503, "lakeFS cannot be reached to sign in")
        code = secrets.token_urlsafe(24)
        lifetime = min(config.sign_in_link_seconds, expires - int(time.time()))
        if lifetime <= 0:
            return unauthenticated("the lakeFS token has expired")
        try:
            await run_in_threadpool(status.redis.set, code_key(code), f"{expires} {token}", ex=lifetime)
        except Exception as exc:
            return error(503, f"Redis cannot be reached: {type(exc).__name__}")
        return JSONResponse({"code": code, "expires_in": lifetime})

    async def sign_in_with_code(request: Request) -> Response:
        """
        summary: Trade a one-time sign-in code for the session cookie (the diff page does it when opened from a link).
        responses:
          200: {description: signed in; the session cookie is set}
          400: {description: body is not a JSON object with code}
          401: {description: the code is unknown, used or expired}
          503: {description: Redis cannot be reached}
        """
        try:
            code = json.loads(await read_body(request))["code"]
            if not isinstance(code, str) or not code:
                raise TypeError
        except (BadEvent, ValueError, KeyError, TypeError):
            return error(400, "send a JSON object with the code")
        try:
            found = await run_in_threadpool(status.redis.getdel, code_key(code))  # one use only
        except Exception as exc:
            return error(503, f"Redis cannot be reached: {type(exc).__name__}")
        if not found:
            return error(401, "this sign-in link is unknown, used or expired: ask for a new one")
        expires, _, token = found.decode().partition(" ")
        return signed_in(request, token, int(expires))

    async def sign_out(request: Request) -> Response:
        """
        summary: Drop the session cookie.
        responses:
          200: {description: signed out}
        """
        response = JSONResponse({"signed_in": False})
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    def signed_in(request: Request, token: str, expires: int) -> Response:
        response = JSONResponse({"signed_in": True, "expires_at": expires})
        response.set_cookie(SESSION_COOKIE, token, max_age=max(0, expires - int(time.time())), path="/",
                            httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return response

    async def diff_page(request: Request) -> Response:
        return HTMLResponse((TEMPLATES / "diff.html").read_text(), headers=PAGE_HEADERS)

    async def page_asset(request: Request) -> Response:
        name = request.path_params["name"]
        media = {"diff.js": "text/javascript", "diff.css": "text/css"}
        if name not in media:
            return error(404, f"no asset {name!r}")
        return Response((TEMPLATES / name).read_text(), media_type=media[name], headers=PAGE_HEADERS)

    async def openapi(request: Request) -> Response:
        return JSONResponse(schemas.get_schema(routes=request.app.routes))

    routes = [
        Route("/webhooks/lakefs", receive_event, methods=["POST"]),
        Route("/exports/{repository}/{commit}", export_status, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/repositories/{repository}/otf/refs/{left_ref}/diff/{right_ref}", table_diff, methods=["GET"]),
        Route("/repositories/{repository}/refs/{ref}/datasets", datasets, methods=["GET"]),
        Route("/repositories/{repository}/refs/{ref}/datasets/resolve", datasets, methods=["GET"]),
        Route("/session", sign_in, methods=["POST"]),
        Route("/session", sign_out, methods=["DELETE"]),
        Route("/session/links", sign_in_link, methods=["POST"]),
        Route("/session/code", sign_in_with_code, methods=["POST"]),
        Route("/diff", diff_page, methods=["GET"], include_in_schema=False),
        Route("/assets/{name}", page_asset, methods=["GET"], include_in_schema=False),
        Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False),
    ]
    return Starlette(routes=routes, middleware=[Middleware(NoStore)])


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
