"""Delta Sharing: the pure rules (response format, protocol shown to recipients, paging, names,
the answers' lines, the signing scope)."""

from __future__ import annotations

import datetime
import hashlib
import json
from unittest import mock

import pyarrow as pa
import pytest

from exporter.config import Config, ObjectStoreConfig, ShareConfig, load_config
from exporter.errors import (InvalidParameter, NotShared, PathOutsideRepository, UnshareableTable, UnsupportedByClient,
                             VersionOutOfRange)
from exporter.export.commit import export_table
from exporter.export.job import ExportAt
from exporter.sharing.catalog import NAME, Catalog, TableName, _schema_name, _split_schema, shared_name
from exporter.sharing.versions import Schema
from exporter.storage.layout import commit_root, export_location
from exporter.sharing.lines import _file_line, encode_lines, query_lines, range_protocol, response_format
from exporter.sharing.versions import SharedTable, shared_protocol
from exporter.storage.presign import Presigner
from exporter.storage.scope import ReadScope
from hooks.sharing import page
from hooks.sharing.errors import answer_of
from tests.fakes import MemoryStore
from tests.unit.source_tables import SourceTable
from tests.fakes import lake_of

pytestmark = pytest.mark.unit

STORE = ObjectStoreConfig(endpoint="http://127.0.0.1:19000", region="us-east-1", access_key_id="AKIDEXAMPLE",
                          secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
CONFIG = Config(object_store=STORE)
NOW = 1_795_000_000  # 2026-11-18


PLAIN = {"minReaderVersion": 1, "minWriterVersion": 2}
DV = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
      "writerFeatures": ["deletionVectors"]}


@pytest.mark.parametrize("header, protocol, answer", [
    (None, PLAIN, "parquet"),  # no header: the protocol's default
    ("responseformat=parquet", PLAIN, "parquet"),
    ("responseformat=delta", PLAIN, "delta"),  # one format asked: it is what is answered
    ("responseformat=delta,parquet;readerfeatures=deletionvectors", PLAIN, "parquet"),  # the server may choose
    ("responseformat=delta,parquet;readerfeatures=deletionvectors,columnmapping", DV, "delta"),
    ("ResponseFormat=Delta", DV, "delta"),  # keys and values are case-insensitive
])
def test_the_response_format_is_negotiated_as_the_protocol_says(header, protocol, answer):
    assert response_format(header, protocol) == answer


@pytest.mark.parametrize("header, words", [
    (None, "deletionVectors"),
    ("responseformat=parquet", "responseformat=delta"),
    ("responseformat=delta;readerfeatures=columnmapping", "does not declare: deletionVectors"),
])
def test_a_table_with_reader_features_is_refused_in_a_format_that_cannot_carry_them(header, words):
    with pytest.raises(UnsupportedByClient) as refused:
        response_format(header, DV)
    assert answer_of(refused.value)[:2] == (400, "UNSUPPORTED_OPERATION")
    assert words in str(refused.value)


def test_features_of_the_log_layout_are_not_shown_to_recipients():
    v2 = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["v2Checkpoint"],
          "writerFeatures": ["v2Checkpoint", "appendOnly"]}
    assert shared_protocol(v2) == {"minReaderVersion": 1, "minWriterVersion": 7, "writerFeatures": ["appendOnly"]}
    assert response_format(None, shared_protocol(v2)) == "parquet"
    both = {**DV, "readerFeatures": ["deletionVectors", "v2Checkpoint"]}
    assert shared_protocol(both)["readerFeatures"] == ["deletionVectors"]


def table_in(namespace: str, allowed: tuple[str, ...] = (), excluded: tuple[str, ...] = ()) -> SharedTable:
    return SharedTable(MemoryStore(namespace=namespace), "t/", "t", 0,
                       scope=ReadScope(namespace, allowed=allowed, excluded=excluded))


def test_a_file_line_in_each_format():
    sign = table_in("s3://lakefs-data/").signer(Presigner(CONFIG, 600, now=NOW))
    add = {"path": "s3://lakefs-data/data/part-0.parquet", "partitionValues": {"region": "eu"}, "size": 573,
           "modificationTime": 1, "dataChange": True, "stats": '{"numRecords":3}',
           "deletionVector": {"storageType": "p", "pathOrInlineDv": "s3://lakefs-data/t/deletion_vector_1.bin",
                              "offset": 1, "sizeInBytes": 36, "cardinality": 2}}
    plain = {k: v for k, v in add.items() if k != "deletionVector"}
    parquet = _file_line("file", "add", plain, "parquet", sign)["file"]
    with pytest.raises(UnsupportedByClient, match="only the delta response format"):
        _file_line("file", "add", add, "parquet", sign)  # never the deleted rows back
    assert set(parquet) == {"url", "id", "partitionValues", "size", "stats", "expirationTimestamp"}
    assert parquet["partitionValues"] == {"region": "eu"} and parquet["size"] == 573
    delta = _file_line("cdf", "remove", add, "delta", sign, 4, 1700)["file"]
    action = delta["deltaSingleAction"]["remove"]
    assert action["path"].startswith("http://127.0.0.1:19000/lakefs-data/data/part-0.parquet?X-Amz-")
    assert action["deletionVector"]["pathOrInlineDv"].startswith("http://127.0.0.1:19000/lakefs-data/t/deletion_")
    assert action["deletionVector"]["storageType"] == "p" and action["stats"] == add["stats"]
    assert (delta["version"], delta["timestamp"]) == (4, 1700) and delta["id"] == parquet["id"]
    assert delta["deletionVectorFileId"] != delta["id"]
    relative = _file_line("file", "add", {**plain, "path": "part-1.parquet"}, "parquet", sign)
    assert relative["file"]["url"].startswith("http://127.0.0.1:19000/lakefs-data/t/part-1.parquet?")


@pytest.mark.parametrize("path, signed", [
    ("s3://lakefs-data/repo/data/a.parquet", True),
    ("s3a://lakefs-data/repo/data/a.parquet", True),  # the same object, Hadoop's scheme
    ("s3://lakefs-data/repo%2Fdata/a.parquet", True),  # percent-encoded, still under the namespace
    ("s3://lakefs-data/other-repo/data/a.parquet", False),  # another repository's namespace
    ("s3://lakefs-data/repo/../other-repo/a.parquet", False),  # no way out by dot segments
    ("s3://secrets/key.pem", False),
    ("s3://imports/2026/a.parquet", True),  # sharing.allowed_locations
    ("s3://imports-private/a.parquet", False),  # a prefix is a folder, not the start of a name
    ("s3://lakefs-data/repo/_lakefs/exported/main/x/_delta_log/0.json", False),  # lakeFS's own and exports
])
def test_only_objects_under_the_namespace_or_allowed_locations_are_signed(path, signed):
    sign = table_in("s3://lakefs-data/repo/", ("s3://imports",)).signer(Presigner(CONFIG, 600, now=NOW))
    if signed:
        assert "X-Amz-Signature=" in sign(path)[1].url
    else:
        with pytest.raises(PathOutsideRepository) as refused:
            sign(path)
        assert "outside the objects this repository's logs may name" in str(refused.value)


def test_pages_follow_their_token_to_the_end():
    items = [{"name": f"s{i:02d}"} for i in range(7)]
    seen, token = [], None
    while True:
        answer = page(items, 3, token)
        seen += answer["items"]
        token = answer.get("nextPageToken")
        if token is None:
            break
    assert seen == items
    assert page(items, 0, None)["items"] == [] and "nextPageToken" in page(items, 0, None)
    with pytest.raises(InvalidParameter):
        page(items, 3, "not base64!")


def test_schema_names_with_one_and_with_several_repositories():
    one = ShareConfig(name="s", repositories=["sales"])
    several = ShareConfig(name="s", repositories=["sales", "ops"])
    assert _schema_name(one, "sales", "main") == "main" and _split_schema(one, "main") == ("sales", "main")
    assert _schema_name(several, "ops", "dev_x") == "ops__dev_x"
    assert _split_schema(several, "ops__dev_x") == ("ops", "dev_x")
    assert _split_schema(several, "nope__main")[0] is None


def test_shares_from_the_environment_and_their_errors():
    config = load_config(environ={"LAKEFS_DELTA_SHARING_SHARES": "partner=sales+ops:main+v*:orders,all=sales"})
    partner, every = config.sharing.shares
    assert (partner.repositories, partner.refs, partner.tables) == (("sales", "ops"), ("main", "v*"), ("orders",))
    assert (every.refs, every.tables) == (("*",), ("*",))
    for bad in ("partner", "a.b=sales", "p=r:x:y:z"):
        with pytest.raises(Exception) as refused:
            load_config(environ={"LAKEFS_DELTA_SHARING_SHARES": bad})
        assert "sharing" in str(refused.value)
    assert json.dumps(config.masked())  # nothing unserialisable


def test_shares_are_listed_by_name_so_pages_miss_none():
    config = load_config(environ={"LAKEFS_DELTA_SHARING_SHARES": "zeta=repo-a,alpha=repo-b,mid=repo-c"})
    catalog = Catalog(lake_of(config, None), shares=["zeta", "alpha", "MID"])
    names, token = [], None
    while True:
        answer = page([{"name": share.name} for share in catalog.shares()], 1, token)
        names += [item["name"] for item in answer["items"]]
        token = answer.get("nextPageToken")
        if token is None:
            break
    assert names == ["alpha", "mid", "zeta"]
    assert Catalog(lake_of(config, None), shares=["alpha"]).share("ALPHA").name == "alpha"
    with pytest.raises(NotShared) as refused:
        Catalog(lake_of(config, None), shares=["alpha"]).share("zeta")
    assert answer_of(refused.value)[:2] == (403, "PERMISSION_DENIED")


def test_a_table_name_no_client_can_address_is_offered_under_a_stable_one_and_a_collision_under_none(caplog):
    derived = shared_name("delta-0.8.0")
    assert shared_name("orders") == "orders" and shared_name("orders") == shared_name("orders")
    assert derived == "delta-0_8_0_" + hashlib.sha256(b"delta-0.8.0").hexdigest()[:8]
    assert all(NAME.fullmatch(shared_name(name)) for name in ("-lead", "a b/c#d", "é.t", "x.y"))
    assert shared_name("x.y") != shared_name("x#y"), "the digest tells apart names that map to the same characters"

    config = load_config(environ={"LAKEFS_DELTA_SHARING_SHARES": "s=repo:v*:*.*+orders+delta*+x_*"})
    store = MemoryStore()
    for name in ("orders", "delta-0.8.0", "secret", "x.y", "x_y_" + hashlib.sha256(b"x.y").hexdigest()[:8]):
        store.put(export_location(config, "v1", "c1", name) + "_delta_log/00000000000000000000.json", b"{}")
    catalog = Catalog(lake_of(config, None), shares=["s"])
    catalog._store = lambda repository: store
    schema = Schema("v1", "repo", "v1", "tag", "c1")
    share = catalog.share("s")
    with caplog.at_level("WARNING"):
        listed = catalog.tables(share, schema)
    assert listed == [TableName(derived, "delta-0.8.0"), TableName("orders", "orders")], \
        "secret is not in the share; x.y's name is another table's: neither is offered, rather than the wrong one"
    assert "share the name" in caplog.text
    assert store.list_folders(commit_root(config, "v1", "c1"))


def logged(entries: dict[str, tuple[int, float]], head: int, ict: dict[int, int] | None = None) -> SharedTable:
    """A shared table over log files of these sizes and modification times, whose commits hold an
    in-commit timestamp where `ict` says."""
    store = MemoryStore()
    for name, (size, modified) in entries.items():
        store.put(f"t/_delta_log/{name}", b"x" * size)
        store._buckets.objects[(store.bucket, store.key(f"t/_delta_log/{name}"))].modified = modified
    table = SharedTable(store, "t/", "t", head)
    table.actions = lambda version: [{"commitInfo": {"inCommitTimestamp": ict[version]}}] \
        if ict and version in ict else [{"commitInfo": {}}]
    return table


def iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_timestamps_resolve_like_delta_readers_resolve_them():
    # versions 3..6 after a checkpoint at 3; version 5's file was written before version 4's
    entries = {f"{3:020d}.checkpoint.parquet": (10, 99.0), **{f"{v:020d}.json": (10, t) for v, t in
                                                             ((3, 100.0), (4, 102.0), (5, 101.0), (6, 110.0))}}
    table = logged(entries, head=6)
    assert [table.timestamp(v) for v in (3, 4, 5, 6)] == [100_000, 102_000, 102_001, 110_000]  # made increasing
    assert table.version_at(iso(102_000), at_or_after=False) == 4
    assert table.version_at(iso(102_001), at_or_after=False) == 5
    assert table.version_at(iso(105_000), at_or_after=True) == 6
    assert table.version_at(iso(999_000), at_or_after=False) == 6
    with pytest.raises(VersionOutOfRange, match="where the shared history"):
        table.version_at(iso(50_000), at_or_after=True)  # a change feed would silently miss versions 0-2
    with pytest.raises(VersionOutOfRange, match="before the oldest readable version"):
        table.version_at(iso(50_000), at_or_after=False)
    with pytest.raises(VersionOutOfRange, match="after the newest version"):
        table.version_at(iso(999_000), at_or_after=True)
    with_ict = logged(entries, head=6, ict={3: 1_000, 4: 2_000, 5: 3_000, 6: 4_000})
    assert with_ict.version_at(iso(2_500), at_or_after=False) == 4  # in-commit timestamps win over file times


def test_versions_and_change_ranges_are_checked_before_an_answer_starts():
    entries = {f"{5:020d}.checkpoint.parquet": (10, 1.0), **{f"{v:020d}.json": (10, 1.0) for v in (6, 7, 8)},
               f"{9:020d}.json": (10, 1.0)}
    table = logged(entries, head=8)  # version 9 is past the committed head: an interrupted append's
    assert table.first_version == 5 and max(table.commits(0, 9)) == 8
    with pytest.raises(VersionOutOfRange, match="versions 5 to 8 are"):
        table.snapshot(4)
    with pytest.raises(VersionOutOfRange, match="version 5 .* is not in its log: changes can be read from version 6"):
        table.check_commits(5, 8)  # the checkpoint's own commit was not exported
    table.check_commits(6, 8)


def test_a_long_log_is_listed_from_the_checkpoint_a_version_needs_not_from_its_start():
    """5,000 versions, a checkpoint every 10: a snapshot lists from the newest checkpoint at or below
    its version (`_last_checkpoint`'s for the head), a range only its own commits."""
    head = 4_995
    entries = {f"{v:020d}.json": (10, 1.0 + v) for v in range(head + 1)}
    entries |= {f"{v:020d}.checkpoint.parquet": (10, 1.0 + v) for v in range(10, head + 1, 10)}
    table = logged(entries, head=head)
    table.store.put("t/_delta_log/_last_checkpoint", b'{"version": 4990, "size": 3}')
    log = "t/_delta_log/"

    head_files = table._segment_files(head)
    assert sorted(head_files)[0] == f"{4990:020d}.checkpoint.parquet" and len(head_files) == 7
    assert table.store.listings == [(log, log + f"{4989:020d}.json", log + f"{4996:020d}")]

    table.store.listings.clear()
    old = table._segment_files(2_005)  # below _last_checkpoint: one window back finds checkpoint 2000
    assert min(old) == f"{2000:020d}.checkpoint.parquet" and max(old) == f"{2005:020d}.json"
    assert table.store.listings == [(log, log + f"{1005:020d}.json", log + f"{2006:020d}")]

    table.store.listings.clear()
    assert sorted(table.commits(100, 120)) == list(range(100, 121))
    assert table.store.listings == [(log, log + f"{99:020d}.json", log + f"{121:020d}")]
    assert table.timestamp(4_993) == 4_994_000  # the file time, from the head's listing: nothing listed again
    assert len(table.store.listings) == 1


def test_a_range_that_gains_deletion_vectors_needs_the_delta_format():
    table = mock.Mock()
    start = mock.Mock(version=1, protocol=PLAIN)
    table.snapshot.return_value = mock.Mock(protocol=DV)
    protocol = range_protocol(table, start, 4)
    assert protocol["readerFeatures"] == ["deletionVectors"] and protocol["minReaderVersion"] == 3
    assert response_format("responseformat=delta,parquet;readerfeatures=deletionvectors", protocol) == "delta"
    with pytest.raises(UnsupportedByClient):
        response_format(None, protocol)
    assert range_protocol(table, start, 1) == PLAIN  # one version: nothing read


def test_a_snapshots_files_are_whole_add_actions_without_the_checkpoints_parsed_columns():
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from exporter.delta.live_files import LiveFiles
    from exporter.delta.log import LogListing, select_segment
    from exporter.export.readback import ExportedLog

    add_type = pa.struct([("path", pa.string()), ("partitionValues", pa.map_(pa.string(), pa.string())),
                          ("size", pa.int64()), ("modificationTime", pa.int64()), ("dataChange", pa.bool_()),
                          ("stats", pa.string()), ("tags", pa.map_(pa.string(), pa.string())),
                          ("stats_parsed", pa.struct([("numRecords", pa.int64())])),
                          ("partitionValues_parsed", pa.struct([("region", pa.string())]))])
    adds = [{"path": f"s3://b/data/f{i}.parquet", "partitionValues": [("region", "eu")], "size": 10 + i,
             "modificationTime": 5, "dataChange": True, "stats": '{"numRecords":3}', "tags": None,
             "stats_parsed": {"numRecords": 3}, "partitionValues_parsed": {"region": "eu"}} for i in range(3)]
    sink = io.BytesIO()
    pq.write_table(pa.table({"add": pa.array(adds, add_type),
                             "metaData": pa.array([{"id": "t"}, None, None], pa.struct([("id", pa.string())])),
                             "protocol": pa.array([None, {"minReaderVersion": 1}, None],
                                                  pa.struct([("minReaderVersion", pa.int32())]))}), sink)
    later = b'{"remove":{"path":"s3://b/data/f1.parquet","dataChange":true}}\n'
    objects = {f"t/_delta_log/{2:020d}.checkpoint.parquet": sink.getvalue(), f"t/_delta_log/{3:020d}.json": later}
    sizes = {name.removeprefix("t/_delta_log/"): len(raw) for name, raw in objects.items()}
    listing = LogListing.from_names(sizes.items())
    files = list(LiveFiles(ExportedLog(MemoryStore(objects, namespace="s3://b"), "t/", sizes, listing, select_segment(listing)))
                 .files(whole=True))
    assert files == [{"path": f"s3://b/data/f{i}.parquet", "partitionValues": {"region": "eu"}, "size": 10 + i,
                      "modificationTime": 5, "dataChange": True, "stats": '{"numRecords":3}'} for i in (0, 2)]


_AWKWARD = '{"numRecords":3,"minValues":{"s":"\\"é\\" \\\\ \t\n\u0001\u007f 😀"}}'  # stats as a writer may escape


def _checkpoint_adds(*extra_fields):
    """A checkpoint batch as `LiveFiles.checkpoint_batches(whole=True)` yields it, with awkward values:
    paths to quote, decode or resolve (relative, `s3a://`, another bucket), partition values with
    nulls, quotes, backslashes, control and non-ASCII characters, stats with the same, sizes and
    stats missing, a map naming a key twice."""
    import pyarrow as pa

    strings = pa.map_(pa.string(), pa.string())
    vector = pa.struct([("storageType", pa.string()), ("pathOrInlineDv", pa.string()), ("offset", pa.int32()),
                        ("sizeInBytes", pa.int32()), ("cardinality", pa.int64())])
    kind = pa.struct([("defaultRowCommitVersion", pa.int64()), ("path", pa.string()), ("partitionValues", strings), ("size", pa.int64()),
                      ("modificationTime", pa.int64()), ("dataChange", pa.bool_()), ("stats", pa.string()),
                      ("tags", strings), ("deletionVector", vector), *extra_fields])
    awkward_path = "s3://lake/repo/data/" + "".join(chr(c) for c in range(0x20, 0x7F) if c not in b"%/") + ".parquet"
    adds = [
        {"path": "s3://lake/repo/data/p=1/a b+c.parquet", "partitionValues": [("p", "1"), ("q", None)], "size": 10,
         "stats": _AWKWARD, "tags": [("INSERTION_TIME", "1")], "modificationTime": 7, "dataChange": False},
        {"path": "s3://lake/repo/data/été/x.parquet", "partitionValues": [], "size": None, "stats": None,
         "defaultRowCommitVersion": 2},
        {"path": "s3://lake/repo/data/p=0/b.parquet", "partitionValues": [("p", 'a"b\\c'), ("r", "")],
         "stats": '{"minValues":{"s":"a\"b\\c"}}', "size": 1},
        {"path": "s3://lake/repo/data/%C3%A9/y.parquet", "partitionValues": [("k", 'ü"n\\ï\t😀')], "size": 0,
         "stats": ""},
        {"path": "relative/p=2/z.parquet", "partitionValues": None, "size": 3, "stats": '{"numRecords":1}'},
        {"path": "s3a://lake/repo/data/q.parquet", "partitionValues": [("p", "3")], "size": 4, "dataChange": True},
        {"path": "s3://imports/2026/p=4/v.parquet", "partitionValues": [("p", "4")], "size": 5},
        {"path": awkward_path, "partitionValues": [("p", "5")], "size": 6},
        {"path": "s3://lake/repo/data/%7e/.hidden/w.parquet", "partitionValues": [("p", None)], "size": 7},
    ]
    return pa.array(adds, kind)


def _sign():
    config = Config(object_store={"access_key_id": "AKIA", "secret_access_key": "s", "endpoint": "http://minio:9000"})
    table = SharedTable(MemoryStore(namespace="s3://lake/repo"), "t/", "t", 0,
                        scope=ReadScope("s3://lake/repo", allowed=("s3://imports",)))
    return table.signer(Presigner(config, 3600, now=1_700_000_000))


def _dict_lines(adds, fmt: str, sign) -> bytes:
    """The checkpoint batch's lines the one way `_file_line` builds them: a dict per file."""
    from exporter.delta.live_files import _plain
    from exporter.sharing.lines import _COMPACT

    return "".join(_COMPACT(_file_line("file", "add", _plain(add), fmt, sign)) + "\n"
                   for add in adds.to_pylist()).encode()


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_file_lines_built_from_arrow_columns_are_the_bytes_of_the_dict_lines(fmt):
    """The checkpoint's files are encoded from Arrow columns, a chunk of lines at a time; the line
    format's rule is `_file_line`: every chunk must be the bytes of its lines encoded one by one
    (the whole batch, and each row alone: what a batch holds decides how it is escaped and quoted)."""
    import pyarrow as pa

    from exporter.sharing.lines import _checkpoint_file_lines

    sign = _sign()
    adds = _checkpoint_adds()
    batches = [adds, *(adds.slice(row, 1) for row in range(len(adds))), adds.slice(1, 3)]
    with mock.patch("exporter.sharing.lines._file_line", side_effect=AssertionError("a dict per file")):
        built = [_checkpoint_file_lines(batch, fmt, sign) for batch in batches]

    assert built == [_dict_lines(batch, fmt, sign) for batch in batches]
    first = json.loads(built[0].splitlines()[0])["file"]
    values = first["partitionValues"] if fmt == "parquet" else first["deltaSingleAction"]["add"]["partitionValues"]
    assert values == {"p": "1", "q": None}
    twice = pa.array([{"path": "s3://lake/repo/d.parquet", "partitionValues": [("p", "1"), ("p", "2")]}],
                     pa.struct([("path", pa.string()), ("partitionValues", pa.map_(pa.string(), pa.string()))]))
    odd = pa.array([{"path": "s3://lake/repo/d.parquet", "stats": "{}", "weight": 0.5}])  # a float
    for batch in (twice, odd):  # encoded from their dicts
        assert _checkpoint_file_lines(batch, fmt, sign) == _dict_lines(batch, fmt, sign)


def test_deletion_vectors_are_signed_in_the_delta_format_and_refused_in_parquet():
    import pyarrow as pa

    from exporter.sharing.lines import _checkpoint_file_lines

    sign = _sign()
    adds = _checkpoint_adds().to_pylist()
    adds[0]["deletionVector"] = {"storageType": "p", "pathOrInlineDv": "s3://lake/repo/t/deletion_vector_1.bin",
                                 "offset": 1, "sizeInBytes": 36, "cardinality": 2}
    adds[2]["deletionVector"] = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
                                 "sizeInBytes": 40, "cardinality": 6}
    adds[5]["deletionVector"] = {"storageType": "p", "pathOrInlineDv": "s3://lake/repo/t/%C3%A9 dv.bin", "offset": 9,
                                 "sizeInBytes": 36, "cardinality": 2}
    with_vectors = pa.array(adds, _checkpoint_adds().type)
    with mock.patch("exporter.sharing.lines._file_line", side_effect=AssertionError("a dict per file")):
        built = _checkpoint_file_lines(with_vectors, "delta", sign)
    expected = _dict_lines(with_vectors, "delta", sign).decode()

    assert built == expected.encode()
    assert '"deletionVectorFileId"' in expected.splitlines()[5]
    with pytest.raises(UnsupportedByClient, match="deletion vector"):
        _checkpoint_file_lines(with_vectors, "parquet", sign)
    adds[1]["deletionVector"] = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "sizeInBytes": 4}
    with pytest.raises(UnshareableTable, match="relative to the table"):
        _checkpoint_file_lines(pa.array(adds, with_vectors.type), "delta", sign)
    adds[1]["deletionVector"] = {"storageType": "p", "pathOrInlineDv": "s3://secrets/dv.bin"}
    with pytest.raises(PathOutsideRepository, match="s3://secrets/dv.bin"):
        _checkpoint_file_lines(pa.array(adds, with_vectors.type), "delta", sign)


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_a_query_answers_each_live_file_once_in_the_bytes_of_its_dict_lines(fmt):
    """A snapshot query's whole answer, as `serve` streams it: protocol, metaData, the later commits'
    files, then the checkpoint's chunks of lines; the same NDJSON bytes as every line's dict encoded."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    from exporter.sharing.lines import _file_id, _metadata_line, _protocol_line, encode_lines, query_lines

    adds = _checkpoint_adds()
    actions = pa.table({"add": pa.concat_arrays([pa.nulls(1, adds.type), adds]),
                        "protocol": pa.array([PLAIN, *[None] * len(adds)]),
                        "metaData": pa.array([{"id": "t", "schemaString": "{}"}, *[None] * len(adds)])})
    sink = io.BytesIO()
    pq.write_table(actions, sink, row_group_size=4)  # the adds in two row groups
    later = [{"add": {"path": "s3://lake/repo/data/later.parquet", "partitionValues": {"p": "9"}, "size": 1,
                      "modificationTime": 2, "dataChange": True, "stats": '{"numRecords":1}'}},
             {"remove": {"path": adds[3]["path"].as_py(), "dataChange": True}}]
    store = MemoryStore({"t/_delta_log/" + f"{1:020d}.checkpoint.parquet": sink.getvalue(),
                         "t/_delta_log/" + f"{1:020d}.json": b"{}\n",
                         "t/_delta_log/" + f"{2:020d}.json": "".join(json.dumps(a) + "\n" for a in later).encode()},
                        namespace="s3://lake/repo")
    table = SharedTable(store, "t/", "t", 2, scope=ReadScope("s3://lake/repo", allowed=("s3://imports",)))
    presigner = Presigner(Config(object_store={"access_key_id": "AKIA", "secret_access_key": "s",
                                               "endpoint": "http://minio:9000"}), 3600, now=1_700_000_000)
    snapshot = table.snapshot()

    answer = b"".join(encode_lines(query_lines(snapshot, fmt, presigner, versioned=True)))

    sign = table.signer(presigner)
    dicts = [_protocol_line(snapshot.protocol, fmt), _metadata_line(snapshot.metadata, fmt, 2),
             *(_file_line("file", "add", add, fmt, sign) for add in snapshot.live.files(whole=True))]
    assert answer == b"".join(encode_lines(dicts))
    assert len(answer.splitlines()) == 2 + len(adds)  # one file removed, one added
    assert b"later.parquet" in answer.splitlines()[2]
    assert _file_id(adds[3]["path"].as_py()).encode() not in answer  # the removed one


def test_a_column_of_paths_is_signed_only_inside_the_namespace_never_in_a_nested_repositorys():
    sign = table_in("s3://lakefs-data/repo", excluded=("s3://lakefs-data/repo/nested-x",)).signer(
        Presigner(CONFIG, 600, now=NOW))
    inside = ["s3://lakefs-data/repo/data/a.parquet", "s3://lakefs-data/repo/data/b%20c.parquet"]
    assert all("X-Amz-Signature=" in url for url in sign.column(pa.array(inside))[1].to_pylist())
    for outside in ("s3://lakefs-data/repo/nested-x/data/a.parquet", "s3://lakefs-data/repo-other/data/a.parquet",
                    "s3://lakefs-data/repo/%2e%2e/repo-other/a.parquet"):
        with pytest.raises(PathOutsideRepository) as refused:
            sign.column(pa.array([*inside, outside]))
        assert refused.value.path == outside


@pytest.mark.parametrize("whose, namespace", [("other", "s3://lake/repo-other"), ("nested", "s3://lake/repo/nested-x")])
def test_a_shared_export_whose_log_names_another_repositorys_file_gets_no_url_for_it(lakefs, events, tmp_path,
                                                                                     whose, namespace):
    """A tag's export keeps the log's absolute paths as they are; sharing it signs none outside the
    repository: not a sibling namespace's file, nor that of a repository nested in this one's."""
    lakefs.create_repository(whose, namespace)
    secret = SourceTable(lakefs, whose, "salaries", tmp_path / whose)
    secret.append(1_000_001).commit()
    address = lakefs.physical_address(whose, "main", secret.data_files()[0])
    config = Config(object_store=STORE, sharing={"shares": [{"name": "s", "repositories": ["repo"]}]})
    events.append(1, 2).commit()
    hostile = {"add": {"path": address, "partitionValues": {}, "size": 500, "modificationTime": 1, "dataChange": True}}
    commit = events.commit(extra={f"tables/events/_delta_log/{1:020d}.json": (json.dumps(hostile) + "\n").encode()})
    lakefs.create_tag("repo", "v1", commit)
    exported = export_table(lake_of(config, lakefs), ExportAt("repo", "v1", commit), events.descriptor)
    assert exported.ok, exported.error
    shared = Catalog(lake_of(config, lakefs), ["s"]).table("s", "v1", "events")

    answered = []
    with pytest.raises(PathOutsideRepository) as refused:
        for chunk in encode_lines(query_lines(shared.snapshot(), "parquet", Presigner(config, 600, now=NOW), False)):
            answered.append(chunk)

    assert refused.value.path == address
    assert answer_of(refused.value) == (500, "INTERNAL_ERROR", str(PathOutsideRepository(address, "s3://lake/repo/")))
    assert address.removeprefix("s3://lake/") not in b"".join(answered).decode()  # no URL of the object
