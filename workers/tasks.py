"""Celery tasks: they take ids, not objects, and call plain functions in `exporter`."""

from __future__ import annotations

from workers.app import app


@app.task(name="lakefs_delta.ping")
def ping(word: str) -> str:
    """Proves a worker is consuming from the broker."""
    return f"pong: {word}"
