"""lakeFS's answers to the service's own calls, as the errors a task retries or not."""

from __future__ import annotations

import json

import pytest
from lakefs_sdk.exceptions import ApiException

from exporter.config import LakeFSConfig
from exporter.errors import BadRequest, CredentialsRefused, NotFound, ServiceUnavailable
from exporter.lakefs.client import LakeFS

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("status,body,error,permanent", [
    (401, '{"message": "error authenticating request"}', CredentialsRefused, False),  # also while lakeFS recovers
    (404, '{"message": "not found"}', NotFound, True),
    (400, '{"message": "bad ref"}', BadRequest, True),
    (503, '{"message": "busy"}', ServiceUnavailable, False),
])
def test_lakefs_answers_become_errors_a_task_retries_or_not(status, body, error, permanent):
    def answered(**_):
        error = ApiException(status=status, reason="")
        error.body = body
        raise error

    with pytest.raises(error) as raised:
        LakeFS(LakeFSConfig())._call("get repository r", answered)
    assert raised.value.permanent is permanent
    assert str(raised.value).endswith(json.loads(body)["message"])
