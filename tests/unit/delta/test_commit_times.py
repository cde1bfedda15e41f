"""Commit times as Delta's readers take them: a time not after the previous version's becomes that
one + 1 ms, so times increase with the version even when file modification times go backwards."""

from __future__ import annotations

import pytest

from exporter.delta.actions import after, increasing

pytestmark = pytest.mark.unit


def test_commit_times_increase_with_the_version_as_delta_readers_make_them():
    assert after(None, 500) == 500
    assert after(100, 101) == 101
    assert after(102, 101) == 103 and after(102, 102) == 103
    # version 5's file was written before version 4's, and version 6 a year earlier still (a copy)
    assert increasing({6: 1_000, 3: 100_000, 4: 102_000, 5: 101_000}) == {3: 100_000, 4: 102_000, 5: 102_001,
                                                                           6: 102_002}
    assert increasing({}) == {}
