"""A stand-in for lakeFS's authorization answer about object prefixes, in front of the real lakeFS.

lakeFS can deny a user the objects under a prefix (a policy on `arn:lakefs:fs:::repository/<repo>/object/<prefix>*`),
but the stack's lakeFS keeps its users in the ACL server, whose permissions are per repository, with no
prefixes. This proxy answers what lakeFS with such a policy answers, and forwards everything else to the
real lakeFS unchanged: a read of an object (`objects`, `objects/stat`) whose path starts with a prefix
denied to the caller's user is refused as lakeFS refuses it (401 "insufficient permissions"), in
lakeFS's order: what lakeFS refuses before it authorizes (400 for a ref it cannot parse, 401 for
unknown credentials) is lakeFS's own answer, then the policy, then lakeFS's answer (200, 404). Users
are told apart as lakeFS tells them: `GET /api/v1/user` with the caller's own credentials.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import httpx

OBJECT_READS = ("/objects", "/objects/stat")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding", "host"}


class PrefixPolicies:
    """lakeFS's answers with `denied[user] = [(repository, prefix), ...]` added to its policies."""

    def __init__(self, lakefs_endpoint: str, port: int):
        self.upstream = lakefs_endpoint.rstrip("/")
        self.denied: dict[str, list[tuple[str, str]]] = {}
        self.refused: list[tuple[str, str, str]] = []  # (user, repository, path) of every read refused
        self.requests: list[tuple[str, str, str]] = []  # (method, path, authorization) of every request
        self._users: dict[str, str | None] = {}
        self._holds: list[list] = []  # [test on (method, path), seconds, times left]: requests kept waiting
        self.held: list[tuple[str, str]] = []  # (method, path) of every request that matched a hold
        self._client = httpx.Client(timeout=120)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def deny(self, user: str, repository: str, prefixes: Iterable[str]) -> None:
        self.denied.setdefault(user, []).extend((repository, prefix) for prefix in prefixes)

    def hold(self, matches, seconds: float, times: int = 1) -> None:
        """Keep the next `times` requests for which `matches(method, path)` is true waiting `seconds`
        before they go on to lakeFS; every later match is recorded in `held` too."""
        self._holds.append([matches, seconds, times])

    def _wait_if_held(self, method: str, path: str) -> None:
        import time

        for hold in self._holds:
            if hold[0](method, path):
                self.held.append((method, path))
                if hold[2] > 0:
                    hold[2] -= 1
                    time.sleep(hold[1])

    def __enter__(self) -> "PrefixPolicies":
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def user_of(self, authorization: str) -> str | None:
        if authorization not in self._users:
            answer = self._client.get(self.upstream + "/api/v1/user", headers={"Authorization": authorization})
            self._users[authorization] = answer.json()["user"]["id"] if answer.status_code == 200 else None
        return self._users[authorization]

    def refuses(self, method: str, target: str, authorization: str) -> bool:
        parts = urlsplit(target)
        segments = parts.path.split("/")  # ['', 'api', 'v1', 'repositories', repo, 'refs', ref, 'objects', ...]
        if method not in ("GET", "HEAD") or len(segments) < 8 or segments[3] != "repositories" \
                or not any(parts.path.endswith(suffix) and segments[7] == "objects" for suffix in OBJECT_READS):
            return False
        repository = unquote(segments[4])
        path = parse_qs(parts.query).get("path", [""])[0]
        user = self.user_of(authorization) if authorization else None
        refused = any(repository == denied_repository and path.startswith(prefix)
                      for denied_repository, prefix in self.denied.get(user or "", []))
        if refused:
            self.refused.append((user, repository, path))
        return refused

    def _handler(self):
        policies = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_):  # quiet
                pass

            def _any(self):
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                policies.requests.append((self.command, self.path, self.headers.get("authorization", "")))
                policies._wait_if_held(self.command, self.path)
                answer = policies._client.request(
                    self.command, policies.upstream + self.path, content=body or None,
                    headers={k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP})
                if answer.status_code not in (400, 401) and \
                        policies.refuses(self.command, self.path, self.headers.get("authorization", "")):
                    self._send(401, {"content-type": "application/json"},
                               json.dumps({"message": "insufficient permissions"}).encode())
                    return
                self._send(answer.status_code, {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP},
                           answer.content)

            def _send(self, status: int, headers: dict[str, str], body: bytes):
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _any

        return Handler
