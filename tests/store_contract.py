"""What every object store the library is given must do: one suite, run against the in-memory store
the unit tests use (tests/unit/storage/test_memory_store_contract.py) and against `ObjectStore` on
the stack's MinIO (tests/integration/test_object_store_contract.py), so a unit test's store answers
as the real one does. Each module importing these defines the fixture `store_at(namespace)`: a store
of that namespace, all of them over one set of buckets.
"""

from __future__ import annotations

import uuid

import pytest

from exporter.errors import NotFound

ODD = "refs/feature#1 +x%/tbl/_delta_log/00000000000000000000.json"  # names hold what URIs must encode


@pytest.fixture
def store(store_at, bucket):
    return store_at(f"s3://{bucket}/contract-{uuid.uuid4().hex[:8]}")


def test_an_object_put_reads_back_whole_and_by_range_and_exists_as_an_object_only(store):
    store.put("a/b.json", b"0123456789")

    assert store.get("a/b.json") == b"0123456789" and store.get_uri(store.uri("a/b.json")) == b"0123456789"
    assert store.get_range(store.uri("a/b.json"), 2, 5) == b"234" and store.get_range(store.uri("a/b.json"), 5, 5) == b""
    assert store.exists("a/b.json") and store.head_uri(store.uri("a/b.json"))
    assert not store.exists("a/") and not store.exists("a/b") and not store.head_uri(store.uri("a/c.json"))
    assert store.has_objects("a/") and not store.has_objects("b/")


def test_a_missing_object_is_not_found(store):
    with pytest.raises(NotFound):
        store.get("nothing/here.json")
    with pytest.raises(NotFound):
        store.get_range(store.uri("nothing/here.json"), 0, 4)
    with pytest.raises(NotFound):
        store.copy("nothing/here.json", "copy.json")


def test_a_name_uris_must_encode_is_listed_as_written_and_its_uri_is_encoded(store):
    store.put(ODD, b"{}")

    assert store.list_keys("refs/") == [ODD] and store.exists(ODD)
    uri = store.uri(ODD)
    assert "%23" in uri and "%25" in uri and "#" not in uri, uri
    assert store.get(ODD) == b"{}"
    store.copy(ODD, ODD + ".copy")
    assert store.get(ODD + ".copy") == b"{}"
    address = store.address(ODD)  # what reads by address take: the key as it is
    assert store.get_uri(address) == b"{}" and store.get_range(address, 0, 1) == b"{" and store.head_uri(address)
    store.copy_uri(address, "plain.json")
    assert store.get("plain.json") == b"{}"


def test_listings_are_sorted_relative_to_the_namespace_and_bounded_by_start_after_and_stop_at(store):
    for name in ("t/b", "t/a", "t/c/d", "t/e", "tx/f", "u/g"):
        store.put(name, name.encode())

    listed = store.list_objects("t/")
    assert [(name, size) for name, size, _ in listed] == [("t/a", 3), ("t/b", 3), ("t/c/d", 5), ("t/e", 3)]
    assert all(isinstance(modified, float) and modified > 1.6e9 for _, _, modified in listed)
    assert [name for name, _, _ in store.list_objects("t/", start_after="t/a", stop_at="t/e")] == ["t/b", "t/c/d"]
    assert store.list_keys("t") == ["t/a", "t/b", "t/c/d", "t/e", "tx/f"]  # a prefix, not a folder
    assert store.list_sizes("u/") == {"u/g": 3}
    assert store.list_folders("") == ["t", "tx", "u"] and store.list_folders("t/") == ["c"]
    assert store.list_objects("none/") == [] and store.list_folders("none/") == []


def test_a_listing_past_one_page_lists_every_key_and_folder_once_in_order(store):
    """More than the 1,000 keys one listing request answers: the pages follow each other, with a
    delimiter too, and `start_after` and `stop_at` bound them across a page's end."""
    from concurrent.futures import ThreadPoolExecutor

    names = [f"many/{i:04d}/x" for i in range(1_003)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda name: store.put(name, b"."), names))

    assert store.list_keys("many/") == names
    assert store.list_folders("many/") == [f"{i:04d}" for i in range(1_003)]
    assert store.list_keys("many/0998/") == ["many/0998/x"]
    assert [name for name, _, _ in store.list_objects("many/", start_after=names[990], stop_at=names[1_002])] \
        == names[991:1_002]
    assert store.has_objects("many/1002/") and not store.has_objects("many/1003/")


def test_copies_within_the_namespace_and_from_another_ones_address(store, store_at, bucket):
    other = store_at(f"s3://{bucket}/contract-{uuid.uuid4().hex[:8]}")
    other.put("src.parquet", b"PAR1")
    store.put("x.json", b"x")

    store.copy("x.json", "y.json")
    store.copy_uri(other.uri("src.parquet"), "copied.parquet")

    assert store.get("y.json") == b"x" and store.get("copied.parquet") == b"PAR1"
    assert other.list_keys("") == ["src.parquet"], "the other namespace's store lists only its own"


def test_delete_removes_what_it_names_in_batches_and_names_already_gone_are_no_error(store):
    names = [f"d/{i:05d}" for i in range(1001)]
    for name in names[:3] + names[-2:]:
        store.put(name, b"1")

    store.delete(names)  # 1001 names: two calls
    store.delete(["d/never-written"])

    assert store.list_keys("d/") == []


def test_an_upload_appears_only_when_completed_and_an_aborted_one_leaves_nothing(store):
    part = store.upload("big.parquet")
    body = b"p" * (part.PART_SIZE + 10)  # more than a part: a multipart upload on S3
    part.write(body[:part.PART_SIZE])
    part.write(body[part.PART_SIZE:])
    part.finish_writing()
    assert not store.exists("big.parquet") and part.size == len(body)
    part.complete()
    assert store.get("big.parquet") == body

    small = store.upload("small.json")
    small.write(b"{}")
    assert not store.exists("small.json")
    small.complete()
    assert store.get("small.json") == b"{}"

    dropped = store.upload("dropped.parquet")
    dropped.write(b"q" * (dropped.PART_SIZE + 1))
    dropped.abort()
    assert not store.exists("dropped.parquet")

    copied = store.upload("copied.parquet")
    copied.write(b"ignored")
    copied.copy_of(store.uri("small.json"), 2)
    copied.complete()
    assert store.get("copied.parquet") == b"{}" and copied.size == 2
