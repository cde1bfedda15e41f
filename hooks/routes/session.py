"""The diff page's sign-in: lakeFS keys, or a one-time code from a sign-in link, for an HttpOnly,
SameSite=Strict session cookie holding a lakeFS token (`hooks.auth`); the secret is never stored."""

from __future__ import annotations

import secrets
import time

import httpx
from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from exporter.config import Config
from hooks.auth import SESSION_COOKIE, SignInRefused, Unauthenticated, caller_of, code_key
from hooks.deps import ServicesDep
from hooks.errors import Refusal, problems, unauthenticated
from hooks.models import Keys, Session, SignInCode, SignInLink

router = APIRouter()


@router.post("/session", response_model=Session, summary="Sign the diff page in with lakeFS keys",
             responses=problems(400, 401, 503))
async def sign_in(request: Request, services: ServicesDep, keys: Keys):
    """lakeFS's login API exchanges the keys for a lakeFS token, which the answer sets as an
    HttpOnly, SameSite=Strict cookie; the secret is never stored."""
    try:
        token, expires = await services.access.login(keys.access_key_id, keys.secret_access_key)
    except SignInRefused as exc:
        raise Refusal(401, str(exc)) from None
    except httpx.HTTPError:
        raise Refusal(503, "lakeFS cannot be reached to sign in") from None
    return _signed_in(request, services.config, token, expires)


@router.delete("/session", response_model=Session, summary="Drop the session cookie")
async def sign_out():
    response = JSONResponse({"signed_in": False})
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.post("/session/links", response_model=SignInLink, summary="A one-time sign-in code for the diff page",
             responses=problems(401, 503))
async def sign_in_link(request: Request, services: ServicesDep):
    """For the lakeFS identity that asks (basic auth with lakeFS keys, or a lakeFS token): open
    `/diff?code=<code>&...` once, before it expires."""
    try:
        caller = caller_of(request.headers.get("authorization", ""), services.config,
                           request.cookies.get(SESSION_COOKIE))
        token, expires = await services.access.token_of(caller)
    except (Unauthenticated, SignInRefused) as exc:
        raise unauthenticated(str(exc)) from None
    except httpx.HTTPError:
        raise Refusal(503, "lakeFS cannot be reached to sign in") from None
    code = secrets.token_urlsafe(24)
    lifetime = min(services.config.api.sign_in_link_seconds, expires - int(time.time()))
    if lifetime <= 0:
        raise unauthenticated("the lakeFS token has expired")
    await run_in_threadpool(services.status.put_once, code_key(code), f"{expires} {token}", lifetime)
    return {"code": code, "expires_in": lifetime}


@router.post("/session/code", response_model=Session, summary="Trade a one-time sign-in code for the session cookie",
             responses=problems(400, 401, 503))
async def sign_in_with_code(request: Request, services: ServicesDep, body: SignInCode):
    found = await run_in_threadpool(services.status.take_once, code_key(body.code))  # one use only
    if not found:
        raise Refusal(401, "this sign-in link is unknown, used or expired: ask for a new one")
    expires, _, token = found.partition(" ")
    return _signed_in(request, services.config, token, int(expires))


def _signed_in(request: Request, config: Config, token: str, expires: int) -> Response:
    """The session cookie: `Secure` when the service is reached over https, which behind a TLS proxy
    only `public_url` knows (the request's own scheme is then http)."""
    https = config.public_url.startswith("https://") if config.public_url else request.url.scheme == "https"
    response = JSONResponse({"signed_in": True, "expires_at": expires})
    response.set_cookie(SESSION_COOKIE, token, max_age=max(0, expires - int(time.time())), path="/",
                        httponly=True, samesite="strict", secure=https)
    return response
