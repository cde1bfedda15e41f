"""Who may read a repository through the API: parsing credentials, service tokens, lakeFS's answer
cached per caller (lakeFS itself is a fake transport here; the integration tests ask a real one)."""

import asyncio
import base64

import httpx
import pytest

from exporter.config import load_config
from exporter.errors import ConfigError
from hooks.auth import (
    ALLOWED,
    FORBIDDEN,
    LAKEFS_DOWN,
    NO_REPOSITORY,
    UNAUTHENTICATED,
    RepositoryAccess,
    Unauthenticated,
    caller_of,
)

pytestmark = pytest.mark.unit


def config(**environ):
    return load_config(None, {"LAKEFS_DELTA_LAKEFS_ENDPOINT": "http://lakefs.invalid", **environ})


def basic(key: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{key}:{secret}".encode()).decode()


def test_api_tokens_name_their_repositories_or_the_config_is_refused():
    tokens = config(LAKEFS_DELTA_API_TOKENS="t1=sales+ops,t2=*").api.tokens
    assert [(t.token.get_secret_value(), t.repositories) for t in tokens] == [("t1", ("sales", "ops")), ("t2", ("*",))]
    assert tokens[0].allows("sales") and not tokens[0].allows("hr") and tokens[1].allows("hr")
    with pytest.raises(ConfigError, match="TOKEN=repo1"):
        config(LAKEFS_DELTA_API_TOKENS="bare-token")
    with pytest.raises(ConfigError, match=r"api\.auth"):
        config(LAKEFS_DELTA_API_AUTH="open")


def test_credentials_are_parsed_or_refused_with_what_is_expected():
    settings = config(LAKEFS_DELTA_API_TOKENS="svc=sales")
    assert caller_of(basic("AKIA1", "s3cret"), settings).authorization == basic("AKIA1", "s3cret")
    assert caller_of("Bearer svc", settings).service_token.repositories == ("sales",)
    lakefs_token = caller_of("Bearer eyJhbGciOi.x.y", settings)
    assert lakefs_token.service_token is None and lakefs_token.authorization == "Bearer eyJhbGciOi.x.y"
    for header in ("", "Bearer ", "Basic !!!", basic("AKIA1", ""), "Token abc"):
        with pytest.raises(Unauthenticated):
            caller_of(header, settings)
    assert "s3cret" not in caller_of(basic("AKIA1", "s3cret"), settings).key  # the cache key holds no secret


@pytest.mark.parametrize("key_id", [".", ".."])
def test_a_key_id_lakefs_cannot_hold_is_refused_without_asking_lakefs(key_id):
    """lakeFS answers 500 to these (`hooks.auth.IMPOSSIBLE_KEY_IDS`): asked, they read as an outage (503)."""
    from hooks.auth import SignInRefused

    asked = []
    access = RepositoryAccess(config(), httpx.AsyncClient(transport=httpx.MockTransport(
        lambda request: asked.append(request.url.path) or httpx.Response(500))))
    with pytest.raises(Unauthenticated, match="no such access key id"):
        caller_of(basic(key_id, "s3cret"), config())
    with pytest.raises(SignInRefused, match="no such access key id"):
        asyncio.run(access.login(key_id, "s3cret"))
    assert asked == []
    assert caller_of(basic("...", "s3cret"), config()).authorization == basic("...", "s3cret")  # lakeFS: a 401


def test_lakefs_decides_once_per_caller_and_repository_within_the_cache_time():
    asked = []

    def lakefs(request: httpx.Request) -> httpx.Response:
        asked.append((request.headers["authorization"], request.url.path))
        repository = request.url.path.rsplit("/", 1)[1]
        return httpx.Response({"user": 200, "x": 200, "y": 403, "gone": 404, "broken": 500}[repository])

    settings = config(LAKEFS_DELTA_API_AUTH_CACHE_SECONDS="60")
    access = RepositoryAccess(settings, httpx.AsyncClient(transport=httpx.MockTransport(lakefs)))
    alice = caller_of(basic("AKIA1", "a"), settings)

    async def decisions():
        return [await access.check(alice, repository) for repository in ("x", "x", "y", "gone", "broken", "broken")]

    assert asyncio.run(decisions()) == [ALLOWED, ALLOWED, FORBIDDEN, NO_REPOSITORY, LAKEFS_DOWN, LAKEFS_DOWN]
    # who the caller is once, before anything else; x once (cached), y and gone once, and a lakeFS
    # error is never cached
    assert [path for _, path in asked] == ["/api/v1/user", "/api/v1/repositories/x", "/api/v1/repositories/y",
                                           "/api/v1/repositories/gone", "/api/v1/repositories/broken",
                                           "/api/v1/repositories/broken"]
    assert all(header == basic("AKIA1", "a") for header, _ in asked)  # the caller's own credentials


def test_lakefs_refusing_the_credentials_is_unauthenticated_and_a_service_token_never_asks_lakefs():
    settings = config(LAKEFS_DELTA_API_TOKENS="svc=x")
    transport = httpx.MockTransport(lambda request: httpx.Response(401))  # /user too: unknown credentials
    access = RepositoryAccess(settings, httpx.AsyncClient(transport=transport))

    async def decisions():
        service = caller_of("Bearer svc", settings)
        return [await access.check(caller_of(basic("AKIA1", "wrong"), settings), "x"),
                await access.check(service, "x"), await access.check(service, "y")]

    assert asyncio.run(decisions()) == [UNAUTHENTICATED, ALLOWED, FORBIDDEN]


def test_lakefs_saying_401_to_a_caller_it_knows_is_forbidden_not_unauthenticated():
    def lakefs(request: httpx.Request) -> httpx.Response:  # lakeFS answers "not allowed" with a 401
        return httpx.Response(200 if request.url.path.endswith("/user") else 401)

    settings = config()
    access = RepositoryAccess(settings, httpx.AsyncClient(transport=httpx.MockTransport(lakefs)))
    assert asyncio.run(access.check(caller_of(basic("AKIA1", "a"), settings), "x")) == FORBIDDEN


def prefix_policy(allowed_prefix: str):
    """lakeFS with a policy allowing one caller to read only objects under `allowed_prefix`
    (Enterprise/Cloud RBAC; the stack's ACL server has no prefixes). lakeFS authorizes a stat
    before it looks the path up, and answers a refused read with 401; /user knows the caller."""
    asked = []

    def lakefs(request: httpx.Request) -> httpx.Response:
        asked.append((request.url.path, request.url.params.get("path")))
        if request.url.path.endswith("/user") or request.url.path.endswith("/repositories/repo"):
            return httpx.Response(200)
        if request.url.path.endswith("/objects/stat"):
            return httpx.Response(404 if request.url.params["path"].startswith(allowed_prefix) else 401)
        return httpx.Response(500)

    return lakefs, asked


COMMIT = "c" * 64


def test_a_table_outside_the_callers_prefix_is_forbidden_and_the_decision_is_cached():
    lakefs, asked = prefix_policy("tables/sales/")
    settings = config(LAKEFS_DELTA_API_AUTH_CACHE_SECONDS="60", LAKEFS_DELTA_API_TOKENS="svc=repo")
    access = RepositoryAccess(settings, httpx.AsyncClient(transport=httpx.MockTransport(lakefs)))
    bob = caller_of(basic("AKIA2", "b"), settings)

    async def decisions():
        return [await access.check_path(bob, "repo", COMMIT, "tables/sales/_delta_log/"),
                await access.check_path(bob, "repo", COMMIT, "tables/sales/_delta_log/"),
                await access.check_path(bob, "repo", COMMIT, "tables/hr/_delta_log/"),
                await access.check_path(caller_of("Bearer svc", settings), "repo", COMMIT, "tables/hr/_delta_log/")]

    assert asyncio.run(decisions()) == [ALLOWED, ALLOWED, FORBIDDEN, ALLOWED]  # a service token reads its repositories
    assert asked == [("/api/v1/user", None),  # once, before anything else
                     (f"/api/v1/repositories/repo/refs/{COMMIT}/objects/stat", "tables/sales/_delta_log/"),
                     (f"/api/v1/repositories/repo/refs/{COMMIT}/objects/stat", "tables/hr/_delta_log/")]
    with pytest.raises(ValueError, match="commit ids"):  # a ref lakeFS may answer 400 for before it authorizes
        asyncio.run(access.check_path(bob, "repo", "main", "tables/sales/_delta_log/"))


@pytest.mark.parametrize("status, decision", [(200, ALLOWED), (404, ALLOWED), (400, FORBIDDEN), (401, FORBIDDEN),
                                              (403, FORBIDDEN), (500, LAKEFS_DOWN)])
def test_only_an_authorized_answer_allows_a_path(status, decision):
    """lakeFS answers 400 to some refs before it authorizes (a tag `rel%`, decoded twice): only 200,
    or 404 (after authorization), allows."""
    def lakefs(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200 if request.url.path.endswith("/user") else status)

    settings = config()
    access = RepositoryAccess(settings, httpx.AsyncClient(transport=httpx.MockTransport(lakefs)))
    assert asyncio.run(access.check_path(caller_of(basic("AKIA1", "a"), settings), "repo", COMMIT, "t/_delta_log/")) \
        == decision


def test_unknown_credentials_cost_one_lakefs_call_however_many_repositories_are_asked():
    asked = []

    def lakefs(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(401)

    settings = config(LAKEFS_DELTA_API_AUTH_CACHE_SECONDS="60")
    access = RepositoryAccess(settings, httpx.AsyncClient(transport=httpx.MockTransport(lakefs)))
    stranger = caller_of(basic("AKIA9", "nope"), settings)

    async def decisions():
        return [await access.check(stranger, f"repo-{n}") for n in range(50)]

    assert set(asyncio.run(decisions())) == {UNAUTHENTICATED}
    assert asked == ["/api/v1/user"]


def test_the_decision_cache_is_bounded(monkeypatch):
    from hooks import auth

    monkeypatch.setattr(auth, "DECISIONS_KEPT", 100)
    settings = config(LAKEFS_DELTA_API_AUTH_CACHE_SECONDS="60", LAKEFS_DELTA_API_TOKENS="svc=repo")
    access = RepositoryAccess(settings, httpx.AsyncClient(transport=httpx.MockTransport(
        lambda request: httpx.Response(200 if request.url.path.endswith("/user") else 404))))

    async def many():
        for n in range(auth.DECISIONS_KEPT + 10):
            await access.check_path(caller_of(basic(f"AKIA{n % 7}", "a"), settings), "repo", COMMIT, f"t{n}/_delta_log/")

    asyncio.run(many())
    assert len(access.decisions._values) <= auth.DECISIONS_KEPT


def test_a_tables_folders_are_decided_once_per_commit_and_each_folder_once_for_the_next_commits():
    """hooks/auth.py check_folders: every folder asked at the first commit, none again at it, only the
    new folder at the next commit; the first refused folder is named, an outage is not kept."""
    lakefs, asked = prefix_policy("tables/sales/")
    settings = config(LAKEFS_DELTA_API_AUTH_CACHE_SECONDS="60", LAKEFS_DELTA_API_TOKENS="svc=repo")
    access = RepositoryAccess(settings, httpx.AsyncClient(transport=httpx.MockTransport(lakefs)))
    bob = caller_of(basic("AKIA2", "b"), settings)
    folders = [f"tables/sales/day={day:02d}/" for day in range(20)]
    stats = lambda: len([path for path, _ in asked if path.endswith("/objects/stat")])  # noqa: E731

    check = lambda commit, wanted: asyncio.run(access.check_folders(bob, "repo", commit, "tables/sales", wanted))  # noqa: E731
    assert check(COMMIT, folders) == (ALLOWED, "") and stats() == 20
    assert check(COMMIT, folders) == (ALLOWED, "") and stats() == 20
    assert check("d" * 64, [*folders, "tables/sales/day=20/"]) == (ALLOWED, "") and stats() == 21
    refused = ["tables/sales/day=21/", "tables/hr/", "tables/sales/day=22/"]
    assert check("e" * 64, [*folders, *refused]) == (FORBIDDEN, "tables/hr/")
    assert stats() == 24  # the three new ones, in one wave
    assert check("f" * 64, ["tables/hr/"]) == (FORBIDDEN, "tables/hr/") and stats() == 24  # its refusal is kept
    service = caller_of("Bearer svc", settings)
    assert check("a" * 64, ["tables/hr/"]) == (FORBIDDEN, "tables/hr/")
    assert asyncio.run(access.check_folders(service, "repo", "a" * 64, "t", ["tables/hr/"])) == (ALLOWED, "")

    down = RepositoryAccess(settings, httpx.AsyncClient(transport=httpx.MockTransport(
        lambda request: httpx.Response(200) if request.url.path.endswith("/user") else httpx.Response(503))))
    assert asyncio.run(down.check_folders(bob, "repo", COMMIT, "t", ["a/"])) == (LAKEFS_DOWN, "a/")
    assert not down.folder_decisions.get((bob.key, "repo", "a/")) and not down.folder_sets.get((bob.key, "repo", COMMIT, "t"))


def test_whole_repository_readers_are_named_by_user_or_group_and_asked_of_lakefs_each_time():
    """hooks/auth.py names_reader: the caller's user by its own credentials, its groups by the
    service's (paged); never cached, never a service token; a bad entry is a config error."""
    asked = []

    def lakefs(request: httpx.Request) -> httpx.Response:
        asked.append((request.url.path, request.headers.get("authorization")))
        if request.url.path.endswith("/user"):
            known = request.headers["authorization"] == basic("AKIA2", "b")
            return httpx.Response(200, json={"user": {"id": "bob"}}) if known else httpx.Response(401)
        if request.url.path.endswith("/auth/users/bob/groups"):
            after = request.url.params.get("after")
            page = [{"id": "analysts"}] if after else [{"id": "everyone"}]
            return httpx.Response(200, json={"results": page, "pagination": {"has_more": not after, "next_offset": "x"}})
        return httpx.Response(500)

    settings = config(LAKEFS_DELTA_LAKEFS_ACCESS_KEY_ID="service", LAKEFS_DELTA_LAKEFS_SECRET_ACCESS_KEY="s3cret",
                      LAKEFS_DELTA_API_TOKENS="svc=repo")
    access = RepositoryAccess(settings, httpx.AsyncClient(transport=httpx.MockTransport(lakefs)))
    bob, stranger = caller_of(basic("AKIA2", "b"), settings), caller_of(basic("AKIA9", "x"), settings)
    named = lambda caller, readers: asyncio.run(access.names_reader(caller, readers))  # noqa: E731
    assert named(bob, ("user:bob",)) and named(bob, ("group:analysts",))  # the second page of its groups
    assert [who for path, who in asked if path.endswith("/groups")] == [basic("service", "s3cret")] * 2
    assert not named(bob, ("user:alice", "group:admins")) and not named(bob, ())
    assert not named(stranger, ("user:bob",)) and not named(caller_of("Bearer svc", settings), ("user:bob",))
    calls = len(asked)
    assert named(bob, ("user:bob",)) and len(asked) == calls + 1  # asked again: never from a cache
    with pytest.raises(ConfigError, match="user:ID or group:ID"):
        config(LAKEFS_DELTA_ICEBERG_VENDED_CREDENTIALS_READERS="bob")
    assert config(LAKEFS_DELTA_ICEBERG_VENDED_CREDENTIALS_READERS="user:bob,group:analysts").iceberg \
        .vended_credentials_readers == ("user:bob", "group:analysts")


def test_the_api_answers_403_for_a_table_the_caller_may_not_read_at_either_ref():
    from types import SimpleNamespace

    from fastapi import FastAPI

    from hooks import errors
    from hooks.routes import diff

    lakefs, _ = prefix_policy("tables/sales/")
    settings = config()
    app = FastAPI()
    errors.install(app)
    app.include_router(diff.router)
    commits = {"main": SimpleNamespace(id="a" * 64), "dev": SimpleNamespace(id="b" * 64)}
    app.state.services = SimpleNamespace(
        config=settings, access=RepositoryAccess(settings, httpx.AsyncClient(transport=httpx.MockTransport(lakefs))),
        lakefs=lambda: SimpleNamespace(commit=lambda repository, ref: commits[ref]),
        folders=SimpleNamespace(of=lambda repository, commit_id, path: ()))

    async def get(path: str) -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            return await client.get(path, headers={"Authorization": basic("AKIA2", "b")})

    for route in ("", "/rows"):
        answer = asyncio.run(get(f"/repositories/repo/otf/refs/main/diff/dev{route}?table_path=tables/hr"))
        assert answer.status_code == 403 and answer.json()["error"] == "this identity may not read table 'tables/hr' at 'main'"


@pytest.mark.parametrize("public_url, scheme, secure", [
    ("", "http", False), ("", "https", True),
    ("https://exporter.example.com", "http", True),  # behind a TLS proxy: the request itself is http
    ("http://127.0.0.1:18080", "https", False)])
def test_the_session_cookie_is_secure_when_the_service_is_reached_over_https(public_url, scheme, secure):
    import time
    from types import SimpleNamespace

    from fastapi import FastAPI

    from hooks import errors
    from hooks.routes import session

    app = FastAPI()
    errors.install(app)
    app.include_router(session.router)
    app.state.services = SimpleNamespace(config=config(LAKEFS_DELTA_PUBLIC_URL=public_url),
                                         status=SimpleNamespace(take_once=lambda key: f"{int(time.time()) + 600} tok"))

    async def sign_in() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"{scheme}://api") as client:
            return await client.post("/session/code", json={"code": "c" * 32})

    answer = asyncio.run(sign_in())
    assert answer.status_code == 200, answer.text
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and ("Secure" in cookie) is secure, cookie


def test_a_session_ends_with_its_lakefs_token_and_keys_and_service_tokens_open_none():
    """What a vended credential's life is capped at (hooks/iceberg/tables.py)."""
    import base64 as b64
    import json as js

    from exporter.config import ApiToken
    from hooks.auth import Caller

    payload = b64.urlsafe_b64encode(js.dumps({"exp": 1_900_000_000}).encode()).decode().rstrip("=")
    assert Caller("k", authorization=f"Bearer h.{payload}.s").session_end() == 1_900_000_000
    assert Caller("k", authorization="Basic a2V5OnNlY3JldA==").session_end() is None
    assert Caller("k", service_token=ApiToken(token="t" * 32, repositories=("*",))).session_end() is None
