"""Who may read which repository through the API: lakeFS decides.

A caller is one of
- a lakeFS identity: HTTP basic auth with a lakeFS access key id and secret, or `Authorization:
  Bearer <lakeFS token>` (from lakeFS's login API). For each repository the service asks lakeFS,
  with the caller's own credentials, for that repository: lakeFS's answer (200, 401, 403, 404) is
  the decision, reused for `api.auth_cache_seconds`. Answers about one table (its diffs, rows,
  versions, datasets) also ask whether the caller may read the table's `_delta_log/` at each ref
  (lakeFS can restrict objects by prefix). The service's own lakeFS user never decides.
- a service token from `api.tokens` (`Authorization: Bearer <token>`), for automation: it reads
  the repositories its entry names, and no others.
No credentials: 401. Credentials that do not open the repository: 403.

The diff page signs in with lakeFS keys once: lakeFS's login API exchanges them for a lakeFS token,
which the service keeps in an HttpOnly, SameSite=Strict session cookie (`SESSION_COOKIE`); the
secret is never stored. A sign-in link (`lakefs-delta sign-in-link`, `make demo`) carries a
one-time code instead: the page trades it for the same cookie and drops it from the address bar.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

import httpx
from pydantic import SecretStr

from exporter.config import ApiToken, Config

ALLOWED, UNAUTHENTICATED, FORBIDDEN, NO_REPOSITORY, LAKEFS_DOWN = 200, 401, 403, 404, 503


@dataclass(frozen=True)
class Caller:
    """Who is asking: their credentials as lakeFS takes them (`authorization`), or the service
    token they matched. `key` names them in the decision cache without holding a secret."""

    key: str
    authorization: str = ""
    service_token: ApiToken | None = None


class Unauthenticated(Exception):
    """The request carries no usable credentials; the message says what is expected."""


SESSION_COOKIE = "lakefs_delta_session"
SIGN_IN_CODES = "lakefs-delta:sign-in:"  # Redis key prefix: sha256 of a one-time code -> a lakeFS token


def caller_of(authorization: str, config: Config, session: str | None = None) -> Caller:
    """The caller an `Authorization` header (or else the session cookie's lakeFS token) names,
    or Unauthenticated."""
    if not authorization.strip() and session:
        return Caller(key=_digest(session), authorization=f"Bearer {session}")
    scheme, _, credentials = authorization.strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() == "basic" and credentials:
        try:
            key_id, separator, secret = base64.b64decode(credentials, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            raise Unauthenticated("the basic credentials are not base64 of ACCESS_KEY_ID:SECRET") from None
        if not separator or not key_id or not secret:
            raise Unauthenticated("basic auth takes a lakeFS access key id and its secret")
        return Caller(key=_digest(authorization), authorization=f"Basic {credentials}")
    if scheme.lower() == "bearer" and credentials:
        matched = matching_token(credentials, [entry.token for entry in config.api.tokens])
        if matched is not None:
            return Caller(key=_digest(credentials), service_token=config.api.tokens[matched])
        return Caller(key=_digest(authorization), authorization=f"Bearer {credentials}")  # a lakeFS token
    raise Unauthenticated("sign in with your lakeFS identity: HTTP basic auth with a lakeFS access key id and "
                          "secret, or `Authorization: Bearer` with a lakeFS token (or a service API token)")


def matching_token(offered: str | None, tokens: Sequence[SecretStr]) -> int | None:
    """The index of the token `offered` equals, or None. Every token is compared, in constant time,
    so timing tells nothing about which matched (webhook tokens and service API tokens alike)."""
    if not offered:
        return None
    matches = [hmac.compare_digest(offered.encode(), token.get_secret_value().encode()) for token in tokens]
    return matches.index(True) if any(matches) else None


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class RepositoryAccess:
    """lakeFS's answers about a caller: "may it read this repository?", "may it read this table's
    log at this ref?" (cached briefly per caller), and, for the page's sign-in, who it is (a
    lakeFS token for its identity)."""

    def __init__(self, config: Config, client: httpx.AsyncClient | None = None):
        self.endpoint = config.lakefs.endpoint.rstrip("/") + "/api/v1"
        self.ttl = config.api.auth_cache_seconds
        self.client = client or httpx.AsyncClient(timeout=min(10.0, config.lakefs.timeout_seconds))
        self.decisions: dict[tuple[str, ...], tuple[int, float]] = {}

    async def check(self, caller: Caller, repository: str) -> int:
        """ALLOWED, UNAUTHENTICATED (lakeFS does not know the credentials), FORBIDDEN,
        NO_REPOSITORY (the caller may read it, but it does not exist) or LAKEFS_DOWN."""
        return await self._decided(caller, (repository,), lambda: self._ask_lakefs(caller, repository))

    async def check_table(self, caller: Caller, repository: str, ref: str, table_path: str) -> int:
        """ALLOWED when lakeFS lets the caller read the table's log at `ref` (lakeFS can restrict a
        repository's objects by prefix); FORBIDDEN, UNAUTHENTICATED or LAKEFS_DOWN otherwise. A
        service token reads whole repositories."""
        return await self._decided(caller, (repository, ref, table_path),
                                   lambda: self._ask_lakefs_table(caller, repository, ref, table_path))

    async def _decided(self, caller: Caller, what: tuple[str, ...], ask) -> int:
        if caller.service_token is not None:
            return ALLOWED if caller.service_token.allows(what[0]) else FORBIDDEN
        now = time.monotonic()
        cached = self.decisions.get((caller.key, *what))
        if cached and cached[1] > now:
            return cached[0]
        decision = await ask()
        if decision != LAKEFS_DOWN:
            if len(self.decisions) > 10_000:  # expired entries go first; a full cache starts over
                self.decisions = {k: v for k, v in self.decisions.items() if v[1] > now} if self.ttl else {}
            self.decisions[(caller.key, *what)] = (decision, now + self.ttl)
        return decision

    async def _ask_lakefs_table(self, caller: Caller, repository: str, ref: str, table_path: str) -> int:
        """A stat of `<table>/_delta_log/` with the caller's credentials: lakeFS authorizes reading
        that path before it looks it up, so 404 (no such object) is a read allowed."""
        try:
            answer = await self.client.get(
                f"{self.endpoint}/repositories/{quote(repository, safe='')}/refs/{quote(ref, safe='')}/objects/stat",
                params={"path": table_path.strip("/") + "/_delta_log/"}, headers={"Authorization": caller.authorization})
        except httpx.HTTPError:
            return LAKEFS_DOWN
        if answer.status_code in (200, 400, 404):  # a ref that does not exist is the route's to answer
            return ALLOWED
        if answer.status_code == 401:
            return await self._known_identity(caller)
        return FORBIDDEN if answer.status_code == 403 else LAKEFS_DOWN

    async def _ask_lakefs(self, caller: Caller, repository: str) -> int:
        try:
            answer = await self.client.get(f"{self.endpoint}/repositories/{quote(repository, safe='')}",
                                           headers={"Authorization": caller.authorization})
        except httpx.HTTPError:
            return LAKEFS_DOWN
        if answer.status_code == 200:
            return ALLOWED
        if answer.status_code == 401:  # lakeFS answers 401 both to unknown credentials and to "not allowed"
            return await self._known_identity(caller)
        if answer.status_code == 403:
            return FORBIDDEN
        if answer.status_code in (400, 404):
            return NO_REPOSITORY
        return LAKEFS_DOWN

    async def _known_identity(self, caller: Caller) -> int:
        """FORBIDDEN when lakeFS knows the caller (it just may not read), else UNAUTHENTICATED."""
        try:
            status = await self._whoami(caller)
        except httpx.HTTPError:
            return LAKEFS_DOWN
        return FORBIDDEN if status == 200 else UNAUTHENTICATED if status == 401 else LAKEFS_DOWN

    async def _whoami(self, caller: Caller) -> int:
        """lakeFS's status for GET /user with the caller's credentials: 200 when it knows them."""
        return (await self.client.get(f"{self.endpoint}/user", headers={"Authorization": caller.authorization})).status_code

    async def login(self, access_key_id: str, secret_access_key: str) -> tuple[str, int]:
        """lakeFS's login API: keys -> (a lakeFS token, its expiry in epoch seconds). SignInRefused
        when lakeFS refuses the keys; httpx.HTTPError when it cannot be reached or fails (5xx)."""
        answer = await self.client.post(f"{self.endpoint}/auth/login",
                                        json={"access_key_id": access_key_id, "secret_access_key": secret_access_key})
        if answer.status_code >= 500:
            answer.raise_for_status()
        if answer.status_code != 200:
            raise SignInRefused("lakeFS does not accept this access key id and secret")
        document = answer.json()
        return document["token"], int(document.get("token_expiration") or time.time() + 3600)

    async def token_of(self, caller: Caller) -> tuple[str, int]:
        """A lakeFS token for the caller's own identity, and its expiry: basic keys are exchanged
        through lakeFS's login API; a lakeFS token is checked with lakeFS and returned. SignInRefused
        for a service token (no lakeFS identity) or credentials lakeFS refuses."""
        scheme, _, credentials = caller.authorization.partition(" ")
        if caller.service_token is not None or not credentials:
            raise SignInRefused("a service API token has no lakeFS identity to sign in as")
        if scheme == "Basic":
            key_id, _, secret = base64.b64decode(credentials).decode().partition(":")
            return await self.login(key_id, secret)
        status = await self._whoami(caller)
        if status >= 500:
            raise httpx.HTTPError(f"lakeFS answered {status} to GET /user")
        if status != 200:
            raise SignInRefused("lakeFS does not accept this token")
        return credentials, _expiry(credentials)


class SignInRefused(Exception):
    """lakeFS did not accept the keys (or the code is unknown, used or expired)."""


def code_key(code: str) -> str:
    return SIGN_IN_CODES + _digest(code)


def _expiry(token: str) -> int:
    """A lakeFS token (a JWT)'s `exp` claim; an hour from now when it has none readable."""
    try:
        payload = token.split(".")[1]
        return int(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["exp"])
    except (IndexError, ValueError, KeyError, TypeError):
        return int(time.time()) + 3600
