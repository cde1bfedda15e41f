"""An exception raised into an object-store request (a task's soft time limit, raised by a signal
handler) ends the request at once: botocore used to wrap it as a connection error and retry, so the
task ran on to its hard time limit and the worker was killed."""

from __future__ import annotations

import signal
import socket
import time

import pytest
from botocore.credentials import Credentials

from exporter.storage.objectstore import _client
from exporter.storage.requests import SignedRequests

pytestmark = pytest.mark.unit


class SoftTimeLimit(Exception):
    pass


def boto3_get(endpoint: str):
    client = _client(endpoint, "us-east-1", "a", "b")
    return lambda: client.get_object(Bucket="bucket", Key="key")


def signed_get(endpoint: str):
    requests = SignedRequests(endpoint, "us-east-1", Credentials("a", "b"))
    return lambda: requests.get("bucket", "key")


@pytest.mark.parametrize("client", [boto3_get, signed_get], ids=["boto3", "signed in-process"])
def test_a_time_limit_raised_into_a_request_is_not_retried(client):
    """Both of the object store's clients: boto3's (listings, deletes, multipart uploads) and its own
    signed requests (`exporter.storage.requests`)."""
    black_hole = socket.socket()  # accepts connections, never answers
    black_hole.bind(("127.0.0.1", 0))
    black_hole.listen(8)

    def time_limit(*_):
        raise SoftTimeLimit()

    get = client(f"http://127.0.0.1:{black_hole.getsockname()[1]}")  # made before the timer
    previous = signal.signal(signal.SIGALRM, time_limit)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    started = time.monotonic()
    try:
        with pytest.raises(SoftTimeLimit):
            get()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        black_hole.close()
    assert time.monotonic() - started < 5  # not three attempts of 30 s each
