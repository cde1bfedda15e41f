"""Result caches in Redis: answers by immutable ids, one claim per computation, failures kept
briefly with their error class, answers of older rules never served."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.diff.rows.compute import RowDiffCache, key_part
from exporter.diff.table import DiffCache
from exporter.errors import MissingDataFiles, ServiceUnavailable, TableNotFound
from exporter.state import results
from exporter.state.results import ResultCache

pytestmark = pytest.mark.unit

LEFT, RIGHT = "a" * 64, "b" * 64


@pytest.fixture
def diffs(redis_url) -> ResultCache:
    return DiffCache(redis_url, ttl_seconds=3600)


def test_an_answer_is_found_by_its_parts_only(diffs, redis_url):
    diffs.put({"versions": [1, 2]}, "repo", LEFT, RIGHT, "tables/events/")

    assert diffs.get("repo", LEFT, RIGHT, "tables/events") == {"versions": [1, 2]}  # a table path's `/` is no part
    assert diffs.get("repo", LEFT, RIGHT, "tables/users") is None
    assert diffs.get("repo", None, RIGHT, "tables/events") is None  # no left commit is its own answer
    assert ResultCache(redis_url, 3600, "overview").get("repo", LEFT, RIGHT, "tables/events") is None  # per kind
    diffs.put({"versions": []}, "repo", None, RIGHT, "tables/events")
    assert diffs.get("repo", None, RIGHT, "tables/events") == {"versions": []}


def test_answers_expire_after_the_ttl(diffs):
    diffs.put([1], "repo", LEFT, RIGHT)
    assert 0 < diffs.redis.ttl(diffs.key("repo", LEFT, RIGHT)) <= 3600


def test_answers_cached_under_older_rules_are_never_served(diffs, monkeypatch):
    diffs.put({"columns": "by name"}, "repo", LEFT, RIGHT)
    monkeypatch.setattr(results, "RULES", results.RULES + 1)

    assert diffs.get("repo", LEFT, RIGHT) is None


def test_one_caller_claims_a_computation_until_it_is_released_or_fails(diffs):
    assert diffs.claim(60, "repo", LEFT, RIGHT)
    assert not diffs.claim(60, "repo", LEFT, RIGHT)  # the others wait for it
    assert diffs.claim(60, "repo", LEFT, "c" * 64)
    diffs.release("repo", LEFT, RIGHT)
    assert diffs.claim(60, "repo", LEFT, RIGHT)

    diffs.put_failure(TableNotFound("no table at tables/x"), "repo", LEFT, RIGHT)
    assert diffs.claim(60, "repo", LEFT, RIGHT)  # a failure frees the claim: asking again may retry


def test_a_failure_comes_back_as_its_error_class_with_its_message_and_is_kept_briefly(diffs):
    assert diffs.failure("repo", LEFT, RIGHT) is None
    diffs.put_failure(MissingDataFiles("events", ["part-1.parquet"]), "repo", LEFT, RIGHT)
    diffs.put_failure(ServiceUnavailable("lakeFS answered 503"), "repo", LEFT, "c" * 64)

    missing, unavailable = diffs.failure("repo", LEFT, RIGHT), diffs.failure("repo", LEFT, "c" * 64)
    assert isinstance(missing, MissingDataFiles) and "part-1.parquet" in str(missing)
    assert isinstance(unavailable, ServiceUnavailable) and str(unavailable) == "lakeFS answered 503"
    assert not unavailable.permanent
    assert diffs.get("repo", LEFT, RIGHT) is None  # a failure is no answer
    assert 0 < diffs.redis.ttl(diffs.key("repo", LEFT, RIGHT) + ":failure") <= ResultCache.FAILURE_TTL_SECONDS


def test_progress_is_shown_while_computing(diffs):
    assert diffs.progress("repo", LEFT, RIGHT) is None
    diffs.put_progress({"files": 3, "of": 10}, "repo", LEFT, RIGHT)
    diffs.put_progress({"files": 7, "of": 10}, "repo", LEFT, RIGHT)
    assert diffs.progress("repo", LEFT, RIGHT) == {"files": 7, "of": 10}


def test_a_row_diff_is_never_answered_for_a_table_path_that_only_joins_to_the_same_text(redis_url):
    """Issue 37, item 4: a reader denied `reports:secret/*` asked for `table_path=reports&key=secret:-`,
    and was answered with `reports:secret`'s cached rows."""
    rows = RowDiffCache(redis_url, 3600)
    rows.put({"rows": ["secret"]}, "repo", LEFT, RIGHT, "reports:secret", key_part(()))

    assert rows.key("repo", LEFT, RIGHT, "reports", "secret:-") != rows.key("repo", LEFT, RIGHT, "reports:secret", "-")
    assert rows.get("repo", LEFT, RIGHT, "reports", "secret:-") is None
    assert rows.get("repo", LEFT, RIGHT, "reports:secret/", "-") == {"rows": ["secret"]}  # the same table
    rows.put_failure(TableNotFound("no table at reports:secret"), "repo", LEFT, RIGHT, "reports:secret", "-")
    assert rows.failure("repo", LEFT, RIGHT, "reports", "secret:-") is None  # nor its failure
    assert rows.claim(60, "repo", LEFT, RIGHT, "reports", "secret:-")  # nor its claim


FREE_TEXT = st.text(st.sampled_from(":/-,0123456789ab"), max_size=8)  # what a part could pass for another with
PARTS = st.lists(st.none() | FREE_TEXT, max_size=5).map(tuple)


@given(PARTS, PARTS)
def test_distinct_parts_never_share_a_key(first, second):
    cache = ResultCache("redis://unused", 60, "rowdiff")
    keys = {cache.key(*parts) + suffix for parts in (first, second) for suffix in ("", ":pending", ":failure")}
    assert first == second or len(keys) == 6


@given(st.tuples(FREE_TEXT, st.none() | FREE_TEXT, FREE_TEXT, FREE_TEXT, FREE_TEXT),
       st.tuples(FREE_TEXT, st.none() | FREE_TEXT, FREE_TEXT, FREE_TEXT, FREE_TEXT))
def test_row_diff_keys_are_the_same_only_for_the_same_table_path_with_or_without_its_slashes(first, second):
    cache = RowDiffCache("redis://unused", 60)

    def named(parts):
        return *parts[:3], parts[3].strip("/"), parts[4]

    assert (cache.key(*first) == cache.key(*second)) == (named(first) == named(second))


def test_a_diff_read_once_is_answered_from_the_process_and_only_the_last_ones_are_kept(diffs, monkeypatch):
    """Diffs of two commits never change: the last ones read are kept decoded (bounded by count and
    size); what Redis no longer has is still answered alike, a diff never read comes from Redis."""
    monkeypatch.setattr(DiffCache, "KEPT", 2)
    for n in range(3):
        diffs.put({"versions": [n]}, "repo", LEFT, RIGHT, f"t{n}")
    assert [diffs.get("repo", LEFT, RIGHT, f"t{n}") for n in range(3)] == [{"versions": [n]} for n in range(3)]
    diffs.redis.flushdb()
    assert diffs.get("repo", LEFT, RIGHT, "t2") == {"versions": [2]} and diffs.get("repo", LEFT, RIGHT, "t1")
    assert diffs.get("repo", LEFT, RIGHT, "t0") is None  # the oldest read was let go
    monkeypatch.setattr(DiffCache, "KEPT_BYTES", 10)
    diffs.put({"versions": list(range(100))}, "repo", LEFT, RIGHT, "big")
    assert diffs.get("repo", LEFT, RIGHT, "big") == {"versions": list(range(100))}
    diffs.redis.flushdb()
    assert diffs.get("repo", LEFT, RIGHT, "big") is None  # too big to keep: Redis's answer only
