"""The API's one mapping of errors to HTTP answers (`{"error": <message>}`): the library's errors
and Redis's by class, and the refusals the routes make themselves (`Refusal`)."""

from __future__ import annotations

import redis
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from exporter.errors import BadRequest, ExporterError, NotFound
from hooks.models import Problem, validation_message


class Refusal(Exception):
    """An answer other than success that a route decides: its status and message (and headers)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


def unauthenticated(message: str) -> Refusal:
    return Refusal(401, message, {"WWW-Authenticate": 'Basic realm="lakeFS"'})


# The most specific class wins. A library error is the caller's (422) unless it is transient
# (`permanent = False`: a service cannot be reached, a retry may succeed), which is 503.
STATUS: dict[type[BaseException], int] = {
    NotFound: 404,
    BadRequest: 400,  # lakeFS's 400 is the caller's: an invalid repository or ref name
    ExporterError: 422,
    redis.RedisError: 503,
    RequestValidationError: 400,
}


def answer_of(exc: BaseException) -> tuple[int, str, dict[str, str]]:
    """(HTTP status, message, headers) for an error."""
    if isinstance(exc, Refusal):
        return exc.status, str(exc), exc.headers
    if isinstance(exc, HTTPException):
        return exc.status_code, str(exc.detail), dict(exc.headers or {})
    if isinstance(exc, redis.RedisError):
        return STATUS[redis.RedisError], f"Redis cannot be reached: {type(exc).__name__}", {}
    if isinstance(exc, RequestValidationError):
        return STATUS[RequestValidationError], validation_message(exc.errors()), {}
    if isinstance(exc, ExporterError) and not exc.permanent:
        return 503, str(exc), {}
    return next(STATUS[cls] for cls in type(exc).__mro__ if cls in STATUS), str(exc), {}


async def _answer(request: Request, exc: Exception) -> Response:
    status, message, headers = answer_of(exc)
    if request.headers.get("x-requested-with"):  # the page: its own sign-in form, not the browser's dialog
        headers = {k: v for k, v in headers.items() if k.lower() != "www-authenticate"}
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    for error in (Refusal, HTTPException, *STATUS):
        app.add_exception_handler(error, _answer)


def problems(*statuses: int) -> dict:
    """OpenAPI `responses` entries for error answers."""
    return {status: {"model": Problem, "description": _MEANING[status]} for status in statuses}


_MEANING = {400: "bad input (the message says which)", 401: "no credentials, or lakeFS does not accept them",
            403: "the caller may not read this repository (lakeFS's decision, or the service token's list)",
            404: "no such repository, ref, table or path",
            413: "body over its route's limit (`hooks.edge`: the webhook's 1 MiB, else 64 KiB)",
            415: "not application/json",
            422: "a required field is missing or invalid, or the table cannot be read",
            503: "a service this one needs (lakeFS, Redis, the object store) cannot be reached"}
