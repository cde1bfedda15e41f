"""Unit-test fixtures: Redis in memory (fakeredis, Lua scripts included), and lakeFS with its object
store in memory (`tests/fakes.py`), new for each test."""

from __future__ import annotations

import uuid

import fakeredis
import pytest
import redis

from tests.fakes import FakeLakeFS, MemoryStore
from tests.unit.source_tables import SourceTable


@pytest.fixture
def redis_url(monkeypatch) -> str:
    """A Redis URL of this test's own: the one connection `exporter.state.connection` opens for it is
    an in-memory Redis (the URL is new, so no connection cached by an earlier test is reused)."""
    server = fakeredis.FakeServer()
    url = f"redis://memory-{uuid.uuid4().hex[:12]}:6379/0"
    real = redis.Redis.from_url

    def from_url(wanted: str, **options):
        return fakeredis.FakeRedis(server=server) if wanted == url else real(wanted, **options)

    monkeypatch.setattr(redis.Redis, "from_url", from_url)
    return url


@pytest.fixture
def fake_lakefs() -> FakeLakeFS:
    """An in-memory lakeFS over an in-memory object store (`fake_lakefs.store`), which tests pass the
    library in (`tests.fakes.lake_of`)."""
    return FakeLakeFS(MemoryStore())


@pytest.fixture
def lakefs(fake_lakefs) -> FakeLakeFS:
    """`fake_lakefs` with the repository `repo` on the storage namespace `s3://lake/repo`."""
    fake_lakefs.create_repository("repo", "s3://lake/repo")
    return fake_lakefs


@pytest.fixture
def events(lakefs, tmp_path) -> SourceTable:
    """The table `events` of `repo`, written by delta-rs and committed state by state."""
    return SourceTable(lakefs, "repo", "events", tmp_path / "events")
