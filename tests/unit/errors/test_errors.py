"""Errors recorded by a worker and read back by the API keep their class: one mapping to HTTP applies."""

import pytest

from exporter.errors import BadRequest, ExporterError, MissingDataFiles, NotFound, ServiceUnavailable, rebuilt

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("error", [NotFound("no table"), BadRequest("bad ref"), ServiceUnavailable("lakeFS down"),
                                   MissingDataFiles("t", ["a.parquet"]), ExporterError("other")])
def test_an_error_rebuilt_from_its_name_and_message_has_its_class_message_and_permanence(error):
    again = rebuilt(type(error).__name__, str(error))
    assert (type(again), str(again), again.permanent) == (type(error), str(error), error.permanent)


def test_an_unknown_name_rebuilds_a_permanent_exporter_error():
    again = rebuilt("SomethingNew", "why")
    assert (type(again), str(again), again.permanent) == (ExporterError, "why", True)
