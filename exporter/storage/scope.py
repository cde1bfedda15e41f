"""Which objects the service reads or signs, with its own object-store keys, when a Delta log names
them by absolute path: only the repository's own (issue 37).

Whoever may commit to a repository writes its logs, and the service's keys reach every repository
in the store; so an absolute path, decoded once as every reader here decodes it, is read or
presigned only when it lies

- in the repository's storage namespace, compared by path segment (`s3://b/ns-other/x` is not in
  `s3://b/ns/`), or in a location the configuration allows besides (`sharing.allowed_locations`);
- not in the namespace's private folders: lakeFS's `_lakefs/`, and this product's exports, branch
  tables and row diffs (`layout.private_folders`), but for the answer's own location where a
  caller names one (`own`);
- not in another repository's namespace inside those places (`excluded`: lakeFS accepts a
  repository whose namespace is `<A's namespace>/x`, so A's namespace holds all of its objects).

`s3a://` and `s3n://` are Hadoop's names for `s3://`: the same bucket and key, compared as
`s3://`. Any other scheme (an upper-case one too) is outside. A path whose key has an empty, `.` or
`..` segment, also once decoded a second time, is outside wherever it points: a store, client or
proxy may resolve it to another key. Relative paths are not this module's: lakeFS resolves them
within the repository, at the log's commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cached_property
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter.errors import PathOutsideRepository

_HADOOP_S3 = ("s3a", "s3n")  # Hadoop's file systems over S3: the same bucket and key as `s3://`
S3_SCHEMES = ("s3", *_HADOOP_S3)
LAKEFS_FOLDER = "_lakefs/"  # lakeFS's own objects under a storage namespace


def plain_address(path: str) -> str | None:
    """`path` decoded once, its scheme `s3://` for Hadoop's aliases; None for a path that is no
    `scheme://bucket/key` or whose key has an empty, `.` or `..` segment (decoded once or twice)."""
    address = unquote(path) if "%" in path else path
    scheme, separator, rest = address.partition("://")
    if not separator:
        return None
    _, _, key = rest.partition("/")
    for text in (key, unquote(key)) if "%" in key else (key,):
        segments = text.split("/")
        if "." in segments or ".." in segments or "" in segments[:-1]:
            return None
    return f"{'s3' if scheme in _HADOOP_S3 else scheme}://{rest}"


def folders(prefixes: Iterable[str]) -> tuple[str, ...]:
    """Prefixes as `within` compares them: decoded, `s3://`, each a folder (ending in `/`)."""
    return tuple((plain_address(prefix) or prefix).rstrip("/") + "/" for prefix in prefixes)


def within(path: str, folders: tuple[str, ...]) -> bool:
    """Whether the object at `path` (a URI) is under one of `folders` (from `folders`): never a path
    with an empty or dot segment, which a store could resolve elsewhere."""
    plain = plain_address(path)
    return plain is not None and plain.startswith(folders)


class ReadScope:
    """The objects absolute log paths may name for one repository (the module's rule).

    `namespace`: the repository's storage namespace; `allowed`: URI prefixes allowed besides;
    `private`: folders relative to the namespace that are refused (default `_lakefs/`); `own`:
    absolute locations inside them that are allowed (the answer's own export); `excluded`: other
    repositories' storage namespaces, any of them (those not inside what is allowed change nothing,
    nor do this one's and those holding it); a function giving them is called when a path is first
    checked (a listing of the repositories that most exports, naming no absolute path, never need)."""

    def __init__(self, namespace: str, allowed: Iterable[str] = (), private: Iterable[str] = (LAKEFS_FOLDER,),
                 own: Iterable[str] = (), excluded: Iterable[str] | Callable[[], Iterable[str]] = ()):
        (self.namespace,) = folders([namespace])
        self._inside = (self.namespace, *folders(allowed))
        private = sorted(self.namespace + folder.strip("/") + "/" for folder in private)
        self._private = tuple(folder for at, folder in enumerate(private) if not folder.startswith(tuple(private[:at])))
        self._own = folders(own)
        self._others = excluded

    @cached_property
    def _excluded(self) -> tuple[str, ...]:
        others = self._others() if callable(self._others) else self._others
        return tuple(other for other in folders(others)
                     if other.startswith(self._inside) and not self.namespace.startswith(other))

    def __contains__(self, path: object) -> bool:
        plain = plain_address(path) if isinstance(path, str) else None
        if plain is None or plain.startswith(self._excluded):
            return False
        return plain.startswith(self._own) or (plain.startswith(self._inside) and not plain.startswith(self._private))

    def check(self, path: str) -> str:
        """The address to read or sign for the log path `path`: `path` decoded once, as every reader
        decodes it (read that, never `path` itself); PathOutsideRepository when the scope does not
        hold it, before anything about the object is known."""
        if path not in self:
            raise PathOutsideRepository(path, self.namespace)
        return unquote(path) if "%" in path else path

    def check_column(self, paths: pa.Array) -> None:
        """`check` of each path of a string column, for a million-file snapshot: plain `s3://` paths
        (nothing to decode, no segment starting with `.`, no empty one) by their prefixes column-wide,
        the others one by one."""
        if not len(paths):
            return
        if isinstance(paths, pa.ChunkedArray):
            paths = paths.combine_chunks()
        plain = pa.array(_plain_rows(paths))
        admitted = pc.and_(_starts_with_any(paths, self._inside), pc.invert(_starts_with_any(paths, self._private)))
        if self._own:
            admitted = pc.or_(admitted, _starts_with_any(paths, self._own))
        if self._excluded:
            admitted = pc.and_(admitted, pc.invert(_starts_with_any(paths, self._excluded)))
        admitted = pc.and_(admitted.fill_null(False), plain)
        if admitted.true_count == len(paths):
            return
        odd = pc.invert(plain)
        if odd.true_count:
            admitted = pc.replace_with_mask(admitted, odd, pa.array(
                [path in self for path in paths.filter(odd).to_pylist()], pa.bool_()))
        if admitted.true_count < len(paths):
            self.check(paths[pc.index(admitted, False).as_py()].as_py())


def _plain_rows(paths: pa.Array) -> np.ndarray:
    """Which paths `plain_address` leaves as they are, but for their scheme: `s3://` URIs with no `%`, no
    segment that starts with `.` and no empty one. The column's bytes are searched at once; only
    the rows where one is found are told apart."""
    plain = pc.starts_with(paths, "s3://").fill_null(False).to_numpy(zero_copy_only=False)
    width = np.int64 if pa.types.is_large_string(paths.type) else np.int32
    offsets = np.frombuffer(paths.buffers()[1], width, len(paths) + 1, paths.offset * np.dtype(width).itemsize)
    values = paths.buffers()[2]
    data = np.frombuffer(values, np.uint8)[offsets[0]:offsets[-1]] if values is not None else np.zeros(0, np.uint8)
    offsets = offsets.astype(np.int64) - offsets[0]
    slash = data == ord("/")
    found = slash[:-1] & (slash[1:] | (data[1:] == ord(".")))  # `//`, `/.`
    found[offsets[:-1][plain] + 3] = False  # the `//` of each `s3://`
    at = np.concatenate([np.flatnonzero(found), np.flatnonzero(data == ord("%"))])
    if len(at):
        plain[np.searchsorted(offsets, at, side="right") - 1] = False
    return plain


def _starts_with_any(column: pa.Array, prefixes: tuple[str, ...]) -> pa.Array:
    found = pa.repeat(False, len(column))
    for prefix in prefixes:
        found = pc.or_(found, pc.starts_with(column, prefix))
    return found
