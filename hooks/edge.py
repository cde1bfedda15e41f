"""The service's edge: what every request is checked for before any handler reads it. Its body's
size (from `Content-Length`, or counted as it streams, never buffered past its route's limit), its
JSON's nesting depth, and the lakeFS commit ids in its path (`CommitId`). A refusal is answered in
the error format of the app the path belongs to (the API's, Delta Sharing's, the Iceberg spec's)."""

from __future__ import annotations

import re
from typing import Annotated

import numpy as np
from fastapi import FastAPI, Path
from pydantic import AfterValidator
from pydantic_core import PydanticCustomError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from exporter.lakefs.client import COMMIT_ID

KiB, MiB = 1024, 1024 * 1024
BODY_LIMIT = 64 * KiB  # every route but those below: sign-in, the Iceberg signer and catalog, the API
LARGER_BODIES = (  # (path, limit): routes whose bodies are larger by nature
    (re.compile(r"/webhooks/lakefs(/checks)?"), 1 * MiB),  # lakeFS's event: a commit's message and metadata
    (re.compile(r"/delta-sharing/shares/[^/]+/schemas/.+/tables/[^/]+/query"), 1 * MiB),  # predicate hints
)
JSON_DEPTH = 64  # arrays and objects inside each other; Python's parser recurses on each
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # escapes included: `\"` goes on
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))


def body_limit(path: str) -> int:
    """The most bytes a request body to `path` may hold."""
    return next((limit for route, limit in LARGER_BODIES if route.fullmatch(path)), BODY_LIMIT)


def nested_too_deep(body: bytes) -> bool:
    """Whether `body` nests arrays and objects deeper than `JSON_DEPTH`, brackets inside strings left
    out; in C and numpy (a Python loop over a 1 MiB body of `[]` held the event loop 0.3 s)."""
    if body.count(b"[") + body.count(b"{") <= JSON_DEPTH:  # most bodies: fewer brackets than the limit
        return False
    brackets = np.frombuffer(_JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS), np.uint8)
    depths = np.cumsum(np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1))
    return int(depths.max(initial=0)) > JSON_DEPTH


def _commit_id(value: str) -> str:
    if not COMMIT_ID.fullmatch(value):
        raise PydanticCustomError("commit_id", "{value} is not a lakeFS commit id (64 lowercase hex digits)",
                                  {"value": repr(value[:80])})
    return value


# A path parameter naming a commit by its id: refused with 400 before the route runs.
CommitId = Annotated[str, Path(description="a lakeFS commit id: 64 lowercase hex digits",
                               json_schema_extra={"pattern": f"^{COMMIT_ID.pattern}$"}), AfterValidator(_commit_id)]


class Refused(Exception):
    """A request the edge answers itself: its status and message, in the format of the path's app."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Edge:
    """Pure ASGI, around the whole service (the mounted apps too): a body is read here, up to its
    route's limit, checked, and handed on whole; a handler never reads more than the limit."""

    def __init__(self, app: ASGIApp, apps: dict[str, FastAPI]):
        self.app = app
        # path prefix -> the app answering there (its own error format); the longest prefix first
        self.apps = sorted(apps.items(), key=lambda item: -len(item[0]))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        try:
            body = await _read(scope, receive, body_limit(scope["path"]))
        except Refused as refused:
            await self._refuse(scope, receive, send, refused)
            return
        if body is None:  # the client went away
            return
        await self.app(scope, _replay(body, receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, refused: Refused) -> None:
        path = scope["path"]
        app = next(app for prefix, app in self.apps if path == prefix or path.startswith(prefix.rstrip("/") + "/"))
        answer = app.exception_handlers[HTTPException]  # the app's one mapping of errors to answers
        response = await answer(Request(scope), HTTPException(refused.status, str(refused)))
        await response(scope, receive, send)


def _has_body(scope: Scope) -> bool:
    headers = dict(scope["headers"])
    return b"transfer-encoding" in headers or headers.get(b"content-length", b"0") != b"0"


async def _read(scope: Scope, receive: Receive, limit: int) -> bytes | None:
    """The whole body, or `Refused`: at once when its `Content-Length` is above `limit`, else as soon
    as the bytes received pass it; then its JSON depth. None when the client disconnects."""
    declared = dict(scope["headers"]).get(b"content-length")
    if declared is not None and not declared.isdigit():
        raise Refused(400, f"Content-Length {declared[:40]!r} is not a number of bytes")
    if declared is not None and int(declared) > limit:
        raise Refused(413, f"request body larger than {limit} bytes")
    received = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        if len(received) + len(chunk) > limit:
            raise Refused(413, f"request body larger than {limit} bytes")
        received += chunk
        if not message.get("more_body", False):
            break
    body = bytes(received)
    if nested_too_deep(body):  # every body this service takes is JSON
        raise Refused(400, f"request body nests arrays and objects deeper than {JSON_DEPTH} levels")
    return body


def _replay(body: bytes, receive: Receive) -> Receive:
    """`receive` for the app: the body read, in one message; then the server's own (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()
    return replayed
