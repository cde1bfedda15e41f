"""Absolute log paths that lead back into lakeFS, pinned to physical addresses or refused.

A table made through lakeFS's S3 gateway (e.g. by `SHALLOW CLONE`) can hold absolute paths such as
`s3a://<repository>/<ref>/<key>`. An export that kept them would read, through lakeFS, whatever the
ref holds at read time. A path at a commit id names an immutable object: it is resolved to that
object's physical address. A path at a branch or tag is refused, naming it.
"""

from __future__ import annotations

import posixpath
import re
from collections import defaultdict
from urllib.parse import unquote, urlsplit

from exporter.delta.paths import physical_uri
from exporter.errors import NotFound, PathIntoLakeFS
from exporter.lakefs.client import COMMIT_ID, LakeFS

_GATEWAY_SCHEMES = ("s3", "s3a", "s3n")
# lakeFS repository ids (pkg/validator: `^[a-z0-9][a-z0-9-]{2,62}$`)
_REPOSITORY_ID = re.compile(r"[a-z0-9][a-z0-9-]{2,62}")


class LakeFSPaths:
    """Called with distinct absolute log paths; answers {path: physical URI, or None when gone} for
    those that address lakeFS. Other absolute paths (other buckets, `abfss://`, ...) are not answered."""

    def __init__(self, lakefs: LakeFS, namespace_bucket: str):
        self.lakefs = lakefs
        self.namespace_bucket = namespace_bucket
        self.endpoint_host = urlsplit(lakefs.endpoint).netloc
        self._repositories: dict[str, bool] = {}

    def __call__(self, paths: list[str]) -> dict[str, str | None]:
        by_ref: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
        for path in paths:
            address = self.lakefs_address(path)
            if address is not None:
                repository, ref, key = address
                by_ref[(repository, ref)].append((path, key))
        answers: dict[str, str | None] = {}
        for (repository, ref), named in sorted(by_ref.items()):
            if not self._is_commit(repository, ref):
                raise PathIntoLakeFS(
                    f"log path {named[0][0]!r} reads through lakeFS repository {repository!r} at {ref!r}, which is "
                    f"not a commit id: what it names changes after this commit, so an export cannot pin it "
                    f"({len(named)} such path(s)). Rewrite the table with paths relative to its root, or at a commit id")
            prefix = posixpath.commonpath([key for _, key in named]) if len(named) > 1 else posixpath.dirname(named[0][1])
            prefix = prefix + "/" if prefix else ""
            listed = {entry.path: entry.physical_address
                      for entry in self.lakefs.list_objects(repository, ref, prefix)}
            for path, key in named:
                answers[path] = physical_uri(listed[key]) if key in listed else None
        return answers

    def lakefs_address(self, path: str) -> tuple[str, str, str] | None:
        """(repository, ref, key) when `path` reads through lakeFS, else None."""
        parts = urlsplit(path)
        scheme = parts.scheme.lower()
        if scheme == "lakefs":
            repository, rest = parts.netloc, parts.path.lstrip("/")
        elif scheme in _GATEWAY_SCHEMES:
            if parts.netloc == self.namespace_bucket or not self._is_repository(parts.netloc):
                return None
            repository, rest = parts.netloc, parts.path.lstrip("/")
        elif scheme in ("http", "https") and parts.netloc == self.endpoint_host:
            repository, _, rest = parts.path.lstrip("/").partition("/")
        else:
            return None
        ref, _, key = rest.partition("/")
        return repository, ref, unquote(key)

    def _is_repository(self, bucket: str) -> bool:
        if not _REPOSITORY_ID.fullmatch(bucket):
            return False
        if bucket not in self._repositories:
            try:
                self.lakefs.storage_namespace(bucket)
                self._repositories[bucket] = True
            except NotFound:
                self._repositories[bucket] = False
        return self._repositories[bucket]

    def _is_commit(self, repository: str, ref: str) -> bool:
        if not COMMIT_ID.fullmatch(ref):
            return False
        try:
            return self.lakefs.commit(repository, ref).id == ref
        except NotFound:
            return False
