"""One request to an app in this process (its ASGI interface, no server): what the unit tests of the
HTTP service send."""

from __future__ import annotations

import asyncio

import httpx


def call(app, method: str, path: str, base_url: str = "http://service", **kwargs) -> httpx.Response:
    """`method path` to `app`; an error the app does not answer is its 500, as a server would send it."""
    async def send():
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
            return await client.request(method, path, **kwargs)
    return asyncio.run(send())
