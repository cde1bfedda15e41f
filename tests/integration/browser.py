"""The diff page in Debian's Chromium, driven by Playwright: what a person sees after opening a link."""

from __future__ import annotations

import os
import re
import time
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


@dataclass
class SeenRows:
    header: list[str]  # the rows grid's column headings
    rows: list[list[str]]  # each row's cells as shown, after every page was loaded
    classes: list[str]  # each row's class: added, removed, updated
    changed: list[tuple[int, str, str, str]]  # (row index, column, before, after) of each marked cell
    pages: str  # what the page says it loaded


def open_rows_grid(link: str, screenshot: str) -> SeenRows:
    """Open `link` (a page URL naming a table and key columns) and load every page of its rows
    section with "More rows"; read the grid as shown."""
    from playwright.sync_api import expect, sync_playwright

    os.makedirs(ARTIFACTS, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_context().new_page()
        page.goto(link)
        expect(page.locator("#rows-pages")).to_have_text(re.compile(r"page"), timeout=120_000)
        for _ in range(100):
            more = page.locator("#more-rows")
            if not more.is_visible():
                break
            shown = page.locator("#rows tbody tr").count()
            more.click()
            expect(page.locator("#rows tbody tr")).not_to_have_count(shown, timeout=60_000)
        header = page.locator("#rows thead th").all_inner_texts()
        grid = page.locator("#rows tbody tr")
        rows = [grid.nth(i).locator("td").all_inner_texts() for i in range(grid.count())]
        classes = [grid.nth(i).get_attribute("class") or "" for i in range(grid.count())]
        changed = []
        for i in range(grid.count()):
            cells = grid.nth(i).locator("td")
            for j in range(cells.count()):
                if "changed" in (cells.nth(j).get_attribute("class") or ""):
                    changed.append((i, header[j], cells.nth(j).locator("del").inner_text(),
                                    cells.nth(j).locator("ins").inner_text()))
        seen = SeenRows(header, rows, classes, changed, page.locator("#rows-pages").inner_text())
        page.locator("#rows").screenshot(path=os.path.join(ARTIFACTS, screenshot))
        browser.close()
    return seen


def open_checks(link: str, keys: tuple[str, str], screenshot: str) -> tuple[str, list[str], list[list[str]]]:
    """Open a merge gate's diff link, sign in with `keys`, and read its merge-gate section: the
    summary line, the findings as shown ("table\\trule\\tfound"), and the rows shown under
    them (each finding's table of rows, a line per row with its header first: "id\\tstatus")."""
    from playwright.sync_api import sync_playwright

    os.makedirs(ARTIFACTS, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page()
        # the session's answer is held a second, as a slow service would give it: the page's error
        # from before the sign-in stays shown that long
        page.route("**/session", lambda route: (time.sleep(1), route.continue_()))
        page.goto(link)
        page.wait_for_selector("#sign-in:not([hidden])", timeout=60_000)
        page.fill("#access-key-id", keys[0])
        page.fill("#secret-access-key", keys[1])
        page.click("#sign-in button")
        # the loads before the sign-in failed with 401 and left their error shown: it is hidden with
        # the form once the session is made, and only then can a shown error be this load's
        page.wait_for_selector("#sign-in", state="hidden", timeout=60_000)
        page.wait_for_selector("#checks:not([hidden]), #error:not([hidden])", timeout=60_000)
        page.screenshot(path=os.path.join(ARTIFACTS, screenshot), full_page=True)
        assert page.locator("#error").is_hidden(), page.locator("#error").inner_text()
        seen = (page.locator("#checks-summary").inner_text(),
                page.locator("#checks-findings > tbody > tr:not(.offending)").all_inner_texts(),
                [table.locator("tr").all_inner_texts() for table in page.locator("#checks-findings tr.offending table").all()])
        browser.close()
    return seen
