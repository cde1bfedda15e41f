"""The diff page, the API reference page and their assets: the service's own scripts and styles,
never framed, sending no referrer (a page's URL may hold a sign-in code)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from starlette.responses import HTMLResponse, Response

from hooks.errors import Refusal

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
ASSETS = {"diff.js": "text/javascript", "diff.css": "text/css", "docs.js": "text/javascript"}
router = APIRouter(include_in_schema=False)


@router.get("/diff")
async def diff_page():
    return HTMLResponse((TEMPLATES / "diff.html").read_text(), headers=PAGE_HEADERS)


@router.get("/docs")
async def docs_page():
    """The API reference, rendered from /openapi.json by the service's own script (no CDN)."""
    return HTMLResponse((TEMPLATES / "docs.html").read_text(), headers=PAGE_HEADERS)


@router.get("/assets/{name}")
async def page_asset(name: str):
    if name not in ASSETS:
        raise Refusal(404, f"no asset {name!r}")
    return Response((TEMPLATES / name).read_text(), media_type=ASSETS[name], headers=PAGE_HEADERS)
