"""Delta's log retention, as writers apply it after a checkpoint (the metadata cleanup of Delta's
writers; table properties `delta.logRetentionDuration`, default 30 days, and
`delta.enableExpiredLogCleanup`, default true): log files older than the retention and below the
newest complete checkpoint that is itself that old are removed. Every version from that checkpoint
on still reads; the versions below it are expired (time travel to them fails, as on any Delta table).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from exporter.delta.log import LogListing, log_file_version
from exporter.errors import CorruptLog

DEFAULT_RETENTION = "interval 30 days"
_UNITS = {"microsecond": 1e-6, "millisecond": 1e-3, "second": 1, "minute": 60, "hour": 3600, "day": 86400,
          "week": 7 * 86400}
_PART = re.compile(r"(-?\d+)\s+([a-z]+?)s?\b")


def interval_seconds(text: str) -> float:
    """A Delta interval property (`interval 30 days`, `interval 1 day 12 hours`, `2 weeks`) in seconds."""
    body = text.strip().lower().removeprefix("interval").strip()
    parts = _PART.findall(body)
    if not parts or _PART.sub("", body).strip() or any(unit not in _UNITS for _, unit in parts):
        raise CorruptLog(f"table property {text!r} is not an interval Delta reads (e.g. 'interval 30 days')")
    return sum(int(number) * _UNITS[unit] for number, unit in parts)


def log_retention_seconds(configuration: Mapping[str, Any]) -> float | None:
    """How long the log keeps files, from the table's properties; None when cleanup is off."""
    if str(configuration.get("delta.enableExpiredLogCleanup", "true")).lower() == "false":
        return None
    return interval_seconds(str(configuration.get("delta.logRetentionDuration", DEFAULT_RETENTION)))


def expired_log_files(files: Iterable[tuple[str, int, float]], cutoff: float) -> tuple[int | None, list[str]]:
    """(the checkpoint the log then starts at, the names to remove) among (name under `_delta_log/`,
    size, modified epoch seconds): the newest complete checkpoint whose files are all at or before
    `cutoff`, and every commit, checkpoint and checksum below it written at or before `cutoff`.
    `_last_checkpoint` and sidecars are never removed here."""
    listed = list(files)
    modified = {name: at for name, _, at in listed}
    checkpoints = LogListing.from_names((name, size) for name, size, _ in listed).checkpoints
    old_enough = [v for v, checkpoint in checkpoints.items() if all(modified[f] <= cutoff for f in checkpoint.files)]
    if not old_enough:
        return None, []
    start = max(old_enough)
    return start, [name for name, _, at in listed
                   if (version := _version(name)) is not None and version < start and at <= cutoff]


def _version(name: str) -> int | None:
    """The version of a commit, checkpoint or `.crc` checksum file."""
    if name.endswith(".crc") and name[:20].isdigit():
        return int(name[:20])
    return log_file_version(name)
