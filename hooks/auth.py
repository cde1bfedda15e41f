"""Who may read which repository through the API: lakeFS decides.

A caller is one of
- a lakeFS identity: HTTP basic auth with a lakeFS access key id and secret, or `Authorization:
  Bearer <lakeFS token>` (from lakeFS's login API). lakeFS is asked, with the caller's own
  credentials, who it is (once), whether it may read a repository, and whether it may read a path
  at a commit (lakeFS can restrict objects by prefix); its answers are the decisions, reused for
  `api.auth_cache_seconds`. What a request may read is its grant (`hooks.grant`), made of these
  answers. The service's own lakeFS user never decides.
- a service token from `api.tokens` (`Authorization: Bearer <token>`), for automation: it reads
  the repositories its entry names, and no others.
No credentials: 401. Credentials that do not open the repository: 403.

The diff page signs in with lakeFS keys once: lakeFS's login API exchanges them for a lakeFS token,
which the service keeps in an HttpOnly, SameSite=Strict session cookie (`SESSION_COOKIE`); the
secret is never stored. A sign-in link (`lakefs-delta sign-in-link`, `make demo`) carries a
one-time code instead: the page trades it for the same cookie and drops it from the address bar.
"""

from __future__ import annotations

import asyncio
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
from exporter.kept import Kept
from exporter.lakefs.client import COMMIT_ID

ALLOWED, UNAUTHENTICATED, FORBIDDEN, NO_REPOSITORY, LAKEFS_DOWN = 200, 401, 403, 404, 503
DECISIONS_KEPT = 50_000  # decisions kept at most (a full cache starts over): ~10 MiB
FOLDER_SETS_KEPT = 4096  # decisions about a table's folder set at a commit kept at most
FOLDERS_KEPT = 200_000  # decisions about single folders kept at most: ~60 MiB
# a folder set's stats in flight at once: lakeFS is asked in waves, the first refusal ends it. More
# at once is slower on a busy lakeFS: 440 stats/s at 8, 220 at 32, 150 at 64 (2 cores, bench/grant.py)
FOLDERS_AT_ONCE = 8


@dataclass(frozen=True)
class Caller:
    """Who is asking: their credentials as lakeFS takes them (`authorization`), or the service
    token they matched. `key` names them in the decision cache without holding a secret."""

    key: str
    authorization: str = ""
    service_token: ApiToken | None = None

    def session_end(self) -> int | None:
        """When the caller's lakeFS session ends (its token's `exp`, epoch seconds); None for keys
        and service tokens, which open no session."""
        scheme, _, token = self.authorization.partition(" ")
        return _expiry(token) if scheme == "Bearer" and self.service_token is None else None


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
        if not possible_key_id(key_id):
            raise Unauthenticated(NO_SUCH_KEY)
        return Caller(key=_digest(authorization), authorization=f"Basic {credentials}")
    if scheme.lower() == "bearer" and credentials:
        matched = matching_token(credentials, [entry.token for entry in config.api.tokens])
        if matched is not None:
            return Caller(key=_digest(credentials), service_token=config.api.tokens[matched])
        return Caller(key=_digest(authorization), authorization=f"Bearer {credentials}")  # a lakeFS token
    raise Unauthenticated("sign in with your lakeFS identity: HTTP basic auth with a lakeFS access key id and "
                          "secret, or `Authorization: Bearer` with a lakeFS token (or a service API token)")


# lakeFS answers 500 to an access key id of "." or ".." (its auth server looks the key up by a path, which
# such a name leaves): no key lakeFS makes or accepts is one, so they are refused here as the wrong keys
# they are, not answered as lakeFS being down (a fuzzed sign-in found it)
IMPOSSIBLE_KEY_IDS = frozenset({".", ".."})
NO_SUCH_KEY = "lakeFS has no such access key id"


def possible_key_id(key_id: str) -> bool:
    return key_id not in IMPOSSIBLE_KEY_IDS


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
    """lakeFS's answers about a caller: "who is it?" (asked once per credential, before anything
    else), "may it read this repository?" and "may it read this path at this commit?" (cached per
    caller, bounded in size and time), and, for the page's sign-in, a lakeFS token for its identity.

    Paths are authorized at commit ids: a commit id is the one ref lakeFS never answers 400 for
    before it authorizes (a tag `rel%` is decoded twice), and a decision about a commit holds as
    long as the caller's policy does. Only an authorized answer is "allowed": 200, or 404 (lakeFS
    authorizes a read of a path before it looks the path up)."""

    def __init__(self, config: Config, client: httpx.AsyncClient | None = None):
        self.endpoint = config.lakefs.endpoint.rstrip("/") + "/api/v1"
        self.ttl = config.api.auth_cache_seconds
        # the service's own lakeFS user: asked only for a caller's groups (`names_reader`), never whether it may read
        self.service_keys = (config.lakefs.access_key_id, config.lakefs.secret_access_key.get_secret_value())
        self.client = client or httpx.AsyncClient(timeout=min(10.0, config.lakefs.timeout_seconds))
        self.decisions: Kept[tuple[str, ...], int] = Kept(entries=DECISIONS_KEPT, seconds=self.ttl)
        self.folder_sets: Kept[tuple[str, ...], tuple[int, str]] = Kept(entries=FOLDER_SETS_KEPT, seconds=self.ttl)
        self.folder_decisions: Kept[tuple[str, ...], int] = Kept(entries=FOLDERS_KEPT, seconds=self.ttl)

    async def verify(self, caller: Caller) -> int:
        """ALLOWED when lakeFS knows the caller's credentials (a service token is known by matching),
        UNAUTHENTICATED when it does not, or LAKEFS_DOWN: one lakeFS call per credential and cache
        time, made before any answer fans out into calls per repository or table."""
        if caller.service_token is not None:
            return ALLOWED
        return await self._decided(caller, ("",), lambda: self._ask_identity(caller))

    async def check(self, caller: Caller, repository: str) -> int:
        """ALLOWED, UNAUTHENTICATED (lakeFS does not know the credentials), FORBIDDEN,
        NO_REPOSITORY (the caller may read it, but it does not exist) or LAKEFS_DOWN."""
        if caller.service_token is not None:
            return ALLOWED if caller.service_token.allows(repository) else FORBIDDEN
        known = await self.verify(caller)
        if known != ALLOWED:
            return known
        return await self._decided(caller, (repository,), lambda: self._ask_lakefs(caller, repository))

    async def check_path(self, caller: Caller, repository: str, commit_id: str, path: str) -> int:
        """ALLOWED when lakeFS lets the caller read `path` at `commit_id` (lakeFS can restrict a
        repository's objects by prefix); FORBIDDEN, UNAUTHENTICATED or LAKEFS_DOWN otherwise. A
        service token reads whole repositories."""
        first = await self._before_asking(caller, repository, commit_id)
        if first is not None:
            return first
        return await self._decided(caller, (repository, commit_id, path),
                                   lambda: self._ask_lakefs_path(caller, repository, commit_id, path))

    async def _before_asking(self, caller: Caller, repository: str, commit_id: str) -> int | None:
        """The answer for a path at a commit that needs no question about the path: a service token's
        (whole repositories), or the caller's own when lakeFS does not know it (UNAUTHENTICATED,
        LAKEFS_DOWN); None when lakeFS is to be asked."""
        if caller.service_token is not None:
            return ALLOWED if caller.service_token.allows(repository) else FORBIDDEN
        if not COMMIT_ID.fullmatch(commit_id):
            raise ValueError(f"paths are authorized at commit ids, not at {commit_id!r}")
        known = await self.verify(caller)
        return None if known == ALLOWED else known

    async def check_folders(self, caller: Caller, repository: str, commit_id: str, table_path: str,
                            folders: Sequence[str]) -> tuple[int, str]:
        """(ALLOWED, "") when lakeFS lets the caller read every one of a table's `folders` at the
        commit, else (FORBIDDEN, UNAUTHENTICATED or LAKEFS_DOWN, the first folder it was not allowed).
        Decided once per caller, commit and table (its folder set is the commit's); each folder's
        answer is kept too, for the table's next commits, which mostly hold the same folders: lakeFS's
        policies name object paths, never refs (`arn:lakefs:fs:::repository/<repo>/object/<path>`).
        The folders not known are asked FOLDERS_AT_ONCE at a time, the first refusal ending it."""
        first = await self._before_asking(caller, repository, commit_id)
        if first is not None:
            return first, ""
        key = (caller.key, repository, commit_id, table_path)
        cached = self.folder_sets.get(key)
        if cached is not None:
            return cached
        decided, asked = (ALLOWED, ""), []
        for folder in folders:
            answer = self.folder_decisions.get((caller.key, repository, folder))
            if answer is None:
                asked.append(folder)
            elif answer != ALLOWED:
                decided = answer, folder
                break
        for start in range(0, len(asked) if decided[0] == ALLOWED else 0, FOLDERS_AT_ONCE):
            wave = asked[start:start + FOLDERS_AT_ONCE]
            answers = await asyncio.gather(*(self._ask_lakefs_path(caller, repository, commit_id, f) for f in wave))
            for folder, answer in zip(wave, answers):
                if answer != LAKEFS_DOWN and self.ttl:
                    self.folder_decisions.put((caller.key, repository, folder), answer)
            refused = [(answer, folder) for answer, folder in zip(answers, wave) if answer != ALLOWED]
            if refused:
                decided = min(refused, key=lambda refusal: refusal[0] != FORBIDDEN)  # a refusal before an outage
                break
        if decided[0] != LAKEFS_DOWN and self.ttl:  # an outage is asked about again
            self.folder_sets.put(key, decided)
        return decided

    async def names_reader(self, caller: Caller, readers: Sequence[str]) -> bool:
        """Whether `readers` (`user:ID`, `group:ID`: `iceberg.vended_credentials_readers`) name the
        caller's lakeFS identity, asked of lakeFS now, never from a cache: who the caller is (with its
        own credentials), then its groups (with the service's, which may list them). False when
        lakeFS does not know the caller; httpx.HTTPError when it cannot be reached or fails."""
        if caller.service_token is not None or not readers:
            return False
        answer = await self.client.get(f"{self.endpoint}/user", headers={"Authorization": caller.authorization})
        if answer.status_code in (401, 403):
            return False
        answer.raise_for_status()
        user = answer.json()["user"]["id"]
        if f"user:{user}" in readers:
            return True
        groups = {reader.partition(":")[2] for reader in readers if reader.startswith("group:")}
        if not groups:
            return False
        after = ""
        while True:
            listed = await self.client.get(f"{self.endpoint}/auth/users/{quote(user, safe='')}/groups",
                                           params={"amount": 1000, "after": after}, auth=self.service_keys)
            listed.raise_for_status()
            page = listed.json()
            if any(group["id"] in groups for group in page["results"]):
                return True
            if not page.get("pagination", {}).get("has_more"):
                return False
            after = page["pagination"]["next_offset"]

    async def _decided(self, caller: Caller, what: tuple[str, ...], ask) -> int:
        cached = self.decisions.get((caller.key, *what))
        if cached is not None:
            return cached
        decision = await ask()
        if decision != LAKEFS_DOWN and self.ttl:  # an outage is asked about again
            self.decisions.put((caller.key, *what), decision)
        return decision

    async def _ask_lakefs_path(self, caller: Caller, repository: str, commit_id: str, path: str) -> int:
        """A stat of `path` with the caller's credentials at the commit."""
        try:
            answer = await self.client.get(
                f"{self.endpoint}/repositories/{quote(repository, safe='')}/refs/{commit_id}/objects/stat",
                params={"path": path}, headers={"Authorization": caller.authorization})
        except httpx.HTTPError:
            return LAKEFS_DOWN
        if answer.status_code in (200, 404):
            return ALLOWED
        if answer.status_code in (401, 403, 400):  # the caller is known (verified): refused, or not authorized
            return FORBIDDEN
        return LAKEFS_DOWN

    async def _ask_lakefs(self, caller: Caller, repository: str) -> int:
        try:
            answer = await self.client.get(f"{self.endpoint}/repositories/{quote(repository, safe='')}",
                                           headers={"Authorization": caller.authorization})
        except httpx.HTTPError:
            return LAKEFS_DOWN
        if answer.status_code == 200:
            return ALLOWED
        if answer.status_code in (401, 403):  # lakeFS answers 401 to "not allowed" too; the caller is known
            return FORBIDDEN
        if answer.status_code in (400, 404):
            return NO_REPOSITORY
        return LAKEFS_DOWN

    async def _ask_identity(self, caller: Caller) -> int:
        try:
            status = await self._whoami(caller)
        except httpx.HTTPError:
            return LAKEFS_DOWN
        return ALLOWED if status == 200 else UNAUTHENTICATED if status in (401, 403) else LAKEFS_DOWN

    async def _whoami(self, caller: Caller) -> int:
        """lakeFS's status for GET /user with the caller's credentials: 200 when it knows them."""
        return (await self.client.get(f"{self.endpoint}/user", headers={"Authorization": caller.authorization})).status_code

    async def login(self, access_key_id: str, secret_access_key: str) -> tuple[str, int]:
        """lakeFS's login API: keys -> (a lakeFS token, its expiry in epoch seconds). SignInRefused
        when lakeFS refuses the keys; httpx.HTTPError when it cannot be reached or fails (5xx)."""
        if not possible_key_id(access_key_id):
            raise SignInRefused(NO_SUCH_KEY)
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
