import pytest

from exporter.config import load_config
from exporter.errors import ConfigError

pytestmark = pytest.mark.unit


def test_environment_overrides_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("lakefs:\n  endpoint: http://lakefs:8000\n  access_key_id: AKIA1\nworker_concurrency: 3\n")
    config = load_config(path, {"LAKEFS_DELTA_LAKEFS_ENDPOINT": "http://other:9000", "LAKEFS_DELTA_WEBHOOK_TOKENS": "a,b"})
    assert config.lakefs.endpoint == "http://other:9000"
    assert config.lakefs.access_key_id == "AKIA1"
    assert config.worker_concurrency == 3
    assert [t.get_secret_value() for t in config.webhook_tokens] == ["a", "b"]


@pytest.mark.parametrize("document, key", [
    ("lakefs:\n  endpont: x\n", "unknown config key 'lakefs.endpont'"),
    ("worker_concurrency: many\n", "worker_concurrency"),
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
    assert config.masked()["api_tokens"] == [{"token": "***", "repositories": ["*"]}]
    assert "hunter2" not in repr(config) and "api-secret" not in repr(config)


def test_a_bad_value_from_the_environment_names_key_and_variable():
    with pytest.raises(ConfigError, match=r"retry\.max_retries \(set by LAKEFS_DELTA_RETRY_MAX_RETRIES\)"):
        load_config(None, {"LAKEFS_DELTA_RETRY_MAX_RETRIES": "-1"})
    with pytest.raises(ConfigError, match=r"http://:\*\*\*@x") as raised:
        load_config(None, {"LAKEFS_DELTA_REDIS_URL": "http://:pw@x"})
    assert "pw@" not in str(raised.value)


def test_task_time_limit_must_stay_below_the_visibility_timeout():
    with pytest.raises(ConfigError, match="task_time_limit_seconds .* below visibility_timeout_seconds"):
        load_config(None, {"LAKEFS_DELTA_VISIBILITY_TIMEOUT_SECONDS": "60", "LAKEFS_DELTA_TASK_TIME_LIMIT_SECONDS": "90"})


def test_sections_and_lists_come_from_the_environment(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("object_store:\n  endpoint: http://file\n  region: eu-west-1\ncatch_up_branches: [main]\n")
    config = load_config(path, {"LAKEFS_DELTA_OBJECT_STORE_ENDPOINT": "http://env",
                                "LAKEFS_DELTA_CATCH_UP_BRANCHES": "main, release-*",
                                "LAKEFS_DELTA_LAKEFS_TIMEOUT_SECONDS": "2.5"})
    assert (config.object_store.endpoint, config.object_store.region) == ("http://env", "eu-west-1")
    assert config.catch_up_branches == ("main", "release-*")
    assert config.lakefs.timeout_seconds == 2.5


def test_a_large_table_is_routed_to_its_own_queue():
    from exporter.config import Config
    from workers.tasks import export_queue

    config = Config(redis_url="redis://localhost/0", large_table_files=1000)
    assert export_queue(config, 999) is None  # the default queue
    assert export_queue(config, 1000) == config.large_table_queue == "lakefs_delta.large"


def test_time_limits_per_task_kind_reach_the_celery_annotations():
    from workers.app import configure, soft_time_limit

    config = load_config(environ={"LAKEFS_DELTA_TASK_TIME_LIMITS": "compute_row_diff=280, catch_up=60",
                                  "LAKEFS_DELTA_TASK_TIME_LIMIT_SECONDS": "200"})
    assert config.time_limit("lakefs_delta.compute_row_diff") == 280 and config.time_limit("export_table") == 200
    annotations = configure(config).conf.task_annotations
    assert annotations["lakefs_delta.compute_row_diff"]["time_limit"] == 280
    assert annotations["lakefs_delta.catch_up"]["soft_time_limit"] == soft_time_limit(60) < 60
    assert annotations["lakefs_delta.export_table"]["time_limit"] == 200
    for bad, words in (("export=100", "unknown task kind 'export'"), ("export_table=300", "below visibility"),
                       ("export_table", "KIND=SECONDS")):
        with pytest.raises(ConfigError) as refused:
            load_config(environ={"LAKEFS_DELTA_TASK_TIME_LIMITS": bad})
        assert words in str(refused.value) and "task_time_limits" in str(refused.value)


def test_time_limits_from_yaml_keep_the_config_hashable(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("task_time_limits:\n  export_table: 100\n  prune: 50\n")
    config = load_config(path, {})
    assert (config.time_limit("export_table"), config.time_limit("prune"), config.time_limit("catch_up")) == (100, 50, 240)
    assert hash(config) == hash(load_config(path, {}))  # workers cache their services by config
