"""Reading log files by physical address: what a process read lately is not read again."""

import pytest

from exporter.lakefs.table_log import _get_all, _RecentFiles
from tests.fakes import MemoryStore

pytestmark = pytest.mark.unit


def test_a_file_read_once_is_not_read_again_at_the_same_address():
    store = MemoryStore({f"s3://b/test-logstore/{n}": f"commit {n}".encode() for n in range(4)})
    addresses = {f"_delta_log/{n}.json": f"s3://b/test-logstore/{n}" for n in range(4)}

    first = _get_all(store, addresses, ["0.json", "1.json"])
    second = _get_all(store, addresses, ["0.json", "1.json", "2.json", "3.json"])

    assert first == {"0.json": b"commit 0", "1.json": b"commit 1"}
    assert second == {f"{n}.json": f"commit {n}".encode() for n in range(4)}
    assert sorted(store.reads) == [f"s3://b/test-logstore/{n}" for n in range(4)]  # each address once


def test_recent_files_keep_a_byte_budget_and_drop_the_least_recently_used():
    recent = _RecentFiles(budget=10, largest=6)
    recent.put("a", b"aaaa")
    recent.put("b", b"bbbb")
    assert recent.get("a") == b"aaaa"  # now "b" is the least recently used
    recent.put("c", b"cccc")
    recent.put("big", b"x" * 7)  # above `largest`: never kept

    assert (recent.get("a"), recent.get("b"), recent.get("c"), recent.get("big")) == (b"aaaa", None, b"cccc", None)
    assert recent.size == 8
