"""The Delta tables at a ref, and the one a path belongs to: listed by a worker once per commit."""

from __future__ import annotations

from fastapi import APIRouter, Query
from starlette.requests import Request

from exporter.diff.datasets import resolve_dataset
from hooks.deps import COMPUTING, Services, ServicesDep, from_workers, still_computing
from hooks.errors import Refusal, problems
from hooks.grant import grant_for
from hooks.models import Dataset, Datasets

router = APIRouter()


@router.get("/repositories/{repository}/refs/{ref}/datasets", response_model=Datasets,
            summary="The Delta tables at a ref", responses={**COMPUTING, **problems(400, 401, 403, 404, 422, 503)})
async def datasets(request: Request, services: ServicesDep, repository: str, ref: str):
    """From descriptors under `_lakefs_tables/`, and detected by their `_delta_log/`; listed by a
    worker once per commit and cached, like diffs. Only the tables the caller may read are listed."""
    grant = await grant_for(request, repository, [ref])
    found = await _datasets_at(services, repository, grant.commit(ref))
    if found is None:
        return still_computing()
    return {"repository": repository, "ref": ref,
            "results": await grant.readable(found, lambda _: [grant.commit(ref)], lambda d: [d["path"]])}


@router.get("/repositories/{repository}/refs/{ref}/datasets/resolve", response_model=Dataset,
            summary="The most specific table a path belongs to",
            responses={**COMPUTING, **problems(400, 401, 403, 404, 422, 503)})
async def resolve(request: Request, services: ServicesDep, repository: str, ref: str,
                  path: str = Query(min_length=1, description="a path from the repository root")):
    grant = await grant_for(request, repository, [ref])
    found = await _datasets_at(services, repository, grant.commit(ref))
    if found is None:
        return still_computing()
    dataset = resolve_dataset(found, path)
    if dataset is None or not await grant.may_read(grant.commit(ref), [dataset["path"]]):
        raise Refusal(404, f"no dataset you may read contains {path!r}")  # the same answer: no oracle
    return dataset


async def _datasets_at(services: Services, repository: str, commit_id: str) -> list[dict] | None:
    return (await from_workers(services, services.datasets, "lakefs_delta.list_datasets", (repository, commit_id)))[1]
