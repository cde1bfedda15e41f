"""Delta Sharing recipients: a bearer token per recipient, bound to shares, with an expiry.

Only the token's SHA-256 is stored (a token is 256 random bits, so a plain hash is enough: nothing
to brute-force). Records live in Redis, which the service already needs durable (AOF, README).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

import redis

from exporter.errors import ExporterError
from exporter.state.connection import connection, key

_RECIPIENTS = key("sharing", "recipients")  # hash: name -> record (JSON)
_TOKENS = key("sharing", "tokens")  # hash: sha256(token) -> name
_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")
TOKEN_PREFIX = "lds_"  # recognisable in a leaked-secret scan


class RecipientError(ExporterError):
    """A recipient cannot be created, found or revoked; the message says why."""


class Unauthenticated(ExporterError):
    """No recipient holds this bearer token, or its token expired or was revoked."""


@dataclass(frozen=True)
class Recipient:
    name: str
    shares: tuple[str, ...]
    created: str  # ISO 8601, UTC
    expires: str
    revoked: str | None = None

    def state(self, now: datetime | None = None) -> str:
        if self.revoked:
            return "revoked"
        return "expired" if _parse(self.expires) <= (now or _now()) else "active"


class Recipients:
    def __init__(self, redis_url: str):
        self.redis = connection(redis_url)

    def create(self, name: str, shares: list[str], expires: datetime) -> tuple[Recipient, str]:
        """A new recipient and its token (shown once: only its hash is kept)."""
        if not _NAME.fullmatch(name):
            raise RecipientError(f"recipient name {name!r}: use 1-64 letters, digits, `_`, `.`, `@`, `-`")
        if not shares:
            raise RecipientError("a recipient needs at least one share")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        recipient = Recipient(name, tuple(dict.fromkeys(shares)), _iso(_now()), _iso(expires))
        with self.redis.pipeline() as pipe:
            try:  # WATCH: two creates of one name cannot both succeed
                pipe.watch(_RECIPIENTS)
                raw = pipe.hget(_RECIPIENTS, name)
                existing = None if raw is None else _recipient(raw)
                if existing is not None and existing.state() == "active":
                    raise RecipientError(f"recipient {name!r} exists and is active: revoke it first to issue a new token")
                stale = self._hashes_of(name) if existing is not None else []
                pipe.multi()  # the record and its token appear together
                if stale:
                    pipe.hdel(_TOKENS, *stale)
                pipe.hset(_RECIPIENTS, name, json.dumps(asdict(recipient)))
                pipe.hset(_TOKENS, _hash(token), name)
                pipe.execute()
            except redis.WatchError:
                raise RecipientError(f"recipient {name!r} was changed by another command meanwhile: try again") from None
        return recipient, token

    def get(self, name: str) -> Recipient | None:
        raw = self.redis.hget(_RECIPIENTS, name)
        return None if raw is None else _recipient(raw)

    def list(self) -> list[Recipient]:
        return sorted((_recipient(raw) for raw in self.redis.hvals(_RECIPIENTS)), key=lambda r: r.name)

    def revoke(self, name: str) -> Recipient:
        """The token stops working at once; the record stays, marked revoked."""
        recipient = self.get(name)
        if recipient is None:
            raise RecipientError(f"no recipient {name!r}")
        if recipient.revoked:
            return recipient
        revoked = Recipient(**{**asdict(recipient), "shares": recipient.shares, "revoked": _iso(_now())})
        stale = self._hashes_of(name)
        with self.redis.pipeline() as pipe:
            if stale:
                pipe.hdel(_TOKENS, *stale)
            pipe.hset(_RECIPIENTS, name, json.dumps(asdict(revoked)))
            pipe.execute()
        return revoked

    def authenticate(self, token: str) -> Recipient:
        """The recipient holding `token`, or Unauthenticated saying why not."""
        name = self.redis.hget(_TOKENS, _hash(token)) if token else None
        recipient = self.get(name.decode()) if name is not None else None
        if recipient is None:
            raise Unauthenticated("the bearer token is not known to this server (wrong, or revoked)")
        if recipient.state() == "revoked":
            raise Unauthenticated(f"the bearer token of recipient {recipient.name!r} was revoked")
        if recipient.state() == "expired":
            raise Unauthenticated(f"the bearer token of recipient {recipient.name!r} expired at {recipient.expires}")
        return recipient

    def _hashes_of(self, name: str) -> list[bytes]:
        return [h for h, owner in self.redis.hgetall(_TOKENS).items() if owner.decode() == name]


def profile(endpoint: str, token: str, recipient: Recipient) -> dict:
    """The profile file a Delta Sharing client reads (PROTOCOL.md#profile-file-format)."""
    return {"shareCredentialsVersion": 1, "endpoint": endpoint.rstrip("/"), "bearerToken": token,
            "expirationTime": recipient.expires}


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _recipient(raw: bytes) -> Recipient:
    record = json.loads(raw)
    return Recipient(**{**record, "shares": tuple(record["shares"])})


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))
