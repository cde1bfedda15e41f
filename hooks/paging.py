"""Paging of a diff's `results` for the HTTP API: `after` (an id) and `amount`."""

MAX_PER_PAGE = 1000


def paginate(results: list[dict], after: str | None, amount: int) -> tuple[list[dict], dict]:
    """A page of newest-first `results` after the entry whose id is `after` (exclusive).

    An `after` that names no entry (e.g. a version since dropped from the diff) starts at the
    first entry older than it. `next_offset` is the page's last id when more follow, else "".
    """
    if not 1 <= amount <= MAX_PER_PAGE:
        raise ValueError(f"amount must be between 1 and {MAX_PER_PAGE}, got {amount}")
    start = _page_start(results, after)
    page = results[start : start + amount]
    has_more = start + amount < len(results)
    return page, {
        "has_more": has_more,
        "next_offset": page[-1]["id"] if has_more else "",
        "max_per_page": MAX_PER_PAGE,
        "results": len(page),
    }


def row_start(after: str | None) -> int:
    """The position a page of rows starts at: after the row id `after`."""
    try:
        start = 0 if not after else int(after) + 1
    except ValueError:
        raise ValueError(f"after must be a row id, got {after!r}") from None
    if start < 0:
        raise ValueError(f"after must be a row id, got {after!r}")
    return start


def row_pagination(page: list[dict], start: int, amount: int, total: int) -> dict:
    if not 1 <= amount <= MAX_PER_PAGE:
        raise ValueError(f"amount must be between 1 and {MAX_PER_PAGE}, got {amount}")
    has_more = start + amount < total
    return {"has_more": has_more, "next_offset": str(page[-1]["id"]) if has_more and page else "",
            "max_per_page": MAX_PER_PAGE, "results": len(page)}


def _page_start(results: list[dict], after: str | None) -> int:
    if not after:
        return 0
    for index, result in enumerate(results):
        if result["id"] == after:
            return index + 1
    try:
        after_version = int(after)
    except ValueError:
        raise ValueError(f"after must be a version number (an id from the results), got {after!r}") from None
    return next((index for index, result in enumerate(results) if int(result["id"]) < after_version), len(results))
