"""Delta Sharing recipients: a bearer token bound to one recipient and its shares, until it
expires or is revoked; only the token's hash is kept."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from exporter.state.recipients import (TOKEN_PREFIX, Recipient, RecipientError, Recipients, Unauthenticated,
                                       profile)

pytestmark = pytest.mark.unit

NOW = datetime.now(timezone.utc)


@pytest.fixture
def recipients(redis_url) -> Recipients:
    return Recipients(redis_url)


def test_a_token_authenticates_its_recipient_with_its_shares(recipients):
    alice, alice_token = recipients.create("alice", ["sales", "ops", "sales"], NOW + timedelta(days=30))
    bob, bob_token = recipients.create("bob@example.com", ["ops"], NOW + timedelta(days=1))

    assert alice_token.startswith(TOKEN_PREFIX) and alice_token != bob_token
    assert recipients.authenticate(alice_token) == alice
    assert alice.shares == ("sales", "ops")  # each share once, in the order given
    assert recipients.authenticate(bob_token).name == "bob@example.com"
    assert [r.name for r in recipients.list()] == ["alice", "bob@example.com"]
    assert recipients.get("alice").state() == "active" and recipients.get("carol") is None


@pytest.mark.parametrize("token", ["", "lds_wrong", TOKEN_PREFIX + "x" * 43])
def test_an_unknown_token_is_refused(recipients, token):
    recipients.create("alice", ["sales"], NOW + timedelta(days=1))
    with pytest.raises(Unauthenticated, match="not known"):
        recipients.authenticate(token)


def test_only_the_tokens_hash_is_stored(recipients):
    _, token = recipients.create("alice", ["sales"], NOW + timedelta(days=1))
    stored = [k for k in recipients.redis.keys("*")]
    stored += [part for k in stored for pair in recipients.redis.hgetall(k).items() for part in pair]
    assert stored and not any(token.encode() in item or token[len(TOKEN_PREFIX):].encode() in item for item in stored)


def test_an_expired_token_is_refused_saying_when_it_expired(recipients):
    carol, token = recipients.create("carol", ["sales"], NOW - timedelta(seconds=1))
    assert carol.state() == "expired"
    with pytest.raises(Unauthenticated, match=f"recipient 'carol' expired at {carol.expires}"):
        recipients.authenticate(token)
    assert Recipient("x", ("s",), carol.created, carol.expires).state(now=NOW - timedelta(days=1)) == "active"


def test_a_revoked_token_stops_working_at_once_and_the_record_stays(recipients):
    _, token = recipients.create("alice", ["sales"], NOW + timedelta(days=30))

    revoked = recipients.revoke("alice")

    assert revoked.state() == "revoked" and revoked.revoked
    with pytest.raises(Unauthenticated):
        recipients.authenticate(token)
    assert recipients.get("alice") == revoked
    assert recipients.revoke("alice") == revoked  # revoking again changes nothing
    with pytest.raises(RecipientError, match="no recipient 'nobody'"):
        recipients.revoke("nobody")


def test_an_active_recipient_is_not_issued_a_second_token(recipients):
    _, token = recipients.create("alice", ["sales"], NOW + timedelta(days=30))
    with pytest.raises(RecipientError, match="exists and is active: revoke it first"):
        recipients.create("alice", ["ops"], NOW + timedelta(days=30))
    assert recipients.authenticate(token).shares == ("sales",)


@pytest.mark.parametrize("end", ["revoke", "expire"])
def test_a_new_token_for_a_revoked_or_expired_recipient_leaves_the_old_one_dead(recipients, end):
    expires = NOW - timedelta(seconds=1) if end == "expire" else NOW + timedelta(days=1)
    _, old = recipients.create("alice", ["sales"], expires)
    if end == "revoke":
        recipients.revoke("alice")

    renewed, new = recipients.create("alice", ["ops"], NOW + timedelta(days=1))

    assert recipients.authenticate(new) == renewed and renewed.shares == ("ops",) and renewed.revoked is None
    with pytest.raises(Unauthenticated, match="not known"):
        recipients.authenticate(old)  # not bound to the new record's shares


@pytest.mark.parametrize("name, shares, message", [
    ("", ["s"], "use 1-64 letters"), ("a b", ["s"], "use 1-64 letters"), ("x" * 65, ["s"], "use 1-64 letters"),
    ("a/b", ["s"], "use 1-64 letters"), ("alice", [], "at least one share"),
])
def test_bad_recipients_are_refused_saying_why(recipients, name, shares, message):
    with pytest.raises(RecipientError, match=message):
        recipients.create(name, shares, NOW + timedelta(days=1))
    assert recipients.list() == []


def test_the_profile_names_the_endpoint_the_token_and_its_expiry(recipients):
    alice, token = recipients.create("alice", ["sales"], datetime(2031, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    assert profile("https://share.example/delta-sharing/", token, alice) == {
        "shareCredentialsVersion": 1, "endpoint": "https://share.example/delta-sharing", "bearerToken": token,
        "expirationTime": "2031-01-02T03:04:05Z"}


def test_two_creates_of_one_name_cannot_both_succeed(recipients, redis_url, monkeypatch):
    recipients.create("alice", ["sales"], NOW - timedelta(seconds=1))  # expired: a new token may be issued
    other = Recipients(redis_url)
    looked_up = recipients._hashes_of

    def meanwhile(name):  # another command issues alice's token between this one's read and write
        other.create("alice", ["ops"], NOW + timedelta(days=1))
        return looked_up(name)

    monkeypatch.setattr(recipients, "_hashes_of", meanwhile)
    with pytest.raises(RecipientError, match="changed by another command meanwhile: try again"):
        recipients.create("alice", ["sales"], NOW + timedelta(days=1))
    assert recipients.get("alice").shares == ("ops",)  # the other command's, alone
