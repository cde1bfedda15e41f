"""The Celery app's configuration as one process changes it."""

from __future__ import annotations

import pytest

from exporter.config import Config
from workers.app import app, configure

pytestmark = pytest.mark.unit


def test_a_process_configured_again_publishes_to_the_new_redis():
    """A long-lived process (the CLI's functions called in turn, a test session) that is pointed at
    another Redis sends its tasks there, not through the connections it opened to the first."""
    configure(Config(redis_url="redis://127.0.0.1:6390/1"))
    with app.producer_or_acquire() as producer:
        first = producer.connection.as_uri()

    configure(Config(redis_url="redis://127.0.0.1:6390/2"))
    with app.producer_or_acquire() as producer:
        second = producer.connection.as_uri()

    assert first.endswith("/1") and second.endswith("/2"), (first, second)


def test_a_worker_process_start_leaves_what_it_made_out_of_the_collectors_reach(monkeypatch):
    """`worker_process_init`: the start's objects frozen (a full collection walks only what tasks
    made since), even when a client could not be built (the first task builds it and says why)."""
    import gc

    import workers.delivery as delivery

    def unreachable(config):
        raise ConnectionError("lakeFS not answering")

    monkeypatch.setattr(delivery, "_services", unreachable)
    gc.unfreeze()
    try:
        delivery._warm()
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()
