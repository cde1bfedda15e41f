"""Table-relative object key -> physical address, for tables of millions of objects.

A listing of a million objects as a Python dict costs about 272 MiB; here it is Arrow arrays: the
keys, sorted as lakeFS lists them, and each address split into a dictionary-encoded folder and a
name (lakeFS writes many objects under one `data/<id>/` folder): about 100 MiB per million. A
batch of paths (a checkpoint's row group) is looked up in one pass over the listing, with the batch
as the hash table (`index_in`); a few paths (a JSON commit) by binary search.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Below this many distinct keys, binary search (about 20 µs a key) beats one pass over the listing.
_BINARY_SEARCH_LIMIT = 2000
_PAGE = 16_384  # entries made Arrow arrays at a time (`from_pairs`) and read back at a time (`__iter__`)


class AddressIndex(Mapping[str, str]):
    """Object key -> physical address, built from listing pages; read-only once built."""

    def __init__(self, keys: pa.ChunkedArray, folders: pa.ChunkedArray, names: pa.ChunkedArray):
        self._keys, self._folders, self._names = keys, folders, names
        self._sorted_view = _SortedKeys(keys)

    @classmethod
    def from_pairs(cls, pairs: Mapping[str, str] | Iterable[tuple[str, str]]) -> "AddressIndex":
        builder = AddressIndexBuilder()
        if isinstance(pairs, Mapping):  # already in memory: one page
            builder.add_page(list(pairs.keys()), list(pairs.values()))
            return builder.build()
        pairs = iter(pairs)
        while chunk := list(itertools.islice(pairs, _PAGE)):  # a page of Arrow at a time, not an object each
            keys, addresses = zip(*chunk)
            builder.add_page(list(keys), list(addresses))
        return builder.build()

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self._keys), _PAGE):
            yield from self._keys.slice(start, _PAGE).to_pylist()

    def __getitem__(self, key: str) -> str:
        address = self.get(key)
        if address is None:
            raise KeyError(key)
        return address

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._row(key) is not None

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        row = self._row(key)
        return default if row is None else self._address(row)

    def get_many(self, keys: Sequence[str | None]) -> list[str | None]:
        """The address of each key, None where there is no such object."""
        if len(keys) <= _BINARY_SEARCH_LIMIT:
            return [None if key is None else self.get(key) for key in keys]
        return self.lookup(pa.array(keys, pa.string())).to_pylist()

    def lookup(self, keys: pa.Array) -> pa.Array:
        """`get_many` for an Arrow string array: a string array, null where there is no such object."""
        rows = self.rows_of(keys)
        folders = self._folders.take(rows).cast(pa.string())
        return pc.binary_join_element_wise(folders, self._names.take(rows), "").combine_chunks()

    def rows_of(self, keys: pa.Array) -> pa.Array:
        """The listing row of each key (int64, null when absent)."""
        if not len(keys) or not len(self._keys):
            return pa.nulls(len(keys), pa.int64())
        encoded = pc.dictionary_encode(keys.cast(pa.string()))
        distinct = encoded.dictionary
        if len(distinct) <= _BINARY_SEARCH_LIMIT:
            rows = pa.array([self._row(key) for key in distinct.to_pylist()], pa.int64())
        else:
            # One pass over the part of the listing between the batch's least and greatest key (all
            # of it for paths in random order; a slice for a checkpoint written in path order),
            # probing a hash table of the batch's distinct keys.
            bounds = pc.min_max(distinct)
            low = bisect.bisect_left(self._sorted_view, bounds["min"].as_py())
            high = bisect.bisect_right(self._sorted_view, bounds["max"].as_py())
            position_in_batch = pc.index_in(self._keys.slice(low, high - low), value_set=distinct)
            found = position_in_batch.is_valid().to_numpy()
            rows_found = np.full(len(distinct), -1, dtype=np.int64)
            rows_found[position_in_batch.drop_null().to_numpy()] = np.flatnonzero(found) + low
            rows = pa.array(rows_found, mask=rows_found < 0)
        return rows.take(encoded.indices)

    def _row(self, key: str) -> int | None:
        position = bisect.bisect_left(self._sorted_view, key)
        return position if position < len(self._keys) and self._sorted_view[position] == key else None

    def _address(self, row: int) -> str:
        return self._folders[row].as_py() + self._names[row].as_py()

    @property
    def nbytes(self) -> int:
        return self._keys.nbytes + self._folders.nbytes + self._names.nbytes


class _SortedKeys(Sequence[str]):
    """The keys as a sequence `bisect` can search without converting them all to Python."""

    def __init__(self, keys: pa.ChunkedArray):
        self._keys = keys

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, index):  # type: ignore[override]
        return self._keys[index].as_py()


class AddressIndexBuilder:
    """Collects listing entries a page at a time as Arrow arrays: no Python object per entry outlives its page."""

    def __init__(self) -> None:
        self._keys: list[pa.Array] = []
        self._folders: list[pa.DictionaryArray] = []
        self._names: list[pa.Array] = []

    def add_page(self, keys: list[str], addresses: list[str]) -> None:
        """A page of entries (lists of equal length)."""
        if keys:
            folders, names = _split(addresses)
            self._keys.append(pa.array(keys, pa.string()))
            self._folders.append(folders)
            self._names.append(names)

    def add_arrays(self, keys: pa.Array, addresses: pa.Array) -> None:
        """Many entries at once (string arrays of equal length)."""
        self.add_page(keys.cast(pa.string()).to_pylist(), addresses.cast(pa.string()).to_pylist())

    def extend(self, other: "AddressIndexBuilder") -> None:
        """Append what `other` collected (a folder listed on another thread)."""
        self._keys += other._keys
        self._folders += other._folders
        self._names += other._names

    def build(self) -> AddressIndex:
        if not self._keys:
            empty = pa.chunked_array([], pa.string())
            return AddressIndex(empty, pa.chunked_array([], pa.dictionary(pa.int32(), pa.string())), empty)
        # Folders listed apart come in any order: put the pages in key order, sorting only if they
        # overlap. The pages stay chunks (no copy into one array: that would double the peak).
        order = sorted(range(len(self._keys)), key=lambda i: self._keys[i][0].as_py())
        keys = pa.chunked_array([self._keys[i] for i in order], pa.string())
        folders = pa.chunked_array([self._folders[i] for i in order]).unify_dictionaries()
        names = pa.chunked_array([self._names[i] for i in order], pa.string())
        self._keys, self._folders, self._names = [], [], []
        if len(keys) > 1 and pc.any(pc.less(keys[1:], keys[:-1])).as_py():  # lakeFS lists in order; others may not
            order = pc.sort_indices(keys)
            keys, folders, names = keys.take(order), folders.take(order), names.take(order)
        return AddressIndex(keys, folders, names)


def _split(addresses: list[str]) -> tuple[pa.DictionaryArray, pa.Array]:
    """Each address as its folder (up to its last `/`, each distinct folder kept once: `data/<id>/` is
    shared by many objects) and its name. In Python: 0.4 ms for a page of 1000, where two of Arrow's
    regular expressions over the same strings took 0.8-0.9 ms."""
    parts = [address.rpartition("/") for address in addresses]
    return (pa.array([folder + slash for folder, slash, _ in parts], pa.string()).dictionary_encode(),
            pa.array([name for _, _, name in parts], pa.string()))
