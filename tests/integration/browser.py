"""The diff page in Debian's Chromium, driven by Playwright: what a person sees after opening a link."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from tests.conftest import ARTIFACTS


@dataclass
class SeenPage:
    url: str  # the address bar once the page settled
    removed_columns: list[str]
    row_difference: str
    cookies: list[dict]
    sign_in_shown: bool  # the sign-in form is on screen


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def open_diff_page(link: str, screenshot: str, keys: tuple[str, str] | None = None) -> SeenPage:
    """Open `link` as printed and wait for the diff; with `keys`, first sign in on the page's form
    with that lakeFS access key id and secret. The screenshot goes to the test artifacts."""
    from playwright.sync_api import sync_playwright

    os.makedirs(ARTIFACTS, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        context = browser.new_context()
        page = context.new_page()
        page.goto(link)
        if keys:
            page.wait_for_selector("#sign-in:not([hidden])", timeout=60_000)
            page.fill("#access-key-id", keys[0])
            page.fill("#secret-access-key", keys[1])
            page.click("#sign-in button")
        page.wait_for_selector("#result:not([hidden])", timeout=60_000)
        seen = SeenPage(url=page.url, removed_columns=sorted(page.locator("#schema tr.removed td:nth-child(2)").all_inner_texts()),
                        row_difference=page.locator("#row-difference").inner_text(), cookies=context.cookies(),
                        sign_in_shown=page.locator("#sign-in").is_visible())
        page.screenshot(path=os.path.join(ARTIFACTS, screenshot), full_page=True)
        browser.close()
    return seen


@dataclass
class SeenOverview:
    tables: list[str]  # the overview's rows as shown: "name (path)\tdiff\trows\tfiles\tschema"
    rows_added: str
    rows_removed: str
    first_rows: list[str]  # the first rows of the table's rows section, as shown


def open_overview(link: str, table_path: str, screenshot: str) -> SeenOverview:
    """Open `link` (a page URL with repository, left and right, no table), read the overview of the
    tables that differ, click `table_path`'s row and read its rows section."""
    from playwright.sync_api import expect, sync_playwright

    os.makedirs(ARTIFACTS, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_context().new_page()
        page.goto(link)
        page.wait_for_selector("#overview:not([hidden])", timeout=120_000)
        tables = page.locator("#tables tbody tr").all_inner_texts()
        page.click(f'#tables tbody tr[data-path="{table_path}"]')
        expect(page.locator("#rows-added")).to_have_text(re.compile(r"^[0-9]+$"), timeout=120_000)  # no eval: the CSP
        seen = SeenOverview(tables=tables, rows_added=page.locator("#rows-added").inner_text(),
                            rows_removed=page.locator("#rows-removed").inner_text(),
                            first_rows=page.locator("#rows tbody tr").all_inner_texts()[:5])
        page.screenshot(path=os.path.join(ARTIFACTS, screenshot), full_page=True)
        browser.close()
    return seen
