"""What an export writes and in which order; `_last_checkpoint`; paths into lakeFS.

The write order is what keeps readers out of a half-written export; the integration test
`test_export_trust.py` proves it with Spark and delta-rs, these tests pin the order itself.
"""

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exporter.delta.log import LogListing, select_segment
from exporter.errors import ExporterError, PathIntoLakeFS
from exporter.export.cold import _last_checkpoint
from exporter.export.log_writer import discard_export, write_log
from exporter.export.resolve import PathResolver
from exporter.lakefs.gateway_paths import LakeFSPaths
from exporter.lakefs.table_log import LogLayout
from tests.fakes import FakeLakeFS, MemoryStore

pytestmark = pytest.mark.unit


def name(version: int, suffix: str = "json") -> str:
    return f"{version:020d}.{suffix}"


def segment_of(*names: str):
    return select_segment(LogListing.from_names((n, 1) for n in names))


def test_with_a_checkpoint_the_commits_go_first_together_and_the_checkpoint_last():
    segment = segment_of(*(name(v) for v in range(0, 6)), name(3, "checkpoint.parquet"))
    outputs = {n: b"x" for n in [name(3), name(4), name(5), name(3, "checkpoint.parquet")]}
    store = MemoryStore()

    write_log(segment, [], lambda n: store.put("t/_delta_log/" + n, outputs.get(n, b"{}")))

    log = "t/_delta_log/"
    assert sorted(store.written[:3]) == [log + name(3), log + name(4), log + name(5)]  # readers make their times increase
    assert store.written[3:] == [log + name(3, "checkpoint.parquet"), log + "_last_checkpoint"]


def test_a_multipart_checkpoint_is_complete_only_with_its_last_part():
    parts = [f"{4:020d}.checkpoint.{p:010d}.{3:010d}.parquet" for p in (1, 2, 3)]
    segment = segment_of(*(name(v) for v in range(4, 7)), *parts)
    store = MemoryStore()

    write_log(segment, [], lambda n: store.put(n, b"{}"))

    assert sorted(store.written[:5]) == sorted([name(4), name(5), name(6), *parts[:2]])
    assert store.written[5:] == [parts[2], "_last_checkpoint"]


def test_v2_sidecars_are_written_before_the_checkpoint_that_names_them():
    v2 = f"{2:020d}.checkpoint.0f7bd4c4-ee57-4c5b-98ce-e3c7a2a8e1e2.parquet"
    segment = segment_of(name(2), name(3), v2, "_sidecars/a.parquet")
    store = MemoryStore()

    write_log(segment, ["_sidecars/a.parquet"], lambda n: store.put(n, b"{}"))

    assert sorted(store.written[:3]) == [name(2), name(3), "_sidecars/a.parquet"]
    assert store.written[3:] == [v2, "_last_checkpoint"]


def test_without_a_checkpoint_version_zero_starts_the_table_and_each_commit_is_written_once():
    segment = segment_of(name(0), name(1), name(2))
    store = MemoryStore()

    write_log(segment, [], lambda n: store.put(n, b"{}"))

    assert sorted(store.written[:2]) == [name(1), name(2)]  # together; readers take 0.json's time for them
    assert store.written[2:] == [name(0)]


def test_discarding_removes_what_makes_a_table_first():
    log = "t/_delta_log/"
    keys = [log + name(3), log + name(4), log + name(3, "checkpoint.parquet"), log + "_last_checkpoint",
            "t/_lakefs_export.json", log + "_sidecars/a.parquet", log + name(0)]
    store = MemoryStore({key: b"x" for key in [*keys, "u/_lakefs_export.json"]})

    assert discard_export(store, "t/") == len(keys)
    assert list(store.objects) == ["u/_lakefs_export.json"]  # another export stays

    first, then = store.deleted
    assert set(first) == {log + name(3, "checkpoint.parquet"), log + "_last_checkpoint", "t/_lakefs_export.json",
                          log + name(0)}
    assert set(then) == {log + name(3), log + name(4), log + "_sidecars/a.parquet"}


# ---------------------------------------------------------------- _last_checkpoint


def loaded_log(names: dict[str, int], last_checkpoint: dict | None) -> LogLayout:
    listing = LogListing.from_names(names.items())
    return LogLayout(addresses={}, listing=listing, segment=select_segment(listing), modification_times={},
                     last_checkpoint=last_checkpoint)


def no_schema_needed():
    raise AssertionError("the schema is read only for a multi-part checkpoint without checkpointSchema")


def test_last_checkpoint_keeps_what_still_holds_and_recomputes_sizes():
    checkpoint = name(10, "checkpoint.parquet")
    source = {"version": 10, "size": 7, "sizeInBytes": 100, "numOfAddFiles": 5, "checksum": "abc",
              "checkpointSchema": {"type": "struct", "fields": []}, "futureField": [1, 2],
              "v2Checkpoint": {"path": "x", "sizeInBytes": 1}}
    loaded = loaded_log({name(10): 1, checkpoint: 100}, source)

    document = json.loads(_last_checkpoint(loaded, 7, {checkpoint: 180}, no_schema_needed))

    assert document == {"version": 10, "size": 7, "sizeInBytes": 180, "numOfAddFiles": 5,
                        "checkpointSchema": {"type": "struct", "fields": []}, "futureField": [1, 2]}


def test_a_stale_source_last_checkpoint_contributes_nothing():
    checkpoint = name(20, "checkpoint.parquet")
    loaded = loaded_log({checkpoint: 5}, {"version": 10, "size": 3, "numOfAddFiles": 1})
    assert json.loads(_last_checkpoint(loaded, 4, {checkpoint: 9}, no_schema_needed)) == {"version": 20, "size": 4, "sizeInBytes": 9}


def test_multipart_without_a_source_last_checkpoint_gets_a_checkpoint_schema():
    parts = [f"{4:020d}.checkpoint.{p:010d}.{2:010d}.parquet" for p in (1, 2)]
    sink = io.BytesIO()
    schema = pa.schema([("txn", pa.struct([("appId", pa.string()), ("version", pa.int64())])),
                        ("commitInfo", pa.struct([("timestamp", pa.timestamp("us", "UTC"))])),
                        ("add", pa.struct([("path", pa.string()), ("partitionValues", pa.map_(pa.string(), pa.string())),
                                           ("tags", pa.list_(pa.string()))]))])
    pq.write_table(schema.empty_table(), sink, use_deprecated_int96_timestamps=True)
    loaded = loaded_log({p: 1 for p in parts}, None)

    document = json.loads(_last_checkpoint(loaded, 2, {parts[0]: len(sink.getvalue()), parts[1]: 4},
                                           lambda: pq.ParquetFile(io.BytesIO(sink.getvalue()))))

    assert document["parts"] == 2 and document["sizeInBytes"] == len(sink.getvalue()) + 4
    fields = {f["name"]: f["type"] for f in document["checkpointSchema"]["fields"]}
    assert fields["txn"]["fields"][1] == {"name": "version", "type": "long", "nullable": True, "metadata": {}}
    assert fields["commitInfo"]["fields"][0]["type"] == "timestamp"  # INT96: Spark's timestamp, not timestamp_ntz
    add = {f["name"]: f["type"] for f in fields["add"]["fields"]}
    assert add["partitionValues"] == {"type": "map", "keyType": "string", "valueType": "string", "valueContainsNull": True}
    assert add["tags"] == {"type": "array", "elementType": "string", "containsNull": True}


# ---------------------------------------------------------------- locations


# ---------------------------------------------------------------- paths into lakeFS


def lakefs_with_source_table() -> tuple[FakeLakeFS, str]:
    """Repository `repo` on namespace `s3://data/repo` whose commit (its id returned) holds a table's files."""
    lakefs = FakeLakeFS(endpoint="http://lakefs.example:8000")
    lakefs.create_repository("repo", "s3://data/repo")
    commit = lakefs.commit_files("repo", "main", {key: b"x" for key in
                                                  ("tables/src/part-1.parquet", "tables/src/p=a b/part-2.parquet",
                                                   "tables/src/dv/x.bin")})
    return lakefs, commit


def address(lakefs: FakeLakeFS, commit: str, path: str) -> str:
    return lakefs.physical_address("repo", commit, path)


def test_paths_at_a_commit_are_pinned_with_one_listing():
    lakefs, commit = lakefs_with_source_table()
    expected = [address(lakefs, commit, "tables/src/part-1.parquet"), address(lakefs, commit, "tables/src/p=a b/part-2.parquet")]
    resolver = PathResolver({}, LakeFSPaths(lakefs, "data"))
    paths = [f"s3a://repo/{commit}/tables/src/part-1.parquet", f"lakefs://repo/{commit}/tables/src/p=a%20b/part-2.parquet",
             f"s3a://repo/{commit}/tables/src/gone.parquet"]

    uris = resolver.resolve_many(paths)

    assert uris == [*expected, None] and all(uri.startswith("s3://data/repo/data/") for uri in expected)
    assert [c for c in lakefs.requests if c[0] == "list_objects"] == [("list_objects", "repo", commit, "tables/src/")]


def test_a_path_at_a_branch_is_refused_naming_it():
    resolver = PathResolver({}, LakeFSPaths(lakefs_with_source_table()[0], "data"))
    with pytest.raises(PathIntoLakeFS, match=r"s3a://repo/main/tables/src/part-1.parquet.*'main'.*not a commit id"):
        resolver.resolve("s3a://repo/main/tables/src/part-1.parquet")


def test_the_lakefs_endpoint_itself_is_refused_at_a_tag():
    lakefs, commit = lakefs_with_source_table()
    lakefs.create_tag("repo", "v1", commit)
    resolver = PathResolver({}, LakeFSPaths(lakefs, "data"))
    with pytest.raises(PathIntoLakeFS, match="'v1'"):
        resolver.resolve("http://lakefs.example:8000/repo/v1/tables/src/part-1.parquet")


def test_other_absolute_paths_stay_as_they_are():
    lakefs, _ = lakefs_with_source_table()
    resolver = PathResolver({}, LakeFSPaths(lakefs, "data"))
    paths = ["s3://data/repo/data/abc", "s3://other-bucket/x.parquet", "abfss://c@acct.dfs.core.windows.net/x",
             "gs://b/x", "s3://Not_A.Repo/x", "/local/x"]
    assert resolver.resolve_many(paths) == paths
    assert ("storage_namespace", "data") not in lakefs.requests  # the namespace's bucket holds physical objects


def test_a_p_deletion_vector_into_lakefs_is_pinned_too():
    lakefs, commit = lakefs_with_source_table()
    resolver = PathResolver({}, LakeFSPaths(lakefs, "data"))
    assert resolver.resolve_deletion_vector("p", f"s3://repo/{commit}/tables/src/dv/x.bin") == \
        address(lakefs, commit, "tables/src/dv/x.bin")


def test_a_checkpoint_opened_again_reads_its_footer_once():
    """The export opens each parquet checkpoint file several times (sidecars, summary, rewrite)."""
    from exporter.parquet.splice import open_parquet
    from exporter.storage.objectstore import ObjectSource

    sink = io.BytesIO()
    pq.write_table(pa.table({"add": pa.array([{"path": "a"}], pa.struct([("path", pa.string())]))}), sink)
    raw = sink.getvalue()

    store = MemoryStore({"s3://b/k": raw})
    source = ObjectSource(store, "s3://b/k", len(raw))
    for _ in range(3):
        assert open_parquet(source, "1.checkpoint.parquet").metadata.num_rows == 1
    assert len(store.range_reads) == 2, store.range_reads  # the magic and the tail, once each


def test_when_a_write_fails_the_writes_beside_it_end_before_the_error_is_raised():
    """The commits before `0.json` are written together: a failure is raised only once the writes
    beside it ended, so the discard that follows finds every object they made."""
    import threading
    import time

    segment = segment_of(*(name(v) for v in range(8)))
    done, lock = [], threading.Lock()

    def write(key: str) -> None:
        if key == name(3):
            raise ExporterError("injected: object store refused put")
        time.sleep(0.2)
        with lock:
            done.append(key)

    with pytest.raises(ExporterError, match="injected"):
        write_log(segment, [], write)
    ended = list(done)
    time.sleep(0.4)

    assert done == ended and name(0) not in done, (ended, done)  # nothing lands after, and no table
