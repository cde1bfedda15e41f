"""What a repository's logs may name by absolute path for the service to read or sign: its storage
namespace (by path segment), not its `_lakefs/` but the answer's own location, not another
repository's namespace nested in it; decoded once, Hadoop's `s3a://`/`s3n://` as `s3://`."""

from __future__ import annotations

from urllib.parse import unquote

import pyarrow as pa
import pytest

from exporter.config import Config
from exporter.errors import PathOutsideRepository
from exporter.storage.layout import private_folders
from exporter.storage.scope import ReadScope
from tests.fakes import lake_of

pytestmark = pytest.mark.unit

NAMESPACE = "s3://lake/ns"
OWN = "s3://lake/ns/_lakefs/exported/v1/" + "a" * 64 + "/orders/"
SCOPE = ReadScope(NAMESPACE, allowed=("s3://imports/2026",), own=(OWN,),
                  excluded=("s3://lake/ns/nested-x", "s3://lake/other", NAMESPACE, "s3://lake"))


@pytest.mark.parametrize("path", [
    "s3://lake/ns/data/g1/c1",
    "s3://lake/ns/data/g1/c1%20copy",  # decoded once: `data/g1/c1 copy`
    "s3://lake/ns%2Fdata/g1/c1",  # an encoded `/` is a `/` once decoded, as every reader decodes it
    "s3a://lake/ns/data/g1/c1", "s3n://lake/ns/data/g1/c1",  # Hadoop's names for the same bucket and key
    "s3://lake/ns/data/.hidden/c1", "s3://lake/ns/data/g1/c1..parquet",  # dots inside a name are no dot segment
    "s3://lake/ns/nested-xy/c1",  # a sibling of the nested namespace, not in it
    OWN + "_delta_log/00000000000000000000.json", OWN + "data/deletes/d.parquet",  # the answer's own location
    "s3://imports/2026/a.parquet",  # allowed besides the namespace
    "s3://lake/ns/data/g1/c1%252e%252e",  # decoded once: a name holding `%2e%2e`, in no dot segment's place
])
def test_inside_the_namespace_is_read_as_decoded_once(path):
    assert path in SCOPE
    assert SCOPE.check(path) == unquote(path)  # what the reader reads: decoded once, never twice


@pytest.mark.parametrize("path", [
    "s3://lake/ns-other/data/c1",  # a sibling prefix: `ns-other/` is not in `ns/`
    "s3://lake/ns",  # the namespace is a folder, not an object
    "s3://lake/other/data/c1", "s3://other-bucket/ns/data/c1", "s3://imports/2026-private/a.parquet",
    "s3://lake/ns/nested-x/data/c1", "s3a://lake/ns/nested-x/data/c1",  # another repository nested in this one
    "s3://lake/ns/_lakefs/exported/v1/" + "a" * 64 + "/payroll/_delta_log/0.json",  # another table's export
    "s3://lake/ns/_lakefs/rowdiff/x/y/t/k.parquet", "s3://lake/ns/_lakefs/dummy",
    "s3://lake/ns/_lakefs/exported/v1/" + "a" * 64 + "/orders-2/data/x",  # not the own location, a sibling
    "s3://lake/ns/../other/data/c1", "s3://lake/ns/data/..", "s3://lake/ns/./_lakefs/x",  # dot segments
    "s3://lake/ns/%2e%2e/other/data/c1", "s3://lake/ns/%2E%2E/other/c1",  # ... once decoded
    "s3://lake/ns/%252e%252e/other/c1",  # ... decoded twice (a store or proxy that decodes again)
    "s3://lake/ns/data%2F..%2F..%2Fother/c1",  # `/` and `..` both encoded
    "s3://lake/ns//_lakefs/x", "s3://lake/ns/data//c1", "s3://lake//ns/data/c1",  # empty segments
    "S3://lake/ns/data/c1", "gs://lake/ns/data/c1", "https://lake/ns/data/c1", "file:///lake/ns/data/c1",
    "/lake/ns/data/c1", "data/c1",  # no scheme: a relative path is lakeFS's to resolve, never read by address
])
def test_outside_the_namespace_is_refused_naming_the_path_and_the_namespace_only(path):
    assert path not in SCOPE
    with pytest.raises(PathOutsideRepository) as refused:
        SCOPE.check(path)
    assert str(refused.value) == str(PathOutsideRepository(path, "s3://lake/ns/"))
    assert repr(path) in str(refused.value) and "s3://lake/ns/" in str(refused.value)


def test_a_namespace_holding_this_one_is_no_exclusion_and_only_the_nested_ones_count():
    nested = ReadScope("s3://lake/ns/nested-x", excluded=("s3://lake/ns", "s3://lake/ns/nested-x", "s3://lake/ns/n2"))
    assert "s3://lake/ns/nested-x/data/c1" in nested  # A's namespace holds this one: it excludes nothing
    assert "s3://lake/ns/data/c1" not in nested  # A's own objects are outside this one anyway
    parent = ReadScope("s3://lake/ns/", excluded=("s3://lake/ns/nested-x/",))
    assert "s3://lake/ns/nested-x/data/c1" not in parent and "s3://lake/ns/data/c1" in parent


def test_the_private_folders_follow_the_export_prefix():
    moved = Config(export_prefix="exports/out")
    assert private_folders(moved) == ("_lakefs/", "exports/out/", "exports/rowdiff/", "exports/iceberg-files/")
    scope = ReadScope(NAMESPACE, private=private_folders(moved))
    assert "s3://lake/ns/exports/out/main/latest/t/_delta_log/0.json" not in scope
    assert "s3://lake/ns/exports/rowdiff/a/b/t/k.parquet" not in scope
    assert "s3://lake/ns/exports/other/c1" in scope and "s3://lake/ns/_lakefs/x" not in scope
    assert "s3://lake/ns/exports/iceberg-files/t/main/c1/metadata/snap-1.avro" not in scope
    assert private_folders(Config()) == ("_lakefs/", "_lakefs/exported/", "_lakefs/rowdiff/", "_lakefs/iceberg-files/")


def test_a_column_is_checked_as_each_of_its_paths():
    inside = ["s3://lake/ns/data/g1/c1", "s3a://lake/ns/data/c2", "s3://lake/ns/data/%C3%A9", OWN + "x",
              "s3://imports/2026/a"]
    SCOPE.check_column(pa.array(inside * 3))
    SCOPE.check_column(pa.array([], pa.string()))
    for outside in ["s3://lake/ns-other/c1", "s3://lake/ns/nested-x/c1", "s3://lake/ns/_lakefs/x",
                    "s3://lake/ns//_lakefs/x", "s3://lake/ns/%2e%2e/other/c1", "s3://lake/ns/a/../../other/c1",
                    "gs://lake/ns/c1", "s3:///lake/ns/c1", "s3://lake/ns/a/./b"]:
        for at in (0, 2, 5):
            paths = inside[:at] + [outside] + inside[at:]
            with pytest.raises(PathOutsideRepository) as refused:
                SCOPE.check_column(pa.array(paths))
            assert refused.value.path == outside


def test_a_repositorys_scope_lists_the_repositories_when_it_checks_its_first_path_and_only_then(lakefs):
    """Most exports name no absolute path: their Iceberg step never lists the repositories. The first
    path checked does, once, and a repository nested in the namespace since then is excluded."""
    lake = lake_of(Config(), lakefs)
    namespace = lakefs.storage_namespace("repo")
    listings = lambda: [r for r in lakefs.requests if r[0] == "list_repositories"]  # noqa: E731
    scope = lake.read_scope("repo")
    lakefs.create_repository("nested", namespace + "/nested")
    assert listings() == []

    assert namespace + "/data/c1" in scope and namespace + "/nested/data/c1" not in scope
    scope.check_column(pa.array([namespace + "/data/c2"]))
    assert len(listings()) == 1
