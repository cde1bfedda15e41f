"""The layout of a `_delta_log`: which checkpoint and commits make up the newest snapshot.

File names follow PROTOCOL.md#delta-log-entries and #checkpoint-naming-scheme; the listing, not
`_last_checkpoint`, decides what exists.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote

from exporter.errors import CorruptLog, TableNotFound

LOG_DIR = "_delta_log/"  # a table's log, under its root
LAST_CHECKPOINT = "_last_checkpoint"  # PROTOCOL.md#last-checkpoint-file: a hint, never the truth

_COMMIT = re.compile(r"(\d{20})\.json")
_CLASSIC_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint\.parquet")
_MULTIPART_CHECKPOINT = re.compile(r"(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet")
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_UUID_CHECKPOINT = re.compile(rf"(\d{{20}})\.checkpoint\.{_UUID}\.(?:json|parquet)")
# Sidecar names are free-form (Delta Spark writes `n.checkpoint.o.p.<uuid>.parquet`).
_SIDECAR = re.compile(r"_sidecars/[^/]+\.(?:parquet|json)")

CheckpointKind = Literal["classic", "multipart", "v2"]
# At one version any complete checkpoint describes the same snapshot: take the simplest.
_KIND_PREFERENCE: dict[str, int] = {"classic": 0, "v2": 1, "multipart": 2}



@dataclass(frozen=True)
class Checkpoint:
    version: int
    kind: CheckpointKind
    files: list[str]  # relative to `_delta_log/`; multi-part parts in part order


@dataclass(frozen=True)
class LogSegment:
    checkpoint: Checkpoint | None
    commits: list[tuple[int, str]]  # (version, file name) for checkpoint version + 1 .. head
    checkpoint_commit: str | None  # the commit at the checkpoint version: checkpoints drop commitInfo
    head_version: int

    @property
    def json_files(self) -> list[str]:
        """The segment's JSON files, which a reader reads whole: a V2 checkpoint's top-level file when
        it is JSON, the commit at the checkpoint version, and every commit after it."""
        names = [n for n in (self.checkpoint.files if self.checkpoint else []) if n.endswith(".json")]
        return names + ([self.checkpoint_commit] if self.checkpoint_commit else []) + [n for _, n in self.commits]


@dataclass(frozen=True)
class LogListing:
    """What a listing of `_delta_log/` and `_delta_log/_sidecars/` holds, by kind."""

    sizes: dict[str, int]  # every listed name, recognised or not
    commits: dict[int, str] = field(default_factory=dict)
    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)  # complete ones only
    sidecars: dict[str, int] = field(default_factory=dict)  # `_sidecars/<name>` -> size

    @classmethod
    def from_names(cls, entries: Iterable[tuple[str, int]]) -> "LogListing":
        """Build from (name relative to `_delta_log/`, size) pairs; unknown names are ignored."""
        sizes = dict(entries)
        return cls(
            sizes=sizes,
            commits=_commits(sizes),
            checkpoints=_complete_checkpoints(sizes),
            sidecars={name: size for name, size in sizes.items() if _SIDECAR.fullmatch(name)},
        )

    def sidecar(self, sidecar_path: str) -> str | None:
        """The listed `_sidecars/<name>` a `sidecar` action's path names, or None when absent."""
        # PROTOCOL.md#sidecar-file-information: a URI-encoded path, usually the bare file name.
        name = f"_sidecars/{unquote(sidecar_path).rsplit('/', 1)[-1]}"
        return name if name in self.sidecars else None


def log_folder(table_path: str) -> str:
    """A table's `_delta_log/` folder, from the table's path (with or without a `/` at either end)."""
    return table_path.strip("/") + "/" + LOG_DIR


def commit_name(version: int) -> str:
    """The file name of commit `version` in `_delta_log/` (PROTOCOL.md#delta-log-entries)."""
    return f"{version:020d}.json"


def commit_version(name: str) -> int | None:
    """The version a commit file name holds; None for any other name."""
    match = _COMMIT.fullmatch(name)
    return int(match.group(1)) if match else None


def log_file_version(name: str) -> int | None:
    """The version of a commit or checkpoint file name (relative to `_delta_log/`); None for
    `_last_checkpoint`, sidecars and names the protocol does not define."""
    for pattern in (_COMMIT, _CLASSIC_CHECKPOINT, _MULTIPART_CHECKPOINT, _UUID_CHECKPOINT):
        if match := pattern.fullmatch(name):
            return int(match.group(1))
    return None


def with_version(name: str, version: int) -> str:
    """A commit or checkpoint file name moved to `version` (its 20-digit prefix replaced)."""
    if log_file_version(name) is None:
        raise ValueError(f"{name!r} is not a commit or checkpoint file name")
    return f"{version:020d}" + name[20:]


def _commits(names: Iterable[str]) -> dict[int, str]:
    return {version: name for name in names if (version := commit_version(name)) is not None}


def _complete_checkpoints(names: Iterable[str]) -> dict[int, Checkpoint]:
    """The preferred complete checkpoint at each version that has one."""
    candidates: list[Checkpoint] = []
    parts: dict[tuple[int, int], dict[int, str]] = {}  # (version, part count) -> part -> name
    for name in sorted(names):
        if match := _CLASSIC_CHECKPOINT.fullmatch(name):
            candidates.append(Checkpoint(int(match.group(1)), "classic", [name]))
        elif match := _UUID_CHECKPOINT.fullmatch(name):
            candidates.append(Checkpoint(int(match.group(1)), "v2", [name]))
        elif match := _MULTIPART_CHECKPOINT.fullmatch(name):
            version, part, count = (int(group) for group in match.groups())
            parts.setdefault((version, count), {})[part] = name
    for (version, count), named_parts in sorted(parts.items()):
        # A multi-part checkpoint with a part missing does not count (PROTOCOL.md#multi-part-checkpoint).
        if set(named_parts) == set(range(1, count + 1)):
            candidates.append(Checkpoint(version, "multipart", [named_parts[part] for part in range(1, count + 1)]))
    chosen: dict[int, Checkpoint] = {}
    for checkpoint in candidates:
        current = chosen.get(checkpoint.version)
        if current is None or _KIND_PREFERENCE[checkpoint.kind] < _KIND_PREFERENCE[current.kind]:
            chosen[checkpoint.version] = checkpoint
    return chosen


def select_segment(listing: LogListing, last_checkpoint_hint: int | None = None,
                   checkpoint_at_most: int | None = None) -> LogSegment:
    """The newest complete checkpoint and every commit after it, up to the newest version.

    `last_checkpoint_hint` (from `_last_checkpoint`) is accepted but never decides: it may be
    stale or point at a checkpoint that is gone, and the listing is the truth.
    With `checkpoint_at_most`, the newest checkpoint at or below that version (none: from version
    0): the segment of a reader that holds the table up to that version and reads on from there.
    """
    if not listing.sizes:
        raise TableNotFound("no files under _delta_log/: not a Delta table")
    head = max([*listing.commits, *listing.checkpoints], default=None)
    if head is None:
        raise CorruptLog("_delta_log/ has no commit (NNN.json) and no complete checkpoint")
    usable = [v for v in listing.checkpoints if checkpoint_at_most is None or v <= checkpoint_at_most]
    checkpoint = listing.checkpoints[max(usable)] if usable else None
    first = checkpoint.version + 1 if checkpoint else 0
    missing = [version for version in range(first, head + 1) if version not in listing.commits]
    if missing:
        raise CorruptLog(_gap_message(missing, checkpoint, head))
    return LogSegment(
        checkpoint=checkpoint,
        commits=[(version, listing.commits[version]) for version in range(first, head + 1)],
        checkpoint_commit=listing.commits.get(checkpoint.version) if checkpoint else None,
        head_version=head,
    )


def _gap_message(missing: list[int], checkpoint: Checkpoint | None, head: int) -> str:
    since = f"checkpoint {checkpoint.version}" if checkpoint else "version 0 (there is no complete checkpoint)"
    return f"_delta_log/ is missing commit(s) {_version_ranges(missing)} between {since} and head version {head}"


def _version_ranges(versions: list[int]) -> str:
    """`[3, 4, 5, 9]` -> `3-5, 9`: a long gap stays readable."""
    ranges: list[list[int]] = []
    for version in versions:
        if ranges and version == ranges[-1][1] + 1:
            ranges[-1][1] = version
        else:
            ranges.append([version, version])
    return ", ".join(str(low) if low == high else f"{low}-{high}" for low, high in ranges)
