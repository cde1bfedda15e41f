"""Paths in a Delta log: relative or absolute, log paths to object keys, physical addresses to URIs.

A log path is a URI relative to the table root (PROTOCOL.md#add-file-and-remove-file); the
exporter turns each one into the absolute URI of the object lakeFS stores it at.
"""

import re
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc

# RFC 3986 scheme; requires the colon, so `p=a/x.parquet` (no scheme) stays relative.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# scheme, then `//authority` when present: the part of a physical address kept as is.
_SCHEME_AND_AUTHORITY = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*:(?://[^/]*)?)?")
# Besides letters, digits and `_.-~`: `/` separates keys, `=` names Hive partitions, `:` is a
# legal path character of an absolute URI (RFC 3986 pchar).
_KEY_SAFE = "/=:"
# Any character `quote` would change. An address without one (the usual lakeFS
# `s3://bucket/ns/data/gXXXX/cYYYY`) is its own URI.
NEEDS_QUOTING = re.compile(r"[^A-Za-z0-9_.~/=:-]")


def is_absolute_uri(path: str) -> bool:
    """True when `path` has a URI scheme (`s3://b/k`, `file:/tmp/x`, `abfss://c@a/k`)."""
    return _SCHEME.match(path) is not None


def log_path_to_key(log_path: str) -> str:
    """The object key, relative to the table root, that a relative log path names."""
    # Decode exactly once and never as a form: `+` is a literal plus (PROTOCOL.md#add-file-and-remove-file).
    return unquote(log_path)


def physical_address(log_uri: str) -> str:
    """The object an absolute log path names (what `physical_uri` encoded), decoded once like a
    relative one."""
    return log_path_to_key(log_uri)


def physical_uri(physical_address: str) -> str:
    """The URI a reader decodes back to `physical_address`: its key percent-encoded, never decoded."""
    if NEEDS_QUOTING.search(physical_address) is None:
        return physical_address  # same answer as below, fast enough for millions of checkpoint rows
    prefix = _SCHEME_AND_AUTHORITY.match(physical_address).group(0)
    return prefix + quote(physical_address[len(prefix) :], safe=_KEY_SAFE)


def is_absolute(log_path: str) -> bool:
    # A scheme-less `/x` is absolute too: readers never join it to the table root.
    # Testing for ":" first keeps the common relative path off the regex.
    return log_path.startswith("/") or (":" in log_path and is_absolute_uri(log_path))


def absolute_column(log_paths: pa.Array) -> pa.Array:
    """`is_absolute` of each log path of an Arrow string column."""
    return pc.or_(pc.starts_with(log_paths, "/"), pc.match_substring_regex(log_paths, "^" + _SCHEME.pattern))
