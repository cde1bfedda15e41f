"""An export's memory follows its row groups, not its table: a 200,000-file table (imported into
lakeFS in one job, see `bench.synthetic.import_objects`) exported in a process of its own, its
Delta log within a bound. The Iceberg step's memory at such sizes is the benchmark's to measure
(`python -m bench --sizes 200000`: "Iceberg metadata of the cold export above"; it measured 417 MiB
here for this table), not a test's."""

import io

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from bench.isolated import measure
from bench.synthetic import build_table
from exporter.lakefs.table_log import LIST_RUNS
from exporter.storage.objectstore import Upload

pytestmark = pytest.mark.integration

FILES = 200_000
PARTITIONS = 100
# A process at rest with the exporter imported is about 135 MiB. A dict of 200,000 listed objects
# plus the checkpoint, its Arrow tables and the rewritten bytes held whole (the exporter before
# streaming) came to about 370 MiB; streamed, the export measured 300 MiB.
PEAK_RSS_BOUND_MIB = 340


def test_a_200000_file_table_exports_within_a_memory_bound(lakefs, repository, s3):
    commit_id = build_table(lakefs, None, repository, FILES, commits_after=10, partitions=PARTITIONS)

    measured = measure("export", repository, "main", commit_id, f"t{FILES}", env={"LAKEFS_DELTA_ICEBERG_ENABLED": "false"})

    assert measured["ok"], measured["error"]
    # pages of 1000, the folders listed in LIST_RUNS runs (each one's last page partly full); no stat per file
    assert measured["lakefs_calls"] <= FILES // 1000 + LIST_RUNS + 10, measured
    assert measured["peak_rss_mib"] < PEAK_RSS_BOUND_MIB, measured
    bucket, _, prefix = measured["location"].removeprefix("s3://").partition("/")
    key = f"{prefix}_delta_log/{1:020d}.checkpoint.parquet"
    size = s3.head_object(Bucket=bucket, Key=key)["ContentLength"]
    assert size > Upload.PART_SIZE, f"the checkpoint ({size} bytes) went up in one part: multipart upload untested"
    checkpoint = pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read()), columns=["add"])
    paths = pc.struct_field(checkpoint.column("add"), "path").drop_null()
    assert len(paths) == FILES and pc.all(pc.starts_with(paths, "s3://")).as_py()
