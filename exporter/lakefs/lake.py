"""What the library works on, built once per process at an edge (a worker, the HTTP service, the
CLI) and passed in: the configuration, the lakeFS client, and the object stores of storage
namespaces. Tests pass one over an in-memory lakeFS and object store (`tests/fakes.py`).

A repository's storage namespace as the library uses it: its object store, and what its logs may
name by absolute path for the service to read or sign (the rule of `exporter.storage.scope`, with
the facts it needs from lakeFS and the configuration)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

from exporter.config import Config
from exporter.lakefs.client import LakeFS
from exporter.storage.layout import private_folders
from exporter.storage.objectstore import ObjectStore
from exporter.storage.scope import ReadScope


class Stores(Protocol):
    """The object store of a storage namespace (`s3://bucket/prefix`)."""

    def at(self, namespace: str) -> ObjectStore: ...


class ObjectStores:
    """Every namespace's `ObjectStore`, made from the configuration (its endpoint and keys per bucket)."""

    def __init__(self, config: Config):
        self.config = config

    def at(self, namespace: str) -> ObjectStore:
        return ObjectStore(self.config, namespace)


@dataclass(frozen=True)
class Lake:
    config: Config
    lakefs: LakeFS
    stores: Stores

    @classmethod
    def connect(cls, config: Config) -> Lake:
        """The lakeFS and the object stores `config` names."""
        return cls(config, LakeFS(config.lakefs), ObjectStores(config))

    def configured(self, config: Config) -> Lake:
        """The same lakeFS and stores under other settings."""
        return dataclasses.replace(self, config=config)

    def store(self, repository: str) -> ObjectStore:
        """The object store of `repository`'s storage namespace."""
        return self.stores.at(self.lakefs.storage_namespace(repository))

    def read_scope(self, repository: str) -> ReadScope:
        """`repository`'s storage namespace and `sharing.allowed_locations`, but the namespace's private
        folders and every other repository's namespace inside them (lakeFS accepts one nested in
        another's): one listing of the repositories, when the scope checks its first path."""
        def others() -> list[str]:
            return [namespace for name, namespace in self.lakefs.storage_namespaces().items() if name != repository]

        return ReadScope(self.lakefs.storage_namespace(repository), allowed=self.config.sharing.allowed_locations,
                         private=private_folders(self.config), excluded=others)
