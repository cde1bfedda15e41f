"""Actions of a Delta commit or checkpoint (PROTOCOL.md#actions): parsing, the protocol and
features a reader must know, and when a commit happened.
"""

import json
from collections.abc import Iterable, Mapping
from typing import Any

from exporter.errors import CorruptLog, UnsupportedTable

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


def in_commit_timestamp(actions: Iterable[Mapping[str, Any]]) -> int | None:
    """PROTOCOL.md#in-commit-timestamps: the commit's `commitInfo.inCommitTimestamp` (epoch ms),
    None when the commit has none. Writers put `commitInfo` first; any position is accepted."""
    for action in actions:
        info = action.get("commitInfo")
        if isinstance(info, Mapping):
            timestamp = info.get("inCommitTimestamp")
            return timestamp if isinstance(timestamp, int) and not isinstance(timestamp, bool) else None
    return None


def commit_timestamp(actions: Iterable[Mapping[str, Any]], modification_time_ms: int) -> int:
    """When a commit happened, as readers decide it (PROTOCOL.md#in-commit-timestamps): the
    in-commit timestamp when set, else the commit file's modification time."""
    timestamp = in_commit_timestamp(actions)
    return modification_time_ms if timestamp is None else timestamp


def after(previous: int | None, timestamp: int) -> int:
    """A commit's time in version order, as Delta's readers make commit times increase (file
    modification times may go backwards: clock skew, copies): a time not after the previous
    version's is that one + 1 ms. In-commit timestamps already increase; they are kept."""
    return timestamp if previous is None or timestamp > previous else previous + 1


def increasing(timestamps: Mapping[int, int]) -> dict[int, int]:
    """{version: commit time}, made increasing in version order (`after`)."""
    made, previous = {}, None
    for version in sorted(timestamps):
        previous = made[version] = after(previous, timestamps[version])
    return made


def commit_times(read: Mapping[int, int], file_times: Mapping[int, int]) -> dict[int, int]:
    """The commit times Delta's readers give the versions `read` ({version: its in-commit timestamp
    or file time, epoch ms}), made increasing over the whole log from its first version: the versions
    before them count by their file times (`file_times`, epoch ms; a log listed from version 0 has
    them), so a checkpoint whose file is older than the previous commit's is that one + 1 ms there too."""
    first = min(read, default=0)
    made = increasing({**{v: t for v, t in file_times.items() if v < first}, **read})
    return {version: made[version] for version in read}
