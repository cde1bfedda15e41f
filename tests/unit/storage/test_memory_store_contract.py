"""The object-store contract (tests/store_contract.py) on the unit tests' in-memory store."""

import pytest

from tests.fakes import MemoryStore
from tests.store_contract import *  # noqa: F401,F403 (the contract's tests and its `store` fixture)

pytestmark = pytest.mark.unit


@pytest.fixture
def bucket() -> str:
    return "lake"


@pytest.fixture
def store_at():
    return MemoryStore().at
