"""The catalog's one mapping of errors to answers: an HTTP status and the spec's error `type`, in
the spec's body `{"error": {"message": ..., "type": ..., "code": ...}}` (its IcebergErrorResponse)."""

from __future__ import annotations

import logging

import redis
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from exporter.errors import (BadRequest, CredentialsNotVended, ExporterError, NoSuchIcebergTable, NoSuchNamespace,
                             NotFound, SignatureRefused)
from hooks.errors import Refusal
from hooks.models import validation_message

log = logging.getLogger("lakefs_delta.iceberg")


class ReadOnly(Exception):
    """A write the spec defines (create, commit, drop, rename, register): this catalog has none."""


# (status, type): the most specific class wins; a refusal of the API's (`Refusal`) keeps its status
ANSWERS: dict[type[BaseException], tuple[int, str]] = {
    NoSuchNamespace: (404, "NoSuchNamespaceException"),
    NoSuchIcebergTable: (404, "NoSuchTableException"),
    NotFound: (404, "NotFoundException"),
    SignatureRefused: (403, "ForbiddenException"),
    CredentialsNotVended: (403, "ForbiddenException"),
    BadRequest: (400, "BadRequestException"),
    RequestValidationError: (400, "BadRequestException"),
    ReadOnly: (406, "UnsupportedOperationException"),
    ExporterError: (422, "UnprocessableEntityException"),  # the table cannot be read as it is
    redis.RedisError: (503, "ServiceUnavailableException"),
    Exception: (500, "InternalServerError"),
}
TRANSIENT = (503, "ServiceUnavailableException")  # a library error worth a retry (`permanent = False`)
# the grant's refusals (`hooks.grant`) and routing's, by status
BY_STATUS = {400: "BadRequestException", 401: "NotAuthorizedException", 403: "ForbiddenException",
             404: "NoSuchNamespaceException", 405: "MethodNotAllowedException", 503: "ServiceUnavailableException"}


def answer_of(exc: BaseException) -> tuple[int, str, str, dict[str, str]]:
    """(HTTP status, error type, message, headers) for an error."""
    if isinstance(exc, Refusal):
        return exc.status, BY_STATUS.get(exc.status, "RESTException"), str(exc), exc.headers
    if isinstance(exc, HTTPException):
        kind = "NotFoundException" if exc.status_code == 404 else BY_STATUS.get(exc.status_code, "RESTException")
        return exc.status_code, kind, str(exc.detail), dict(exc.headers or {})
    if isinstance(exc, ExporterError) and not exc.permanent:
        return (*TRANSIENT, str(exc), {})
    matched = next(cls for cls in type(exc).__mro__ if cls in ANSWERS)
    status, kind = ANSWERS[matched]
    if isinstance(exc, RequestValidationError):
        return status, kind, validation_message(exc.errors()), {}
    if matched is Exception:
        return status, kind, "the catalog failed to answer; its log says why", {}
    if isinstance(exc, redis.RedisError):
        return status, kind, f"Redis cannot be reached: {type(exc).__name__}", {}
    return status, kind, str(exc), {}


async def _answer(request: Request, exc: Exception) -> Response:
    status, kind, message, headers = answer_of(exc)
    if status == 500:
        log.exception("iceberg %s %s failed", request.method, request.url.path, exc_info=exc)
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status,
                        headers=headers)


def install(app: FastAPI) -> None:
    for error in (*ANSWERS, Refusal, HTTPException):
        app.add_exception_handler(error, _answer)
