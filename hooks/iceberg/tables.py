"""The tables of a [repository, ref] namespace, loading one, and its readers' access to the objects:
S3 remote signing, or vended credentials.

Remote signing: `loadTable` names two signers, for the Iceberg clients of each age (read from their
code): the table's per-commit address in `s3.signer.endpoint` (PyIceberg, Iceberg Java 1.10 and 1.11,
which read that property), and the specification's `.../tables/{table}/sign`, which Java 1.12 derives
from the table's identifier itself (it no longer reads `s3.signer.endpoint`) and which carries the
commit the table was loaded at in the signing properties (`remote-signing-config`). `signer.endpoint`
is not sent: Java 1.12 would take it over the specification's address.

Vended credentials (`X-Iceberg-Access-Delegation: vended-credentials`) when `iceberg.vended_credentials`
is on and the caller reads the whole repository: a service token naming it, or a lakeFS user or group
`iceberg.vended_credentials_readers` names (the credential reaches every object lakeFS wrote for the
repository: exporter/storage/vended.py); otherwise the table is answered for remote signing, which
PyIceberg, asking for vended credentials by default, uses as well.
"""

from __future__ import annotations

import hashlib
import time
from urllib.parse import quote

import httpx
from fastapi import APIRouter, Query
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from exporter.catalog.iceberg import CatalogTable
from exporter.errors import BadRequest, CredentialsNotVended, NoSuchIcebergTable
from exporter.lakefs.client import COMMIT_ID
from hooks.edge import CommitId
from hooks.errors import Refusal
from hooks.grant import grant_for
from hooks.iceberg.deps import catalog, levels, page, readable_export, readable_namespace, readable_table, segment

router = APIRouter()
TABLE = "/namespaces/{namespace}/tables/{table}"
# PyIceberg's S3 remote signing (pyiceberg.io.fsspec.S3V4RestSigner) is in its fsspec FileIO
FILE_IO = "pyiceberg.io.fsspec.FsspecFileIO"
DELEGATION = "x-iceberg-access-delegation"
VENDED = "vended-credentials"
COMMIT_PROPERTY = "lakefs.commit-id"  # in the signing properties Java 1.12 sends with each sign request


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
    here, or holds the credential vended to them (they hold no store keys)."""
    parts = levels(segment(namespace))
    found = await readable_table(request, parts, segment(table))
    credentials = None
    if VENDED in _listed(request, DELEGATION):
        try:
            credentials = await _vended(request, found)
        except CredentialsNotVended:
            pass  # signed instead: a reader asking for either (PyIceberg) reads on
    if credentials is None:
        etag = _etag(found)
        if etag in _listed(request, "if-none-match"):
            return Response(status_code=304, headers={"ETag": etag})  # metadata files never change: nothing read
        config, access = _signing(found), {"remote-signing-config": {"properties": {COMMIT_PROPERTY: found.commit_id}}}
        headers = {"ETag": etag}
    else:  # a credential expires: never answered from a client's cache
        config, access = credentials[0]["config"], {"storage-credentials": credentials}
        headers = {"Cache-Control": "no-store"}
    metadata = await run_in_threadpool(catalog(request).metadata, found)
    properties = await run_in_threadpool(catalog(request).storage_properties, found.repository)
    return JSONResponse({"metadata-location": found.metadata_location, "metadata": metadata,
                         "config": {**properties, **config}, **access}, headers=headers)


@router.get(TABLE + "/credentials")
async def load_credentials(request: Request, namespace: str, table: str):
    """A fresh vended credential for the table (readers renew theirs here), or 403 with the reason."""
    found = await readable_table(request, levels(segment(namespace)), segment(table))
    return JSONResponse({"storage-credentials": await _vended(request, found)}, headers={"Cache-Control": "no-store"})


@router.head(TABLE)
async def table_exists(request: Request, namespace: str, table: str):
    await readable_table(request, levels(segment(namespace)), segment(table))
    return Response(status_code=204)


@router.post(TABLE + "/commits/{commit_id}/sign")
async def sign(request: Request, namespace: str, table: str, commit_id: CommitId, wanted: SignRequest):
    """S3 remote signing for a reader of the table as of `commit_id` (`load_table` names this
    address): the request's URL presigned, or 403 for an object its readers do not read."""
    found = await _pinned(request, levels(segment(namespace)), segment(table), commit_id)
    url = await run_in_threadpool(catalog(request).signed_url, found, wanted.method, wanted.uri)
    return {"uri": url, "headers": {}}


@router.post(TABLE + "/sign")
async def sign_table(request: Request, namespace: str, table: str, wanted: SignRequest):
    """The specification's remote signing (Iceberg 1.12's `rest.remote-signing.endpoint`): for the
    table as of the commit its signing properties name, else as the ref's current commit holds it."""
    parts = levels(segment(namespace))
    commit_id = wanted.properties.get(COMMIT_PROPERTY)
    if commit_id is None:
        found = await readable_table(request, parts, segment(table))
    else:
        if not COMMIT_ID.fullmatch(commit_id):
            raise BadRequest(f"signing property {COMMIT_PROPERTY} is not a lakeFS commit id")
        found = await _pinned(request, parts, segment(table), commit_id)
    url = await run_in_threadpool(catalog(request).signed_url, found, wanted.method, wanted.uri)
    return {"uri": url, "headers": {}}


async def _pinned(request: Request, parts: list[str], table: str, commit_id: str) -> CatalogTable:
    """The table of [repository, ref] as loaded at `commit_id`, once the caller may read it."""
    if len(parts) != 2:
        raise NoSuchIcebergTable(f"no table {table!r} in {parts[0]!r}: tables are in [repository, ref]")
    grant = await grant_for(request, parts[0])  # before anything is looked up
    return await readable_export(grant, catalog(request), parts[1], commit_id, table)


async def _vended(request: Request, found: CatalogTable) -> list[dict]:
    """The table's `storage-credentials`, once vending is on and the caller reads the whole
    repository (the credential reaches every object lakeFS wrote for it: exporter/storage/vended.py):
    a service token naming it, or a lakeFS identity `iceberg.vended_credentials_readers` names, asked
    of lakeFS now. Its life ends with the caller's session."""
    services = request.app.state.services
    settings = services.config.iceberg
    if not settings.vended_credentials:
        raise CredentialsNotVended("this catalog vends no credentials (iceberg.vended_credentials is off): "
                                   "readers sign their requests through it")
    grant = await grant_for(request, found.repository)
    if not grant.whole and not await _named_reader(services, grant.caller, settings.vended_credentials_readers):
        raise CredentialsNotVended(
            f"a vended credential reaches every object of {found.repository!r}, and it is vended only to whole-"
            "repository readers (a service token naming the repository, or a lakeFS user or group "
            "iceberg.vended_credentials_readers names), which this identity is not: sign requests through the "
            "catalog instead")
    seconds = settings.vended_credentials_seconds
    ends = grant.caller.session_end() if grant.caller is not None else None
    if ends is not None:
        seconds = min(seconds, int(ends - time.time()))
    return await run_in_threadpool(catalog(request).storage_credentials, found, seconds)


async def _named_reader(services, caller, readers: tuple[str, ...]) -> bool:
    try:
        return await services.access.names_reader(caller, readers)
    except (httpx.HTTPError, KeyError, ValueError):
        raise Refusal(503, "lakeFS, which tells whether this identity is a whole-repository reader, cannot be "
                           "reached") from None


def _listed(request: Request, header: str) -> set[str]:
    """The values of a comma-separated request header."""
    return {value.strip() for value in request.headers.get(header, "").split(",")}


def _etag(table: CatalogTable) -> str:
    """A table's version: its metadata file's name (a new one for every change), hashed."""
    return '"' + hashlib.sha256(table.metadata_location.encode()).hexdigest()[:32] + '"'


def _signing(table: CatalogTable) -> dict[str, str]:
    namespace = "%1F".join(quote(part, safe="") for part in (table.repository, table.ref))  # SEPARATOR, encoded
    return {"py-io-impl": FILE_IO, "s3.signer": "S3V4RestSigner", "s3.remote-signing-enabled": "true",
            "s3.path-style-access": "true",
            "s3.signer.endpoint": f"v1/namespaces/{namespace}/tables/{quote(table.name, safe='')}"
                                  f"/commits/{table.commit_id}/sign"}
