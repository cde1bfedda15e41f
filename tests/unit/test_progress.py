"""Progress: the library's steps (exporter/progress.py) and how the CLI shows them (lakefs_delta/progress.py)."""

from __future__ import annotations

import io

import pytest

from exporter.config import Config
from exporter.export.commit import export_commit
from exporter.export.job import ExportAt
from exporter.progress import Step, counted, each
from exporter.lakefs.installer import ACTION_PATH, render_action
from exporter.state.status import StatusStore
from exporter.upkeep.catch_up import catch_up
from lakefs_delta.progress import Shown
from tests.fakes import FakeLakeFS
from tests.unit.source_tables import SourceTable
from tests.fakes import lake_of

pytestmark = pytest.mark.unit

CONFIG = Config(iceberg={"enabled": False})


def test_a_counter_reports_every_nth_and_the_last_and_a_stage_of_nothing_at_once():
    steps: list[Step] = []
    advance = counted(steps.append, "export", "tables/t", "commits rewritten", 10, "versions", every=4)
    for _ in range(10):
        advance(1)
    counted(steps.append, "export", "tables/t", "checkpoint files rewritten", 0, "files")

    assert [(s.stage, s.done, s.total, s.finished) for s in steps] == [
        ("commits rewritten", 4, 10, False), ("commits rewritten", 8, 10, False), ("commits rewritten", 10, 10, True),
        ("checkpoint files rewritten", 0, 0, True)]


def test_each_advances_once_an_items_work_is_done():
    seen: list[tuple[str, int]] = []
    done = [0]

    def advance(more: int) -> None:
        done[0] += more

    for item in each(["a", "b"], advance):
        seen.append((item, done[0]))

    assert seen == [("a", 0), ("b", 1)] and done[0] == 2


def test_off_a_terminal_each_finished_stage_is_one_line_and_unfinished_ones_none():
    stream = io.StringIO()
    with Shown(stream, terminal=False) as shown:
        shown(Step("verify", "s3://lake/t/", "files checked", 4096, None, "files"))
        shown(Step("export", "tables/t", "commits rewritten", 3, 40, "versions"))
        shown(Step("export", "tables/t", "commits rewritten", 40, 40, "versions"))

    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith("] export tables/t: commits rewritten 40/40 versions"), lines


def test_on_a_terminal_each_stage_is_a_bar_with_its_count():
    stream = io.StringIO()
    with Shown(stream, terminal=True) as shown:
        shown(Step("export", "tables/t", "commits rewritten", 3, 40, "versions"))
        shown(Step("export", "tables/t", "commits rewritten", 40, 40, "versions"))
        shown(Step("verify", "s3://lake/t/", "files checked", 4096, None, "files"))

    shown_text = stream.getvalue()
    assert "export tables/t: commits rewritten" in shown_text and "40/40" in shown_text
    assert "verify s3://lake/t/: files checked" in shown_text and "4096" in shown_text
    assert "\x1b[" in shown_text  # drawn in place with terminal controls, not as log lines


def test_a_cold_then_an_incremental_export_report_their_stages_to_the_end(lakefs: FakeLakeFS, events: SourceTable):
    first = events.append(1, 2).append(3).commit()
    steps: list[Step] = []

    export_commit(lake_of(CONFIG, lakefs), ExportAt("repo", "main", first), progress=steps.append)
    second = events.append(4).commit()
    export_commit(lake_of(CONFIG, lakefs), ExportAt("repo", "main", second), progress=steps.append)

    finished = [(s.subject, s.stage, s.done, s.total) for s in steps if s.finished]
    assert finished == [
        ("tables/events", "log listed", 2, 2), ("tables/events", "checkpoint files rewritten", 0, 0),
        ("tables/events", "commits rewritten", 2, 2), ("tables/events", "log written", 2, 2),
        (f"repo@{first[:12]}", "tables exported", 1, 1),
        ("tables/events", "commits rewritten", 1, 1), ("tables/events", "log written", 3, 3),
        (f"repo@{second[:12]}", "tables exported", 1, 1)], finished


def test_catch_up_reports_the_repositories_and_each_ones_commits(lakefs: FakeLakeFS, events: SourceTable, redis_url):
    events.append(1).commit()
    lakefs.commit_files("repo", "main", {ACTION_PATH: render_action("http://exporter:8080/webhook", ["main"], [])},
                        "install")
    steps: list[Step] = []

    catch_up(lake_of(CONFIG, lakefs), StatusStore(redis_url), progress=steps.append)

    finished = [(s.subject, s.stage, s.done, s.total) for s in steps if s.finished]
    assert finished == [("repo", "commits checked", 3, 3), ("lakeFS", "repositories checked", 1, 1)], finished
