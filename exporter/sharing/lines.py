"""The protocol's answer lines for one shared table (delta-io/delta-sharing PROTOCOL.md): protocol and
metaData lines in the `parquet` or `delta` response format, file lines with presigned URLs for a
snapshot, a version range or its changes, encoded as newline-delimited JSON.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from exporter.delta.deletion_vectors import ABSOLUTE, RELATIVE
from exporter.delta.live_files import _plain
from exporter.errors import InvalidParameter, UnshareableTable, UnsupportedByClient, VersionOutOfRange
from exporter.sharing import json_columns
from exporter.sharing.json_columns import NotColumnar
from exporter.sharing.versions import SharedTable, Snapshot, TableSigner
from exporter.storage.presign import PresignedUrl, Presigner, hex_digests, string_bytes

_COMPACT = json.JSONEncoder(separators=(",", ":")).encode  # one encoder: `json.dumps` with options builds one a call


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


def query_lines(snapshot: Snapshot, fmt: str, presigner: Presigner, versioned: bool) -> Iterator[dict | bytes]:
    """A snapshot query's answer: protocol, metadata, then one line per live file, streamed. The
    checkpoint's files are encoded from Arrow columns, `_LINES` files to a bytes chunk
    (`_checkpoint_file_lines`: the bytes of `_file_line` encoded, without a dict per file)."""
    yield _protocol_line(snapshot.protocol, fmt)
    yield _metadata_line(snapshot.metadata, fmt, snapshot.version if versioned else None)
    sign = snapshot.table.signer(presigner)
    for add in snapshot.live.later_files():
        yield _file_line("file", "add", add, fmt, sign)
    for adds in snapshot.live.checkpoint_batches(whole=True):
        for start in range(0, len(adds), _LINES):
            yield _checkpoint_file_lines(adds.slice(start, _LINES), fmt, sign)


_LINES = 8_192  # file lines per chunk (about 5 MiB), built column by column: fewer hold more memory, no less CPU
_MD5 = hashlib.md5(usedforsecurity=False)  # copied per file: a new hash given an option costs twice as much


def _checkpoint_file_lines(adds: pa.StructArray, fmt: str, sign: TableSigner) -> bytes:
    """`_COMPACT(_file_line("file", "add", add, fmt, sign))` of each add, newline-terminated, from
    its columns; from its dict where a column is one `json_columns` does not write."""
    try:
        lines = _parquet_file_lines(adds, sign) if fmt == "parquet" else _delta_file_lines(adds, sign)
    except NotColumnar:
        return "".join(_COMPACT(_file_line("file", "add", add, fmt, sign)) + "\n"
                       for add in map(_plain, adds.to_pylist())).encode()
    return string_bytes(lines)


def _parquet_file_lines(adds: pa.StructArray, sign: TableSigner) -> pa.Array:
    fields = {field.name for field in adds.type}
    if "deletionVector" in fields and adds.field("deletionVector").null_count < len(adds):
        for add in adds.filter(adds.field("deletionVector").is_valid()).to_pylist():
            _file_line("file", "add", _plain(add), "parquet", sign)  # raises: parquet has no DVs
    absolute, urls = sign.column(adds.field("path"))
    values = json_columns.map_objects(adds.field("partitionValues")) if "partitionValues" in fields else None
    size = pc.cast(pc.fill_null(adds.field("size"), 0), pa.string()) if "size" in fields else "0"
    stats = ""
    if "stats" in fields:
        given = pc.fill_null(pc.greater(pc.binary_length(adds.field("stats")), 0), False)
        stats = pc.if_else(given, json_columns.join(',"stats":', json_columns.strings(adds.field("stats"))), "")
    return json_columns.join('{"file":{"url":"', urls, '","id":"', _file_ids(absolute), '","partitionValues":',
                             "{}" if values is None else pc.fill_null(values, "{}"), ',"size":', size, stats,
                             f',"expirationTimestamp":{sign.presigner.expires_ms}}}}}\n')


def _delta_file_lines(adds: pa.StructArray, sign: TableSigner) -> pa.Array:
    absolute, urls = sign.column(adds.field("path"))
    replaced, vector_ids = {"path": json_columns.join('"', urls, '"')}, ""
    if "deletionVector" in {field.name for field in adds.type}:
        vectors = adds.field("deletionVector")
        storage = pc.fill_null(pc.struct_field(vectors, "storageType"), "")
        if pc.equal(storage, RELATIVE).true_count:  # raises, naming the first
            _file_line("file", "add", _plain(adds.filter(pc.equal(storage, RELATIVE))[0].as_py()), "delta", sign)
        signed = pc.equal(storage, ABSOLUTE)
        if signed.true_count:  # an absolute vector's path is signed; an inline one's bytes stay
            stored = vectors.field("pathOrInlineDv")
            vector_paths, vector_urls = sign.column(stored.filter(signed))
            stored = pc.replace_with_mask(json_columns.strings(stored), signed, json_columns.join('"', vector_urls, '"'))
            replaced["deletionVector"] = json_columns.objects(vectors, {"pathOrInlineDv": stored})
            ids = json_columns.join(',"deletionVectorFileId":"', _file_ids(vector_paths), '"')
            vector_ids = pc.fill_null(pc.replace_with_mask(pa.nulls(len(adds), pa.string()), signed, ids), "")
    return json_columns.join('{"file":{"id":"', _file_ids(absolute), '"', vector_ids,
                             f',"expirationTimestamp":{sign.presigner.expires_ms},"deltaSingleAction":{{"add":',
                             json_columns.objects(adds, replaced), "}}}\n")


def _file_ids(paths: pa.Array) -> pa.Array:
    """`_file_id` of each path of a column."""
    digests, new = [], _MD5.copy
    for path in paths.cast(pa.binary()).to_pylist():
        file_id = new()
        file_id.update(path)
        digests.append(file_id.digest())
    return hex_digests(digests, 16, len(paths))


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


@dataclass(frozen=True)
class Feed:
    """What a feed of versions holds: with `change_files`, a change data feed (cdc files where a
    version has them, PROTOCOL.md#add-cdc-file), else a streaming query's data change files; every
    version's metaData with `historical_metadata`, else only the first's."""

    change_files: bool = True
    historical_metadata: bool = False


STREAM = Feed(change_files=False, historical_metadata=True)  # a streaming client's data change files


def changes_lines(table: SharedTable, snapshot: Snapshot, end: int, fmt: str, presigner: Presigner,
                  feed: Feed = Feed(), protocol: dict | None = None) -> Iterator[dict]:
    """The `feed` of versions `snapshot.version` to `end`, under `protocol` (`range_protocol`: the
    strictest over the range)."""
    change_files, historical_metadata = feed.change_files, feed.historical_metadata
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
                    yield _metadata_line(table.named(action["metaData"]), fmt, version)
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


def encode_lines(lines: Iterable[dict | bytes], batch: int = 1000) -> Iterator[bytes]:
    """NDJSON, a batch of lines per chunk; a line is a dict, or bytes: lines already encoded, each
    ending in a newline."""
    chunk: list[str] = []
    for line in lines:
        if type(line) is bytes:  # noqa: E721 (lines already encoded)
            if chunk:
                yield ("\n".join(chunk) + "\n").encode()
                chunk = []
            yield line
            continue
        chunk.append(_COMPACT(line))
        if len(chunk) >= batch:
            yield ("\n".join(chunk) + "\n").encode()
            chunk = []
    if chunk:
        yield ("\n".join(chunk) + "\n").encode()
