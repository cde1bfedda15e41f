"""The Delta Sharing app's one mapping of errors to answers: an HTTP status and the protocol's
`errorCode`, in the protocol's body `{"errorCode": ..., "message": ...}`."""

from __future__ import annotations

import logging

import redis
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from exporter.errors import (ExporterError, InvalidParameter, NotFound, NotShared, PathOutsideRepository, ShareNotFound,
                             UnshareableTable, UnsupportedByClient, VersionOutOfRange)
from exporter.state.recipients import Unauthenticated
from hooks.models import validation_message

log = logging.getLogger("lakefs_delta.sharing")


class MalformedRequest(Exception):
    """A request body the protocol cannot take (not JSON, not an object)."""


# (status, errorCode, message): None is the error's own message. The most specific class wins.
ANSWERS: dict[type[BaseException], tuple[int, str, str | None]] = {
    Unauthenticated: (401, "UNAUTHENTICATED", None),
    NotShared: (403, "PERMISSION_DENIED", None),
    ShareNotFound: (404, "RESOURCE_DOES_NOT_EXIST", None),
    NotFound: (404, "RESOURCE_DOES_NOT_EXIST", None),
    VersionOutOfRange: (400, "INVALID_PARAMETER_VALUE", None),
    InvalidParameter: (400, "INVALID_PARAMETER_VALUE", None),
    RequestValidationError: (400, "INVALID_PARAMETER_VALUE", None),
    MalformedRequest: (400, "MALFORMED_REQUEST", None),
    UnsupportedByClient: (400, "UNSUPPORTED_OPERATION", None),
    UnshareableTable: (500, "INTERNAL_ERROR", None),
    PathOutsideRepository: (500, "INTERNAL_ERROR", None),  # its log names an object it may not: not the recipient's doing
    ExporterError: (500, "INTERNAL_ERROR", "the table cannot be read now"),
    redis.RedisError: (503, "INTERNAL_ERROR", "the recipient store cannot be reached: try again"),
    Exception: (500, "INTERNAL_ERROR", "the server failed to answer; its log says why"),
}
# a transient library error (`permanent = False`): worth a retry
TRANSIENT = (503, "INTERNAL_ERROR",
             "a service this server needs (lakeFS, the object store) cannot be reached: try again")
HTTP_CODES = {404: "RESOURCE_DOES_NOT_EXIST"}  # routing's own refusals: no such path; else (a wrong method) MALFORMED_REQUEST


def answer_of(exc: BaseException) -> tuple[int, str, str]:
    """(HTTP status, errorCode, message) for an error."""
    if isinstance(exc, HTTPException):
        return exc.status_code, HTTP_CODES.get(exc.status_code, "MALFORMED_REQUEST"), str(exc.detail)
    if isinstance(exc, ExporterError) and not exc.permanent and not isinstance(exc, Unauthenticated):
        return TRANSIENT
    status, code, message = ANSWERS[_matched(exc)]
    if isinstance(exc, RequestValidationError):
        message = validation_message(exc.errors())
    return status, code, str(exc) if message is None else message


def _matched(exc: BaseException) -> type[BaseException]:
    return next(cls for cls in type(exc).__mro__ if cls in ANSWERS)


async def _answer(request: Request, exc: Exception) -> Response:
    status, code, message = answer_of(exc)
    if not isinstance(exc, HTTPException) and _matched(exc) is Exception:
        log.exception("sharing %s %s failed", request.method, request.url.path, exc_info=exc)
    elif status >= 500 and not isinstance(exc, redis.RedisError):
        log.error("sharing %s %s failed: %s", request.method, request.url.path, exc)
    return JSONResponse({"errorCode": code, "message": message}, status_code=status)


def install(app: FastAPI) -> None:
    for error in (*ANSWERS, HTTPException):
        app.add_exception_handler(error, _answer)
