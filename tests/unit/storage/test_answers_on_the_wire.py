"""Answers as a server writes them on the socket, read by the kept connections' own HTTP/1.1
reading (`exporter.storage.requests._exchange`): every way a body is delimited, interim answers,
a connection the server ends, and answers that are no HTTP."""

from __future__ import annotations

import http.client
import socket
import threading

import pytest

from exporter.storage.requests import Connections

pytestmark = pytest.mark.unit


class _Wire:
    """A server that reads each request's head (and a Content-Length body) and writes the next of
    `answers` as raw bytes; an answer ending in CLOSE ends the connection after it. It records
    each request's head and body."""

    CLOSE = b"<close>"

    def __init__(self, answers: list[bytes]):
        self.answers, self.requests, self.connections = list(answers), [], 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.listener.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._converse, args=(sock,), daemon=True).start()

    def _converse(self, sock: socket.socket) -> None:
        reader = sock.makefile("rb")
        with sock, reader:
            while self.answers:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    line = reader.readline()
                    if not line:
                        return
                    head += line
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append((head.decode(), reader.read(length)))
                answer = self.answers.pop(0)
                sock.sendall(answer.removesuffix(self.CLOSE))
                if answer.endswith(self.CLOSE):
                    return


def _connections(wire: _Wire) -> Connections:
    return Connections(wire.origin, None, 2, 2)


@pytest.mark.parametrize("answer,body", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Many: 1\r\nX-Many: 2\r\n\r\nhello", b"hello"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n",
     b"hello world"),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", b"ok"),
    (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
])
def test_a_body_is_read_as_its_answer_delimits_it_and_the_connection_is_kept(answer, body):
    wire = _Wire([answer, b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext"])
    connections = _connections(wire)

    assert connections.request("GET", "/a", None, {}).data == body
    assert connections.request("GET", "/b", None, {}).data == b"next"
    assert wire.connections == 1  # the first answer left the connection ready for the next


def test_a_head_answer_has_no_body_whatever_its_length_says():
    wire = _Wire([b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"])
    connections = _connections(wire)

    assert connections.request("HEAD", "/a", None, {}).data == b""
    assert connections.request("GET", "/a", None, {}).data == b"x" and wire.connections == 1


@pytest.mark.parametrize("answer", [
    b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
    b"HTTP/1.0 200 OK\r\n\r\nok" + _Wire.CLOSE,  # no length: the body is what comes until the connection ends
])
def test_an_answer_that_ends_its_connection_is_read_whole_and_the_next_request_gets_a_new_one(answer):
    wire = _Wire([answer, b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nz"])
    connections = _connections(wire)

    assert connections.request("GET", "/a", None, {}).data == b"ok"
    assert connections.request("GET", "/b", None, {}).data == b"z" and wire.connections == 2


def test_a_request_is_written_with_its_host_its_headers_and_its_bodys_length():
    wire = _Wire([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"] * 3)
    connections = _connections(wire)

    connections.request("PUT", "/bucket/k?x=1", b"body", {"x-amz-date": "20261203T000000Z"})
    connections.request("PUT", "/bucket/copy", None, {"Host": "named.example"})  # a copy: no body, length 0
    connections.request("GET", "/bucket/k", None, {})

    host = wire.origin.removeprefix("http://")
    assert wire.requests == [
        (f"PUT /bucket/k?x=1 HTTP/1.1\r\nHost: {host}\r\nx-amz-date: 20261203T000000Z\r\nContent-Length: 4\r\n\r\n", b"body"),
        ("PUT /bucket/copy HTTP/1.1\r\nHost: named.example\r\nContent-Length: 0\r\n\r\n", b""),
        (f"GET /bucket/k HTTP/1.1\r\nHost: {host}\r\n\r\n", b"")]


@pytest.mark.parametrize("answer,error", [
    (b"SSH-2.0-OpenSSH\r\n\r\n" + _Wire.CLOSE, http.client.BadStatusLine),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort" + _Wire.CLOSE, http.client.IncompleteRead),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel" + _Wire.CLOSE, http.client.IncompleteRead),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + _Wire.CLOSE, http.client.HTTPException),
    (b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n" + _Wire.CLOSE, http.client.HTTPException),
    (_Wire.CLOSE, http.client.RemoteDisconnected),
])
def test_an_answer_that_is_no_http_or_ends_early_raises_a_connection_error_never_a_short_body(answer, error):
    wire = _Wire([answer])

    with pytest.raises(error):
        _connections(wire).request("GET", "/a", None, {})
