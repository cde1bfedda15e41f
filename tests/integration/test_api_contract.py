"""The live service against its own OpenAPI document: the document is valid OpenAPI, and
property-based requests made from it (schemathesis, a few hundred cases over every operation)
never get a 5xx and always get an answer its schema, status code and content type allow."""

from __future__ import annotations

import json
import os
from urllib.parse import quote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from openapi_spec_validator import validate
from schemathesis.checks import (content_type_conformance, not_a_server_error, response_schema_conformance,
                                 status_code_conformance)

from tests.conftest import SERVICE_PORT

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


FUZZ_PORT = SERVICE_PORT + 52  # a service sharing one repository, for the Iceberg and sharing fuzz
HOSTILE = ["..", "%2e%2e", "a%2Fb", "\x1f", "a\x1fb\x1fc", "x" * 4000, "ü名", "rel%", "%", "main~1", " ..", "a\\b",
           "{}", "*", "%00", "\u202e", "-", "."]


def test_the_iceberg_and_sharing_routes_fuzzed_with_valid_and_hostile_names_give_no_server_error(
        processes, service, lakefs, config, repository, tmp_path):
    """schemathesis over every Iceberg catalog and Delta Sharing route (the Iceberg app publishes no
    document: its schema is made from the app here), then each route with names that exist and
    names chosen to break parsers (dot segments, `%`, the namespace separator, 4,000 characters)."""
    from exporter.config import IcebergConfig
    from hooks.deps import Services
    from hooks.iceberg.app import create_iceberg_app
    from exporter.lakefs.lake import Lake
    from tests.integration.test_delta_sharing import cli
    from tests.integration.test_iceberg_catalog import commit_delta_table
    from tests.integration.deltatables import export_one

    commit = commit_delta_table(lakefs, repository, tmp_path / "orders")
    iceberg = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
    assert export_one(iceberg, lakefs, repository, "main", commit, "orders").ok
    env = {"LAKEFS_DELTA_SHARING_SHARES": f"fuzz={repository}:main:*",
           "LAKEFS_DELTA_SHARING_ENDPOINT": f"http://127.0.0.1:{FUZZ_PORT}/delta-sharing"}
    fuzzed = processes.serve("service-fuzz", FUZZ_PORT, extra_env=env)
    profile = tmp_path / "fuzz.share"
    made = cli(env, "sharing", "recipient", "create", f"fuzz-{repository}", "--share", "fuzz", "--output", str(profile))
    assert made.returncode == 0, made.stderr
    recipient = {"Authorization": f"Bearer {json.loads(profile.read_text())['bearerToken']}"}
    api = {"Authorization": f"Bearer {api_token()}"}

    iceberg_app = create_iceberg_app(config, Services.start(config, Lake.connect(config)))
    schemas = [(schemathesis.openapi.from_dict(iceberg_app.openapi()), fuzzed + "/iceberg", api),
               (schemathesis.openapi.from_url(fuzzed + "/delta-sharing/openapi.json"), fuzzed + "/delta-sharing", recipient)]
    calls = []
    for schema, base_url, headers in schemas:
        for operation in [result.ok() for result in schema.get_all_operations()]:
            @given(case=operation.as_strategy())
            @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck), database=None)
            def call(case):
                case.call_and_validate(base_url=base_url, headers=headers, checks=[not_a_server_error])
                calls.append(operation.label)

            call()
    assert len(calls) >= 200, f"only {len(calls)} requests were made"

    namespace = f"{repository}%1Fmain"
    answers = []
    for name in ["orders", repository, "main", commit, *HOSTILE]:
        part = quote(name, safe="")
        answers += [
            httpx.get(f"{fuzzed}/iceberg/v1/namespaces/{part}", headers=api, timeout=30),
            httpx.get(f"{fuzzed}/iceberg/v1/namespaces", headers=api, params={"parent": name, "pageToken": name}, timeout=30),
            httpx.get(f"{fuzzed}/iceberg/v1/namespaces/{namespace}/tables/{part}", headers=api, timeout=30),
            httpx.get(f"{fuzzed}/iceberg/v1/namespaces/{repository}%1F{part}/tables/orders", headers=api, timeout=30),
            httpx.post(f"{fuzzed}/iceberg/v1/namespaces/{namespace}/tables/orders/commits/{part}/sign", headers=api,
                       json={"method": "GET", "uri": f"http://127.0.0.1:1/{part}", "headers": {}}, timeout=30),
            httpx.get(f"{fuzzed}/delta-sharing/shares/{part}/schemas/{part}/tables/{part}/metadata", headers=recipient,
                      timeout=30),
            httpx.post(f"{fuzzed}/delta-sharing/shares/fuzz/schemas/{quote(repository)}/tables/{part}/query",
                       headers=recipient, json={"version": 0, "predicateHints": [name]}, timeout=30),
        ]
    server_errors = [(a.request.method, str(a.request.url)[:200], a.status_code) for a in answers if a.status_code >= 500]
    assert not server_errors, server_errors
    assert any(a.status_code == 200 for a in answers), "no valid name was answered: the names reached nothing"
    print(f"{len(calls)} fuzzed requests, {len(answers)} named ones")
