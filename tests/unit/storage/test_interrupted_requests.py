"""An exception raised into an object-store request (a task's soft time limit, raised by a signal
handler) ends the request at once: botocore used to wrap it as a connection error and retry, so the
task ran on to its hard time limit and the worker was killed."""

from __future__ import annotations

import signal
import socket
import time

import pytest

from exporter.storage.objectstore import _client

pytestmark = pytest.mark.unit


class SoftTimeLimit(Exception):
    pass


def test_a_time_limit_raised_into_a_request_is_not_retried():
    black_hole = socket.socket()  # accepts connections, never answers
    black_hole.bind(("127.0.0.1", 0))
    black_hole.listen(8)

    def time_limit(*_):
        raise SoftTimeLimit()

    client = _client(f"http://127.0.0.1:{black_hole.getsockname()[1]}", "us-east-1", "a", "b")  # made before the timer
    previous = signal.signal(signal.SIGALRM, time_limit)
    signal.setitimer(signal.ITIMER_REAL, 0.5)
    started = time.monotonic()
    try:
        with pytest.raises(SoftTimeLimit):
            client.get_object(Bucket="bucket", Key="key")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        black_hole.close()
    assert time.monotonic() - started < 5  # not three attempts of 30 s each
