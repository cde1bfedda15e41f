"""lakeFS's pre-merge and pre-commit hooks: the change against each table's declared rules
(`exporter.checks`), answered within lakeFS's hook timeout. 200 passes; 412 blocks, the body the
report lakeFS keeps with the hook run; 503 when the check could not finish (lakeFS or the store
unreachable, or past `checks.timeout_seconds`): a gate fails closed unless told otherwise."""

from __future__ import annotations

import logging

import anyio
from fastapi import APIRouter, Header, Query
from starlette.requests import Request
from starlette.responses import PlainTextResponse

from exporter.checks.gate import Report, check_change
from exporter.errors import ExporterError, ServiceUnavailable
from hooks.auth import matching_token
from hooks.deps import ServicesDep
from hooks.errors import Refusal, problems
from hooks.grant import grant_for
from hooks.models import CheckReport
from hooks.routes.webhook import parse_event

log = logging.getLogger("lakefs_delta.hooks")
CHECKED_EVENTS = ("pre-merge", "pre-commit")
router = APIRouter()


REPORT = {"text/plain": {"schema": {"type": "string"}}}


@router.post("/webhooks/lakefs/checks",
             summary="Check a merge or commit against each changed table's declared rules",
             responses={**problems(400, 401, 413, 415, 422),
                        200: {"description": "every rule of every changed table passed (or the event is not checked)",
                              "content": REPORT},
                        412: {"description": "a rule failed: the body is the report lakeFS keeps with the hook run",
                              "content": REPORT},
                        503: {"description": "the check could not finish (lakeFS or the store unreachable, too slow): "
                                             "blocked, the reason in the body", "content": REPORT}})
async def check_event(request: Request, services: ServicesDep, x_webhook_token: str | None = Header(None),
                      token: str | None = Query(None, description="the webhook token, when no header carries it")):
    config = services.config
    if matching_token(x_webhook_token or token, config.webhook_tokens) is None:
        raise Refusal(401, "missing or wrong webhook token (header X-Webhook-Token or query parameter token)")
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise Refusal(415, f"content type must be application/json, not {content_type or 'missing'!r}")
    event = parse_event(await request.body())
    event_type, repository = event["event_type"], event["repository_id"]
    if event_type not in CHECKED_EVENTS:
        return PlainTextResponse(f"lakefs-delta checks: {event_type} is not checked (only {', '.join(CHECKED_EVENTS)})\n")
    branch = event.get("branch_id")
    source = branch if event_type == "pre-commit" else event.get("source_ref")
    if not isinstance(branch, str) or not branch or not isinstance(source, str) or not source:
        raise Refusal(422, f"`branch_id`{' and `source_ref`' if event_type == 'pre-merge' else ''} are required "
                           f"for {event_type} events")
    try:
        report = await _checked(services, repository, source, branch, event_type == "pre-commit")
    except ExporterError as exc:  # too slow, lakeFS or the store unreachable, a log that cannot be read: never a silent pass
        return _unfinished(services, event_type, repository, source, branch, str(exc))
    log.info("check %s %s %s into %s passed=%s findings=%d", event_type, repository, source, branch, report.passed,
             len(report.findings))
    return PlainTextResponse(report.text(config.public_url), status_code=200 if report.passed else 412)


async def _checked(services, repository: str, source: str, destination: str, staged: bool = False) -> Report:
    """`check_change` on a thread of its own, within `checks.timeout_seconds`, else ServiceUnavailable
    (the check goes on in its thread; its answer is not awaited)."""
    seconds = services.config.checks.timeout_seconds
    try:
        with anyio.fail_after(seconds):
            return await anyio.to_thread.run_sync(check_change, services.lake, repository, source, destination, staged,
                                                  services.diffs, abandon_on_cancel=True)
    except TimeoutError:
        raise ServiceUnavailable(f"the check did not finish within checks.timeout_seconds ({seconds:g} s)") from None


def _unfinished(services, event_type: str, repository: str, source: str, branch: str, reason: str) -> PlainTextResponse:
    passes = services.config.checks.pass_when_unfinished
    log.warning("check %s %s %s into %s unfinished passed=%s reason=%s", event_type, repository, source, branch,
                passes, reason)
    outcome = "passed anyway (checks.pass_when_unfinished)" if passes else "blocked"
    return PlainTextResponse(f"lakefs-delta checks: {source} into {branch} ({repository}): {outcome}: {reason}\n",
                             status_code=200 if passes else 503)


@router.get("/repositories/{repository}/otf/refs/{destination}/checks/{source}", response_model=CheckReport,
            summary="The merge gate's report for merging source into destination, as the pre-merge hook would answer",
            responses=problems(400, 401, 403, 404, 422, 503))
async def check_report(request: Request, services: ServicesDep, repository: str, destination: str, source: str):
    """Computed now from the two refs' logs (what `lakefs-delta check` prints); the findings about
    tables the caller may not read are left out, the gate's answer (`passed`) is the whole one."""
    grant = await grant_for(request, repository, [destination, source])
    report = await _checked(services, repository, grant.commit(source), grant.commit(destination))
    commits = (report.source_commit, report.destination_commit)
    visible = await grant.readable([f for f in report.findings if not f.of_descriptor], lambda _: commits,
                                   lambda f: [f.path])
    visible += [f for f in report.findings
                if f.of_descriptor and await grant.may_read_object(report.source_commit, f.path)]
    tables = await grant.readable(report.tables, lambda _: commits, lambda name: [report.table_paths[name]])
    return {**report.as_dict(), "source": source, "destination": destination, "tables": tables,
            "findings": [f.as_dict() for f in visible]}
