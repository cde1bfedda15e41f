"""The storm's rows of worker groups (`bench.webhooks.worker_groups_row`) and of one more worker host
(`one_more_worker_host`): what they say from the runs' figures."""

import pytest

from bench import webhooks
from bench.webhooks import ICEBERG_ON, StormGroups, iceberg_storms, one_more_worker_host, worker_groups_row

pytestmark = pytest.mark.unit


def test_the_groups_are_listed_by_their_number_and_grow_while_the_cores_have_room(monkeypatch):
    monkeypatch.setattr(webhooks.os, "cpu_count", lambda: 2)
    row = worker_groups_row([StormGroups(3, 3859, 0.99, ICEBERG_ON), StormGroups(1, 3706, 0.87, ICEBERG_ON),
                             StormGroups(2, 4023, 0.98, ICEBERG_ON)])
    assert "1 group 3,706 (87% of the cores busy), 2 groups 4,023 (98% of the cores busy), " \
           "3 groups 3,859 (99% of the cores busy)" in row["benchmark"]
    assert row["target"] == ("grows with workers until the cores are busy", True)

    flat = worker_groups_row([StormGroups(2, 4023, 0.98, ICEBERG_ON), StormGroups(3, 3859, 0.99, ICEBERG_ON)])
    assert flat["target"][1] is False
    assert worker_groups_row([StormGroups(2, 4023, 0.98, ICEBERG_ON), StormGroups(2, 3900, 0.98, ICEBERG_ON)]) is None


def test_only_the_storms_with_iceberg_on_by_a_task_of_its_own_are_compared():
    rows = [{"benchmark": "a"}, {"storm_groups": StormGroups(2, 4124, 0.98, ", iceberg.enabled off")},
            {"storm_groups": StormGroups(3, 3859, 0.99, ICEBERG_ON)},
            {"storm_groups": StormGroups(2, 3000, 0.99, ICEBERG_ON + ", iceberg.same_task")},
            {"storm_groups": StormGroups(1, 3706, 0.87, ICEBERG_ON)}]
    assert [run.workers for run in iceberg_storms(rows)] == [1, 3]


def test_one_more_worker_host_shares_the_workers_cpu_and_keeps_the_services_here():
    own = {"lakeFS": 2.4, "MinIO": 7.8, "Redis": 1.2, "webhook service": 0.6, "workers": 13.2, "bench client": 0.1}
    row = one_more_worker_host(own, 600, 2, ICEBERG_ON)
    # 22 ms of workers and 20 ms of services an export: 2 cores give 2,857 a minute; 4 cores 5,714,
    # under the 6,000 the services alone allow on these 2
    assert row["files_per_s"] == pytest.approx(4 * 60 / 0.042)
    assert "workers' 22 ms" in row["benchmark"] and "the rest's 20 ms" in row["benchmark"]
    assert "at most 5,714 exports a minute where one host gives at most 2,857" in row["benchmark"]

    heavy_services = {"MinIO": 30.0, "workers": 6.0}
    assert one_more_worker_host(heavy_services, 600, 2, ICEBERG_ON)["files_per_s"] == pytest.approx(2 * 60 / 0.05)
