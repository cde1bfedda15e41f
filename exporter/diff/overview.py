"""Every table that differs between two refs: descriptors plus detected Delta tables on either
side, each with its diff type, row delta, files and whether its schema changed.

A table whose objects lakeFS reports unchanged between the two commits (one short diff call) is
left out without reading its log; the others get the history diff (cached like the API's).
"""

from __future__ import annotations

from exporter.diff.datasets import list_datasets
from exporter.diff.table import DiffCache, cached_diff
from exporter.lakefs.lake import Lake
from exporter.state.results import ResultCache


def compare_refs(lake: Lake, diffs: DiffCache, repository: str, left_commit: str, right_commit: str) -> dict:
    lakefs = lake.lakefs
    datasets = {d["path"]: d for d in list_datasets(lakefs, repository, left_commit)}
    datasets.update({d["path"]: d for d in list_datasets(lakefs, repository, right_commit)})
    tables = []
    for path, dataset in sorted(datasets.items()):
        if not any(True for _ in lakefs.diff(repository, left_commit, right_commit, prefix=path + "/", amount=1)):
            continue  # no object of the table changed
        diff, _ = cached_diff(lake, diffs, repository, left_commit, right_commit, path)
        rows, files = diff["row_count"], diff["files"]
        tables.append({
            "name": dataset["name"], "path": path, "source": dataset["source"], "diff_type": diff["diff_type"],
            "rows": {"left": rows["left"], "right": rows["right"], "difference": rows["difference"]},
            "files": {"left": (files["left"] or {}).get("count"), "right": (files["right"] or {}).get("count")},
            "schema_changed": bool(diff["schema_changes"]), "operations": len(diff["results"]),
        })
    return {"left_commit": left_commit, "right_commit": right_commit, "tables": tables}


class OverviewCache(ResultCache):
    """Overviews keyed by (repository, left commit, right commit)."""

    def __init__(self, redis_url: str, ttl_seconds: int):
        super().__init__(redis_url, ttl_seconds, "overview")
