"""Reading a table's `_delta_log` at a commit: one listing through lakeFS, files by physical address.

The listing gives both the log's layout and every object's physical address; the log files
themselves are read straight from the object store, in parallel, so lakeFS sees one call per
1000 listed objects and none per file.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from exporter.delta.checkpoint import checkpoint_files
from exporter.delta.log import (LAST_CHECKPOINT, LOG_DIR, LogListing, LogSegment, commit_version, log_folder,
                                select_segment)
from exporter.errors import ExporterError, NotFound, TableNotFound
from exporter.lakefs.addresses import AddressIndex, AddressIndexBuilder
from exporter.lakefs.client import PAGE_SIZE, LakeFS, ObjectStats
from exporter.parquet.splice import BytesSource, ParquetSource
from exporter.storage.objectstore import ObjectSource, ObjectStore
from exporter.threads import IO_THREADS, io_pool

LIST_THREADS = 8  # runs of a table's folders listed at once
LIST_RUNS = 4 * LIST_THREADS  # runs a table's folders are cut into: an uneven run leaves threads busy with others


@dataclass
class LoadedLog:
    addresses: AddressIndex  # table-relative object key -> physical address
    segment: LogSegment
    files: dict[str, bytes]  # name under _delta_log/ -> raw bytes: the segment's JSON files
    checkpoint_files: list[str]  # sidecars first, then the checkpoint's own files (write order)
    listing: LogListing  # everything `_delta_log/` holds, e.g. JSON commits older than the checkpoint
    modification_times: dict[str, int]  # name under _delta_log/ -> the source object's mtime (epoch seconds)
    last_checkpoint: dict | None  # the source's `_last_checkpoint` document, when readable

    def read_more(self, store: ObjectStore, names: list[str]) -> None:
        """Read more `_delta_log/` files (e.g. older commits, for history) into `files`."""
        self.files.update(_get_all(store, self.addresses, [n for n in names if n not in self.files]))

    def source(self, store: ObjectStore, name: str) -> ParquetSource:
        """A parquet log file, read by byte ranges from its physical address (never whole)."""
        return ObjectSource(store, self.addresses[LOG_DIR + name], self.listing.sizes[name])


@dataclass
class LogLayout:
    """A listing of `_delta_log/` (and, unless `log_only`, of the whole table) at a commit."""

    addresses: AddressIndex  # table-relative object key -> physical address
    listing: LogListing
    segment: LogSegment
    modification_times: dict[str, int]
    last_checkpoint: dict | None

    def commit_file_times(self) -> dict[int, int]:
        """Each listed commit's file time (epoch ms): a commit's time to Delta's readers without
        in-commit timestamps, before the checkpoint too."""
        return {version: seconds * 1000 for name, seconds in self.modification_times.items()
                if (version := commit_version(name)) is not None}


def list_log(lakefs: LakeFS, store: ObjectStore, repository: str, commit_id: str, table_path: str,
             log_only: bool = False) -> LogLayout:
    prefix = table_path.strip("/") + "/"
    if log_only:
        folders = [_list_folder(lakefs, repository, commit_id, prefix, prefix + LOG_DIR)]
    else:
        folders = _list_table(lakefs, repository, commit_id, prefix)
    addresses = AddressIndexBuilder()
    log_entries: list[tuple[str, int]] = []
    modification_times: dict[str, int] = {}
    for folder in folders:
        addresses.extend(folder.addresses)
        log_entries += folder.log_entries
        modification_times.update(folder.modification_times)
    if not log_entries:
        raise TableNotFound(f"no Delta table at {repository}@{commit_id}/{table_path}: {prefix}{LOG_DIR} is empty")
    listing = LogListing.from_names(log_entries)
    index = addresses.build()
    last_checkpoint = _last_checkpoint(store, index)
    segment = select_segment(listing, last_checkpoint.get("version") if last_checkpoint else None)
    return LogLayout(index, listing, segment, modification_times, last_checkpoint)


@dataclass
class _Folder:
    """One folder's listing, compact: Arrow arrays, plus the `_delta_log/` entries' sizes and times."""

    addresses: AddressIndexBuilder
    log_entries: list[tuple[str, int]]
    modification_times: dict[str, int]


def _list_table(lakefs: LakeFS, repository: str, commit_id: str, prefix: str) -> list[_Folder]:
    """Everything under the table, in key order. A table that fits one page is that one call.
    A bigger one (that page is discarded: one call in a thousand) is listed at the top level with
    delimiter `/` (the files of an unpartitioned table, and the folders), then in runs of adjacent
    folders (partitions, `_delta_log/`), each run one stream of full pages from its first folder to
    the next run's, `LIST_THREADS` runs at a time: a partitioned table is neither one serial chain of
    pages nor a call for each of its (perhaps ten thousand, mostly small) folders."""
    first: list[ObjectStats] = []
    for page in lakefs.object_pages(repository, commit_id, prefix):
        first += page
        if len(first) >= PAGE_SIZE:
            break
    if len(first) < PAGE_SIZE:
        return [_folder_of([first], prefix)]
    folders: list[str] = []
    files: list[ObjectStats] = []
    for entry in lakefs.list_objects(repository, commit_id, prefix, delimiter="/"):
        if entry.path_type == "common_prefix":
            folders.append(entry.path)
        else:
            files.append(entry)
    with io_pool(LIST_THREADS) as pool:
        listed = list(pool.map(lambda run: _folder_of(_list_run(lakefs, repository, commit_id, prefix, *run), prefix),
                               folder_runs(folders, LIST_RUNS)))
    return [_folder_of([files], prefix), *listed]


def folder_runs(folders: list[str], runs: int) -> list[tuple[str, str]]:
    """`folders` (sorted, each ending in `/`) cut into at most `runs` runs of adjacent folders, each
    as (its first folder, the key its listing stops at: the next run's first folder, or for the last
    run the last folder with `0`, the character after `/`, for its `/`: above every key inside it)."""
    if not folders:
        return []
    size = -(-len(folders) // runs)
    firsts = folders[::size]
    return list(zip(firsts, [*firsts[1:], folders[-1][:-1] + "0"]))


def _list_run(lakefs: LakeFS, repository: str, commit_id: str, prefix: str, first: str,
              end: str) -> Iterator[list[ObjectStats]]:
    """The objects inside folders from `first` up to the key `end` (excluded), read a page at a time
    and no further. Listing starts after `first` without its `/`, before every key inside it; files
    of the table's top level that sort among the folders are the top-level listing's, not a run's."""
    for page in lakefs.object_pages(repository, commit_id, prefix, after=first[:-1]):
        yield [entry for entry in page if first <= entry.path < end and "/" in entry.path[len(prefix):]]
        if page and page[-1].path >= end:
            return


def _list_folder(lakefs: LakeFS, repository: str, commit_id: str, table_prefix: str, folder: str) -> _Folder:
    return _folder_of(lakefs.object_pages(repository, commit_id, folder), table_prefix)


def _folder_of(pages: Iterable[list[ObjectStats]], table_prefix: str) -> _Folder:
    """Pages of entries made Arrow arrays a page at a time: `LIST_THREADS` runs at once hold a page
    of Python objects each, not the whole listing."""
    listed = _Folder(AddressIndexBuilder(), [], {})
    cut, log = len(table_prefix), table_prefix + LOG_DIR
    for page in pages:
        listed.addresses.add_page([entry.path[cut:] for entry in page], [entry.physical_address for entry in page])
        for entry in page:
            if entry.path.startswith(log):
                name = entry.path[len(log):]
                listed.log_entries.append((name, entry.size_bytes or 0))
                listed.modification_times[name] = entry.mtime
    return listed


def checkpoint_files_hint(lakefs: LakeFS, repository: str, commit_id: str, table_path: str) -> int:
    """How many files the table's newest checkpoint lists, from its `_last_checkpoint` (one call;
    `numOfAddFiles`, else the checkpoint's action count); 0 when there is none or it is unreadable."""
    try:
        document = json.loads(lakefs.get_object(repository, commit_id, log_folder(table_path) + LAST_CHECKPOINT))
        return int(document.get("numOfAddFiles", document.get("size", 0)))
    except NotFound:
        return 0
    except (ValueError, TypeError, AttributeError):
        return 0  # only a hint: a broken one is the export's to report


def read_log_files(store: ObjectStore, addresses: Mapping[str, str], names: list[str]) -> dict[str, bytes]:
    """`_delta_log/` files by name, read in parallel by physical address."""
    return _get_all(store, addresses, names)


def load_log(lakefs: LakeFS, store: ObjectStore, repository: str, commit_id: str, table_path: str,
             log_only: bool = False) -> LoadedLog:
    """The segment a reader needs at this commit. `log_only` lists `_delta_log/` alone (no data files)."""
    layout = list_log(lakefs, store, repository, commit_id, table_path, log_only)
    addresses, listing, segment = layout.addresses, layout.listing, layout.segment
    modification_times, last_checkpoint = layout.modification_times, layout.last_checkpoint
    files = _get_all(store, addresses, segment.json_files)
    loaded = LoadedLog(addresses, segment, files, [], listing, modification_times, last_checkpoint)
    if segment.checkpoint:
        loaded.checkpoint_files = checkpoint_files(addresses, segment, lambda name: BytesSource(files[name])
                                                   if name in files else loaded.source(store, name))
        loaded.read_more(store, [n for n in loaded.checkpoint_files if n.endswith(".json")])
    return loaded


def _last_checkpoint(store: ObjectStore, addresses: Mapping[str, str]) -> dict | None:
    address = addresses.get(LOG_DIR + LAST_CHECKPOINT)
    if address is None:
        return None
    try:
        document = json.loads(store.get_uri(address))
        int(document["version"])
        return document
    except (ExporterError, ValueError, KeyError, TypeError):
        return None  # only a hint: the listing decides


def _get_all(store: ObjectStore, addresses: Mapping[str, str], names: list[str]) -> dict[str, bytes]:
    """Read by physical address; small files come from `_RECENT` when this process read them lately."""
    wanted = {name: addresses[LOG_DIR + name] for name in names}
    found = {name: _RECENT.get(address) for name, address in wanted.items()}
    missing = [name for name, raw in found.items() if raw is None]
    if len(missing) == 1:
        found[missing[0]] = store.get_uri(wanted[missing[0]])
    elif missing:
        with io_pool(min(IO_THREADS, len(missing))) as pool:
            found.update(zip(missing, pool.map(lambda n: store.get_uri(wanted[n]), missing)))
    for name in missing:
        _RECENT.put(wanted[name], found[name])
    return found


class _RecentFiles:
    """Log files this process read lately, by physical address: a lakeFS physical address is
    written once, so its bytes never change. Exports of a branch's consecutive commits, and the
    diffs against their parents, read mostly the same JSON commits. Bounded in bytes."""

    def __init__(self, budget: int = 64 << 20, largest: int = 1 << 20):
        self.budget, self.largest, self.size = budget, largest, 0
        self.files: OrderedDict[str, bytes] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, address: str) -> bytes | None:
        with self.lock:
            raw = self.files.get(address)
            if raw is not None:
                self.files.move_to_end(address)
            return raw

    def put(self, address: str, raw: bytes) -> None:
        if len(raw) > self.largest:
            return
        with self.lock:
            if address in self.files:
                return
            self.files[address] = raw
            self.size += len(raw)
            while self.size > self.budget:
                self.size -= len(self.files.popitem(last=False)[1])


_RECENT = _RecentFiles()
