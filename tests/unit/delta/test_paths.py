"""Log paths to object keys, physical addresses to URIs, deletion vector file names."""

from urllib.parse import unquote

import pytest

from exporter.delta.deletion_vectors import relative_path
from exporter.delta.paths import is_absolute_uri, log_path_to_key, physical_uri
from exporter.errors import CorruptLog
from exporter.export.resolve import PathResolver

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "path",
    [
        "s3://bucket/k",
        "s3a://bucket/k",
        "file:/tmp/table/part.parquet",
        "file:///tmp/x",
        "abfss://c@acct.dfs.core.windows.net/k",
    ],
)
def test_uris_with_a_scheme_are_absolute(path: str) -> None:
    assert is_absolute_uri(path)


@pytest.mark.parametrize("path", ["part-0.parquet", "date=2024-01-01/part-0.parquet", "p=a%3Ab/x.parquet", "x=1/y:z"])
def test_table_relative_paths_are_not_absolute(path: str) -> None:
    assert not is_absolute_uri(path)


def test_plus_is_a_literal_plus_not_a_space() -> None:
    assert log_path_to_key("p=c+d/part.parquet") == "p=c+d/part.parquet"


def test_spark_double_encoded_percent_is_decoded_once() -> None:
    # Spark: value `a%b` -> Hive dir `p=a%25b` -> log path `p=a%2525b`.
    assert log_path_to_key("p=a%2525b/part.parquet") == "p=a%25b/part.parquet"


def test_encoded_space_and_non_ascii_decode_to_the_key() -> None:
    assert log_path_to_key("p=x%20y/part.parquet") == "p=x y/part.parquet"
    assert log_path_to_key("p=%C3%A9/part.parquet") == "p=é/part.parquet"
    assert log_path_to_key("p=é/part.parquet") == "p=é/part.parquet"  # Spark writes it raw


def test_a_plain_lakefs_address_is_its_own_uri() -> None:
    address = "s3://bucket/repo-ns/data/gabc123_x-y.z~/cdef"
    assert physical_uri(address) == address


@pytest.mark.parametrize(
    ("address", "uri"),
    [
        ("s3://bucket/ns/a b", "s3://bucket/ns/a%20b"),
        ("s3://bucket/ns/a%20b", "s3://bucket/ns/a%2520b"),  # a literal % in the key: never decoded
        ("s3://bucket/ns/é", "s3://bucket/ns/%C3%A9"),
        ("s3://bucket/ns/a#b?c", "s3://bucket/ns/a%23b%3Fc"),
        ("s3://bucket/ns/c+d", "s3://bucket/ns/c%2Bd"),
        ("s3://bucket/ns/date=2024-01-01/x", "s3://bucket/ns/date=2024-01-01/x"),
        ("abfss://c@acct.dfs.core.windows.net/a b", "abfss://c@acct.dfs.core.windows.net/a%20b"),
        ("file:/tmp/a b", "file:/tmp/a%20b"),
    ],
)
def test_physical_uri_encodes_only_the_key(address: str, uri: str) -> None:
    assert physical_uri(address) == uri


@pytest.mark.parametrize("key", ["a b", "100%", "é/ü", "a#b?c", "c+d", "p=a%25b/x y", "日本/データ"])
def test_a_reader_decoding_the_uri_once_gets_the_physical_key_back(key: str) -> None:
    assert unquote(physical_uri(f"s3://bucket/ns/{key}")) == f"s3://bucket/ns/{key}"


def test_protocol_example_deletion_vector_with_random_prefix() -> None:
    # PROTOCOL.md#json-example-1--on-disk-with-relative-path-with-random-prefix
    assert (
        relative_path("ab^-aqEH.-t@S}K{vb[*k^")
        == "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    )


def test_deletion_vector_written_by_delta_spark() -> None:
    # Delta Spark 4.4.0 DELETE wrote this descriptor and the file beside it, with no prefix.
    assert (
        relative_path("Ys#IoS6<adOUyLC}FIGm")
        == "deletion_vector_bbbeccd0-a844-4684-9da2-7dbdfa6e9319.bin"
    )


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("short", "shorter than"),
        ("ab^-aqEH.-t@S}K{vb[*k\"", "not a Z85 character"),
    ],
)
def test_malformed_deletion_vector_is_a_corrupt_log(value: str, complaint: str) -> None:
    with pytest.raises(CorruptLog, match=complaint):
        relative_path(value)


def test_a_z85_group_above_32_bits_decodes_to_its_low_32_bits_as_delta_decodes_it() -> None:
    """Delta's Base85Codec sums a group in a long and keeps `sum.toInt`, its low 32 bits: '$$$$$' is
    83 * (85^5 - 1) / 84 = 4,384,852,500 + ..., read modulo 2^32."""
    from exporter.delta.deletion_vectors import _z85_decode

    assert _z85_decode("$$$$$", "t") == ((83 * (85 ** 5 - 1) // 84) % 2 ** 32).to_bytes(4, "big")
    assert _z85_decode("HelloWorld", "t") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])  # ZeroMQ's own example


def test_a_last_z85_group_led_by_hashes_is_the_z85_crates_tail() -> None:
    """delta-rs and delta-kernel-rs write an inline vector of 34 bytes as 8 words and a last group
    '##093': 2 tail bytes, 0x0300 (delta-kernel-rs's test table cdf-table-with-dv, version 5, which
    delta-rs reads with row 3 deleted)."""
    from exporter.delta.deletion_vectors import CorruptLog, _z85_decode, deleted_rows

    assert _z85_decode("##093", "t") == b"\x03\x00"
    assert _z85_decode("HelloWorld#0000", "t") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B, 0, 0, 0])
    inline = {"storageType": "i", "pathOrInlineDv": "^Bg9^0rr910000000000iXQKl0rr91000005c8Xg##093", "sizeInBytes": 34,
              "cardinality": 1}
    assert list(deleted_rows(inline, read_range=None)) == [3]
    for broken in ("##%%%", "####0", "#####"):  # a tail above its byte count, or of no bytes
        with pytest.raises(CorruptLog, match="Z85"):
            _z85_decode(broken, "t")


ADDRESSES = {
    "date=2024-01-01/part-0001.parquet": "s3://bucket/ns/data/gabc/cdef",
    "p=a%25b/part.parquet": "s3://bucket/ns/data/g1/c1",
    "p=c+d/part.parquet": "s3://bucket/ns/data/g2/c2",
    "p=x y/part.parquet": "s3://bucket/imported/p=x y/part.parquet",
    "ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin": "s3://bucket/ns/data/g3/c3",
}


def test_resolver_maps_relative_log_paths_to_physical_uris() -> None:
    resolver = PathResolver(ADDRESSES)
    assert resolver.resolve("date=2024-01-01/part-0001.parquet") == "s3://bucket/ns/data/gabc/cdef"
    assert resolver.resolve("p=a%2525b/part.parquet") == "s3://bucket/ns/data/g1/c1"
    assert resolver.resolve("p=c+d/part.parquet") == "s3://bucket/ns/data/g2/c2"
    assert resolver.resolve("p=x%20y/part.parquet") == "s3://bucket/imported/p=x%20y/part.parquet"
    assert resolver.resolved == 4


def test_resolver_leaves_absolute_paths_alone_and_reports_missing_objects_as_none() -> None:
    resolver = PathResolver(ADDRESSES)
    assert resolver.resolve("s3://elsewhere/a%20b.parquet") == "s3://elsewhere/a%20b.parquet"
    assert resolver.resolve("/mnt/data/part.parquet") == "/mnt/data/part.parquet"
    assert resolver.resolve("vacuumed/part.parquet") is None
    assert (resolver.resolved, resolver.not_found) == (0, 1)


def test_the_same_log_path_always_yields_the_identical_string() -> None:
    resolver = PathResolver(ADDRESSES)
    first = resolver.resolve("p=x%20y/part.parquet")
    assert resolver.resolve("p=x%20y/part.parquet") is first  # memoised: the same object
    assert resolver.resolve_many(["p=c+d/part.parquet", "p=x%20y/part.parquet"]) == [
        resolver.resolve("p=c+d/part.parquet"),
        first,
    ]


@pytest.mark.parametrize("copies", [1, 600])  # small lists are checked in Python, large ones in Arrow
def test_resolve_many_agrees_with_resolve(copies: int) -> None:
    log_paths = ["p=x%20y/part.parquet", "s3://abs/x", "gone.parquet", "p=a%2525b/part.parquet"] * copies
    resolver = PathResolver(ADDRESSES)
    assert resolver.resolve_many(log_paths) == [PathResolver(ADDRESSES).resolve(p) for p in log_paths]
    assert (resolver.resolved, resolver.not_found) == (2 * copies, copies)


def test_resolver_finds_deletion_vector_files() -> None:
    resolver = PathResolver(ADDRESSES)
    assert resolver.resolve_deletion_vector("u", "ab^-aqEH.-t@S}K{vb[*k^") == "s3://bucket/ns/data/g3/c3"
    assert resolver.resolve_deletion_vector("u", "Ys#IoS6<adOUyLC}FIGm") is None


def test_a_colon_after_the_first_segment_is_a_relative_path() -> None:
    resolver = PathResolver({"t=10:00/part-9.parquet": "s3://bucket/ns/data/g9/c9"})
    assert resolver.resolve_many(["t=10:00/part-9.parquet", "t=10%3A00/part-9.parquet", "s3://b/t=10:00/x"]) == \
        ["s3://bucket/ns/data/g9/c9", "s3://bucket/ns/data/g9/c9", "s3://b/t=10:00/x"]


def test_the_column_rule_for_absolute_paths_is_the_one_for_a_path():
    import pyarrow as pa

    from exporter.delta.paths import absolute_column, is_absolute

    paths = ["part-0.parquet", "p=a:b/x.parquet", "s3://b/k", "/tmp/x", "file:/tmp/x", "abfss://c@a/k",
             "lakefs://r/main/x", "a b/%3A.parquet", "1x:y", ""]
    assert absolute_column(pa.array(paths, pa.string())).to_pylist() == [is_absolute(p) for p in paths]
