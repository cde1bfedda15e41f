"""The listing index answers exactly like a dict, in both of its lookup modes."""

import random

import pyarrow as pa
import pytest

from exporter.lakefs.addresses import _BINARY_SEARCH_LIMIT, AddressIndex

pytestmark = pytest.mark.unit


def _pairs(count: int) -> dict[str, str]:
    rng = random.Random(7)
    names = [f"p={rng.choice(['a', 'b b', 'ünï', '50%'])}/part-{i:05d}-{rng.getrandbits(64):x}.parquet" for i in range(count)]
    names += ["", "x", "x/", "deletion_vector_1.bin", "日本/ファイル"]
    return {name: f"s3://bucket/ns/data/g{i % 7}/c{i:06d}" for i, name in enumerate(names)}


@pytest.mark.parametrize("probes", [10, _BINARY_SEARCH_LIMIT * 3], ids=["binary search", "one pass over the listing"])
def test_lookups_answer_like_a_dict(probes):
    pairs = _pairs(5000)
    shuffled = list(pairs.items())
    random.Random(1).shuffle(shuffled)  # not in listing order: the index sorts
    index = AddressIndex.from_pairs(shuffled)
    rng = random.Random(2)
    keys = [rng.choice(list(pairs)) for _ in range(probes)] + ["absent", "p=a/part", None, "x"]
    keys += keys[:3]  # repeated keys
    assert index.get_many(keys) == [None if k is None else pairs.get(k) for k in keys]
    assert index.lookup(pa.array(keys, pa.string())).to_pylist() == [None if k is None else pairs.get(k) for k in keys]


def test_mapping_protocol():
    index = AddressIndex.from_pairs([("b", "s3://x/1"), ("a", "s3://y/z/2"), ("c", "no-folder")])
    assert (index["a"], index.get("c"), index.get("d"), index.get("d", "default")) == ("s3://y/z/2", "no-folder", None, "default")
    assert list(index) == ["a", "b", "c"] and len(index) == 3 and "b" in index and "d" not in index and 1 not in index
    with pytest.raises(KeyError):
        index["d"]
    empty = AddressIndex.from_pairs([])
    assert empty.get_many(["a"] * (_BINARY_SEARCH_LIMIT + 1)) == [None] * (_BINARY_SEARCH_LIMIT + 1) and len(empty) == 0


def test_a_checkpoints_paths_resolve_in_arrow_exactly_as_one_by_one():
    from exporter.export.resolve import PathResolver

    keys = {f"p={i % 3}/part-{i}.parquet": f"s3://b/ns/data/g{i % 5}/c{i}" for i in range(3000)}
    keys["a b/x%.parquet"] = "s3://b/ns/data/g1/with space"  # an address that needs quoting
    keys["t=10:00/y.parquet"] = "s3://b/ns/data/g2/y"
    paths = list(keys)[:2500] + ["a%20b/x%25.parquet", "t=10:00/y.parquet", "s3://elsewhere/z.parquet",
                                 "/abs/path.parquet", "missing.parquet", None]
    resolver = PathResolver(AddressIndex.from_pairs(keys.items()))
    plain = PathResolver(keys)
    one_by_one = [None if p is None else plain.resolve(p) for p in paths]
    assert resolver.resolve_array(pa.array(paths, pa.string())).to_pylist() == one_by_one
    assert one_by_one[-6:-1] == ["s3://b/ns/data/g1/with%20space", "s3://b/ns/data/g2/y", "s3://elsewhere/z.parquet",
                                 "/abs/path.parquet", None]


def test_folders_listed_apart_merge_into_one_index_in_any_order():
    from exporter.lakefs.addresses import AddressIndexBuilder

    def folder(pairs):
        builder = AddressIndexBuilder()
        builder.add_page([key for key, _ in pairs], [address for _, address in pairs])
        return builder

    merged = AddressIndexBuilder()
    for part in (folder([("z.parquet", "s3://b/3"), ("a.parquet", "s3://b/1")]),  # overlaps the others: sorted
                 folder([("p=2/x", "s3://b/p2")]), folder([("_delta_log/0.json", "s3://b/log")])):
        merged.extend(part)
    index = merged.build()
    assert list(index) == ["_delta_log/0.json", "a.parquet", "p=2/x", "z.parquet"]
    assert index.get_many(["p=2/x", "a.parquet", "_delta_log/0.json", "z.parquet"]) == ["s3://b/p2", "s3://b/1", "s3://b/log", "s3://b/3"]


def test_a_batch_in_key_order_is_looked_up_in_its_slice_of_the_listing():
    pairs = {f"part-{i:06d}.parquet": f"s3://b/ns/data/g/c{i}" for i in range(0, 20000, 2)}
    index = AddressIndex.from_pairs(pairs.items())
    keys = [f"part-{i:06d}.parquet" for i in range(5001, 12001)]  # half of them absent, first and last too
    assert index.get_many(keys) == [pairs.get(k) for k in keys]
    edges = ["part-000000.parquet", "part-019998.parquet", "a", "z"] + keys[:_BINARY_SEARCH_LIMIT]
    assert index.get_many(edges) == [pairs.get(k) for k in edges]
