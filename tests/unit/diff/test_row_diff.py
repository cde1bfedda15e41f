"""Row diff: deletion vectors decoded as the protocol frames them, columns matched by identity, and
removed/added rows matched as multisets (pure logic, no services)."""

from __future__ import annotations

import json
import struct
import zlib

import pyarrow as pa
import pytest
from pyroaring import BitMap

from exporter.delta.deletion_vectors import MAGIC, deleted_rows
from exporter.diff.rows.compute import _described, _named_as_right
from exporter.diff.rows.compare import changes, unmatched
from exporter.errors import CorruptLog

pytestmark = pytest.mark.unit
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def bitmap_array(rows: list[int]) -> bytes:
    return struct.pack("<iq", MAGIC, 1) + struct.pack("<i", 0) + BitMap(rows).serialize()


def z85(raw: bytes) -> str:
    raw += b"\0" * (-len(raw) % 4)
    out = []
    for start in range(0, len(raw), 4):
        word = int.from_bytes(raw[start:start + 4], "big")
        out += [_Z85[word // 85 ** p % 85] for p in range(4, -1, -1)]
    return "".join(out)


def test_a_stored_deletion_vector_is_read_at_its_offset():
    payload = bitmap_array([0, 7, 70_000])
    file = b"\x01" + b"padding" + struct.pack(">i", len(payload)) + payload + struct.pack(">I", zlib.crc32(payload))
    reads = []

    def read_range(name, start, end):
        reads.append((name, start, end))
        return file[start:end]

    descriptor = {"storageType": "p", "pathOrInlineDv": "s3://b/dv.bin", "offset": 8, "sizeInBytes": len(payload),
                  "cardinality": 3}
    assert list(deleted_rows(descriptor, read_range)) == [0, 7, 70_000]
    assert reads == [("s3://b/dv.bin", 8, 12 + len(payload))]


def test_an_inline_deletion_vector_and_none():
    payload = bitmap_array([2, 3])
    descriptor = {"storageType": "i", "pathOrInlineDv": z85(payload), "sizeInBytes": len(payload), "cardinality": 2}
    assert list(deleted_rows(descriptor, lambda *a: b"")) == [2, 3]
    assert list(deleted_rows(None, lambda *a: b"")) == []
    with pytest.raises(CorruptLog, match="magic"):
        deleted_rows({"storageType": "i", "pathOrInlineDv": z85(b"\0" * 16), "sizeInBytes": 16}, lambda *a: b"")


def table(rows: list[tuple], partition: str = "") -> pa.Table:
    return pa.table({"id": [r[0] for r in rows], "v": [r[1] for r in rows], "__partition": [partition] * len(rows)})


def diff(removed: list[tuple], added: list[tuple], key: list[str] = ()) -> tuple[list[dict], dict]:
    """The rows as the rows file holds them (values decoded), and the counts."""
    left, right = table(removed), table(added)
    kept_left, kept_right = unmatched(left, right, ["id", "v"])
    changed = changes(left.take(kept_left), right.take(kept_right), list(key))
    rows = [{**{k: v for k, v in row.items() if v is not None}, "values": json.loads(row["values"]),
             **({"before": json.loads(row["before"])} if row["before"] else {})}
            for batch in changed.batches(size=2) for row in batch]
    return rows, changed.counts


def test_a_rewrite_of_the_same_rows_changes_nothing_and_duplicates_count():
    rows, counts = diff([(1, "a"), (2, "b")], [(2, "b"), (1, "a")])  # OPTIMIZE, an identical overwrite
    assert rows == [] and counts["total"] == {"added": 0, "removed": 0, "updated": 0}
    rows, counts = diff([(1, "a")], [(1, "a"), (1, "a")])  # a duplicate appended: one more of the same row
    assert counts["total"]["added"] == 1 and rows[0]["values"] == {"id": 1, "v": "a"}


def test_an_update_is_a_removed_and_an_added_row_or_with_a_key_one_update():
    removed, added = [(1, "a"), (2, "b"), (3, "c")], [(1, "a"), (2, "B"), (3, "c")]  # copy-on-write UPDATE of id 2
    rows, counts = diff(removed, added)
    assert counts["total"] == {"added": 1, "removed": 1, "updated": 0}
    assert [(r["change"], r["values"]["v"]) for r in rows] == [("removed", "b"), ("added", "B")]
    rows, counts = diff(removed, added, key=["id"])
    assert counts["total"] == {"added": 0, "removed": 0, "updated": 1}
    assert rows == [{"change": "updated", "partition": "", "values": {"id": 2, "v": "B"}, "before": {"id": 2, "v": "b"},
                     "id": 0}]


MAPPED = {"delta.columnMapping.mode": "name"}


def described(columns: list[tuple[str, int]], configuration: dict | None = None, partitioned_by: tuple = ()):
    """A side as its metaData action describes it: (name, column-mapping id) per column; with
    column mapping, each column's physical name is `col-<id>`."""
    fields = [{"name": name, "type": "string", "nullable": True, "metadata": {
        "delta.columnMapping.id": column_id, "delta.columnMapping.physicalName": f"col-{column_id}"}}
        for name, column_id in columns]
    return _described("c1", None, {"schemaString": json.dumps({"type": "struct", "fields": fields}),
                                   "configuration": configuration or {}, "partitionColumns": list(partitioned_by)})


def test_a_renamed_column_keeps_its_identity_and_takes_its_new_name_on_the_left():
    left = described([("id", 1), ("amount", 2), ("day", 3)], MAPPED, partitioned_by=("day",))
    right = described([("id", 1), ("total", 2), ("date", 3)], MAPPED, partitioned_by=("date",))

    named, renamed = _named_as_right(left, right)

    assert renamed == [{"from": "amount", "to": "total"}, {"from": "day", "to": "date"}]
    assert named.columns == ["id", "total", "date"] and named.partition_columns == ["date"]
    assert named.physical == {"id": "col-1", "total": "col-2", "date": "col-3"}  # still read from the same data


def test_without_column_mapping_on_both_sides_columns_are_their_names():
    left = described([("id", 1), ("amount", 2)])  # mapping ids present but the mode is off: names rule
    right = described([("id", 1), ("total", 2)], MAPPED)

    named, renamed = _named_as_right(left, right)

    assert renamed == [] and named.columns == ["id", "amount"]


def test_a_dropped_column_whose_name_a_renamed_one_took_never_hides_it():
    # `total` (id 3) dropped, then `amount` (id 2) renamed to `total`: the left's `total` is a different column
    left = described([("id", 1), ("amount", 2), ("total", 3)], MAPPED)
    right = described([("id", 1), ("total", 2)], MAPPED)

    named, renamed = _named_as_right(left, right)

    assert renamed == [{"from": "amount", "to": "total"}]
    assert named.columns == ["id", "total", "total (dropped)"]
    assert named.physical == {"id": "col-1", "total": "col-2", "total (dropped)": "col-3"}


def test_rows_are_paged_by_their_position():
    from hooks.paging import row_pagination, row_start

    assert row_start(None) == 0 and row_start("3") == 4
    assert row_pagination([{"id": 0}, {"id": 1}], 0, 2, 5) == {"has_more": True, "next_offset": "1", "max_per_page": 1000,
                                                              "results": 2}
    assert row_pagination([{"id": 4}], 4, 2, 5)["has_more"] is False and row_pagination([], 9, 2, 5)["results"] == 0
    with pytest.raises(ValueError, match="row id"):
        row_start("x")
