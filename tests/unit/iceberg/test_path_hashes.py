"""The path hashes' BLAKE2b (our C, `_blake2b.c`) against hashlib's, and its guards on what it is given."""

import hashlib
import random

import numpy as np
import pyarrow as pa
import pytest

from exporter.iceberg._blake2b import digests as c_digests
from exporter.iceberg.path_hashes import digests, utf8_digests

pytestmark = pytest.mark.unit


def _hashlib(values: list[bytes]) -> list[int]:
    return [int.from_bytes(hashlib.blake2b(v, digest_size=8).digest(), "little", signed=True) for v in values]


def _strings() -> list[bytes]:
    """Every length up to three blocks and past (the block edges 127, 128, 129, 256 among them), and
    random ones, of random bytes."""
    rng = random.Random(51)
    return [rng.randbytes(n) for n in range(0, 400)] + [rng.randbytes(rng.randrange(2000)) for _ in range(300)]


def test_the_c_gives_hashlibs_digest_of_every_length():
    values = _strings()
    offsets = np.cumsum([0, *map(len, values)], dtype=np.int64)
    got = np.frombuffer(c_digests(b"".join(values), offsets), "<i8")
    assert got.tolist() == _hashlib(values)


def test_paths_as_text_and_as_arrow_columns_hash_alike():
    paths = [f"s3://lake/repo/data/g{i:04d}/part-{i}-día.parquet" for i in range(1000)] + [""]
    want = _hashlib([p.encode() for p in paths])
    assert digests(paths).tolist() == want
    for kind in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary()):
        column = pa.array(paths, kind)
        assert utf8_digests(column).tolist() == want, kind
        # a slice's offsets start inside the column's buffer
        assert utf8_digests(column.slice(17, 500)).tolist() == want[17:517], kind
    assert utf8_digests(pa.array([], pa.string())).tolist() == []
    assert digests([]).tolist() == []


def test_a_null_path_or_another_type_is_refused():
    with pytest.raises(ValueError, match="1 of 2 paths are null"):
        utf8_digests(pa.array(["a", None]))
    with pytest.raises(TypeError, match="string or binary expected"):
        utf8_digests(pa.array([1, 2]))


@pytest.mark.parametrize("size", [3, 100_000], ids=["with the GIL", "without it"])  # 64 KiB and more: without
@pytest.mark.parametrize("offsets, error", [
    ([0, 4], r"string 0: offsets 0 to 4 are past the data's"),
    ([0, 1, 200_000], r"string 1: offsets 1 to 200000 are past the data's"),
    ([2, 1], "string 0: offsets 2 to 1 are negative or out of order"),
    ([-1, 2], "string 0: offsets -1 to 2 are negative or out of order"),
    ([], "not one or more int64"),
])
def test_offsets_that_leave_the_data_are_refused_not_read(size, offsets, error):
    if size > 3 and offsets == [0, 4]:
        offsets = [0, size + 1]
        error = rf"string 0: offsets 0 to {size + 1} are past the data's {size} bytes"
    with pytest.raises(ValueError, match=error):
        c_digests(b"a" * size, np.array(offsets, np.int64))


def test_offsets_of_another_width_are_refused():
    with pytest.raises(ValueError, match="not one or more int64"):
        c_digests(b"abc", b"\x00\x00\x00")

