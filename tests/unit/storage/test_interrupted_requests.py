"""An exception raised into an object-store request (a task's soft time limit, raised by a signal
handler) ends the request at once: botocore used to wrap it as a connection error and retry, so the
task ran on to its hard time limit and the worker was killed."""

from __future__ import annotations

import signal
import socket
import threading
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
    black_hole = socket.socket()  # accepts connections, reads the request, never answers
    black_hole.bind(("127.0.0.1", 0))
    black_hole.listen(8)
    main = threading.main_thread().ident
    attempts: list[socket.socket] = []

    def signal_once_asked() -> None:
        """The time limit, sent to the thread making the request once the request has arrived (a
        process-wide timer may be taken by another thread: pytest-xdist's has its own, and then no
        request is interrupted; the exporter's own pools block these signals, `exporter.threads`).
        Every later connection is counted: a retry would make one."""
        try:
            while True:
                connection, _ = black_hole.accept()
                attempts.append(connection)
                if len(attempts) == 1:
                    connection.recv(65536)
                    signal.pthread_kill(main, signal.SIGALRM)
        except OSError:  # closed at the end
            pass

    def time_limit(*_):
        raise SoftTimeLimit()

    get = client(f"http://127.0.0.1:{black_hole.getsockname()[1]}")
    previous = signal.signal(signal.SIGALRM, time_limit)
    threading.Thread(target=signal_once_asked, daemon=True).start()
    started = time.monotonic()
    try:
        with pytest.raises(SoftTimeLimit):
            get()
    finally:
        signal.signal(signal.SIGALRM, previous)
        took = time.monotonic() - started
        black_hole.shutdown(socket.SHUT_RDWR)  # wakes the accept
        black_hole.close()
        for connection in attempts:
            connection.close()
    assert len(attempts) == 1, attempts  # not retried
    # At once, but for one case: a signal that lands just before the request starts waiting for its
    # answer is handled when that wait ends, at the read timeout (30 s), as CPython checks for signals
    # before it blocks. Met once in a CI run, once in 64 runs beside one; three attempts would take 90 s.
    assert took < 30 + 5, took


def test_the_request_threads_leave_the_time_limit_signals_to_the_main_thread():
    from exporter.threads import TIME_LIMIT_SIGNALS, io_pool

    with io_pool(2) as pool:
        blocked = pool.submit(signal.pthread_sigmask, signal.SIG_BLOCK, []).result()
    assert TIME_LIMIT_SIGNALS <= set(blocked)
