"""The 8-byte hashes a manifest's data paths are looked up by: an append finds the manifests a
retired path is in, and the catalog's signer the files a table names (`catalog.iceberg.ReadersObjects`),
without reading a manifest. 8 bytes of BLAKE2b of the path's UTF-8.

The signer signs a file whose hash a table names, so the hash must be one whose collisions cannot be
made: a path crafted to share a named file's hash would be signed. MurmurHash3 (Iceberg's bucket
hash) took 9 ms for 100,000 paths where BLAKE2b takes 53 ms, but its collisions can be made (seed
or not); it is not used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np


def digests(paths: Iterable[str]) -> np.ndarray:
    """Each path's hash, in the order given."""
    return utf8_digests(p.encode() for p in paths)


def utf8_digests(paths: Iterable[bytes]) -> np.ndarray:
    """`digests` of paths in UTF-8 already (an Arrow array's, as the binary list of its data gives
    them: no `str` made for each, nor encoded back). The digests joined and read as one array: a
    Python int for each cost 0.1 s of a 100,000-file table's Iceberg step."""
    blake2b = hashlib.blake2b
    return np.frombuffer(b"".join(blake2b(p, digest_size=8).digest() for p in paths), "<i8")


def path_hashes(paths: Iterable[str]) -> np.ndarray:
    """The paths' hashes, sorted: what a manifest's paths are looked up by (a collision only costs
    reading the manifest)."""
    return np.sort(digests(paths))


def path_hash(path: str) -> int:
    """One path's hash (a manifest's `file_path`, as written)."""
    return int(digests([path])[0])


def hashes_of(raw: bytes) -> np.ndarray:
    """A manifest's path hashes as stored (`hashes_bytes`): 8 bytes each, little-endian; sorted here
    (an older writer kept them in its manifest's order)."""
    if len(raw) % 8:
        raise ValueError(f"path hashes of {len(raw)} bytes: not a whole number of 8-byte hashes")
    return np.sort(np.frombuffer(raw, "<i8"))


def hashes_bytes(hashes: np.ndarray) -> bytes:
    """Path hashes as a manifest keeps them beside it: 8 bytes each, little-endian (`hashes_of`)."""
    return hashes.astype("<i8").tobytes()
