"""Listing a table and reading its log files by physical address: what a process read lately is
not read again."""

import pytest

from exporter.lakefs.client import PAGE_SIZE
from exporter.lakefs.table_log import LIST_RUNS, _get_all, _RecentFiles, folder_runs, load_log
from tests.fakes import FakeLakeFS, MemoryStore

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


def test_a_table_of_more_than_a_page_is_listed_whole_and_its_segment_read_once():
    lakefs = FakeLakeFS()
    lakefs.create_repository("repo", "s3://bucket/repo")
    commits = {f"t/_delta_log/{v:020d}.json": f'{{"commitInfo":{{"v":{v}}}}}'.encode() for v in range(3)}
    data = {f"t/part-{i:05d}.parquet": b"x" for i in range(PAGE_SIZE + 10)}  # the top level takes two pages
    partitioned = {f"t/p={p}/part-0.parquet": b"y" for p in range(3)}
    commit_id = lakefs.commit_files("repo", "main", {**commits, **data, **partitioned})

    loaded = load_log(lakefs, lakefs.store, "repo", commit_id, "t")

    assert len(loaded.addresses) == len(commits) + len(data) + len(partitioned)
    assert loaded.addresses["p=2/part-0.parquet"].startswith("s3://bucket/repo/data/")
    assert loaded.segment.head_version == 2 and loaded.files == {n.split("/")[-1]: b for n, b in commits.items()}
    log_addresses = sorted(loaded.addresses[path.removeprefix("t/")] for path in commits)
    assert sorted(uri for uri in lakefs.store.reads if uri in log_addresses) == log_addresses  # each once


def test_many_small_folders_are_listed_in_runs_of_full_pages_not_a_call_each():
    lakefs = FakeLakeFS()
    lakefs.create_repository("repo", "s3://bucket/repo")
    commits = {f"t/_delta_log/{v:020d}.json": f'{{"commitInfo":{{"v":{v}}}}}'.encode() for v in range(3)}
    partitions = {f"t/p={p}/part-{i}.parquet": b"y" for p in range(3000) for i in range(2)}
    among = {"t/p=10.parquet": b"z", "t/p=2!.parquet": b"z"}  # top-level files sorting among the folders
    commit_id = lakefs.commit_files("repo", "main", {**commits, **partitions, **among})

    before = lakefs.calls
    loaded = load_log(lakefs, lakefs.store, "repo", commit_id, "t")
    calls = lakefs.calls - before

    assert sorted(loaded.addresses.keys()) == sorted(path.removeprefix("t/") for path in {**commits, **partitions, **among})
    assert loaded.segment.head_version == 2
    # 6,005 objects in 3,001 folders: one first page, three pages of folders, then six pages of
    # objects cut into LIST_RUNS runs (each run's last page may reach into the next run)
    assert calls <= 1 + 3 + 6 + LIST_RUNS + 1, calls  # + the _last_checkpoint read


def test_folders_are_cut_into_runs_of_adjacent_folders_ending_where_the_next_begins():
    folders = [f"t/p={n:02d}/" for n in range(10)]

    assert folder_runs(folders, 4) == [("t/p=00/", "t/p=03/"), ("t/p=03/", "t/p=06/"), ("t/p=06/", "t/p=09/"),
                                       ("t/p=09/", "t/p=090")]
    assert folder_runs(folders[:2], 4) == [("t/p=00/", "t/p=01/"), ("t/p=01/", "t/p=010")]
    assert folder_runs([], 4) == []
    assert "t/p=09/\U0010ffff" < "t/p=090" < "t/p=09a"  # above every key inside the last folder, below the next


def test_the_files_after_the_last_folder_are_not_listed_twice():
    """An unpartitioned table: `_delta_log/` is its one folder and sorts before its files (`_` before
    `p`): the run listing it stops at its end, not at the end of the table."""
    lakefs = FakeLakeFS()
    lakefs.create_repository("repo", "s3://bucket/repo")
    commits = {f"t/_delta_log/{v:020d}.json": f'{{"commitInfo":{{"v":{v}}}}}'.encode() for v in range(3)}
    data = {f"t/part-{i:05d}.parquet": b"x" for i in range(5 * PAGE_SIZE)}
    commit_id = lakefs.commit_files("repo", "main", {**commits, **data})

    before = lakefs.calls
    loaded = load_log(lakefs, lakefs.store, "repo", commit_id, "t")

    assert len(loaded.addresses) == len(commits) + len(data)
    # the first page, the top level's six pages (5,000 files and the folder), the log's run and its
    # one page, the _last_checkpoint read: not five pages more of the files after the log
    assert lakefs.calls - before <= 1 + 6 + 1 + 1, lakefs.calls - before
