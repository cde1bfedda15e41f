"""The Delta Sharing server (delta-io/delta-sharing PROTOCOL.md), mounted at `/delta-sharing`: a
thin adapter over `exporter.sharing`. Recipients authenticate with their bearer token; errors
carry the protocol's body, `{"errorCode": ..., "message": ...}`.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import redis
from fastapi import FastAPI, Header, Query
from fastapi.exceptions import RequestValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from exporter.config import Config
from exporter.errors import ExporterError, NotFound
from exporter.lakefs.client import LakeFS
from exporter.storage.presign import Presigner
from exporter.state.recipients import Recipient, Recipients, Unauthenticated
from hooks.models import validation_message
from exporter.sharing.catalog import Catalog
from exporter.sharing.refusals import SharingError, invalid
from exporter.sharing.lines import changes_lines, encode_lines, metadata_lines, query_lines, range_protocol, response_format

log = logging.getLogger("lakefs_delta.sharing")
NDJSON = "application/x-ndjson; charset=utf-8"
VERSION_HEADER = "Delta-Table-Version"
CAPABILITIES_HEADER = "delta-sharing-capabilities"
MAX_RESULTS = 500


def create_sharing_app(config: Config) -> FastAPI:
    recipients = Recipients(config.redis)
    lakefs = LakeFS(config.lakefs)
    app = FastAPI(title="lakefs-delta-exporter Delta Sharing", docs_url=None, redoc_url=None,
                  description="Delta Sharing protocol server over lakeFS branch tables and tag exports.")

    def protocol_error(status: int, code: str, message: str) -> JSONResponse:
        return JSONResponse({"errorCode": code, "message": message}, status_code=status)

    @app.exception_handler(SharingError)
    async def _sharing(request: Request, exc: SharingError) -> Response:
        if exc.status >= 500:
            log.error("sharing %s %s failed: %s", request.method, request.url.path, exc)
        return protocol_error(exc.status, exc.error_code, str(exc))

    @app.exception_handler(Unauthenticated)
    async def _unauthenticated(request: Request, exc: Unauthenticated) -> Response:
        return protocol_error(401, "UNAUTHENTICATED", str(exc))

    @app.exception_handler(ExporterError)
    async def _exporter(request: Request, exc: ExporterError) -> Response:
        if isinstance(exc, NotFound):
            return protocol_error(404, "RESOURCE_DOES_NOT_EXIST", str(exc))
        log.error("sharing %s %s failed: %s", request.method, request.url.path, exc)
        return protocol_error(500 if exc.permanent else 503, "INTERNAL_ERROR",
                              "the table cannot be read now" if exc.permanent else "a service this server needs "
                              "(lakeFS, the object store) cannot be reached: try again")

    @app.exception_handler(redis.RedisError)
    async def _redis(request: Request, exc: redis.RedisError) -> Response:
        return protocol_error(503, "INTERNAL_ERROR", "the recipient store cannot be reached: try again")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("sharing %s %s failed", request.method, request.url.path)
        return protocol_error(500, "INTERNAL_ERROR", "the server failed to answer; its log says why")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        return protocol_error(400, "INVALID_PARAMETER_VALUE", validation_message(exc.errors()))

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        code = {404: "RESOURCE_DOES_NOT_EXIST", 405: "MALFORMED_REQUEST"}.get(exc.status_code, "MALFORMED_REQUEST")
        return protocol_error(exc.status_code, code, str(exc.detail))

    async def catalog_of(request: Request) -> Catalog:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("missing bearer token (header Authorization: Bearer <token>)")
        recipient: Recipient = await run_in_threadpool(recipients.authenticate, token.strip())
        return Catalog(config, lakefs, recipient.shares)

    # ------------------------------------------------------------ shares, schemas, tables

    @app.get("/shares")
    async def list_shares(request: Request, maxResults: int = Query(MAX_RESULTS, ge=0),
                          pageToken: str | None = None):
        catalog = await catalog_of(request)
        return page([{"name": share.name} for share in catalog.shares()], maxResults, pageToken)

    @app.get("/shares/{share}")
    async def get_share(request: Request, share: str):
        catalog = await catalog_of(request)
        return {"share": {"name": catalog.share(share).name}}

    @app.get("/shares/{share}/schemas")
    async def list_schemas(request: Request, share: str, maxResults: int = Query(MAX_RESULTS, ge=0),
                           pageToken: str | None = None):
        catalog = await catalog_of(request)
        offered = catalog.share(share)
        schemas = await run_in_threadpool(catalog.schemas, offered)
        return page([{"name": schema.name, "share": offered.name} for schema in schemas], maxResults, pageToken)

    @app.get("/shares/{share}/schemas/{schema}/tables")
    async def list_tables(request: Request, share: str, schema: str, maxResults: int = Query(MAX_RESULTS, ge=0),
                          pageToken: str | None = None):
        catalog = await catalog_of(request)
        offered = catalog.share(share)

        def tables() -> list[dict]:
            found = catalog.schema(offered, schema)
            return [{"name": name, "schema": found.name, "share": offered.name}
                    for name in catalog.tables(offered, found)]
        return page(await run_in_threadpool(tables), maxResults, pageToken)

    @app.get("/shares/{share}/all-tables")
    async def list_all_tables(request: Request, share: str, maxResults: int = Query(MAX_RESULTS, ge=0),
                              pageToken: str | None = None):
        catalog = await catalog_of(request)
        offered = catalog.share(share)

        def tables() -> list[dict]:
            return [{"name": name, "schema": schema.name, "share": offered.name}
                    for schema in catalog.schemas(offered) for name in catalog.tables(offered, schema)]
        return page(await run_in_threadpool(tables), maxResults, pageToken)

    # ------------------------------------------------------------ one table

    table_path = "/shares/{share}/schemas/{schema}/tables/{table}"

    @app.get(table_path + "/version")
    async def table_version(request: Request, share: str, schema: str, table: str,
                            startingTimestamp: str | None = None):
        catalog = await catalog_of(request)

        def version() -> int:
            shared = catalog.table(share, schema, table)
            if startingTimestamp is None:
                return shared.head_version
            return shared.version_at(startingTimestamp, at_or_after=True)
        return Response(status_code=200, headers={VERSION_HEADER: str(await run_in_threadpool(version))})

    @app.get(table_path + "/metadata")
    async def table_metadata(request: Request, share: str, schema: str, table: str,
                             version: int | None = Query(None, ge=0), timestamp: str | None = None,
                             capabilities: str | None = Header(None, alias=CAPABILITIES_HEADER)):
        catalog = await catalog_of(request)
        if version is not None and timestamp is not None:
            raise invalid("version and timestamp cannot both be given")

        def answer() -> tuple[int, str, bytes]:
            shared = catalog.table(share, schema, table)
            at = shared.version_at(timestamp, at_or_after=False) if timestamp is not None else version
            snapshot = shared.snapshot(at)
            fmt = response_format(capabilities, snapshot.protocol)
            return snapshot.version, fmt, b"".join(encode_lines(metadata_lines(snapshot, fmt)))
        at, fmt, body = await run_in_threadpool(answer)
        return Response(body, media_type=NDJSON, headers=_headers(at, fmt))

    @app.post(table_path + "/query")
    async def query_table(request: Request, share: str, schema: str, table: str,
                          capabilities: str | None = Header(None, alias=CAPABILITIES_HEADER)):
        catalog = await catalog_of(request)
        body = await _query_body(request)
        version, timestamp = body.get("version"), body.get("timestamp")
        starting, ending = body.get("startingVersion"), body.get("endingVersion")
        if sum(value is not None for value in (version, timestamp, starting)) > 1:
            raise invalid("version, timestamp and startingVersion are mutually exclusive")
        presigner = Presigner(config, config.sharing.url_lifetime_seconds)

        def answer():
            shared = catalog.table(share, schema, table)
            if starting is not None:  # a streaming client's data change files since `starting`
                end = shared.head_version if ending is None else min(ending, shared.head_version)
                _check_range(starting, end, shared.head_version)
                shared.check_commits(starting, end)
                first = shared.snapshot(starting)
                protocol = range_protocol(shared, first, end)
                fmt = response_format(capabilities, protocol)
                return starting, fmt, changes_lines(shared, first, end, fmt, presigner, historical_metadata=True,
                                                    change_files=False, protocol=protocol)
            at = shared.version_at(timestamp, at_or_after=False) if timestamp is not None else version
            snapshot = shared.snapshot(at)
            fmt = response_format(capabilities, snapshot.protocol)
            return snapshot.version, fmt, query_lines(snapshot, fmt, presigner, versioned=at is not None)
        return await streamed(answer)

    async def streamed(answer) -> StreamingResponse:
        """The answer's protocol and metadata lines are made before the status is sent, so a refusal
        is still an HTTP error; an error after that (an object the table may not expose, the store
        gone) can only break the connection, which clients take as a failed read, never a table."""
        def first_lines():
            version, fmt, lines = answer()
            return version, fmt, lines, [next(lines), next(lines)]
        version, fmt, lines, first = await run_in_threadpool(first_lines)

        def all_lines():
            yield from first
            try:
                yield from lines
            except Exception as exc:
                log.error("sharing answer broken off after its status was sent: %s", exc)
                raise
        return StreamingResponse(encode_lines(all_lines()), media_type=NDJSON, headers=_headers(version, fmt))

    @app.get(table_path + "/changes")
    async def table_changes(request: Request, share: str, schema: str, table: str,
                            startingVersion: int | None = Query(None, ge=0), startingTimestamp: str | None = None,
                            endingVersion: int | None = Query(None, ge=0), endingTimestamp: str | None = None,
                            includeHistoricalMetadata: bool = False,
                            capabilities: str | None = Header(None, alias=CAPABILITIES_HEADER)):
        catalog = await catalog_of(request)
        if (startingVersion is None) == (startingTimestamp is None):
            raise invalid("give exactly one of startingVersion and startingTimestamp")
        if endingVersion is not None and endingTimestamp is not None:
            raise invalid("give at most one of endingVersion and endingTimestamp")
        presigner = Presigner(config, config.sharing.url_lifetime_seconds)

        def answer():
            shared = catalog.table(share, schema, table)
            start = startingVersion if startingVersion is not None else \
                shared.version_at(startingTimestamp, at_or_after=True)
            end = endingVersion if endingVersion is not None else \
                shared.version_at(endingTimestamp, at_or_after=False) if endingTimestamp is not None else \
                shared.head_version
            _check_range(start, end, shared.head_version)
            shared.check_commits(start, end)
            first = shared.snapshot(start)
            protocol = range_protocol(shared, first, end)
            fmt = response_format(capabilities, protocol)
            return start, fmt, changes_lines(shared, first, end, fmt, presigner,
                                             historical_metadata=includeHistoricalMetadata, protocol=protocol)
        return await streamed(answer)

    return app


def _headers(version: int, fmt: str) -> dict[str, str]:
    return {VERSION_HEADER: str(version), CAPABILITIES_HEADER: f"responseformat={fmt}"}


def _check_range(start: int, end: int, head: int) -> None:
    if start > head:
        raise invalid(f"starting version {start} is after the table's newest version {head}")
    if end < start:
        raise invalid(f"ending version {end} is before starting version {start}")
    if end > head:
        raise invalid(f"ending version {end} is after the table's newest version {head}")


async def _query_body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if len(raw) > 1024 * 1024:
        raise invalid("request body larger than 1 MiB")
    try:
        body = json.loads(raw) if raw.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SharingError(400, "MALFORMED_REQUEST", f"request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise SharingError(400, "MALFORMED_REQUEST", "request body must be a JSON object")
    for key in ("version", "startingVersion", "endingVersion", "limitHint"):
        value = body.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise invalid(f"{key} must be a non-negative integer, not {value!r}")
    if body.get("timestamp") is not None and not isinstance(body["timestamp"], str):
        raise invalid("timestamp must be a string in ISO 8601 format")
    return body


def page(items: list[dict], max_results: int, page_token: str | None) -> dict:
    """A page of `items` (sorted by name): after the name the token holds, at most `max_results`."""
    after = ""
    if page_token:
        try:
            after = base64.urlsafe_b64decode(page_token.encode()).decode()
        except ValueError:
            raise invalid("pageToken is not one this server issued") from None
    remaining = [item for item in items if _key(item) > after]
    chosen = remaining[:max_results]
    answer: dict[str, Any] = {"items": chosen}
    if len(remaining) > len(chosen):
        last = _key(chosen[-1]) if chosen else after
        answer["nextPageToken"] = base64.urlsafe_b64encode(last.encode()).decode()
    return answer


def _key(item: dict) -> str:
    return f"{item.get('schema', '')}\0{item['name']}"
