"""Where the new work meets the old, on the real stack (lakeFS, MinIO, Redis, the service and a worker):
a rows page whose file prune removed, a tag copy whose source prune removes mid-copy, the catalog of a
branch whose head changed one table of two, and catch-up's CLI sending the Iceberg tables it counts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import deltalake
import httpx
import pyarrow as pa
import pytest

from exporter.config import IcebergConfig
from exporter.export.commit import export_table
from exporter.export.job import ExportAt
from exporter.export.log_writer import discard_export
from exporter.lakefs.descriptors import TableDescriptor
from exporter.storage.layout import MANIFEST, export_location
from exporter.storage.objectstore import ObjectStore
from tests.conftest import ROOT
from tests.integration.deltatables import add_descriptor, delta_rs_rows, export_one, spark_settings
from tests.integration.test_iceberg_exports import assert_iceberg_reads, readers  # noqa: F401 (a fixture)
from tests.integration.test_iceberg_exports import spark_rows as iceberg_spark_rows
from tests.fakes import lake_of

pytestmark = pytest.mark.integration


def commit_table(lakefs, repository: str, path: str, folder: Path, *batches: pa.Table, message: str = "") -> str:
    """delta-rs appends of `batches` in `folder`, uploaded under `path` on main and committed."""
    for batch in batches:
        deltalake.write_deltalake(str(folder), batch, mode="append")
    for file in sorted(folder.rglob("*")):
        if file.is_file():
            lakefs.upload_object(repository, "main", f"{path}/{file.relative_to(folder).as_posix()}", file.read_bytes())
    return lakefs.commit_branch(repository, "main", message or f"{path}: {len(batches)} version(s)")


def ids(*values: int) -> pa.Table:
    return pa.table({"id": pa.array(values, pa.int64())})


def service_token(stack_env) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack_env['LAKEFS_DELTA_WEBHOOK_TOKENS'].split(',')[0]}"}


def test_a_rows_page_whose_file_is_gone_is_computed_again_not_a_500(service, lakefs, config, repository, stack_env,
                                                                  tmp_path):
    base = lakefs.commit(repository, "main").id
    head = commit_table(lakefs, repository, "tables/t", tmp_path / "t", ids(1, 2, 3))
    rows = f"{service}/repositories/{repository}/otf/refs/{base}/diff/{head}/rows"
    first = httpx.get(rows, params={"table_path": "tables/t"}, headers=service_token(stack_env), timeout=180)
    assert first.status_code == 200 and len(first.json()["rows"]) == 3, first.text
    store = ObjectStore(config, lakefs.storage_namespace(repository))
    rows_file = first.json()["rows_location"]
    store.delete([rows_file])  # as prune removes it with the exports it compares

    again = httpx.get(rows, params={"table_path": "tables/t"}, headers=service_token(stack_env), timeout=180)
    while again.status_code == 202:
        again = httpx.get(rows, params={"table_path": "tables/t"}, headers=service_token(stack_env), timeout=180)
    assert again.status_code == 200, again.text  # before: 500 (KeyError in rows_page)
    assert sorted(row["values"]["id"] for row in again.json()["rows"]) == [1, 2, 3]
    assert store.exists(rows_file)  # written again


def test_a_tag_copy_whose_source_prune_removes_mid_copy_is_exported_cold(lakefs, config, repository, tmp_path,
                                                                         monkeypatch):
    """Prune holds the source export's lock, not the tag's: the store is made to lose the source just
    before the tag's first copy (a chosen key), on the real MinIO."""
    commit_table(lakefs, repository, "tables/t", tmp_path / "t", ids(1), ids(2))
    add_descriptor(lakefs, repository, "t", "tables/t")
    commit = lakefs.commit_branch(repository, "main", "descriptor")
    plain = config.model_copy(update={"iceberg": IcebergConfig(enabled=False)})
    assert export_one(plain, lakefs, repository, "main", commit, "t").ok
    lakefs.create_tag(repository, "v1", commit)
    store = ObjectStore(plain, lakefs.storage_namespace(repository))
    source = export_location(plain, "main", commit, "t")
    real_copy, pruned = ObjectStore.copy, []

    def copy_after_prune(self, source_relative: str, relative: str) -> None:
        if not pruned:
            pruned.append(discard_export(store, source))
        real_copy(self, source_relative, relative)

    monkeypatch.setattr(ObjectStore, "copy", copy_after_prune)
    descriptor = TableDescriptor("t", "tables/t", "_lakefs_tables/t.yaml")
    outcome = export_table(lake_of(plain, lakefs), ExportAt(repository, "v1", commit), descriptor, copy_from=("main",))
    assert pruned and outcome.ok and not outcome.incremental, outcome  # before: failed, permanent
    assert json.loads(store.get(export_location(plain, "v1", commit, "t") + MANIFEST)).get("derived_from") is None
    assert delta_rs_rows(outcome) == [(1,), (2,)]


def test_the_catalog_of_a_branch_serves_every_table_its_head_holds(service, lakefs, config, repository, tmp_path,
                                                                   stack_env):
    iceberg = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
    commit_table(lakefs, repository, "tables/a", tmp_path / "a", ids(1))
    commit_table(lakefs, repository, "tables/b", tmp_path / "b", ids(2))
    add_descriptor(lakefs, repository, "a", "tables/a")
    add_descriptor(lakefs, repository, "b", "tables/b")
    first = lakefs.commit_branch(repository, "main", "descriptors")
    for name in ("a", "b"):
        assert export_one(iceberg, lakefs, repository, "main", first, name).iceberg["state"] == "written"
    second = commit_table(lakefs, repository, "tables/a", tmp_path / "a", ids(3))  # only `a` changed

    namespace = f"{service}/iceberg/v1/namespaces/{quote(repository)}%1Fmain"
    listed = httpx.get(namespace + "/tables", headers=service_token(stack_env), timeout=60).json()
    assert sorted(t["name"] for t in listed["identifiers"]) == ["a", "b"]  # before: [] until `a`'s export, then ['a']
    for name in ("a", "b"):  # `a` while its new export is not written: its previous one (before: 404)
        loaded = httpx.get(f"{namespace}/tables/{name}", headers=service_token(stack_env), timeout=60)
        assert loaded.status_code == 200 and f"/{first}/{name}/" in loaded.json()["metadata-location"], loaded.text
    assert export_one(iceberg, lakefs, repository, "main", second, "a").iceberg["state"] == "written"
    loaded = httpx.get(f"{namespace}/tables/a", headers=service_token(stack_env), timeout=60).json()
    assert f"/{second}/a/" in loaded["metadata-location"]


def test_the_catch_up_command_sends_the_iceberg_tables_it_counts(processes, lakefs, config, repository, tmp_path,
                                                                 stack_env):
    """A complete export whose Iceberg table is still pending (its task lost): `lakefs-delta catch-up`
    queues export_iceberg, and a worker writes it (before: printed as queued, never sent)."""
    from exporter.lakefs.installer import action_files, install_actions

    install_actions(lakefs, repository, "main", action_files("http://127.0.0.1:1/webhooks/lakefs", ["main"], {}))
    commit_table(lakefs, repository, "tables/t", tmp_path / "t", ids(1))
    add_descriptor(lakefs, repository, "t", "tables/t")
    commit = lakefs.commit_branch(repository, "main", "descriptor")
    iceberg = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
    # the library writes the Delta log; its Iceberg task is never sent
    descriptor = TableDescriptor("t", "tables/t", "_lakefs_tables/t.yaml")
    outcome = export_table(lake_of(iceberg, lakefs), ExportAt(repository, "main", commit), descriptor)
    assert outcome.ok and outcome.iceberg["state"] == "pending"
    processes.worker("catch-up-iceberg")
    time.sleep(1.1)  # past catch_up.in_flight_seconds: its task is taken for lost
    done = subprocess.run([sys.executable, "-m", "lakefs_delta.cli", "catch-up", "--repo", repository], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**stack_env, "PATH": "/usr/bin:/bin", "LAKEFS_DELTA_ICEBERG_ENABLED": "true",
                               "LAKEFS_DELTA_CATCH_UP_IN_FLIGHT_SECONDS": "1"})
    assert done.returncode == 0 and "Iceberg table of t" in done.stdout, done.stdout + done.stderr
    store = ObjectStore(iceberg, lakefs.storage_namespace(repository))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        manifest = json.loads(store.get(export_location(iceberg, "main", commit, "t") + MANIFEST))
        if manifest["iceberg"]["state"] == "written":
            break
        time.sleep(1)
    assert manifest["iceberg"]["state"] == "written", manifest["iceberg"]


def test_a_classic_named_v2_checkpoint_is_shared_like_any_other(spark, lakefs, config, repository, tmp_path):
    """Item 15: a V2 checkpoint under the classic name (`n.checkpoint.parquet`, pointing at a sidecar),
    `_last_checkpoint` naming a UUID-named top-level file the log no longer holds: the shape of
    delta-kernel-rs's `v2-classic-checkpoint-json`. A sharing query of the tag's export and of the
    branch table answers the files Spark reads (before: 500, "the table cannot be read now",
    since the sidecar was never listed for a classic-named checkpoint)."""
    from exporter.branch_tables.table import append_commit
    from exporter.sharing.lines import query_lines
    from exporter.sharing.versions import Schema, branch_table, tag_export
    from exporter.storage.presign import Presigner
    from tests.integration.writers import local_uri, spark_rows

    local = tmp_path / "classic_v2"
    uri = local_uri(local)
    with spark_settings(spark, {"spark.databricks.delta.checkpoint.partSize": "2",  # the checkpoint's adds go to sidecars
                                "spark.databricks.delta.checkpointV2.topLevelFileFormat": "parquet"}):
        spark.sql(f"CREATE TABLE delta.`{uri}` (id BIGINT) USING delta TBLPROPERTIES "
                  "('delta.checkpointPolicy' = 'v2', 'delta.checkpointInterval' = '2')")
        for i in range(3):  # version 2: the checkpoint
            spark.sql(f"INSERT INTO delta.`{uri}` VALUES ({i}), ({i + 10})")
    expected = spark_rows(spark, uri)
    log = local / "_delta_log"
    [top] = [p for p in log.glob(f"{2:020d}.checkpoint.*.parquet")]
    top.rename(log / f"{2:020d}.checkpoint.parquet")  # the classic name; _last_checkpoint still names the old one
    assert list((log / "_sidecars").glob("*.parquet"))
    for file in sorted(local.rglob("*")):
        if file.is_file() and not file.name.endswith(".crc"):
            lakefs.upload_object(repository, "main", f"tables/cv2/{file.relative_to(local).as_posix()}",
                                 file.read_bytes())
    add_descriptor(lakefs, repository, "cv2", "tables/cv2")
    commit_id = lakefs.commit_branch(repository, "main", "a classic-named V2 checkpoint")
    config = config.model_copy(update={"branch_tables": ("main",)})
    assert export_one(config, lakefs, repository, "main", commit_id, "cv2").ok
    assert not append_commit(lake_of(config, lakefs), repository, "main", commit_id, "cv2").skipped
    lakefs.create_tag(repository, "v1", commit_id)
    assert export_one(config, lakefs, repository, "v1", commit_id, "cv2").ok

    store = ObjectStore(config, lakefs.storage_namespace(repository))
    for shared in (branch_table(config, store, Schema("main", repository, "main", "branch"), "cv2"),
                   tag_export(config, store, Schema("v1", repository, "v1", "tag", commit_id), "cv2")):
        lines = list(query_lines(shared.snapshot(), "parquet", Presigner(config, 900), versioned=False))
        urls = [json.loads(line)["file"]["url"] for chunk in lines if isinstance(chunk, bytes)
                for line in chunk.decode().splitlines()]
        urls += [line["file"]["url"] for line in lines if isinstance(line, dict) and "file" in line]
        got = sorted(((value,) for url in urls for value in pq_ids(httpx.get(url, timeout=30).content)), key=repr)
        assert got == expected, shared.location


def pq_ids(data: bytes) -> list[int]:
    import io

    import pyarrow.parquet as pq

    return pq.read_table(io.BytesIO(data)).column("id").to_pylist()


def test_a_vacuumed_table_gets_an_iceberg_table_from_its_first_whole_version(spark, lakefs, config, repository,
                                                                            readers):
    """Item 8: the files of versions 1 and 2 were vacuumed (the export keeps their paths relative,
    since lakeFS has no object for them). The Iceberg table's snapshots start at the first version
    whose live files all exist, and PyIceberg and DuckDB read each as Spark reads the source
    (before: the Iceberg step failed, "unsupported storage location 'part-….parquet'")."""
    config = config.model_copy(update={"iceberg": IcebergConfig(enabled=True)})
    uri = f"s3a://{repository}/main/tables/vac"
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, note STRING) USING delta "
              "TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')")                    # 0
    with spark_settings(spark, {"spark.databricks.delta.stats.collect": "false"}):  # as old writers: no numRecords, a footer says
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES (1, 'a'), (2, 'b')")                      # 1
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES (3, 'c')")                                # 2
    spark.sql(f"INSERT OVERWRITE delta.`{uri}` VALUES (10, 'x'), (11, 'y')")                   # 3
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES (12, 'z')")                                   # 4
    with spark_settings(spark, {"spark.databricks.delta.retentionDurationCheck.enabled": "false"}):
        spark.sql(f"VACUUM delta.`{uri}` RETAIN 0 HOURS")  # versions 1 and 2's files are gone
    add_descriptor(lakefs, repository, "vac", "tables/vac")
    commit_id = lakefs.commit_branch(repository, "main", "vacuumed")
    head = int(max(e.path.rsplit("/", 1)[1].split(".")[0]
                   for e in lakefs.list_objects(repository, commit_id, "tables/vac/_delta_log/")
                   if e.path.endswith(".json")))

    outcome = export_one(config, lakefs, repository, "main", commit_id, "vac")

    assert outcome.ok, outcome.error
    record = outcome.iceberg
    assert record and record["state"] == "written", record
    assert sorted(map(int, record["snapshot_ids"])) == list(range(3, head + 1)), record["snapshot_ids"]
    assert_iceberg_reads(record, {v: iceberg_spark_rows(spark, repository, commit_id, v, "tables/vac")
                                  for v in (3, 4, head)}, readers)


def test_iceberg_snapshot_times_answer_as_spark_does_on_the_source_when_file_times_go_back(
        spark, lakefs, config, repository, readers, tmp_path):
    """Item 1: version 3 (the checkpoint) was written to lakeFS before version 2, so its file time is
    older; Delta's readers give it version 2's time + 1 ms. Between versions' times, PyIceberg's
    `snapshot_as_of_timestamp` on the export's Iceberg table answers the version Spark's
    `timestampAsOf` answers on the source (none where Spark's is before the exported checkpoint),
    and the manifest's `source_timestamps_ms` are Spark's times of the exported versions."""
    from delta.tables import DeltaTable
    from pyiceberg.table import StaticTable

    local = tmp_path / "times"
    for version in range(5):  # version v holds v + 1 rows: a read tells which version it is
        deltalake.write_deltalake(str(local), ids(version), mode="append")
        if version == 3:
            deltalake.DeltaTable(str(local)).create_checkpoint()
    log = local / "_delta_log"

    def upload(*files: Path) -> None:
        for file in files:
            lakefs.upload_object(repository, "main", f"tables/times/{file.relative_to(local).as_posix()}",
                                 file.read_bytes())
        time.sleep(1.5)  # lakeFS keeps a modification time per upload, to the second

    upload(*[f for f in local.rglob("*.parquet") if "_delta_log" not in f.parts],
           log / f"{0:020d}.json", log / f"{1:020d}.json")
    upload(log / f"{3:020d}.json", log / f"{3:020d}.checkpoint.parquet", log / "_last_checkpoint")
    upload(log / f"{2:020d}.json")  # after version 3: its file time is newer
    upload(log / f"{4:020d}.json")
    add_descriptor(lakefs, repository, "times", "tables/times")
    commit_id = lakefs.commit_branch(repository, "main", "file times go back at the checkpoint")
    source = f"s3a://{repository}/{commit_id}/tables/times"
    spark_ms = {row["version"]: row["ms"] for row in DeltaTable.forPath(spark, source).history()
                .selectExpr("version", "unix_millis(timestamp) AS ms").collect()}
    assert spark_ms[3] == spark_ms[2] + 1, spark_ms  # Delta's rule: the file time was not after version 2's

    outcome = export_one(config.model_copy(update={"iceberg": IcebergConfig(enabled=True)}), lakefs, repository,
                         "main", commit_id, "times")

    assert outcome.ok and outcome.checkpoint_version == 3, outcome.error
    store = ObjectStore(config, lakefs.storage_namespace(repository))
    manifest = json.loads(store.get(export_location(config, "main", commit_id, "times") + MANIFEST))
    assert {int(v): ms for v, ms in manifest["source_timestamps_ms"].items()} == {v: spark_ms[v] for v in (3, 4)}
    table = StaticTable.from_metadata(outcome.iceberg["metadata_location"], properties=readers[0])
    # between the versions' times: Delta readers disagree by a few ms exactly at a commit's time
    instants = [spark_ms[0] - 1000, (spark_ms[1] + spark_ms[2]) // 2, (spark_ms[3] + spark_ms[4]) // 2]
    seen, got = [], []
    for instant in instants:
        moment = spark.sql(f"SELECT date_format(timestamp_millis({instant}), 'yyyy-MM-dd HH:mm:ss.SSS')").first()[0]
        try:
            seen.append(spark.read.format("delta").option("timestampAsOf", moment).load(source).count() - 1)
        except Exception:  # before version 0 (or after the head): Spark refuses the instant
            seen.append(None)
        snapshot = table.snapshot_as_of_timestamp(instant)
        got.append(int(snapshot.summary["delta.version"]) if snapshot is not None else None)
    assert seen == [None, 1, 3], (seen, spark_ms)
    assert got == [None, None, 3], (got, spark_ms)  # before: v3's snapshot at its file time, 2.5 s early


def test_versions_an_interrupted_append_wrote_stay_as_readers_read_them(spark, lakefs, config, repository, tmp_path,
                                                                        monkeypatch):
    """Item 6: the worker dies after writing branch-table version 1 of the two a commit brings;
    Spark and delta-rs read version 1 meanwhile. The commit is then reverted (the source's head back
    at version 0): the next append keeps version 1 as it was read and brings the table to the
    source's state with a synthetic version 2 (before: version 1 was deleted, and a synthetic
    version 1 written in its place, so a reader's version 1 changed under it)."""
    from exporter.branch_tables.table import append_commit
    from exporter.branch_tables.state import read_state
    from exporter.storage.layout import branch_table_location

    config = config.model_copy(update={"branch_tables": ("main",)})
    folder = tmp_path / "t"
    add_descriptor(lakefs, repository, "t", "tables/t")
    first = commit_table(lakefs, repository, "tables/t", folder, ids(1, 2))
    assert export_one(config, lakefs, repository, "main", first, "t").ok
    assert not append_commit(lake_of(config, lakefs), repository, "main", first, "t").skipped
    second = commit_table(lakefs, repository, "tables/t", folder, ids(3), ids(4))  # versions 1, 2
    assert export_one(config, lakefs, repository, "main", second, "t").ok
    store = ObjectStore(config, lakefs.storage_namespace(repository))
    target = branch_table_location(config, "main", "t")
    put = ObjectStore.put

    def killed_after_version_1(self, key: str, *args, **kwargs):
        if key == target + f"_delta_log/{2:020d}.json":
            raise SystemExit("the worker is killed")
        return put(self, key, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(ObjectStore, "put", killed_after_version_1)
        with pytest.raises(SystemExit):
            append_commit(lake_of(config, lakefs), repository, "main", second, "t")
    location = store.uri(target)
    read_then = delta_rs_rows(location)
    assert read_then == [(1,), (2,), (3,)]  # version 1: what the readers see
    assert sorted(tuple(r) for r in spark.read.format("delta").load(location.replace("s3://", "s3a://")).collect()) \
        == read_then

    reverted = lakefs.revert(repository, "main", second)  # the source's head back at version 0
    assert export_one(config, lakefs, repository, "main", reverted, "t").ok
    synced = append_commit(lake_of(config, lakefs), repository, "main", reverted, "t")

    assert synced.appended == [2] and "moved back" in synced.synthetic, synced
    assert delta_rs_rows(location, 1) == read_then  # never taken back
    assert delta_rs_rows(location) == [(1,), (2,)]
    state = read_state(store, target)
    assert [(c["commit_id"], c["version"]) for c in state["commits"]] == [(first, 0), (second, 1), (reverted, 2)]
