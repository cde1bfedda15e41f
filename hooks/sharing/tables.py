"""Delta Sharing: one table's version, metadata, query and changes, as newline-delimited JSON."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import APIRouter, Header, Query
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from exporter.errors import InvalidParameter, VersionOutOfRange
from exporter.sharing.lines import (STREAM, Feed, changes_lines, encode_lines, metadata_lines, query_lines,
                                    range_protocol, response_format)
from hooks.sharing.deps import catalog_of, chunks, in_thread, services
from hooks.sharing.errors import MalformedRequest

log = logging.getLogger("lakefs_delta.sharing")
NDJSON = "application/x-ndjson; charset=utf-8"
VERSION_HEADER = "Delta-Table-Version"
CAPABILITIES_HEADER = "delta-sharing-capabilities"
TABLE = "/shares/{share}/schemas/{schema}/tables/{table}"
router = APIRouter()


@router.get(TABLE + "/version")
async def table_version(request: Request, share: str, schema: str, table: str, startingTimestamp: str | None = None):
    catalog = await catalog_of(request)

    def version() -> int:
        shared = catalog.table(share, schema, table)
        if startingTimestamp is None:
            return shared.head_version
        return shared.version_at(startingTimestamp, at_or_after=True)
    return Response(status_code=200, headers={VERSION_HEADER: str(await in_thread(request, version))})


@router.get(TABLE + "/metadata")
async def table_metadata(request: Request, share: str, schema: str, table: str,
                         version: int | None = Query(None, ge=0), timestamp: str | None = None,
                         capabilities: str | None = Header(None, alias=CAPABILITIES_HEADER)):
    catalog = await catalog_of(request)
    if version is not None and timestamp is not None:
        raise InvalidParameter("version and timestamp cannot both be given")

    def answer() -> tuple[int, str, bytes]:
        shared = catalog.table(share, schema, table)
        at = shared.version_at(timestamp, at_or_after=False) if timestamp is not None else version
        snapshot = shared.snapshot(at)
        fmt = response_format(capabilities, snapshot.protocol)
        return snapshot.version, fmt, b"".join(encode_lines(metadata_lines(snapshot, fmt)))
    at, fmt, body = await in_thread(request, answer)
    return Response(body, media_type=NDJSON, headers=_headers(at, fmt))


@router.post(TABLE + "/query")
async def query_table(request: Request, share: str, schema: str, table: str,
                      capabilities: str | None = Header(None, alias=CAPABILITIES_HEADER)):
    catalog = await catalog_of(request)
    body = await _query_body(request)
    version, timestamp = body.get("version"), body.get("timestamp")
    starting, ending = body.get("startingVersion"), body.get("endingVersion")
    if sum(value is not None for value in (version, timestamp, starting)) > 1:
        raise InvalidParameter("version, timestamp and startingVersion are mutually exclusive")
    presigner = services(request).presigner()

    def answer():
        shared = catalog.table(share, schema, table)
        if starting is not None:  # a streaming client's data change files since `starting`
            end = shared.head_version if ending is None else min(ending, shared.head_version)
            _check_range(starting, end, shared.head_version)
            shared.check_commits(starting, end)
            first = shared.snapshot(starting)
            protocol = range_protocol(shared, first, end)
            fmt = response_format(capabilities, protocol)
            return starting, fmt, changes_lines(shared, first, end, fmt, presigner, STREAM, protocol)
        at = shared.version_at(timestamp, at_or_after=False) if timestamp is not None else version
        snapshot = shared.snapshot(at)
        fmt = response_format(capabilities, snapshot.protocol)
        return snapshot.version, fmt, query_lines(snapshot, fmt, presigner, versioned=at is not None)
    return await _streamed(request, answer)


@router.get(TABLE + "/changes")
async def table_changes(request: Request, share: str, schema: str, table: str,
                        startingVersion: int | None = Query(None, ge=0), startingTimestamp: str | None = None,
                        endingVersion: int | None = Query(None, ge=0), endingTimestamp: str | None = None,
                        includeHistoricalMetadata: bool = False,
                        capabilities: str | None = Header(None, alias=CAPABILITIES_HEADER)):
    catalog = await catalog_of(request)
    if (startingVersion is None) == (startingTimestamp is None):
        raise InvalidParameter("give exactly one of startingVersion and startingTimestamp")
    if endingVersion is not None and endingTimestamp is not None:
        raise InvalidParameter("give at most one of endingVersion and endingTimestamp")
    presigner = services(request).presigner()

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
                                         Feed(historical_metadata=includeHistoricalMetadata), protocol)
    return await _streamed(request, answer)


async def _streamed(request: Request, answer) -> StreamingResponse:
    """The answer's protocol and metadata lines are made before the status is sent, so a refusal
    is still an HTTP error; an error after that (an object the table may not expose, the store
    gone) can only break the connection, which clients take as a failed read, never a table."""
    def first_lines():
        version, fmt, lines = answer()
        return version, fmt, lines, [next(lines), next(lines)]
    version, fmt, lines, first = await in_thread(request, first_lines)

    def all_lines():
        yield from first
        try:
            yield from lines
        except Exception as exc:
            log.error("sharing answer broken off after its status was sent: %s", exc)
            raise
    return StreamingResponse(chunks(request, encode_lines(all_lines())), media_type=NDJSON,
                             headers=_headers(version, fmt))


def _headers(version: int, fmt: str) -> dict[str, str]:
    return {VERSION_HEADER: str(version), CAPABILITIES_HEADER: f"responseformat={fmt}"}


def _check_range(start: int, end: int, head: int) -> None:
    if start > head:
        raise VersionOutOfRange(f"starting version {start} is after the table's newest version {head}")
    if end < start:
        raise VersionOutOfRange(f"ending version {end} is before starting version {start}")
    if end > head:
        raise VersionOutOfRange(f"ending version {end} is after the table's newest version {head}")


async def _query_body(request: Request) -> dict[str, Any]:
    raw = await request.body()  # its size and depth checked at the edge (`hooks.edge`)
    try:
        body = json.loads(raw) if raw.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedRequest(f"request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise MalformedRequest("request body must be a JSON object")
    for key in ("version", "startingVersion", "endingVersion", "limitHint"):
        value = body.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise InvalidParameter(f"{key} must be a non-negative integer, not {value!r}")
    if body.get("timestamp") is not None and not isinstance(body["timestamp"], str):
        raise InvalidParameter("timestamp must be a string in ISO 8601 format")
    return body
