"""The webhook answers whatever the readers do: with every thread of anyio's default limiter held
(slow Delta Sharing answers, diffs), an event is still queued at once, on the webhook's own capacity."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import anyio
import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from starlette.concurrency import run_in_threadpool

from exporter.config import Config
from hooks.deps import WEBHOOK_THREADS
from hooks.metrics import ServiceMetrics
from hooks.routes import webhook

pytestmark = pytest.mark.unit

EVENT = {"event_type": "post-commit", "repository_id": "repo", "branch_id": "main", "commit_id": "c" * 64}


def test_an_event_is_queued_at_once_while_readers_hold_every_default_thread():
    queued = []
    services = SimpleNamespace(
        config=Config(webhook_tokens=(SecretStr("t"),)), metrics=ServiceMetrics(dict),
        status=SimpleNamespace(set_table=lambda *args: True),
        queue=SimpleNamespace(send_task=lambda name, args, kwargs, **options: queued.append(args) or SimpleNamespace(id="t1")),
        webhook_threads=anyio.CapacityLimiter(WEBHOOK_THREADS))
    app = FastAPI()
    app.include_router(webhook.router)
    app.state.services = services
    release = threading.Event()

    async def scenario() -> tuple[int, float, int]:
        total = anyio.to_thread.current_default_thread_limiter().total_tokens
        readers = [asyncio.create_task(run_in_threadpool(release.wait)) for _ in range(int(total) + 10)]
        while anyio.to_thread.current_default_thread_limiter().borrowed_tokens < total:  # every reader thread taken
            await asyncio.sleep(0.01)
        started = time.monotonic()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
            answer = await asyncio.wait_for(client.post("/webhooks/lakefs", json=EVENT, headers={"X-Webhook-Token": "t"}),
                                            timeout=10)
        seconds = time.monotonic() - started
        release.set()
        await asyncio.gather(*readers)
        return answer.status_code, seconds, len(readers)

    status, seconds, readers = asyncio.run(scenario())

    assert status == 202 and queued == [("repo", "main", "c" * 64, False)]
    assert seconds < 5, f"the webhook waited {seconds:.1f} s for {readers} readers' threads"
