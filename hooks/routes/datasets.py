"""The Delta tables at a ref, and the one a path belongs to: listed by a worker once per commit."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from exporter.diff.datasets import resolve_dataset
from hooks.deps import COMPUTING, Services, ServicesDep, from_workers, may_read, require_reader, still_computing
from hooks.errors import Refusal, problems
from hooks.models import Dataset, Datasets

router = APIRouter()


@router.get("/repositories/{repository}/refs/{ref}/datasets", response_model=Datasets,
            summary="The Delta tables at a ref", responses={**COMPUTING, **problems(400, 401, 403, 404, 422, 503)})
async def datasets(request: Request, services: ServicesDep, repository: str, ref: str):
    """From descriptors under `_lakefs_tables/`, and detected by their `_delta_log/`; listed by a
    worker once per commit and cached, like diffs. Only the tables the caller may read are listed."""
    await require_reader(request, repository)
    found = await _datasets_at(services, repository, ref)
    if found is None:
        return still_computing()
    readable = await asyncio.gather(*(may_read(request, repository, [(ref, dataset["path"])]) for dataset in found))
    return {"repository": repository, "ref": ref, "results": [d for d, may in zip(found, readable) if may]}


@router.get("/repositories/{repository}/refs/{ref}/datasets/resolve", response_model=Dataset,
            summary="The most specific table a path belongs to",
            responses={**COMPUTING, **problems(400, 401, 403, 404, 422, 503)})
async def resolve(request: Request, services: ServicesDep, repository: str, ref: str,
                  path: str = Query(min_length=1, description="a path from the repository root")):
    await require_reader(request, repository)
    found = await _datasets_at(services, repository, ref)
    if found is None:
        return still_computing()
    dataset = resolve_dataset(found, path)
    if dataset is None:
        raise Refusal(404, f"no dataset contains {path!r}")
    await require_reader(request, repository, [(ref, dataset["path"])])
    return dataset


async def _datasets_at(services: Services, repository: str, ref: str) -> list[dict] | None:
    commit_id = (await run_in_threadpool(services.lakefs().commit, repository, ref)).id
    return (await from_workers(services, services.datasets, "lakefs_delta.list_datasets", (repository, commit_id)))[1]
