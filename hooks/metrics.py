"""What GET /metrics renders: this process's metrics (`ServiceMetrics`), and the workers' figures,
kept in a Redis hash by `StatusStore.count`/`observe`/`set_gauge`, as Prometheus metric families
with HELP and TYPE: counters (`*_total`), summaries (`*_sum` + `*_count`) and gauges (`*_current`)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterator

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from exporter.state.status import GAUGE

HELP = {
    "lakefs_delta_tasks": "Celery tasks run by the workers, by task and outcome",
    "lakefs_delta_versions_read": "Delta versions read by completed exports",
    "lakefs_delta_files_rewritten": "Paths rewritten to physical addresses by completed exports",
    "lakefs_delta_iceberg_metadata": "Iceberg tables written beside completed exports and branch-table appends "
                                     "(iceberg.enabled), by outcome: written, refused (Iceberg cannot represent "
                                     "the table), failed",
    "lakefs_delta_iceberg_seconds": "Seconds the Iceberg table of a completed export took (its own task)",
    "lakefs_delta_export_seconds": "Seconds a completed table export took",
    "lakefs_delta_diff_precompute_seconds": "Seconds a diff precomputation took",
    "lakefs_delta_catch_up_terminal_failures": "Exports the last catch-up run found failed for good and did not "
                                               "re-queue (fix the cause, then re-export)",
}
_SERIES = re.compile(r'(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?$')
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>[^"]*)"')


class WorkerMetrics(Collector):
    """Collects from `read()` (series name -> value, e.g. `StatusStore.metrics`) on each scrape;
    nothing when it fails (Redis down: the scrape still answers this process's own metrics)."""

    def __init__(self, read: Callable[[], dict[str, float]]):
        self.read = read

    def collect(self) -> Iterator[Metric]:
        try:
            series = self.read()
        except Exception:
            return
        counters: dict[str, list[tuple[dict, float]]] = defaultdict(list)
        summaries: dict[str, dict[tuple, dict]] = defaultdict(dict)
        gauges: dict[str, list[tuple[dict, float]]] = defaultdict(list)
        for key, value in sorted(series.items()):
            parsed = _SERIES.match(key)
            if not parsed:
                continue
            name, labels = parsed["name"], dict(_LABEL.findall(parsed["labels"] or ""))
            if name.endswith(GAUGE):
                gauges[name.removesuffix(GAUGE)].append((labels, value))
                continue
            for suffix in ("_sum", "_count"):
                if name.endswith(suffix):
                    summaries[name[: -len(suffix)]].setdefault(tuple(sorted(labels.items())), {})[suffix] = value
                    break
            else:
                counters[name.removesuffix("_total")].append((labels, value))
        for kind, families in ((CounterMetricFamily, counters), (GaugeMetricFamily, gauges)):
            for name, samples in families.items():
                family = kind(name, HELP.get(name, name), labels=sorted(samples[0][0]))
                for labels, value in samples:
                    family.add_metric([labels[k] for k in sorted(labels)], value)
                yield family
        for name, by_labels in summaries.items():
            label_names = [k for k, _ in next(iter(by_labels))]
            family = SummaryMetricFamily(name, HELP.get(name, name), labels=label_names)
            for labels, parts in by_labels.items():
                family.add_metric([v for _, v in labels], count_value=parts.get("_count", 0), sum_value=parts.get("_sum", 0))
            yield family


class ServiceMetrics:
    """This process's metrics (webhook events and answer times, diff answer times), and the
    workers' read from Redis on each scrape."""

    def __init__(self, worker_series: Callable[[], dict[str, float]]):
        self.registry = prometheus_client.CollectorRegistry()
        self.events_total = prometheus_client.Counter("lakefs_delta_events_total", "Webhook events received",
                                                      ["event_type", "outcome"], registry=self.registry)
        self.answer_seconds = prometheus_client.Histogram("lakefs_delta_webhook_answer_seconds",
                                                          "Time to answer a webhook", registry=self.registry)
        self.diff_seconds = prometheus_client.Histogram("lakefs_delta_diff_seconds", "Time to answer a diff request",
                                                        ["cached"], registry=self.registry)
        self.registry.register(WorkerMetrics(worker_series))

    def render(self) -> bytes:
        return prometheus_client.generate_latest(self.registry)
