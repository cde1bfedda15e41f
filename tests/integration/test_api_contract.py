"""The live service against its own OpenAPI document: the document is valid OpenAPI, and
property-based requests made from it (schemathesis, a few hundred cases over every operation)
never get a 5xx and always get an answer its schema, status code and content type allow."""

from __future__ import annotations

import os

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from openapi_spec_validator import validate
from schemathesis.checks import (content_type_conformance, not_a_server_error, response_schema_conformance,
                                 status_code_conformance)

pytestmark = pytest.mark.integration
CASES_PER_OPERATION = 40  # 13 operations, several without parameters: about 300 requests


def api_token() -> str:
    return os.environ["LAKEFS_DELTA_WEBHOOK_TOKENS"].split(",")[0]  # the stack's service token (every repository)


def test_the_openapi_document_is_valid(service):
    document = httpx.get(service + "/openapi.json", timeout=10).json()
    validate(document)
    assert document["openapi"].startswith("3.1")
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert operation.get("responses"), f"{method} {path} documents no response"


def test_no_request_made_from_the_document_gets_a_server_error_or_an_undocumented_answer(service):
    schema = schemathesis.openapi.from_url(service + "/openapi.json")
    headers = {"Authorization": f"Bearer {api_token()}"}
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 11
    calls = []

    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=CASES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck),
                  database=None)
        def call(case):
            case.call_and_validate(base_url=service, headers=headers, checks=checks)
            calls.append(operation.label)

        call()
    assert len(calls) >= 100, f"only {len(calls)} requests were made"
    print(f"{len(calls)} requests over {len(operations)} operations")
