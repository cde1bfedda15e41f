"""The status API's records validate every record a worker writes: an export whose Iceberg table
is still to be written (`pending`), and the Iceberg record as the Iceberg task leaves it."""

from __future__ import annotations

import pytest

from exporter.export.manifest import PENDING
from hooks.models import ExportRecord

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("iceberg", [
    PENDING,
    {"state": "written", "metadata_location": "s3://lake/repo/x/metadata/v1.metadata.json", "snapshot_ids": {"1": 7},
     "recorded_at": 1764140000.5},
    {"state": "failed", "reason": "gave up after 5 retries: the store answered 503", "recorded_at": 1764140000.5},
])
def test_an_export_record_with_each_iceberg_record_a_worker_writes_validates(iceberg):
    record = ExportRecord.model_validate({"state": "done", "ref": "main", "table": "events", "updated_at": 1764139999.0,
                                          "location": "s3://lake/repo/x/", "iceberg": iceberg})

    assert record.model_dump(exclude_none=True)["iceberg"] == iceberg
