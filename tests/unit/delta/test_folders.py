"""The folders a table's files live in (exporter/delta/folders.py): from JSON actions and from a
checkpoint's columns, the same rule; and through lakeFS at a commit (exporter/lakefs/table_folders.py)."""

from __future__ import annotations

import io

import deltalake
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exporter.config import Config
from exporter.delta.folders import file_folders
from exporter.lakefs.table_folders import TableFolders, table_folders
from exporter.parquet.splice import BytesSource
from tests.fakes import lake_of
from tests.unit.source_tables import SourceTable

pytestmark = pytest.mark.unit

# "8J)/...": a deletion vector stored beside the table, under the random prefix `ab` (PROTOCOL.md#deletion-vector-descriptor-schema)
VECTOR = {"storageType": "u", "pathOrInlineDv": "ab" + "0" * 20, "offset": 1, "sizeInBytes": 4, "cardinality": 1}
ACTIONS = [
    {"add": {"path": "region=eu/day=1/part-0.parquet", "deletionVector": VECTOR}},
    {"add": {"path": "region=us/part-1.parquet"}},
    {"add": {"path": "part-root.parquet"}},  # at the root: no folder
    {"remove": {"path": "region=ap/part-2.parquet"}},
    {"cdc": {"path": "_change_data/cdc-0.parquet"}},
    {"add": {"path": "city=S%C3%A3o%20Paulo/part-3.parquet"}},  # escaped: decoded once
    {"add": {"path": "s3://elsewhere/table/x=1/part-4.parquet"}},  # absolute: no folder of the table
    {"add": {"path": "/abs/x=2/part-5.parquet"}},
    {"add": {"path": "name%2Fwith%2Fslashes.parquet"}},  # its last `/` is encoded
    {"metaData": {"id": "t"}}, {"commitInfo": {"operation": "WRITE"}},
]
FOLDERS = {"region=eu/day=1", "ab", "region=us", "", "region=ap", "_change_data", "city=São Paulo", "name/with"}


def test_the_folders_of_every_file_the_actions_name_relative_paths_only():
    assert file_folders([], ACTIONS) == FOLDERS


def test_a_checkpoints_columns_give_the_same_folders_as_its_actions():
    rows = [action for action in ACTIONS if set(action) & {"add", "remove"}]
    vector = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
                        ("sizeInBytes", pa.int32()), ("cardinality", pa.int64())])
    schema = pa.schema([("add", pa.struct([("path", pa.string()), ("deletionVector", vector)])),
                        ("remove", pa.struct([("path", pa.string()), ("deletionVector", vector)]))])
    table = pa.Table.from_pylist([{"add": row.get("add"), "remove": row.get("remove")} for row in rows], schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=3)
    from_checkpoint = file_folders([("00000000000000000010.checkpoint.parquet", BytesSource(buffer.getvalue()))], [])
    assert from_checkpoint == file_folders([], rows) == FOLDERS - {"_change_data"}


def test_a_tables_folders_at_a_commit_are_lakefs_paths_read_once(lakefs, tmp_path):
    source = SourceTable(lakefs, "repo", "orders", tmp_path / "orders").partitioned(1, 2)
    first = source.commit()
    deltalake.DeltaTable(str(tmp_path / "orders")).create_checkpoint()
    source.partitioned(3)
    head = source.commit()
    lake = lake_of(Config(), lakefs)
    assert table_folders(lake, "repo", first, "tables/orders") == ("tables/orders/part=1/", "tables/orders/part=2/")
    assert table_folders(lake, "repo", head, "tables/orders/") == \
        ("tables/orders/part=1/", "tables/orders/part=2/", "tables/orders/part=3/")  # checkpoint + a commit
    assert table_folders(lake, "repo", head, "tables/none") == ()
    kept = TableFolders(lake)
    assert kept.of("repo", head, "tables/orders") == table_folders(lake, "repo", head, "tables/orders")
    calls = lakefs.calls
    assert kept.of("repo", head, "tables/orders/") == kept.of("repo", head, "tables/orders")
    assert lakefs.calls == calls  # a commit's folders are read once
