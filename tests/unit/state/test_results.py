"""Result caches in Redis: answers by immutable ids, one claim per computation, failures kept
briefly with their error class, answers of older rules never served."""

from __future__ import annotations

import pytest

from exporter.errors import MissingDataFiles, ServiceUnavailable, TableNotFound
from exporter.state import results
from exporter.state.results import ResultCache

pytestmark = pytest.mark.unit

LEFT, RIGHT = "a" * 64, "b" * 64


@pytest.fixture
def diffs(redis_url) -> ResultCache:
    return ResultCache(redis_url, ttl_seconds=3600, kind="diff")


def test_an_answer_is_found_by_its_parts_only(diffs, redis_url):
    diffs.put({"versions": [1, 2]}, "repo", LEFT, RIGHT, "tables/events/")

    assert diffs.get("repo", LEFT, RIGHT, "tables/events") == {"versions": [1, 2]}  # a folder's `/` is no part
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
