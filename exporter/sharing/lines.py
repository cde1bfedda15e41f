"""The protocol's answer lines for one shared table (delta-io/delta-sharing PROTOCOL.md): protocol and
metaData lines in the `parquet` or `delta` response format, file lines with presigned URLs for a
snapshot, a version range or its changes, encoded as newline-delimited JSON.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from exporter.delta.deletion_vectors import ABSOLUTE, RELATIVE
from exporter.delta.live_files import _plain
from exporter.errors import InvalidParameter, UnshareableTable, UnsupportedByClient, VersionOutOfRange
from exporter.sharing.versions import SharedTable, Snapshot, TableSigner
from exporter.storage.presign import PresignedUrl, Presigner

_COMPACT = json.JSONEncoder(separators=(",", ":")).encode  # one encoder: `json.dumps` with options builds one a call
_string = json.encoder.encode_basestring_ascii  # a str as `_COMPACT` writes it (quoted, non-ASCII escaped)


def response_format(capabilities: str | None, protocol: Mapping[str, Any]) -> str:
    """`parquet` or `delta` (PROTOCOL.md#delta-sharing-capabilities-header): parquet when the client
    takes it and the table needs no reader feature; delta when it must be, or is all it takes."""
    asked = _capability(capabilities, "responseformat") or ["parquet"]
    needs = _reader_features(protocol) or protocol.get("minReaderVersion", 1) > 1
    if needs:
        if "delta" not in asked:
            needed = ", ".join(_reader_features(protocol)) or f"reader version {protocol['minReaderVersion']}"
            raise UnsupportedByClient(f"the table needs reader features ({needed}) that only the delta response "
                                      "format carries: send `delta-sharing-capabilities: responseformat=delta`")
        taken = _capability(capabilities, "readerfeatures")
        missing = [f for f in _reader_features(protocol) if taken is not None and f.lower() not in taken]
        if missing:
            raise UnsupportedByClient(f"the table needs reader features this client does not declare: {', '.join(missing)}")
        return "delta"
    return "parquet" if "parquet" in asked else "delta"


def _capability(header: str | None, key: str) -> list[str] | None:
    for part in (header or "").split(";"):
        name, _, values = part.partition("=")
        if name.strip().lower() == key:
            return [v.strip().lower() for v in values.split(",") if v.strip()]
    return None


def _reader_features(protocol: Mapping[str, Any]) -> list[str]:
    return list(protocol.get("readerFeatures") or [])


def metadata_lines(snapshot: Snapshot, fmt: str) -> list[dict]:
    return [_protocol_line(snapshot.protocol, fmt), _metadata_line(snapshot.metadata, fmt, None)]


def _protocol_line(protocol: dict, fmt: str) -> dict:
    if fmt == "delta":
        return {"protocol": {"deltaProtocol": protocol}}
    return {"protocol": {"minReaderVersion": 1}}


def _metadata_line(metadata: dict, fmt: str, version: int | None) -> dict:
    if fmt == "delta":
        line = {"deltaMetadata": metadata}
    else:
        line = {key: metadata[key] for key in ("id", "name", "description") if metadata.get(key) is not None}
        line.update(format={"provider": "parquet"}, schemaString=metadata.get("schemaString", ""),
                    partitionColumns=metadata.get("partitionColumns") or [],
                    configuration=metadata.get("configuration") or {})
    if version is not None:
        line["version"] = version
    return {"metaData": line}


def query_lines(snapshot: Snapshot, fmt: str, presigner: Presigner, versioned: bool) -> Iterator[dict | str]:
    """A snapshot query's answer: protocol, metadata, then one line per live file, streamed. The
    checkpoint's files in the parquet format are encoded straight from Arrow columns
    (`_parquet_file_lines`: the same bytes as `_file_line` encoded, without a dict per file)."""
    yield _protocol_line(snapshot.protocol, fmt)
    yield _metadata_line(snapshot.metadata, fmt, snapshot.version if versioned else None)
    sign = snapshot.table.signer(presigner)
    for add in snapshot.live.later_files():
        yield _file_line("file", "add", add, fmt, sign)
    for adds in snapshot.live.checkpoint_batches(whole=True):
        if fmt == "parquet":
            yield from _parquet_file_lines(adds, sign)
        else:
            yield from (_file_line("file", "add", add, fmt, sign) for add in map(_plain, adds.to_pylist()))


def _parquet_file_lines(adds: pa.StructArray, sign: TableSigner) -> Iterator[str]:
    """`_COMPACT(_file_line("file", "add", add, "parquet", sign))` of each add, from its columns."""
    fields = {field.name for field in adds.type}
    if "deletionVector" in fields and adds.field("deletionVector").null_count < len(adds):
        first = pc.index(adds.field("deletionVector").is_valid(), True).as_py()
        _file_line("file", "add", _plain(adds[first].as_py()), "parquet", sign)  # raises: parquet has no DVs
    count = len(adds)
    column = lambda name: adds.field(name).to_pylist() if name in fields else [None] * count  # noqa: E731
    absolute, urls = sign.many(column("path"))
    expires = f',"expirationTimestamp":{sign.presigner.expires_ms}}}}}'
    for path, url, values, size, stats in zip(absolute, urls, column("partitionValues"), column("size"),
                                              column("stats")):
        yield "".join(('{"file":{"url":', _string(url), ',"id":"', _file_id(path), '","partitionValues":',
                       _COMPACT(dict(values)) if values else "{}", ',"size":', str(0 if size is None else size),
                       ',"stats":' + _string(stats) if stats else "", expires))


def range_protocol(table: SharedTable, start: Snapshot, end: int) -> dict:
    """The protocol a reader of versions `start`..`end` must follow: the start's, with every reader
    feature the table gained by `end` (deletion vectors enabled mid-range need the delta format)."""
    protocol = dict(start.protocol)
    if end > start.version:
        later = table.snapshot(end).protocol
        features = list(dict.fromkeys([*_reader_features(protocol), *_reader_features(later)]))
        if features:
            protocol["readerFeatures"] = features
        protocol["minReaderVersion"] = max(protocol.get("minReaderVersion", 1), later.get("minReaderVersion", 1))
    return protocol


def changes_lines(table: SharedTable, snapshot: Snapshot, end: int, fmt: str, presigner: Presigner,
                  historical_metadata: bool, change_files: bool = True, protocol: dict | None = None) -> Iterator[dict]:
    """A change data feed (`change_files`: cdc files where a version has them, PROTOCOL.md#add-cdc-file)
    or the data change files of a streaming query, versions `snapshot.version` to `end`, under
    `protocol` (`range_protocol`: the strictest over the range)."""
    start = snapshot.version
    _require_change_data_feed(table, snapshot.metadata, start, change_files)
    yield _protocol_line(protocol or snapshot.protocol, fmt)
    yield _metadata_line(snapshot.metadata, fmt, start if historical_metadata or fmt == "delta" else None)
    sign = table.signer(presigner)
    commits = table.commits(start, end)
    for version in range(start, end + 1):
        if version not in commits:
            raise VersionOutOfRange(f"version {version} of table {table.name!r} is not in its log")
        actions = table.actions(version)
        timestamp = table.timestamp(version, actions)
        for action in actions:
            if "metaData" in action and version > start:
                _require_change_data_feed(table, action["metaData"], version, change_files)
                if historical_metadata:
                    yield _metadata_line(action["metaData"], fmt, version)
        has_cdc = change_files and any("cdc" in action for action in actions)
        for action in actions:
            for kind in ("add", "remove", "cdc"):
                file_action = action.get(kind)
                if not isinstance(file_action, dict):
                    continue
                if kind == "cdc" and not change_files:
                    continue
                if kind != "cdc" and (not file_action.get("dataChange", True) or (has_cdc and fmt == "parquet")):
                    continue
                wrapper = "cdf" if kind == "cdc" else kind
                yield _file_line(wrapper, kind, file_action, fmt, sign, version, timestamp)


def _require_change_data_feed(table: SharedTable, metadata: Mapping[str, Any], version: int, change_files: bool) -> None:
    if change_files and str((metadata.get("configuration") or {}).get("delta.enableChangeDataFeed", "")).lower() != "true":
        raise InvalidParameter(f"the change data feed is not enabled on table {table.name!r} at version "
                               f"{version} (delta.enableChangeDataFeed)")


def _file_line(wrapper: str, kind: str, action: dict, fmt: str, sign: Callable[[str], tuple[str, PresignedUrl]],
               version: int | None = None, timestamp: int | None = None) -> dict:
    path, url = sign(action["path"])
    if fmt == "delta":
        shared = {**action, "path": url.url}
        line: dict[str, Any] = {"id": _file_id(path)}
        vector = action.get("deletionVector")
        if isinstance(vector, dict) and vector.get("storageType") == ABSOLUTE:
            vector_path, vector_url = sign(vector["pathOrInlineDv"])
            shared["deletionVector"] = {**vector, "pathOrInlineDv": vector_url.url}
            line["deletionVectorFileId"] = _file_id(vector_path)
        elif isinstance(vector, dict) and vector.get("storageType") == RELATIVE:
            raise UnshareableTable(f"a deletion vector relative to the table ({vector}) in an "
                                   "exported log: the export should have made it absolute")
        if version is not None:
            line.update(version=version, timestamp=timestamp)
        line.update(expirationTimestamp=url.expires_ms, deltaSingleAction={kind: shared})
        return {"file": line}
    if action.get("deletionVector"):  # the parquet format cannot say which rows are deleted: never answer without
        raise UnsupportedByClient(f"{path} has a deletion vector, which only the delta response format carries")
    line = {"url": url.url, "id": _file_id(path), "partitionValues": action.get("partitionValues") or {},
            "size": action.get("size", 0)}
    if action.get("stats") and kind == "add":
        line["stats"] = action["stats"]
    if version is not None:
        line.update(version=version, timestamp=timestamp)
    line["expirationTimestamp"] = url.expires_ms
    return {wrapper: line}


def _file_id(path: str) -> str:
    return hashlib.md5(path.encode(), usedforsecurity=False).hexdigest()


def encode_lines(lines: Iterable[dict | str], batch: int = 1000) -> Iterator[bytes]:
    """NDJSON, a batch of lines per chunk; a line is a dict, or a str already encoded."""
    chunk: list[str] = []
    for line in lines:
        chunk.append(line if type(line) is str else _COMPACT(line))  # noqa: E721 (lines already encoded)
        if len(chunk) >= batch:
            yield ("\n".join(chunk) + "\n").encode()
            chunk = []
    if chunk:
        yield ("\n".join(chunk) + "\n").encode()
