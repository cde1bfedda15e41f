"""Branch tables where capabilities meet: a VACUUM on the branch, a burst of commits whose events
arrive out of order, an event naming a branch its commit is not on. Each branch table is read with
Spark, delta-rs and the Delta Sharing connector, and compared with Spark reading the source through
lakeFS at the commit. Real lakeFS, MinIO, Redis and Spark."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from exporter.lakefs.installer import action_files, install_actions
from exporter.branch_tables.table import append_commit, branch_table_versions
from exporter.errors import BranchTableRefused
from exporter.state.status import StatusStore
from tests.conftest import SERVICE_PORT
from tests.integration.deltatables import add_descriptor, delta_rs_rows, export_one, read_version, rows, table_uri
from tests.integration.test_branch_tables import branch_commit, branch_log_versions
from tests.integration.test_delta_sharing import cli, connector_python, consume  # noqa: F401 (a fixture)
from tests.integration.test_webhooks import GOOD, WEBHOOK, token, wait_for_export
from tests.fakes import lake_of

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def config(config):
    """The session's config, keeping branch tables on `main`: this module appends from library calls,
    with no action installed to name the branch (`append_commit` refuses a branch nobody named)."""
    return config.model_copy(update={"branch_tables": ("main",)})

SHARING_PORT = SERVICE_PORT + 41  # this module's own sharing server (test_delta_sharing's is +40)


@pytest.fixture(scope="module")
def seams(lakefs, stack_env) -> dict[str, str]:
    """Two repositories: `direct` (exports and appends called here, in the order a test chooses) and
    `action` (the real action calls the real service)."""
    names = {kind: f"t-seams-{kind}-{uuid.uuid4().hex[:6]}" for kind in ("direct", "action")}
    for name in names.values():
        lakefs.create_repository(name, f"s3://{stack_env['LAKEFS_DELTA_STACK_BUCKET']}/{name}")
    return names


@pytest.fixture(scope="module")
def sharing_env(seams) -> dict[str, str]:
    return {"LAKEFS_DELTA_SHARING_SHARES": f"seams={seams['direct']}+{seams['action']}:main:*",
            "LAKEFS_DELTA_SHARING_ENDPOINT": f"http://127.0.0.1:{SHARING_PORT}/delta-sharing"}


@pytest.fixture(scope="module")
def profile(processes, sharing_env, tmp_path_factory):
    processes.serve("sharing-seams", SHARING_PORT, extra_env=sharing_env)
    path = tmp_path_factory.mktemp("seams") / "seams.share"
    made = cli(sharing_env, "sharing", "recipient", "create", f"seams-{uuid.uuid4().hex[:6]}", "--share", "seams",
               "--output", str(path))
    assert made.returncode == 0, made.stderr
    return path


def shared_rows(python, profile, repository: str, table: str, columns: list[str],
                versions: list[int | None]) -> dict[int | None, list[tuple]]:
    """The branch table read with the Delta Sharing connector, at each version (None: latest)."""
    calls = {str(v): ["load", f"seams.{repository}__main.{table}", {} if v is None else {"version": v}] for v in versions}
    got = consume(python, profile, calls)
    for name, answer in got.items():
        assert isinstance(answer, list), (name, answer)
    return {v: sorted((tuple(row[c] for c in columns) for row in got[str(v)]), key=repr) for v in versions}


def commit_export_append(config, lakefs, repository: str, name: str, message: str, append: bool = True) -> str:
    commit_id = lakefs.commit_branch(repository, "main", message)
    outcome = export_one(config, lakefs, repository, "main", commit_id, name)
    assert outcome.ok, outcome.error
    if append:
        assert not append_commit(lake_of(config, lakefs), repository, "main", commit_id, name).skipped
    return commit_id


def test_a_vacuum_on_the_branch_leaves_the_branch_table_with_the_sources_files(
        spark, lakefs, config, seams, profile, connector_python, s3):
    repository, path = seams["direct"], "tables/vacuumed"
    uri = table_uri(repository, "main", path)
    for start in (0, 10, 20):  # three appends of 5 rows, one file each
        spark.range(start, start + 5).selectExpr("id", "CAST(id AS STRING) AS note").coalesce(1) \
            .write.format("delta").mode("append").save(uri)
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.appendOnly' = 'false')")
    add_descriptor(lakefs, repository, "vacuumed", path)
    commit_export_append(config, lakefs, repository, "vacuumed", "three appends and a property")
    spark.sql(f"OPTIMIZE delta.`{uri}`")
    spark.sql(f"VACUUM delta.`{uri}` RETAIN 0 HOURS")  # the three small files are deleted from the branch
    vacuumed = commit_export_append(config, lakefs, repository, "vacuumed", "optimize + vacuum")

    source = rows(read_version(spark, table_uri(repository, vacuumed, path)))
    assert len(source) == 15
    location = branch_table_versions(lake_of(config, lakefs), repository, "main", "vacuumed")["location"]
    assert rows(read_version(spark, location)) == source, "Spark reads the branch table as the source"
    assert delta_rs_rows(location) == source, "delta-rs too"
    assert len(spark.read.format("delta").load(location).inputFiles()) == 1, "the one file OPTIMIZE wrote"
    assert shared_rows(connector_python, profile, repository, "vacuumed", ["id", "note"], [None])[None] == source
    removes = [a["remove"]["path"] for v in versions_after(s3, location, 3) for a in branch_commit(s3, location, v) if "remove" in a]
    assert removes and all(p.startswith("s3://") for p in removes), removes


def versions_after(s3, location: str, version: int) -> list[int]:
    return [v for v in branch_log_versions(s3, location) if v > version]


def test_a_burst_whose_events_arrive_out_of_order_maps_every_commit_to_its_version(
        spark, lakefs, config, seams, profile, connector_python, s3):
    """Six commits, a checkpoint every four versions. The first three are appended as they come;
    the events of the next two are held back, and the last commit's is delivered first: its append
    brings versions 3..5, though its export starts at the checkpoint of version 4 (version 3 is read
    from the source). Then the held events are released together (late events: no-ops)."""
    repository, path = seams["direct"], "tables/burst"
    uri = table_uri(repository, "main", path)
    spark.sql(f"CREATE TABLE delta.`{uri}` (id INT, note STRING) USING delta "
              "TBLPROPERTIES ('delta.checkpointInterval' = '4')")
    add_descriptor(lakefs, repository, "burst", path)
    commits = [commit_export_append(config, lakefs, repository, "burst", "version 0")]
    for version in range(1, 6):
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES ({version}, 'v{version}')")
        commits.append(commit_export_append(config, lakefs, repository, "burst", f"version {version}",
                                            append=version < 3))
    last = append_commit(lake_of(config, lakefs), repository, "main", commits[5], "burst")
    assert last.appended == [3, 4, 5]
    held = [append_commit(lake_of(config, lakefs), repository, "main", c, "burst") for c in commits[3:5]]
    assert all(outcome.skipped for outcome in held), [o.skipped for o in held]

    versions = branch_table_versions(lake_of(config, lakefs), repository, "main", "burst")
    mapped = {entry["commit_id"]: entry["version"] for entry in versions["commits"]}
    assert [mapped.get(c) for c in commits] == list(range(6)), "every commit maps to the version that reads as it"
    assert [e["appended"] for e in versions["commits"][3:]] == [[3, 3], [4, 4], [5, 5]]
    location = versions["location"]
    for version, commit_id in enumerate(commits):
        assert rows(read_version(spark, location, version)) == \
            rows(read_version(spark, table_uri(repository, commit_id, path))), version
        assert branch_commit(s3, location, version)[0]["commitInfo"]["lakeFS"]["commit"] == commit_id
    for version in (3, 4, 5):
        assert delta_rs_rows(location, version) == rows(read_version(spark, table_uri(repository, commits[version], path)))
    read = shared_rows(connector_python, profile, repository, "burst", ["id", "note"], [3, 4, None])
    for version in (3, 4):
        assert read[version] == rows(read_version(spark, table_uri(repository, commits[version], path))), version
    assert read[None] == rows(read_version(spark, table_uri(repository, commits[5], path)))


def test_an_event_naming_main_with_a_commit_of_another_branch_never_moves_mains_branch_table(
        service, spark, lakefs, config, seams, profile, connector_python):
    repository, path = seams["action"], "tables/guarded"
    install_actions(lakefs, repository, "main", action_files(WEBHOOK, ["main"], {"guarded": path}, ["main"]))
    uri = table_uri(repository, "main", path)
    spark.createDataFrame([(1, "main")], "id INT, note STRING").write.format("delta").save(uri)
    on_main = lakefs.commit_branch(repository, "main", "the table on main")
    assert wait_for_export(service, repository, on_main, {"guarded"})["guarded"]["state"] == "done"
    status = StatusStore(config.redis)
    assert wait_for_branch_table_note(status, repository, "main", on_main, "guarded")["state"] == "appended"

    lakefs.create_branch(repository, "feat", "main")  # the action follows main only: no event from feat
    spark.sql(f"INSERT INTO delta.`{table_uri(repository, 'feat', path)}` VALUES (2, 'feat')")
    on_feat = lakefs.commit_branch(repository, "feat", "a row on feat")
    forged = {**GOOD, "repository_id": repository, "branch_id": "main", "commit_id": on_feat, "source_ref": on_feat}
    answer = httpx.post(WEBHOOK + "?branch_tables=main", json=forged, headers={"X-Webhook-Token": token()}, timeout=30)
    assert answer.status_code == 202, answer.text
    note = wait_for_branch_table_note(status, repository, "main", on_feat, "guarded")
    assert note["state"] == "refused" and "not on the first-parent line of branch 'main'" in note["reason"], note

    lakefs.create_branch(repository, "other", "main")  # a branch no config or action keeps a branch table for
    spark.sql(f"INSERT INTO delta.`{table_uri(repository, 'other', path)}` VALUES (3, 'other')")
    on_other = lakefs.commit_branch(repository, "other", "a row on other")
    claimed = {**GOOD, "repository_id": repository, "branch_id": "other", "commit_id": on_other, "source_ref": on_other}
    answer = httpx.post(WEBHOOK + "?branch_tables=*", json=claimed, headers={"X-Webhook-Token": token()}, timeout=30)
    assert answer.status_code == 202, answer.text
    note = wait_for_branch_table_note(status, repository, "other", on_other, "guarded")
    assert note["state"] == "refused" and "keeps no branch tables" in note["reason"], note
    with pytest.raises(BranchTableRefused):
        append_commit(lake_of(config, lakefs), repository, "other", on_other, "guarded")

    versions = branch_table_versions(lake_of(config, lakefs), repository, "main", "guarded")
    assert [e["commit_id"] for e in versions["commits"]] == [on_main]
    source = rows(read_version(spark, table_uri(repository, on_main, path)))
    assert source == [(1, "main")]
    assert rows(read_version(spark, versions["location"])) == source
    assert delta_rs_rows(versions["location"]) == source
    assert shared_rows(connector_python, profile, repository, "guarded", ["id", "note"], [None])[None] == source


def wait_for_branch_table_note(status: StatusStore, repository: str, branch: str, commit_id: str, table: str,
                               timeout: float = 120) -> dict:
    """What the append task recorded on the commit's export record."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = status.record(repository, branch, commit_id, table) or {}
        if "branch_table" in record:
            return record["branch_table"]
        time.sleep(0.5)
    raise AssertionError(f"no branch table outcome recorded for {repository}/{branch}/{commit_id}/{table}: {record}")
