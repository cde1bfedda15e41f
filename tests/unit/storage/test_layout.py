"""Where things live under `_lakefs/`: a ref or table name as one URI-safe path segment, distinct
for distinct names and read back as the name."""

from __future__ import annotations

import pytest

from exporter.storage.layout import location_segment, segment_name

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("name", ["main", "v1.0#rc+2", "feature/é", "a~b"])
def test_a_location_segment_reads_back_as_its_name(name):
    assert segment_name(location_segment(name)) == name


@pytest.mark.parametrize("ref, segment", [
    ("main", "main"), ("feature-x_1.2", "feature-x_1.2"), ("v1#2", "v1~232"), ("50%", "50~25"),
    ("a+b~c", "a~2Bb~7Ec"), ("é", "~C3~A9"), ("x=y&z", "x~3Dy~26z"),
])
def test_location_segments_are_uri_safe_and_distinct(ref, segment):
    assert location_segment(ref) == segment


def test_location_segments_never_collide():
    names = ["~", "~7E", "%7E", "a b", "a+b", "a%20b", "a~20b"]
    assert len({location_segment(n) for n in names}) == len(names)
