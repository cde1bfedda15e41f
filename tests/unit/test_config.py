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
    assert config.webhook_tokens == ("a", "b")


@pytest.mark.parametrize("document, key", [
    ("lakefs:\n  endpont: x\n", "lakefs.'endpont'"),
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
