"""The tables of a [repository, ref] namespace, loading one, and signing its readers' S3 requests."""

from __future__ import annotations

import hashlib
from urllib.parse import quote

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from exporter.export.iceberg_catalog import CatalogTable
from exporter.errors import NoSuchIcebergTable
from hooks.edge import CommitId
from hooks.grant import grant_for
from hooks.iceberg.deps import catalog, levels, page, readable_export, readable_namespace, readable_table, segment

router = APIRouter()
TABLE = "/namespaces/{namespace}/tables/{table}"
# PyIceberg's S3 remote signing (pyiceberg.io.fsspec.S3V4RestSigner) is in its fsspec FileIO
FILE_IO = "pyiceberg.io.fsspec.FsspecFileIO"


class SignRequest(BaseModel):
    """The S3 signer's request (apache/iceberg aws/src/main/resources/s3-signer-open-api.yaml)."""

    method: str
    uri: str
    region: str = ""
    headers: dict[str, list[str]] = Field(default_factory=dict)
    body: str | None = None
    properties: dict[str, str] = Field(default_factory=dict)


@router.get("/namespaces/{namespace}/tables")
async def list_tables(request: Request, namespace: str, pageToken: str | None = None,
                      pageSize: int | None = Query(None, ge=1)):
    """The tables of the ref's current commit with an Iceberg table, which the caller may read;
    paged by name (`deps.page`)."""
    parts = levels(segment(namespace))
    grant, found = await readable_namespace(request, parts)
    if found is None:
        return {"identifiers": []}
    tables = await grant.readable(await run_in_threadpool(catalog(request).tables, found),
                                  lambda _: [found.commit_id], lambda table: table.table_paths)
    tables, more = page(tables, lambda t: t.name, pageToken, pageSize)
    return {"identifiers": [{"namespace": parts, "name": table.name} for table in tables], **more}


@router.get(TABLE)
async def load_table(request: Request, namespace: str, table: str, snapshots: str | None = None):
    """The table's current metadata and where it is; `config` tells readers to sign their requests
    here (they hold no store keys)."""
    found = await readable_table(request, levels(segment(namespace)), segment(table))
    etag = _etag(found)
    if etag in (value.strip() for value in request.headers.get("if-none-match", "").split(",")):
        return Response(status_code=304, headers={"ETag": etag})  # metadata files never change: nothing read
    metadata = await run_in_threadpool(catalog(request).metadata, found)
    properties = await run_in_threadpool(catalog(request).storage_properties, found.repository)
    return JSONResponse({"metadata-location": found.metadata_location, "metadata": metadata,
                         "config": {**properties, **_signing(found)}}, headers={"ETag": etag})


@router.head(TABLE)
async def table_exists(request: Request, namespace: str, table: str):
    await readable_table(request, levels(segment(namespace)), segment(table))
    return Response(status_code=204)


@router.post(TABLE + "/commits/{commit_id}/sign")
async def sign(request: Request, namespace: str, table: str, commit_id: CommitId, wanted: SignRequest):
    """S3 remote signing for a reader of the table as of `commit_id` (`load_table` names this
    address): the request's URL presigned, or 403 for an object its readers do not read."""
    parts = levels(segment(namespace))
    if len(parts) != 2:
        raise NoSuchIcebergTable(f"no table {segment(table)!r} in {parts[0]!r}: tables are in [repository, ref]")
    grant = await grant_for(request, parts[0])  # before anything is looked up
    found = await readable_export(grant, catalog(request), parts[1], commit_id, segment(table))
    url = await run_in_threadpool(catalog(request).signed_url, found, wanted.method, wanted.uri)
    return {"uri": url, "headers": {}}


def _etag(table: CatalogTable) -> str:
    """A table's version: its metadata file's name (a new one for every change), hashed."""
    return '"' + hashlib.sha256(table.metadata_location.encode()).hexdigest()[:32] + '"'


def _signing(table: CatalogTable) -> dict[str, str]:
    namespace = "%1F".join(quote(part, safe="") for part in (table.repository, table.ref))  # SEPARATOR, encoded
    return {"py-io-impl": FILE_IO, "s3.signer": "S3V4RestSigner", "s3.remote-signing-enabled": "true",
            "s3.path-style-access": "true",
            "s3.signer.endpoint": f"v1/namespaces/{namespace}/tables/{quote(table.name, safe='')}"
                                  f"/commits/{table.commit_id}/sign"}
