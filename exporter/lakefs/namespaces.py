"""A repository's storage namespace as the library uses it: its object store, and what its logs may
name by absolute path for the service to read or sign (the rule of `exporter.storage.scope`, with
the facts it needs from lakeFS and the configuration)."""

from __future__ import annotations

from exporter.config import Config
from exporter.lakefs.client import LakeFS
from exporter.storage.layout import private_folders
from exporter.storage.objectstore import ObjectStore
from exporter.storage.scope import ReadScope


def repository_store(config: Config, lakefs: LakeFS, repository: str) -> ObjectStore:
    """The object store of `repository`'s storage namespace."""
    return ObjectStore(config, lakefs.storage_namespace(repository))


def read_scope(config: Config, lakefs: LakeFS, repository: str) -> ReadScope:
    """`repository`'s storage namespace and `sharing.allowed_locations`, but the namespace's private
    folders and every other repository's namespace inside them (lakeFS accepts one nested in
    another's): one listing of the repositories."""
    others = [namespace for name, namespace in lakefs.storage_namespaces().items() if name != repository]
    return ReadScope(lakefs.storage_namespace(repository), allowed=config.sharing.allowed_locations,
                     private=private_folders(config), excluded=others)
