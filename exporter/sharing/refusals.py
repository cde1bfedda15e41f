"""Refusals a Delta Sharing answer can be: the protocol's error codes.
"""

from __future__ import annotations

from exporter.errors import ExporterError


class SharingError(ExporterError):
    """An answer other than success, in the protocol's terms: HTTP status and `errorCode`."""

    def __init__(self, status: int, error_code: str, message: str):
        super().__init__(message)
        self.status, self.error_code = status, error_code


def not_found(message: str) -> SharingError:
    return SharingError(404, "RESOURCE_DOES_NOT_EXIST", message)


def forbidden(message: str) -> SharingError:
    return SharingError(403, "PERMISSION_DENIED", message)


def invalid(message: str) -> SharingError:
    return SharingError(400, "INVALID_PARAMETER_VALUE", message)


def unsupported(message: str) -> SharingError:
    return SharingError(400, "UNSUPPORTED_OPERATION", message)
