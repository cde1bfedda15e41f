"""The merge gate's webhook fails closed: a check that cannot finish in time, or cannot reach lakeFS,
blocks the merge with the reason (unless `checks.pass_when_unfinished`); a report's answer is 200 or 412."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from exporter.checks.gate import Finding, Report
from exporter.config import ChecksConfig, Config
from exporter.errors import ServiceUnavailable
from hooks import errors
from hooks.routes import checks
from tests.unit.hooks.asgi import call

pytestmark = pytest.mark.unit

EVENT = {"event_type": "pre-merge", "repository_id": "repo", "branch_id": "main", "source_ref": "f" * 64}


def answer(monkeypatch, check, event=EVENT, **settings):
    monkeypatch.setattr(checks, "check_change", check)
    app = FastAPI()
    errors.install(app)
    app.include_router(checks.router)
    app.state.services = SimpleNamespace(lake=None, diffs=None, config=Config(webhook_tokens=(SecretStr("t"),),
                                                                    checks=ChecksConfig(**settings)))
    return call(app, "POST", "/webhooks/lakefs/checks", json=event, headers={"X-Webhook-Token": "t"})


def test_a_check_past_its_time_blocks_with_the_reason_or_passes_when_told(monkeypatch):
    release = threading.Event()

    def slow(*_):
        release.wait(5)
        return Report("repo", "f", "main", "f", "m")

    try:
        blocked = answer(monkeypatch, slow, timeout_seconds=0.2)
        passed = answer(monkeypatch, slow, timeout_seconds=0.2, pass_when_unfinished=True)
    finally:
        release.set()
    assert blocked.status_code == 503 and "blocked: the check did not finish within checks.timeout_seconds (0.2 s)" \
        in blocked.text, blocked.text
    assert passed.status_code == 200 and "passed anyway (checks.pass_when_unfinished)" in passed.text


def test_lakefs_unreachable_blocks_with_the_reason(monkeypatch):
    def unreachable(*_):
        raise ServiceUnavailable("lakeFS unreachable during get commit repo@main: connection refused")

    blocked = answer(monkeypatch, unreachable)
    assert blocked.status_code == 503 and "blocked: lakeFS unreachable during get commit" in blocked.text


def test_a_report_is_answered_412_when_a_rule_failed_and_a_commit_is_checked_staged(monkeypatch):
    asked = []

    def report(lake, repository, source, destination, staged, diffs):
        asked.append((repository, source, destination, staged))
        return Report(repository, source, destination, source, "m", tables=["events"],
                      findings=[Finding("events", "schema", "column `amount` removed (double)")] if not staged else [])

    refused = answer(monkeypatch, report)
    assert refused.status_code == 412 and "- events: schema: column `amount` removed (double)" in refused.text
    commit = answer(monkeypatch, report, {"event_type": "pre-commit", "repository_id": "repo", "branch_id": "main"})
    assert commit.status_code == 200 and asked == [("repo", "f" * 64, "main", False), ("repo", "main", "main", True)]
    assert answer(monkeypatch, report, {**EVENT, "source_ref": ""}).status_code == 422
