"""The object-store contract (tests/store_contract.py) on `ObjectStore` against the stack's MinIO:
what the unit tests' in-memory store must answer alike."""

import pytest

from exporter.storage.objectstore import ObjectStore
from tests.store_contract import *  # noqa: F401,F403 (the contract's tests and its `store` fixture)

pytestmark = pytest.mark.integration


@pytest.fixture
def bucket(stack_env) -> str:
    return stack_env["LAKEFS_DELTA_STACK_BUCKET"]


@pytest.fixture
def store_at(config):
    return lambda namespace: ObjectStore(config, namespace)
