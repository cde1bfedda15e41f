"""The 8-byte hashes a manifest's data paths are looked up by: an append finds the manifests a
retired path is in, and the catalog's signer the files a table names (`catalog.iceberg.ReadersObjects`),
without reading a manifest. 8 bytes of BLAKE2b of the path's UTF-8.

The signer signs a file whose hash a table names, so the hash must be one whose collisions cannot be
made: a path crafted to share a named file's hash would be signed. MurmurHash3 (Iceberg's bucket
hash) took 9 ms for 100,000 paths where BLAKE2b took 53 ms, but its collisions can be made (seed
or not); it is not used.

BLAKE2b is computed by our C (`_blake2b.c`), many paths a call, as Arrow holds a string column, and
without the GIL from 64 KiB of paths: hashlib's call per path held it for all of those 53 ms, one
core's work in a step otherwise on two (C: 28 ms, on either core). It gives hashlib's
`blake2b(path, digest_size=8)`.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa

try:
    from exporter.iceberg._blake2b import digests as _digests
except ImportError as exc:  # a source checkout not installed: the C is built at install
    raise ImportError(f"exporter/iceberg/_blake2b.c is not built ({exc}): install the project (`bash scripts/setup.sh`, "
                      "or `pip install -e .` with a C compiler and Python's headers)") from exc


def digests(paths: Iterable[str]) -> np.ndarray:
    """Each path's hash, in the order given."""
    encoded = [p.encode() for p in paths]
    offsets = np.zeros(len(encoded) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
    return np.frombuffer(_digests(b"".join(encoded), offsets), "<i8")


def utf8_digests(paths: pa.Array) -> np.ndarray:
    """`digests` of a string (or binary) column, from its buffers as they are: no `str` made for
    each path, nor encoded back (12 ms of 100,000 paths)."""
    if paths.null_count:
        raise ValueError(f"{paths.null_count} of {len(paths)} paths are null")
    large = pa.types.is_large_string(paths.type) or pa.types.is_large_binary(paths.type)
    if not (large or pa.types.is_string(paths.type) or pa.types.is_binary(paths.type)):
        raise TypeError(f"paths of type {paths.type}: string or binary expected")
    if not len(paths):  # its offsets buffer may be empty
        return np.empty(0, "<i8")
    _, offsets, data = paths.buffers()
    offsets = np.frombuffer(offsets, np.int64 if large else np.int32)[paths.offset:paths.offset + len(paths) + 1]
    if len(offsets) != len(paths) + 1:  # pyarrow refuses to make such an array; not hashed short if one came
        raise ValueError(f"{len(paths)} paths with {len(offsets)} offsets: a broken array")
    return np.frombuffer(_digests(b"" if data is None else data, offsets.astype(np.int64)), "<i8")


def path_hashes(paths: Iterable[str]) -> np.ndarray:
    """The paths' hashes, sorted: what a manifest's paths are looked up by (a collision only costs
    reading the manifest)."""
    return np.sort(digests(paths))


def path_hash(path: str) -> int:
    """One path's hash (a manifest's `file_path`, as written): the signer's, once a request
    (0.95 µs; `digests` of a list of one, 3.6 µs)."""
    raw = path.encode()
    return int.from_bytes(_digests(raw, np.array((0, len(raw)), np.int64)), "little", signed=True)


def hashes_of(raw: bytes) -> np.ndarray:
    """A manifest's path hashes as stored (`hashes_bytes`): 8 bytes each, little-endian; sorted here
    (an older writer kept them in its manifest's order)."""
    if len(raw) % 8:
        raise ValueError(f"path hashes of {len(raw)} bytes: not a whole number of 8-byte hashes")
    return np.sort(np.frombuffer(raw, "<i8"))


def hashes_bytes(hashes: np.ndarray) -> bytes:
    """Path hashes as a manifest keeps them beside it: 8 bytes each, little-endian (`hashes_of`)."""
    return hashes.astype("<i8").tobytes()
