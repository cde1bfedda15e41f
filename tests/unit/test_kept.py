"""Values kept in a process: by key, at most so many, each for so long when it may change."""

from __future__ import annotations

import pytest

from exporter.kept import Kept

pytestmark = pytest.mark.unit


def test_a_value_is_kept_until_its_time_is_up_and_a_full_store_starts_over(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("exporter.kept.time.monotonic", lambda: now[0])
    namespaces, commits = Kept(seconds=60.0), Kept(entries=2)

    namespaces.put("repo", "s3://a")
    commits.put("c1", None)  # a value may be None: told apart from none by the default
    commits.put("c2", "two")
    now[0] += 59.9
    kept = (namespaces.get("repo"), commits.get("c1", "absent"), commits.get("c2"))
    now[0] += 0.1
    commits.put("c3", "three")

    assert kept == ("s3://a", None, "two")
    assert namespaces.get("repo") is None  # a minute old: asked again
    assert (commits.get("c1", "absent"), commits.get("c2"), commits.get("c3")) == ("absent", None, "three")


def test_keep_makes_a_value_once_none_included_and_keeps_nothing_when_making_fails():
    made = []
    states = Kept()

    def make(value):
        made.append(value)
        return value

    first = (states.keep("no table", lambda: make(None)), states.keep("no table", lambda: make("again")))
    with pytest.raises(KeyError):
        states.keep("broken", lambda: {}["missing"])

    assert first == (None, None) and made == [None]
    assert states.keep("broken", lambda: make("read")) == "read"


def test_keep_keeps_only_a_value_final_calls_final():
    manifests, reads = Kept(), []

    def read(state):
        reads.append(state)
        return {"iceberg": state}

    final = lambda manifest: manifest["iceberg"] != "pending"  # noqa: E731
    seen = [manifests.keep("export", lambda: read("pending"), final=final),
            manifests.keep("export", lambda: read("written"), final=final),
            manifests.keep("export", lambda: read("rewritten"), final=final)]

    assert [m["iceberg"] for m in seen] == ["pending", "written", "written"]
    assert reads == ["pending", "written"]  # made again while pending, kept once written
