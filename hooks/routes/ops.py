"""Operations: liveness, readiness (Redis and lakeFS, each probed with a deadline) and metrics."""

from __future__ import annotations

import asyncio

import prometheus_client
from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, PlainTextResponse, Response

from hooks.deps import AUTH_NONE_WARNING, ServicesDep
from hooks.models import Health, Readiness

router = APIRouter()


@router.get("/healthz", response_model=Health, summary="The process is up")
async def healthz():
    return {"status": "ok"}


@router.get("/readyz", response_model=Readiness, summary="Redis and lakeFS are reachable",
            responses={503: {"model": Readiness, "description": "a dependency is unreachable"}})
async def readyz(services: ServicesDep):
    loop = asyncio.get_running_loop()

    async def probe(check) -> bool:
        try:
            return await asyncio.wait_for(loop.run_in_executor(services.probes, check), timeout=3)
        except (asyncio.TimeoutError, RuntimeError):
            return False

    checks = {"redis": await probe(services.status.ping), "lakefs": await probe(services.lakefs().healthy)}
    warnings = [AUTH_NONE_WARNING] if services.config.api.auth == "none" else []
    return JSONResponse({"ready": all(checks.values()), "checks": checks, "warnings": warnings},
                        status_code=200 if all(checks.values()) else 503)


@router.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics",
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}})
async def metrics(services: ServicesDep):
    """This process's, plus the workers' counters kept in Redis."""
    text = await run_in_threadpool(services.metrics.render)  # reads Redis
    return Response(text, media_type=prometheus_client.CONTENT_TYPE_LATEST)
