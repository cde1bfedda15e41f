"""Datasets at a ref: tables named by descriptors, plus Delta tables found by their `_delta_log/`."""

from __future__ import annotations

from exporter.delta.log import LogListing
from exporter.lakefs.client import LakeFS
from exporter.lakefs.descriptors import discover_tables
from exporter.state.results import ResultCache

MAX_DEPTH = 6  # folders below the root searched for undeclared tables
MAX_FOLDERS = 2000  # a bound on the walk for repositories with very many folders


def latest_version(lakefs: LakeFS, repository: str, ref: str, table_path: str) -> int | None:
    prefix = f"{table_path.strip('/')}/_delta_log/"
    listing = LogListing.from_names((e.path[len(prefix):], e.size_bytes or 0)
                                    for e in lakefs.list_objects(repository, ref, prefix))
    versions = list(listing.commits) + list(listing.checkpoints)
    return max(versions) if versions else None


def detect_delta_tables(lakefs: LakeFS, repository: str, ref: str) -> list[str]:
    """Folders holding a `_delta_log/`, walked level by level; partition folders (`k=v`) are not entered."""
    found, frontier, visited = [], [""], 0
    for _ in range(MAX_DEPTH):
        next_frontier = []
        for folder in frontier:
            visited += 1
            if visited > MAX_FOLDERS:
                return sorted(found)
            for entry in lakefs.list_objects(repository, ref, folder, delimiter="/"):
                if entry.path_type != "common_prefix":
                    continue
                name = entry.path[len(folder):].rstrip("/")
                if name == "_delta_log":
                    found.append(folder.rstrip("/"))
                elif "=" not in name and not name.startswith(("_lakefs", ".")):
                    next_frontier.append(entry.path)
        frontier = next_frontier
    return sorted(found)


def list_datasets(lakefs: LakeFS, repository: str, ref: str) -> list[dict]:
    discovery = discover_tables(lakefs, repository, ref)
    datasets = {t.path: {"name": t.name, "type": "delta", "path": t.path, "source": "descriptor"}
                for t in discovery.tables}
    for path in detect_delta_tables(lakefs, repository, ref):
        datasets.setdefault(path, {"name": path.rsplit("/", 1)[-1], "type": "delta", "path": path, "source": "detected"})
    for dataset in datasets.values():
        dataset["latest_version"] = latest_version(lakefs, repository, ref, dataset["path"])
    return sorted(datasets.values(), key=lambda d: d["path"])


def resolve_dataset(datasets: list[dict], path: str) -> dict | None:
    """The most specific dataset a path belongs to (nested tables allowed)."""
    path = path.strip("/")
    matches = [d for d in datasets if path == d["path"] or path.startswith(d["path"] + "/")]
    return max(matches, key=lambda d: len(d["path"]), default=None)


class DatasetsCache(ResultCache):
    """The datasets of a commit, keyed by (repository, commit id)."""

    def __init__(self, redis_url: str, ttl_seconds: int):
        super().__init__(redis_url, ttl_seconds, "datasets")
