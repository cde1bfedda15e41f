"""The workers' figures from Redis render as typed Prometheus families (HELP and TYPE)."""

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hooks.metrics import WorkerMetrics

pytestmark = pytest.mark.unit


def test_worker_series_become_counters_and_summaries_with_help():
    series = {'lakefs_delta_tasks_total{outcome="succeeded",task="export_table"}': 7.0,
              'lakefs_delta_tasks_total{outcome="failed",task="export_table"}': 1.0,
              "lakefs_delta_versions_read_total": 42.0,
              "lakefs_delta_export_seconds_sum": 3.5, "lakefs_delta_export_seconds_count": 7.0}
    registry = prometheus_client.CollectorRegistry()
    registry.register(WorkerMetrics(lambda: series))

    text = prometheus_client.generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}

    assert "# TYPE lakefs_delta_tasks_total counter" in text and "# HELP lakefs_delta_tasks_total Celery tasks" in text
    assert families["lakefs_delta_tasks"].type == "counter"
    assert {(s.labels["task"], s.labels["outcome"], s.value) for s in families["lakefs_delta_tasks"].samples
            if s.name.endswith("_total")} == {("export_table", "succeeded", 7.0), ("export_table", "failed", 1.0)}
    assert families["lakefs_delta_export_seconds"].type == "summary"
    assert {s.name: s.value for s in families["lakefs_delta_export_seconds"].samples} == {
        "lakefs_delta_export_seconds_count": 7.0, "lakefs_delta_export_seconds_sum": 3.5}
    assert [s.value for s in families["lakefs_delta_versions_read"].samples if s.name.endswith("_total")] == [42.0]


def test_redis_down_leaves_the_other_metrics_answering():
    def down():
        raise ConnectionError("redis down")

    registry = prometheus_client.CollectorRegistry()
    registry.register(WorkerMetrics(down))
    prometheus_client.Counter("lakefs_delta_events", "events", registry=registry).inc()
    assert "lakefs_delta_events_total 1.0" in prometheus_client.generate_latest(registry).decode()


def test_a_gauge_is_rendered_as_a_gauge_with_its_last_value():
    series = {"lakefs_delta_catch_up_terminal_failures_current": 3.0}
    registry = prometheus_client.CollectorRegistry()
    registry.register(WorkerMetrics(lambda: series))
    text = prometheus_client.generate_latest(registry).decode()
    assert "# TYPE lakefs_delta_catch_up_terminal_failures gauge" in text
    assert "lakefs_delta_catch_up_terminal_failures 3.0" in text
