"""Every key this product writes under a repository's storage namespace, in one place.

    <export_prefix>/<ref>/<commit id>/<table>/          a per-commit export; its manifest
                                                        `_lakefs_export.json` is written last
        metadata/ data/                                 with `iceberg.enabled`, the export as an Iceberg
                                                        table at the same location: `metadata/` (its
                                                        `v<head>.metadata.json` written last, before the
                                                        manifest) and position deletes under `data/`
    <export_prefix>/<branch>/latest/<table>/            a branch table; its state
                                                        `_lakefs_branch_table.json` is written last
    <parent of export_prefix>/rowdiff/<left>/<right>/<table>/<key>.parquet
                                                        the rows of a row diff the Spark job wrote
    <parent of export_prefix>/iceberg-files/<table>/<ref>/<commit id>/metadata/ data/
                                                        the manifests, manifest lists and delete files
                                                        a per-commit export's Iceberg table wrote;
                                                        later exports' tables name them where they are

`export_prefix` is `_lakefs/exported` unless configured. Refs and table names become path segments
through `location_segment`, which `segment_name` undoes. Every location is relative to the storage
namespace and ends with `/` (a folder), except the row diff's file.
"""

import posixpath
import re

from exporter.config import Config
from exporter.storage.scope import LAKEFS_FOLDER

MANIFEST = "_lakefs_export.json"  # an export is complete once this exists
STATE = "_lakefs_branch_table.json"  # a branch table's head, offset and followed commits
ICEBERG_FILES = "iceberg-files"  # beside the exports root: the Iceberg files per-commit exports share
LATEST = "latest"  # the commit folder of branch tables: never a commit id (those are 64 hex digits)
_SEGMENT_SAFE = re.compile(r"[A-Za-z0-9._-]")


def location_segment(name: str) -> str:
    """A ref or table name as a path segment that is the same string as an object key, a URI and a
    Hadoop path: letters, digits, `.`, `_` and `-` as they are, every other byte of its UTF-8 as `~XX`.

    A tag may hold `#`, `%`, `+`, `&`, `~`, ...: percent-encoding would give a URI that Hadoop paths
    (Spark) take literally and URL parsers (delta-rs) decode, so the two would name different keys.
    """
    return "".join(char if _SEGMENT_SAFE.fullmatch(char) else "".join(f"~{b:02X}" for b in char.encode("utf-8"))
                   for char in name)


def segment_name(segment: str) -> str:
    """`location_segment` undone: `~XX` bytes back to UTF-8."""
    raw = re.sub(rb"~([0-9A-F]{2})", lambda m: bytes([int(m.group(1), 16)]), segment.encode())
    return raw.decode("utf-8", errors="replace")


def exports_root(config: Config) -> str:
    """The folder holding every ref's exports and branch tables."""
    return config.export_prefix.strip("/") + "/"


def commit_root(config: Config, ref: str, commit_id: str) -> str:
    """The folder of one commit's exports (one subfolder per table)."""
    return f"{exports_root(config)}{location_segment(ref)}/{commit_id}/"


def export_location(config: Config, ref: str, commit_id: str, table: str) -> str:
    """The export of `table` at `commit_id`, reached through `ref`."""
    return f"{commit_root(config, ref, commit_id)}{location_segment(table)}/"


def iceberg_location(location: str) -> str:
    """The Iceberg table over an export: the export's own location, its folders beside `_delta_log/`."""
    return location


def iceberg_files_location(location: str) -> str:
    """Where the Iceberg table over the export at `location` writes its manifests, manifest lists and
    delete files. A per-commit export's go to its own folder of the table's Iceberg files (an
    export derived from another names the other's files where they are, and prune's collection
    keeps them while an export names them); a branch table's beside its metadata, at its location."""
    root, ref, commit, table = location.rstrip("/").rsplit("/", 3)
    if commit == LATEST:
        return location
    return f"{iceberg_table_files(location)}{ref}/{commit}/"


def iceberg_table_files(location: str) -> str:
    """The folder of the Iceberg files of every per-commit export of the table the export at
    `location` is of (the files its Iceberg table may name); a branch table's location."""
    root, _, commit, table = location.rstrip("/").rsplit("/", 3)
    if commit == LATEST:
        return location
    return f"{iceberg_files_root(root + '/')}{table}/"


def iceberg_files_root(exports: str) -> str:
    """The folder of every table's Iceberg files (a folder per table), beside the exports root `exports`."""
    return f"{posixpath.dirname(exports.strip('/'))}/{ICEBERG_FILES}/".lstrip("/")


def branch_tables_root(config: Config, branch: str) -> str:
    """The folder of a branch's branch tables (one subfolder per table)."""
    return commit_root(config, branch, LATEST)


def branch_table_location(config: Config, branch: str, table: str) -> str:
    """The branch table of `table` on `branch`: a location that never changes."""
    return f"{branch_tables_root(config, branch)}{location_segment(table)}/"


def private_folders(config: Config) -> tuple[str, ...]:
    """The folders of a storage namespace whose objects no Delta log may name (`exporter.storage.scope`):
    lakeFS's `_lakefs/`, and where this product writes (every ref's exports and branch tables, the
    row diffs), under `_lakefs/` too unless `export_prefix` moves them."""
    return tuple(dict.fromkeys([LAKEFS_FOLDER, exports_root(config), row_diffs_root(config),
                                iceberg_files_root(exports_root(config))]))


def row_diffs_root(config: Config) -> str:
    """Where row diffs' rows files are, a folder per (left commit, right commit)."""
    return f"{posixpath.dirname(config.export_prefix.strip('/'))}/rowdiff/".lstrip("/")


def row_diff_location(config: Config, left_commit: str | None, right_commit: str, table_prefix: str, key: str) -> str:
    """The Parquet file of a row diff's rows, keyed by both commits, the table and the diff's key."""
    return (f"{row_diffs_root(config)}{left_commit or '-'}/{right_commit}/"
            f"{location_segment(table_prefix.rstrip('/'))}/{location_segment(key)}.parquet")
