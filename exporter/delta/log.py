"""The layout of a `_delta_log`: which checkpoint and commits make up the newest snapshot.

File names follow PROTOCOL.md#delta-log-entries and #checkpoint-naming-scheme; the listing, not
`_last_checkpoint`, decides what exists.
"""

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote

from exporter.errors import CorruptLog, TableNotFound, UnsupportedTable

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

# Reader features whose meaning the exporter knows (PROTOCOL.md#valid-feature-names-in-table-features,
# plus names Delta Spark 4.4 defines): none moves commits or data files out of reach.
KNOWN_READER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "typeWidening",
        "typeWidening-preview",
        "variantType",
        "variantType-preview",
        "variantShredding",
        "variantShredding-preview",
        "geospatial",
    }
)
# Commits of these tables may live in a catalog, not in `_delta_log` (PROTOCOL.md#catalog-managed-tables).
_CATALOG_FEATURES = frozenset({"catalogManaged", "catalogOwned-preview", "coordinatedCommits-preview"})
_COMMIT_COORDINATOR_PROPERTY = "delta.coordinatedCommits.commitCoordinator"
_MAX_READER_VERSION = 3


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


def _commits(names: Iterable[str]) -> dict[int, str]:
    return {int(match.group(1)): name for name in names if (match := _COMMIT.fullmatch(name))}


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


def select_segment(listing: LogListing, last_checkpoint_hint: int | None = None) -> LogSegment:
    """The newest complete checkpoint and every commit after it, up to the newest version.

    `last_checkpoint_hint` (from `_last_checkpoint`) is accepted but never decides: it may be
    stale or point at a checkpoint that is gone, and the listing is the truth.
    """
    if not listing.sizes:
        raise TableNotFound("no files under _delta_log/: not a Delta table")
    head = max([*listing.commits, *listing.checkpoints], default=None)
    if head is None:
        raise CorruptLog("_delta_log/ has no commit (NNN.json) and no complete checkpoint")
    checkpoint = listing.checkpoints[max(listing.checkpoints)] if listing.checkpoints else None
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


def parse_actions(file_name: str, raw: bytes) -> list[dict[str, Any]]:
    """The actions of a newline-delimited JSON commit or checkpoint; blank lines are skipped."""
    actions = []
    for line_number, line in enumerate(raw.split(b"\n"), start=1):
        if line.strip():
            actions.append(parse_action_line(file_name, line_number, line))
    return actions


def parse_action_line(file_name: str, line_number: int, line: bytes) -> dict[str, Any]:
    """One action; CorruptLog names the file and 1-based line when it is not a JSON object."""
    try:
        action = json.loads(line)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        raise CorruptLog(f"{file_name} line {line_number}: not valid JSON ({error})") from error
    if not isinstance(action, dict):
        kind = type(action).__name__
        raise CorruptLog(f"{file_name} line {line_number}: an action must be a JSON object, got {kind}")
    return action


def check_protocol(actions: Iterable[Mapping[str, Any]]) -> None:
    """Refuse a table the exporter cannot copy faithfully: raise UnsupportedTable naming why."""
    for action in actions:
        if isinstance(protocol := action.get("protocol"), Mapping):
            _check_protocol_action(protocol)
        if isinstance(metadata := action.get("metaData"), Mapping):
            _check_configuration(metadata.get("configuration") or {})


def _check_protocol_action(protocol: Mapping[str, Any]) -> None:
    reader_version = protocol.get("minReaderVersion")
    if isinstance(reader_version, int) and reader_version > _MAX_READER_VERSION:
        raise UnsupportedTable(
            f"table needs minReaderVersion {reader_version}; the exporter knows versions up to {_MAX_READER_VERSION}"
        )
    reader_features = protocol.get("readerFeatures") or []
    for feature in [*reader_features, *(protocol.get("writerFeatures") or [])]:
        if feature in _CATALOG_FEATURES:
            raise UnsupportedTable(
                f"table uses the {feature!r} feature: its commits may live in a catalog, not in _delta_log, "
                "so an export of _delta_log could miss versions"
            )
    for feature in reader_features:
        if feature not in KNOWN_READER_FEATURES:
            raise UnsupportedTable(
                f"table uses the reader feature {feature!r}, which the exporter does not know; "
                "refusing rather than exporting a log it may misread"
            )


def _check_configuration(configuration: Mapping[str, Any]) -> None:
    for key in configuration:
        if key.startswith(_COMMIT_COORDINATOR_PROPERTY):
            raise UnsupportedTable(
                f"table property {key!r} is set: coordinated commits may not be in _delta_log, "
                "so an export of _delta_log could miss versions"
            )
