"""Each app answers an error once, from its table: the API's `{"error": ...}` with a status, and
Delta Sharing's `{"errorCode": ..., "message": ...}`; a worker's failure read back answers the same."""


import httpx
import pytest
import redis
from fastapi import FastAPI

from exporter.diff.rows.spark import SparkJobFailed
from exporter.errors import (BadRequest, CorruptLog, InvalidParameter, NotFound, NotShared, ServiceUnavailable,
                             ShareNotFound, UnshareableTable, UnsupportedByClient, VersionOutOfRange, rebuilt)
from exporter.state.recipients import Unauthenticated
from hooks import errors as api_errors
from hooks.errors import Refusal, unauthenticated
from hooks.sharing import errors as sharing_errors
from hooks.sharing.errors import MalformedRequest
from tests.unit.hooks.asgi import call

pytestmark = pytest.mark.unit


class RaisingApp:
    """An app with one route, GET /fails, that raises `error`; its errors answered as `install` says."""

    def __init__(self, install, error: BaseException):
        self.app = FastAPI()
        install(self.app)

        @self.app.get("/fails")
        async def fails(amount: int = 1):
            raise error

    def request(self, method: str, path: str, **kwargs) -> httpx.Response:
        return call(self.app, method, path, base_url="http://api", **kwargs)

    def get(self, path: str, **kwargs) -> httpx.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs) -> httpx.Response:
        return self.request("POST", path, **kwargs)


@pytest.mark.parametrize("error, status, message", [
    (NotFound("no repository 'x'"), 404, "no repository 'x'"),
    (BadRequest("invalid ref name"), 400, "invalid ref name"),
    (CorruptLog("version 3 is missing"), 422, "version 3 is missing"),
    (ServiceUnavailable("lakeFS answered 502"), 503, "lakeFS answered 502"),
    (SparkJobFailed("executor lost"), 422, "executor lost"),  # for good: its attempts were spent (row_diff.spark)
    (rebuilt("NotFound", "gone"), 404, "gone"),  # a worker's failure, read back from the result cache
    (redis.ConnectionError("refused"), 503, "Redis cannot be reached: ConnectionError"),
    (Refusal(413, "body larger than 1048576 bytes"), 413, "body larger than 1048576 bytes"),
])
def test_the_api_answers_each_error_from_its_one_table(error, status, message):
    answer = RaisingApp(api_errors.install, error).get("/fails")
    assert (answer.status_code, answer.json()) == (status, {"error": message})


def test_the_api_answers_invalid_parameters_and_unknown_paths_in_its_own_body():
    client = RaisingApp(api_errors.install, NotFound("x"))
    invalid = client.get("/fails?amount=many")
    assert invalid.status_code == 400 and "amount" in invalid.json()["error"]
    assert client.get("/nowhere").status_code == 404 and "error" in client.get("/nowhere").json()


def test_the_page_gets_no_browser_sign_in_dialog():
    client = RaisingApp(api_errors.install, unauthenticated("sign in"))
    assert client.get("/fails").headers["www-authenticate"] == 'Basic realm="lakeFS"'
    assert "www-authenticate" not in client.get("/fails", headers={"X-Requested-With": "fetch"}).headers


@pytest.mark.parametrize("error, status, code, message", [
    (Unauthenticated("token revoked"), 401, "UNAUTHENTICATED", "token revoked"),
    (NotShared("share 'a' is not shared with this recipient"), 403, "PERMISSION_DENIED",
     "share 'a' is not shared with this recipient"),
    (ShareNotFound("no share 'z'"), 404, "RESOURCE_DOES_NOT_EXIST", "no share 'z'"),
    (NotFound("no object"), 404, "RESOURCE_DOES_NOT_EXIST", "no object"),
    (VersionOutOfRange("versions 5 to 8 are"), 400, "INVALID_PARAMETER_VALUE", "versions 5 to 8 are"),
    (InvalidParameter("timestamp 'x' is not in ISO 8601"), 400, "INVALID_PARAMETER_VALUE",
     "timestamp 'x' is not in ISO 8601"),
    (MalformedRequest("request body is not JSON"), 400, "MALFORMED_REQUEST", "request body is not JSON"),
    (UnsupportedByClient("only the delta response format"), 400, "UNSUPPORTED_OPERATION",
     "only the delta response format"),
    (UnshareableTable("the log has no start"), 500, "INTERNAL_ERROR", "the log has no start"),
    (CorruptLog("bad json"), 500, "INTERNAL_ERROR", "the table cannot be read now"),
    (ServiceUnavailable("lakeFS answered 502"), 503, "INTERNAL_ERROR",
     "a service this server needs (lakeFS, the object store) cannot be reached: try again"),
    (redis.ConnectionError("refused"), 503, "INTERNAL_ERROR", "the recipient store cannot be reached: try again"),
    (KeyError("bug"), 500, "INTERNAL_ERROR", "the server failed to answer; its log says why"),
])
def test_delta_sharing_answers_each_error_in_the_protocols_terms(error, status, code, message):
    answer = RaisingApp(sharing_errors.install, error).get("/fails")
    assert (answer.status_code, answer.json()) == (status, {"errorCode": code, "message": message})


def test_delta_sharing_answers_invalid_parameters_and_unknown_paths_in_the_protocols_terms():
    client = RaisingApp(sharing_errors.install, NotFound("x"))
    assert client.get("/fails?amount=many").json()["errorCode"] == "INVALID_PARAMETER_VALUE"
    assert client.get("/nowhere").json()["errorCode"] == "RESOURCE_DOES_NOT_EXIST"
    assert (client.post("/fails").status_code, client.post("/fails").json()["errorCode"]) == (405, "MALFORMED_REQUEST")
