"""lakeFS's webhook: the receiver only validates and queues; the work happens in the workers. A
202 means the event is in Redis; a 503 means it is not, so lakeFS records the hook run as failed
(and catch-up finds it)."""

from __future__ import annotations

import json
import logging
import re
import time
from typing import Any

import anyio
from fastapi import APIRouter, Header, Query
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from exporter.branch_tables.table import follows
from exporter.state.status import COMMIT_RECORD
from hooks.auth import matching_token
from hooks.deps import Services, ServicesDep
from hooks.errors import Refusal, problems
from hooks.models import EventIgnored, EventQueued, LakeFSEvent

log = logging.getLogger("lakefs_delta.hooks")
COMMIT_ID = re.compile(r"[0-9A-Za-z]{1,128}")  # lakeFS commit ids are hex; ASCII letters and digits only
QUEUED_EVENTS = {"post-commit", "post-merge", "post-create-tag"}
REF_FIELD = {"post-commit": "branch_id", "post-merge": "branch_id", "post-create-tag": "tag_id"}
router = APIRouter()


@router.post("/webhooks/lakefs", status_code=202, response_model=EventQueued,
             summary="Receive a lakeFS action event and queue its export",
             responses={200: {"model": EventIgnored, "description": "an event type that is not exported"},
                        **problems(400, 401, 413, 415, 422, 503)},
             openapi_extra={"requestBody": {"required": True, "content": {
                 "application/json": {"schema": LakeFSEvent.model_json_schema()}}}})
async def receive_event(request: Request, services: ServicesDep, x_webhook_token: str | None = Header(None),
                        token: str | None = Query(None, description="the webhook token, when no header carries it"),
                        branch_tables: str = Query("", description="comma-separated branch patterns that keep "
                                                   "branch tables (the action `install-actions` writes sets it)")):
    """post-commit, post-merge and post-create-tag are queued (202); the token is compared in
    constant time. 503 means the event is not in the queue, so lakeFS records the hook as failed."""
    started = time.monotonic()
    try:
        response = await _receive(services, request, x_webhook_token or token,
                                  [p.strip() for p in branch_tables.split(",") if p.strip()])
    except Refusal as exc:  # answered here, not by the app's table: counted, and without headers
        services.metrics.events_total.labels("unknown", f"rejected_{exc.status}").inc()
        log.warning("event rejected status=%d reason=%s", exc.status, exc)
        response = JSONResponse({"error": str(exc)}, status_code=exc.status)
    services.metrics.answer_seconds.observe(time.monotonic() - started)
    return response


async def _receive(services: Services, request: Request, offered: str | None, branch_patterns: list[str]) -> Response:
    config, events_total = services.config, services.metrics.events_total
    if matching_token(offered, config.webhook_tokens) is None:
        raise Refusal(401, "missing or wrong webhook token (header X-Webhook-Token or query parameter token)")
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise Refusal(415, f"content type must be application/json, not {content_type or 'missing'!r}")
    event = parse_event(await request.body())  # its size and depth checked at the edge (`hooks.edge`)
    event_type = event["event_type"]
    if event_type not in QUEUED_EVENTS or event_type not in config.events:
        events_total.labels(event_type[:40], "ignored").inc()
        return JSONResponse({"status": "ignored", "event_type": event_type}, status_code=200)
    repository, ref, commit_id = event["repository_id"], event[REF_FIELD[event_type]], event["commit_id"]
    try:
        tag = event_type == "post-create-tag"
        branch_table = not tag and follows(ref, [*config.branch_tables, *branch_patterns])
        task = await anyio.to_thread.run_sync(_publish, services, repository, ref, commit_id, tag, branch_table,
                                              limiter=services.webhook_threads)  # never waits for readers' threads
    except Exception as exc:  # kombu/redis raise many types when the broker is down
        events_total.labels(event_type, "unavailable").inc()
        log.error("event %s %s/%s ref=%s outcome=unavailable reason=%s", event_type, repository, commit_id, ref,
                  type(exc).__name__)
        return JSONResponse({"error": f"queue unavailable, event not accepted: {type(exc).__name__}"}, status_code=503)
    events_total.labels(event_type, "queued").inc()
    log.info("event %s %s/%s ref=%s outcome=queued task=%s", event_type, repository, commit_id, ref, task.id)
    return JSONResponse({"status": "queued", "task_id": task.id, "repository": repository, "ref": ref,
                         "commit_id": commit_id}, status_code=202)


def _publish(services: Services, repository: str, ref: str, commit_id: str, tag: bool, branch_table: bool):
    services.status.set_table(repository, ref, commit_id, COMMIT_RECORD, "queued")
    # a tag exports every table of its commit: the release must be readable as a whole
    return services.queue.send_task("lakefs_delta.export_commit", (repository, ref, commit_id, tag),
                                    {"branch_table": branch_table}, retry=True,
                                    retry_policy={"max_retries": 1, "interval_start": 0, "interval_step": 0.5})


def parse_event(body: bytes) -> dict[str, Any]:
    """lakeFS's event payload (shared/reference/lakefs-contract.md §1), checked field by field."""
    try:
        event = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Refusal(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(event, dict):
        raise Refusal(400, "body must be a JSON object")
    for field in ("event_type", "repository_id"):
        if not isinstance(event.get(field), str) or not event[field].strip():
            raise Refusal(422, f"`{field}` is required and must be a non-empty string")
    if event["event_type"] in QUEUED_EVENTS:
        for field in (REF_FIELD[event["event_type"]], "commit_id"):
            if not isinstance(event.get(field), str) or not event[field].strip():
                raise Refusal(422, f"`{field}` is required for {event['event_type']} events")
        commit_id = event["commit_id"]
        if not COMMIT_ID.fullmatch(commit_id):
            raise Refusal(422, "`commit_id` must be a lakeFS commit id")
        for field in ("repository_id", REF_FIELD[event["event_type"]]):
            if "/" in event[field] or len(event[field]) > 256:
                raise Refusal(422, f"`{field}` is not a valid lakeFS name")
    return event
