import pytest
import yaml

from exporter.config import load_config
from exporter.errors import ConfigError

pytestmark = pytest.mark.unit


def test_environment_overrides_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lakefs:\n  endpoint: http://lakefs:8000\n  access_key_id: AKIA1\nworkers:\n  concurrency: 3\n")
    config = load_config(path, {"LAKEFS_DELTA_LAKEFS_ENDPOINT": "http://other:9000", "LAKEFS_DELTA_WEBHOOK_TOKENS": "a,b"})
    assert config.lakefs.endpoint == "http://other:9000"
    assert config.lakefs.access_key_id == "AKIA1"
    assert config.workers.concurrency == 3
    assert [t.get_secret_value() for t in config.webhook_tokens] == ["a", "b"]


@pytest.mark.parametrize("document, key", [
    ("lakefs:\n  endpont: x\n", "unknown config key 'lakefs.endpont'"),
    ("workers: {concurrency: many}\n", "workers.concurrency"),
    ("events: [post-commit, pre-merge]\n", "events"),
    ("redis_url: http://x\n", "redis_url"),
    ("- a\n- b\n", "top level"),
])
def test_bad_keys_are_named(tmp_path, document, key):
    path = tmp_path / "c.yaml"
    path.write_text(document)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(path, {})


def test_broken_yaml_is_reported(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lakefs: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path, {})


def test_masked_config_hides_secrets():
    config = load_config(None, {"LAKEFS_DELTA_LAKEFS_SECRET_ACCESS_KEY": "s3cr3t",
                                "LAKEFS_DELTA_OBJECT_STORE_SECRET_ACCESS_KEY": "m1n10",
                                "LAKEFS_DELTA_WEBHOOK_TOKENS": "tok"})
    shown = str(config.masked())
    assert "s3cr3t" not in shown and "m1n10" not in shown and "tok" not in shown.replace("tokens", "")
    assert config.masked()["lakefs"]["secret_access_key"] == "***"


def test_object_store_is_chosen_by_longest_prefix(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("object_store: {prefix: 's3://', endpoint: http://default}\n"
                    "extra_object_stores:\n  - {prefix: 's3://special/', endpoint: http://special}\n")
    config = load_config(path, {})
    assert config.object_store_for("s3://special/ns").endpoint == "http://special"
    assert config.object_store_for("s3://other/ns").endpoint == "http://default"
    with pytest.raises(ConfigError, match="gs://x"):
        config.object_store_for("gs://x")


def test_a_password_in_redis_url_is_masked_everywhere():
    config = load_config(None, {"LAKEFS_DELTA_REDIS_URL": "redis://:hunter2@redis:6379/3",
                                "LAKEFS_DELTA_API_TOKENS": "api-secret=*"})
    assert config.redis == "redis://:hunter2@redis:6379/3"
    assert config.masked()["redis_url"] == "redis://:***@redis:6379/3"
    assert config.masked()["api"]["tokens"] == [{"token": "***", "repositories": ["*"]}]
    assert "hunter2" not in repr(config) and "api-secret" not in repr(config)


def test_a_bad_value_from_the_environment_names_key_and_variable():
    with pytest.raises(ConfigError, match=r"tasks\.retry\.max_retries \(set by LAKEFS_DELTA_TASKS_RETRY_MAX_RETRIES\)"):
        load_config(None, {"LAKEFS_DELTA_TASKS_RETRY_MAX_RETRIES": "-1"})
    with pytest.raises(ConfigError, match=r"http://:\*\*\*@x") as raised:
        load_config(None, {"LAKEFS_DELTA_REDIS_URL": "http://:pw@x"})
    assert "pw@" not in str(raised.value)


def test_task_time_limit_must_stay_below_the_visibility_timeout():
    with pytest.raises(ConfigError, match="tasks: .*time_limit_seconds .* below visibility_timeout_seconds"):
        load_config(None, {"LAKEFS_DELTA_TASKS_VISIBILITY_TIMEOUT_SECONDS": "60",
                           "LAKEFS_DELTA_TASKS_TIME_LIMIT_SECONDS": "90"})


def test_sections_and_lists_come_from_the_environment(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("object_store:\n  endpoint: http://file\n  region: eu-west-1\ncatch_up:\n  branches: [main]\n")
    config = load_config(path, {"LAKEFS_DELTA_OBJECT_STORE_ENDPOINT": "http://env",
                                "LAKEFS_DELTA_CATCH_UP_BRANCHES": "main, release-*",
                                "LAKEFS_DELTA_LAKEFS_TIMEOUT_SECONDS": "2.5",
                                "LAKEFS_DELTA_ICEBERG_ENABLED": "false"})
    assert (config.object_store.endpoint, config.object_store.region) == ("http://env", "eu-west-1")
    assert config.catch_up.branches == ("main", "release-*")
    assert config.lakefs.timeout_seconds == 2.5
    assert not config.iceberg.enabled and load_config(None, {}).iceberg.enabled  # on unless turned off


def test_a_large_table_is_routed_to_its_own_queue():
    from exporter.config import Config
    from workers.tasks import export_queue

    config = Config(redis_url="redis://localhost/0", workers={"large_table_files": 1000})
    assert export_queue(config, 999) is None  # the default queue
    assert export_queue(config, 1000) == config.workers.large_table_queue == "lakefs_delta.large"


def test_time_limits_per_task_kind_reach_the_celery_annotations():
    from exporter.config import soft_time_limit
    from workers.app import configure

    config = load_config(environ={"LAKEFS_DELTA_TASKS_TIME_LIMITS": "compute_row_diff=280, catch_up=60",
                                  "LAKEFS_DELTA_TASKS_TIME_LIMIT_SECONDS": "200"})
    limit = config.tasks.time_limit
    assert limit("lakefs_delta.compute_row_diff") == 280 and limit("export_table") == 200
    annotations = configure(config).conf.task_annotations
    assert annotations["lakefs_delta.compute_row_diff"]["time_limit"] == 280
    assert annotations["lakefs_delta.catch_up"]["soft_time_limit"] == soft_time_limit(60) < 60
    assert annotations["lakefs_delta.export_table"]["time_limit"] == 200
    long_diff = load_config(environ={"LAKEFS_DELTA_TASKS_TIME_LIMITS": "compute_row_diff=3600"})  # a Spark job's hour
    assert long_diff.tasks.time_limit("compute_row_diff") == 3600 > long_diff.tasks.visibility_timeout_seconds
    for bad, words in (("export=100", "unknown task kind 'export'"), ("export_table=300", "below visibility"),
                       ("compute_row_diff=4", "at least 5"), ("export_table", "KIND=SECONDS")):
        with pytest.raises(ConfigError) as refused:
            load_config(environ={"LAKEFS_DELTA_TASKS_TIME_LIMITS": bad})
        assert words in str(refused.value) and "time_limits" in str(refused.value)


def test_time_limits_from_yaml_keep_the_config_hashable(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("tasks:\n  time_limits:\n    export_table: 100\n    prune: 50\n")
    config = load_config(path, {})
    limit = config.tasks.time_limit
    assert (limit("export_table"), limit("prune"), limit("catch_up")) == (100, 50, 240)
    assert hash(config) == hash(load_config(path, {}))  # workers cache their services by config


def test_settings_are_grouped_by_capability(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("""
api: {auth: none, auth_cache_seconds: 5, sign_in_link_seconds: 60, diff_cache_ttl_seconds: 600, diff_wait_seconds: 1}
catch_up: {repositories: [sales], branches: [main], interval_seconds: 60, depth: 10, max_per_run: 5}
row_diff: {max_bytes: 1000, precompute_bytes: 100, spark: {master: "local[2]", time_limit_seconds: 60, attempts: 2}}
tasks:
  time_limit_seconds: 100
  time_limits: {compute_row_diff: 150}  # 2 x 60 s within its soft limit (135 s)
  visibility_timeout_seconds: 200
  lock_ttl_seconds: 10
  max_deliveries: 2
  retry: {max_retries: 1}
workers: {concurrency: 4, max_memory_per_child_mib: 512, large_table_files: 10, large_table_queue: big}
""")
    config = load_config(path, {})
    assert (config.api.auth, config.api.auth_cache_seconds, config.api.diff_wait_seconds) == ("none", 5, 1.0)
    assert (config.catch_up.repositories, config.catch_up.depth, config.catch_up.max_per_run) == (("sales",), 10, 5)
    assert (config.row_diff.max_bytes, config.row_diff.spark.master) == (1000, "local[2]")
    assert (config.tasks.time_limit("compute_row_diff"), config.tasks.time_limit("prune")) == (150, 100)
    assert (config.tasks.retry.max_retries, config.tasks.max_deliveries) == (1, 2)
    assert (config.workers.concurrency, config.workers.large_table_queue) == (4, "big")
    assert set(config.masked()) >= {"api", "catch_up", "row_diff", "tasks", "workers", "sharing", "retention"}


# A value for each renamed key, none of them the default; YAML as the previous release wrote it.
OLD_YAML = {
    "api_auth": "none", "api_tokens": ["tok=sales"], "auth_cache_seconds": 5, "sign_in_link_seconds": 60,
    "diff_cache_ttl_seconds": 600, "diff_wait_seconds": 1.5,
    "catch_up_repositories": ["sales"], "catch_up_branches": ["main"], "catch_up_interval_seconds": 60,
    "catch_up_depth": 10, "catch_up_max_per_run": 5,
    "row_diff_max_bytes": 1000, "row_diff_precompute_bytes": 100, "row_diff_spark": {"master": "local[1]"},
    "task_time_limit_seconds": 100, "task_time_limits": {"prune": 50}, "visibility_timeout_seconds": 400,
    "lock_ttl_seconds": 10, "max_deliveries": 2, "retry": {"max_retries": 1},
    "worker_concurrency": 4, "worker_max_memory_per_child_mib": 512, "large_table_files": 10,
    "large_table_queue": "big",
}


def _nested(key: str, value):
    """`a.b` and a value -> {a: {b: value}}."""
    for part in reversed(key.split(".")):
        value = {part: value}
    return value


@pytest.mark.parametrize("old", sorted(OLD_YAML))
def test_an_old_flat_key_still_loads_with_a_warning_naming_the_new_key(tmp_path, old):
    from exporter.config import RENAMED_KEYS, RenamedConfigKey

    assert set(OLD_YAML) == set(RENAMED_KEYS)  # every renamed key has a case here
    new = RENAMED_KEYS[old]
    old_file, new_file = tmp_path / "old.yaml", tmp_path / "new.yaml"
    old_file.write_text(yaml.safe_dump({old: OLD_YAML[old]}))
    new_file.write_text(yaml.safe_dump(_nested(new, OLD_YAML[old])))
    with pytest.warns(RenamedConfigKey, match=rf"'{old}' is renamed '{new}'"):
        config = load_config(old_file, {})
    assert config == load_config(new_file, {}) != load_config(None, {})


# The variables whose name changed with their key (`LAKEFS_DELTA_CATCH_UP_DEPTH` did not), and a value.
OLD_VARIABLES = {
    "LAKEFS_DELTA_AUTH_CACHE_SECONDS": "5", "LAKEFS_DELTA_SIGN_IN_LINK_SECONDS": "60",
    "LAKEFS_DELTA_DIFF_CACHE_TTL_SECONDS": "600", "LAKEFS_DELTA_DIFF_WAIT_SECONDS": "1.5",
    "LAKEFS_DELTA_TASK_TIME_LIMIT_SECONDS": "100", "LAKEFS_DELTA_TASK_TIME_LIMITS": "prune=50",
    "LAKEFS_DELTA_VISIBILITY_TIMEOUT_SECONDS": "400", "LAKEFS_DELTA_LOCK_TTL_SECONDS": "10",
    "LAKEFS_DELTA_MAX_DELIVERIES": "2", "LAKEFS_DELTA_RETRY_MAX_RETRIES": "1",
    "LAKEFS_DELTA_RETRY_BACKOFF_SECONDS": "1", "LAKEFS_DELTA_RETRY_BACKOFF_MAX_SECONDS": "30",
    "LAKEFS_DELTA_RETRY_OUTAGE_SECONDS": "60",  # a key added since: the old section's name reaches it too
    "LAKEFS_DELTA_WORKER_CONCURRENCY": "4", "LAKEFS_DELTA_WORKER_MAX_MEMORY_PER_CHILD_MIB": "512",
    "LAKEFS_DELTA_LARGE_TABLE_FILES": "10", "LAKEFS_DELTA_LARGE_TABLE_QUEUE": "big",
}


@pytest.mark.parametrize("old", sorted(OLD_VARIABLES))
def test_an_old_variable_still_loads_with_a_warning_naming_the_new_one(old):
    from exporter.config import RENAMED_VARIABLES, RenamedConfigKey

    assert set(OLD_VARIABLES) == set(RENAMED_VARIABLES)
    new, key = RENAMED_VARIABLES[old]
    with pytest.warns(RenamedConfigKey, match=rf"{old} is renamed {new} \({key}\)"):
        config = load_config(None, {old: OLD_VARIABLES[old]})
    assert config == load_config(None, {new: OLD_VARIABLES[old]}) != load_config(None, {})


def test_variables_of_keys_that_moved_into_a_section_of_their_prefix_are_unchanged():
    import warnings

    environ = {"LAKEFS_DELTA_CATCH_UP_INTERVAL_SECONDS": "60", "LAKEFS_DELTA_CATCH_UP_BRANCHES": "main,dev-*",
               "LAKEFS_DELTA_ROW_DIFF_MAX_BYTES": "1000", "LAKEFS_DELTA_ROW_DIFF_SPARK_MASTER": "local[2]",
               "LAKEFS_DELTA_API_AUTH": "none", "LAKEFS_DELTA_API_TOKENS": "tok=*"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new form: no warning
        config = load_config(None, environ)
    assert (config.catch_up.interval_seconds, config.catch_up.branches) == (60, ("main", "dev-*"))
    assert (config.row_diff.max_bytes, config.row_diff.spark.master) == (1000, "local[2]")
    assert (config.api.auth, config.api.tokens[0].repositories) == ("none", ("*",))


def test_the_environment_overrides_a_section_key_by_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("tasks:\n  lock_ttl_seconds: 10\n  retry: {max_retries: 2, backoff_seconds: 3}\n"
                    "workers: {concurrency: 3}\n")
    config = load_config(path, {"LAKEFS_DELTA_TASKS_RETRY_MAX_RETRIES": "7", "LAKEFS_DELTA_WORKERS_CONCURRENCY": "5",
                                "LAKEFS_DELTA_API_DIFF_WAIT_SECONDS": "0"})
    assert (config.tasks.lock_ttl_seconds, config.tasks.retry.max_retries, config.tasks.retry.backoff_seconds) == (
        10, 7, 3.0)
    assert (config.workers.concurrency, config.api.diff_wait_seconds) == (5, 0.0)


def test_an_old_variable_overrides_the_file_like_its_new_name(tmp_path):
    from exporter.config import RenamedConfigKey

    path = tmp_path / "c.yaml"
    path.write_text("workers: {concurrency: 3}\n")
    with pytest.warns(RenamedConfigKey, match="LAKEFS_DELTA_WORKERS_CONCURRENCY"):
        assert load_config(path, {"LAKEFS_DELTA_WORKER_CONCURRENCY": "5"}).workers.concurrency == 5


@pytest.mark.parametrize("document, words", [
    ({"catch_up_depth": 5, "catch_up": {"depth": 6}}, "'catch_up_depth' is the old name of 'catch_up.depth'"),
    ({"retry": {"max_retries": 1}, "tasks": {"retry": {"max_retries": 2}}}, "'retry' is the old name of 'tasks.retry'"),
    ({"api_tokens": ["a=*"], "api": {"tokens": ["b=*"]}}, "'api_tokens' is the old name of 'api.tokens'"),
])
def test_a_key_given_both_ways_is_refused(tmp_path, document, words):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ConfigError, match=words):
        load_config(path, {})


def test_a_variable_set_under_both_names_is_refused():
    with pytest.raises(ConfigError, match="LAKEFS_DELTA_WORKER_CONCURRENCY is the old name of "
                                          r"LAKEFS_DELTA_WORKERS_CONCURRENCY \(workers\.concurrency\)"):
        load_config(None, {"LAKEFS_DELTA_WORKER_CONCURRENCY": "4", "LAKEFS_DELTA_WORKERS_CONCURRENCY": "5"})


def test_an_old_key_is_warned_about_once():
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")
        for _ in range(3):
            load_config(None, {"LAKEFS_DELTA_LOCK_TTL_SECONDS": "10"})
    assert [str(warning.message) for warning in seen] == [
        "LAKEFS_DELTA_LOCK_TTL_SECONDS is renamed LAKEFS_DELTA_TASKS_LOCK_TTL_SECONDS (tasks.lock_ttl_seconds); "
        "the old name works until the next release"]


def test_a_bad_value_in_an_old_variable_names_that_variable():
    with pytest.raises(ConfigError, match=r"tasks\.retry\.max_retries \(set by LAKEFS_DELTA_RETRY_MAX_RETRIES\)"):
        with pytest.warns(Warning):
            load_config(None, {"LAKEFS_DELTA_RETRY_MAX_RETRIES": "-1"})


def test_the_readme_shows_the_whole_config_in_its_new_form_with_the_defaults(tmp_path):
    import warnings
    from pathlib import Path

    from exporter.config import Config

    readme = next(folder / "README.md" for folder in Path(__file__).resolve().parents
                  if (folder / "README.md").exists()).read_text()
    path = tmp_path / "c.yaml"
    path.write_text(readme.split("### Configuration", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no old key
        assert load_config(path, {}) == load_config(None, {})
    assert set(Config.model_fields) == set(yaml.safe_load(path.read_text()))  # every key shown
