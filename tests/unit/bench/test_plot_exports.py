"""The export-time plot: a Lua run stopped at its time-out is drawn as a lower bound, its label
inside the axes (it once sat on the title)."""

import matplotlib.pyplot as plt
import pytest

from bench.__main__ import plot_exports

pytestmark = pytest.mark.unit

ROWS = [
    {"benchmark": "export 10,000-file table + 50 commits (cold, the Delta log alone: what Lua writes)", "seconds": 0.46},
    {"benchmark": "export 1,000,000-file table + 50 commits (cold, the Delta log alone: what Lua writes)", "seconds": 8.6},
    {"benchmark": "lakeFS Lua exporter, 10,000-file table + 50 commits", "seconds": 8.5},
    {"benchmark": "lakeFS Lua exporter, 1,000,000-file table + 50 commits (timeout after 2000 s; still running in lakeFS)",
     "seconds": 2000.2, "timeout": True},
]


def test_a_timed_out_lua_run_is_labelled_as_a_bound_inside_the_axes(tmp_path):
    path = plot_exports(ROWS, tmp_path / "export-time.png")

    assert path.read_bytes().startswith(b"\x89PNG")
    figure = plt.gcf()
    axes = figure.axes[0]
    [label] = axes.texts
    assert label.get_text() == "time-out at 2,000 s:\nLua still running"
    renderer = figure.canvas.get_renderer()
    assert axes.get_window_extent(renderer).contains(*label.get_window_extent(renderer).p0)
    assert axes.get_window_extent(renderer).contains(*label.get_window_extent(renderer).p1)
    assert not label.get_window_extent(renderer).overlaps(axes.title.get_window_extent(renderer))
    plt.close(figure)


def test_no_export_rows_no_plot(tmp_path):
    assert plot_exports([{"benchmark": "webhook answer p50", "seconds": 0.03}], tmp_path / "none.png") is None
