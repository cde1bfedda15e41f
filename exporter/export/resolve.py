"""Resolving log paths to the absolute URIs of their objects, for tables of millions of files."""

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc

from exporter.delta.deletion_vectors import ABSOLUTE, relative_path
from exporter.delta.paths import NEEDS_QUOTING, is_absolute, log_path_to_key, physical_uri

# Below this many addresses, building an Arrow array costs more than checking each in Python.
_ARROW_BATCH = 1024


def _physical_uris(addresses: list[str | None]) -> list[str | None]:
    """`physical_uri` of each address (None stays None); one Arrow pass finds the few to encode."""
    if len(addresses) < _ARROW_BATCH:
        return [None if address is None else physical_uri(address) for address in addresses]
    needs_quoting = pc.match_substring_regex(pa.array(addresses, pa.string()), NEEDS_QUOTING.pattern)
    uris = list(addresses)
    for index in pc.indices_nonzero(needs_quoting.fill_null(False)).to_pylist():
        uris[index] = physical_uri(addresses[index])
    return uris


_UNSEEN = object()  # memo marker: None is a real answer (the object is missing)


class Addresses(Protocol):
    """Table-relative object key -> physical address (`exporter.lakefs.addresses.AddressIndex`)."""

    def get(self, key: str) -> str | None: ...

    def get_many(self, keys: Sequence[str | None]) -> list[str | None]: ...


# Absolute paths that may lead back into lakeFS: given the distinct ones, answers which resolve to
# which physical URI (None: the object is gone) and raises for those that cannot be pinned down.
AbsolutePathResolver = Callable[[list[str]], dict[str, "str | None"]]


class PathResolver:
    """Turns log paths into the absolute URIs of their objects.

    Readers reconcile add and remove on the raw path string, so one log path must always yield
    the byte-identical URI: resolution is a pure function of the path and the mapping (which must
    not change while the resolver is in use), and `resolve` memoises it for the commits that
    mention a file again. Absolute paths stay as they are, except those `absolute` maps (paths
    that address lakeFS itself, see `exporter.lakefs.gateway_paths`).
    """

    def __init__(self, physical_addresses: Addresses | Mapping[str, str], absolute: AbsolutePathResolver | None = None):
        if not hasattr(physical_addresses, "get_many"):
            from exporter.lakefs.addresses import AddressIndex

            physical_addresses = AddressIndex.from_pairs(physical_addresses)
        self._physical_addresses = physical_addresses
        self._absolute = absolute
        self._absolute_uris: dict[str, str | None] = {}
        self._uris: dict[str, str | None] = {}
        self._deletion_vector_uris: dict[str, str | None] = {}
        self.resolved = 0  # lookups that found an object
        self.not_found = 0  # lookups that found none

    def resolve(self, log_path: str) -> str | None:
        """The absolute URI for `log_path`; absolute paths unchanged; None when the object is gone."""
        uri = self._uris.get(log_path, _UNSEEN)
        if uri is _UNSEEN:
            uri = self._uris[log_path] = self.resolve_many([log_path])[0]
        return uri

    def resolve_many(self, log_paths: Sequence[str]) -> list[str | None]:
        """`resolve` of each path, in order, for the millions of distinct paths of a checkpoint.

        Not memoised: a memo entry per checkpoint row would cost as much as the lookup it saves.
        """
        uris, found = self._uncounted(log_paths)
        self.resolved += found
        self.not_found += uris.count(None)
        return uris

    def _uncounted(self, log_paths: Sequence[str]) -> tuple[list[str | None], int]:
        """`resolve_many` without counting: the URIs, and how many relative paths found an object."""
        # Inline tests keep this loop free of calls: a path with neither `:` nor a leading `/` is
        # relative (RFC 3986: no scheme), and one without `%` is its own key.
        keys = [
            None if ":" in log_path or log_path[:1] == "/" else (log_path_to_key(log_path) if "%" in log_path else log_path)
            for log_path in log_paths
        ]
        absolute = []
        for index in [i for i, key in enumerate(keys) if key is None] if None in keys else []:
            log_path = log_paths[index]
            if is_absolute(log_path):
                absolute.append(index)
            else:  # a colon after the first segment, e.g. `t=10:00/part-1.parquet`
                keys[index] = log_path_to_key(log_path)
        addresses = self._physical_addresses.get_many(keys)
        uris = _physical_uris(addresses)
        if absolute:
            mapped = self._resolve_absolute([log_paths[index] for index in absolute])
            for index in absolute:
                uris[index] = mapped[log_paths[index]]
        return uris, len(addresses) - addresses.count(None)

    def resolve_array(self, log_paths: pa.Array) -> pa.Array:
        """`resolve_many` of a string array (e.g. a checkpoint's distinct paths), in Arrow kernels:
        only absolute, percent-encoded and colon-holding paths, and addresses that need quoting,
        become Python strings."""
        lookup = getattr(self._physical_addresses, "lookup", None)
        if lookup is None or len(log_paths) < _ARROW_BATCH:
            return pa.array(self.resolve_many(log_paths.to_pylist()), pa.string())
        log_paths = log_paths.cast(pa.string())
        special = pc.fill_null(pc.match_substring_regex(log_paths, r"^/|[:%]"), False)
        addresses = lookup(pc.if_else(special, pa.scalar(None, pa.string()), log_paths))
        found = len(addresses) - addresses.null_count
        quoting = pc.fill_null(pc.match_substring_regex(addresses, NEEDS_QUOTING.pattern), False)
        fix = pc.or_(special, quoting)
        uris = addresses
        if pc.any(fix).as_py():
            positions = pc.indices_nonzero(fix).to_pylist()
            specials = [i for i in positions if special[i].as_py()]
            special_uris, special_found = self._uncounted([log_paths[i].as_py() for i in specials])
            found += special_found
            answers = dict(zip(specials, special_uris))
            replacements = [answers[i] if i in answers else physical_uri(addresses[i].as_py()) for i in positions]
            uris = pc.replace_with_mask(addresses, fix, pa.array(replacements, pa.string()))
        self.resolved += found
        self.not_found += uris.null_count - log_paths.null_count
        return uris

    def _resolve_absolute(self, paths: list[str]) -> dict[str, str | None]:
        if self._absolute is None:
            return {path: path for path in paths}
        unseen = sorted({path for path in paths if path not in self._absolute_uris})
        if unseen:
            answers = self._absolute(unseen)
            self._absolute_uris.update((path, answers.get(path, path)) for path in unseen)
        return {path: self._absolute_uris[path] for path in paths}

    def resolve_deletion_vector(self, storage_type: str, path_or_inline_dv: str) -> str | None:
        """The absolute URI of a deletion vector stored in a file: `u` (relative, Z85 id) or `p`
        (absolute, kept unless it addresses lakeFS); None when the object is gone."""
        if storage_type == ABSOLUTE:
            return self.resolve(path_or_inline_dv)
        uri = self._deletion_vector_uris.get(path_or_inline_dv, _UNSEEN)
        if uri is _UNSEEN:
            uri = self.resolve_deletion_vectors([path_or_inline_dv])[0]
            self._deletion_vector_uris[path_or_inline_dv] = uri
        return uri

    def resolve_deletion_vectors(self, relative_dvs: Sequence[str]) -> list[str | None]:
        """`resolve_deletion_vector` of many `u` descriptors (distinct) in one lookup; not memoised."""
        addresses = self._physical_addresses.get_many([relative_path(v) for v in relative_dvs])
        found = len(addresses) - addresses.count(None)
        self.resolved += found
        self.not_found += len(addresses) - found
        return [None if address is None else physical_uri(address) for address in addresses]
