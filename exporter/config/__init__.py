"""The one configuration loader (pydantic-settings): a YAML file, then `LAKEFS_DELTA_*` overrides.

Every key can be set either way; the environment wins. Names: the YAML path in upper case joined
by `_`, e.g. `lakefs.endpoint` -> `LAKEFS_DELTA_LAKEFS_ENDPOINT`, `tasks.retry.max_retries` ->
`LAKEFS_DELTA_TASKS_RETRY_MAX_RETRIES`. Lists are comma-separated. Settings are grouped by
capability (`api`, `catch_up`, `iceberg`, `row_diff`, `tasks`, `workers`, ...); the previous release's flat
keys (`RENAMED_KEYS`) still load, with a warning naming the new key, and given both ways are an error.
Secrets are `SecretStr`: they print as `**********`, and `masked()` hides them, a password inside
`redis_url` included. Errors name the bad key.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, get_origin

import yaml
from pydantic import BaseModel, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from exporter.config.renamed import (ENV_PREFIX, RENAMED_KEYS, RenamedConfigKey, renamed_variables, upgrade_document,
                                     upgrade_environment)
from exporter.config.sections import (SOLE_DELIVERY_KINDS, TASK_KINDS, ApiConfig, ApiToken, CatchUpConfig, ChecksConfig,
                                      IcebergConfig, LakeFSConfig, ObjectStoreConfig, RetentionConfig, RetryConfig,
                                      RowDiffConfig, RowDiffSparkConfig, ShareConfig, SharingConfig, TasksConfig,
                                      WorkersConfig, soft_time_limit)
from exporter.errors import ConfigError

__all__ = ["soft_time_limit", "CONFIG_ENV", "ENV_PREFIX", "KNOWN_EVENTS", "RENAMED_KEYS", "RENAMED_VARIABLES", "SOLE_DELIVERY_KINDS",
           "TASK_KINDS", "ApiConfig", "ApiToken", "CatchUpConfig", "ChecksConfig", "Config", "IcebergConfig", "LakeFSConfig",
           "ObjectStoreConfig", "RenamedConfigKey", "RetentionConfig", "RetryConfig", "RowDiffConfig", "RowDiffSparkConfig", "ShareConfig",
           "SharingConfig", "TasksConfig", "WorkersConfig", "load_config", "mask_url"]

CONFIG_ENV = "LAKEFS_DELTA_CONFIG"
KNOWN_EVENTS = ("post-commit", "post-merge", "post-create-tag")
_URL_PASSWORD = re.compile(r"(?<=://)([^:/@]*):([^@/]+)@")


class Config(BaseSettings):
    model_config = SettingsConfigDict(extra="forbid", frozen=True)

    lakefs: LakeFSConfig = LakeFSConfig()
    object_store: ObjectStoreConfig = ObjectStoreConfig()
    extra_object_stores: tuple[ObjectStoreConfig, ...] = ()
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:16379/0")  # may hold a password
    webhook_tokens: tuple[SecretStr, ...] = ()
    export_prefix: str = "_lakefs/exported"
    # The URL lakeFS and browsers reach this service at, behind any proxy (e.g.
    # https://exporter.example.com). With it: the session cookie is `Secure` when it is https, and
    # catch-up acts only on repositories whose installed action calls `<public_url>/...` (unless
    # `catch_up.repositories` names them). Empty: the cookie follows the request's scheme, and
    # catch-up acts on every repository whose action is installed.
    public_url: str = ""
    # Branches (patterns) that keep a branch table: one Delta table per (branch, table) at
    # `<export_prefix>/<branch>/latest/<table>/` that follows the branch's commits.
    # `install-actions --branch-tables` puts patterns in the action instead; both apply.
    branch_tables: tuple[str, ...] = ()
    events: tuple[str, ...] = KNOWN_EVENTS
    api: ApiConfig = ApiConfig()
    catch_up: CatchUpConfig = CatchUpConfig()
    checks: ChecksConfig = ChecksConfig()
    iceberg: IcebergConfig = IcebergConfig()
    row_diff: RowDiffConfig = RowDiffConfig()
    retention: RetentionConfig = RetentionConfig()
    sharing: SharingConfig = SharingConfig()
    tasks: TasksConfig = TasksConfig()
    workers: WorkersConfig = WorkersConfig()

    @model_validator(mode="after")
    def _row_diff_job_fits_its_task(self) -> "Config":
        """A row diff's Spark job, every attempt of it, ends within its task's soft time limit: a
        task stopped first would be started again from nothing, the trap of a budget it cannot cover."""
        spark = self.row_diff.spark
        task = self.tasks.time_limit("compute_row_diff")
        if spark.master and spark.attempts * spark.time_limit_seconds >= soft_time_limit(task):
            raise ValueError(
                f"row_diff.spark.time_limit_seconds ({spark.time_limit_seconds}) x row_diff.spark.attempts "
                f"({spark.attempts}) must end before the compute_row_diff task's soft time limit "
                f"({soft_time_limit(task)} s of tasks.time_limits.compute_row_diff: {task}): raise the task's "
                "limit or lower the job's")
        return self

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        """The environment over the YAML file (both given to `load_config`)."""
        document, environ = _SOURCES.get(({}, os.environ))
        return init_settings, _Environment(settings_cls, environ), _Document(settings_cls, document)

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, values: Any) -> Any:
        """Keys given to `Config(...)` itself under the previous release's flat names."""
        return upgrade_document(values) if isinstance(values, dict) else values

    @field_validator("events")
    @classmethod
    def _known_events(cls, events: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [e for e in events if e not in KNOWN_EVENTS]
        if unknown:
            raise ValueError(f"unknown event {unknown[0]!r}; known: {', '.join(KNOWN_EVENTS)}")
        return events

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, url: str) -> str:
        if url and not url.startswith(("http://", "https://")):
            raise ValueError(f"expected an http(s) URL, got {url!r}")
        return url.rstrip("/")

    def calls_this_service(self, url: str) -> bool:
        """Whether a webhook URL (an installed action's) reaches this deployment: under `public_url`."""
        return not self.public_url or url == self.public_url or url.startswith(self.public_url + "/")

    @field_validator("redis_url")
    @classmethod
    def _redis(cls, redis_url: SecretStr) -> SecretStr:
        if not redis_url.get_secret_value().startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"expected a redis:// URL, got {mask_url(redis_url.get_secret_value())!r}")
        return redis_url

    @property
    def redis(self) -> str:
        """The Redis URL to connect to (a secret: never log it, use `masked()`)."""
        return self.redis_url.get_secret_value()

    def object_store_for(self, storage_namespace: str) -> ObjectStoreConfig:
        """The most specific store whose prefix matches the namespace."""
        stores = sorted((self.object_store, *self.extra_object_stores), key=lambda s: len(s.prefix), reverse=True)
        for store in stores:
            if storage_namespace.startswith(store.prefix):
                return store
        raise ConfigError(f"object_store: no store configured for storage namespace {storage_namespace!r}")

    def masked(self) -> dict[str, Any]:
        """The configuration as a dict with every secret replaced by `***`."""
        document = self.model_dump(mode="json")  # SecretStr dumps as "**********"
        document["redis_url"] = mask_url(self.redis)
        return _stars(document)


RENAMED_VARIABLES = renamed_variables(Config)


def mask_url(url: str) -> str:
    """`redis://:pw@host/0` -> `redis://:***@host/0`."""
    return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:***@", url)


def _stars(document: Any) -> Any:
    if isinstance(document, dict):
        return {k: _stars(v) for k, v in document.items()}
    if isinstance(document, list):
        return [_stars(v) for v in document]
    return "***" if document == "**********" else document


_SOURCES: ContextVar[tuple[dict[str, Any], Mapping[str, str]]] = ContextVar("config_sources")


class _Document(PydanticBaseSettingsSource):
    """The YAML file's document (read by `load_config`, which reports a broken file precisely)."""

    def __init__(self, settings_cls: type[BaseSettings], document: dict[str, Any]):
        super().__init__(settings_cls)
        self.document = document

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ gives the whole document

    def __call__(self) -> dict[str, Any]:
        return upgrade_document(self.document)


class _Environment(PydanticBaseSettingsSource):
    """`LAKEFS_DELTA_<KEY>` and `LAKEFS_DELTA_<SECTION>_<KEY>`, lists comma-separated: the names the
    stack, the Dockerfile and the docs use (pydantic-settings' own env source would split
    `OBJECT_STORE_ENDPOINT` at every underscore)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]):
        super().__init__(settings_cls)
        self.environ = environ

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ does the whole document at once

    def __call__(self) -> dict[str, Any]:
        return _from_environment(self.settings_cls, upgrade_environment(self.environ, RENAMED_VARIABLES), ENV_PREFIX)


def _from_environment(model: type[BaseModel], environ: Mapping[str, str], prefix: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        env_name = f"{prefix}{name.upper()}"
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            section = _from_environment(annotation, environ, env_name + "_")
            if section:
                found[name] = section
        elif env_name in environ and name != "extra_object_stores":
            value = environ[env_name]
            if get_origin(annotation) is tuple:
                value = [part.strip() for part in value.split(",") if part.strip()]
            found[name] = value
    return found


def load_config(path: str | os.PathLike | None = None, environ: Mapping[str, str] | None = None) -> Config:
    environ = os.environ if environ is None else environ
    path = path or environ.get(CONFIG_ENV)
    document: dict[str, Any] = {}
    if path:
        try:
            document = yaml.safe_load(Path(path).read_text()) or {}
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if not isinstance(document, dict):
            raise ConfigError(f"config file {path}: the top level must be a mapping")
    sources = _SOURCES.set((document, environ))
    try:
        return Config()
    except ValidationError as exc:
        raise ConfigError(_explain(exc, environ)) from None
    finally:
        _SOURCES.reset(sources)


def _explain(error: ValidationError, environ: Mapping[str, str]) -> str:
    """Each problem with the key it is about, as written in YAML (and the variable that sets it)."""
    problems = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        variable = ENV_PREFIX + "_".join(str(part).upper() for part in item["loc"] if not isinstance(part, int))
        old_names = [old for old, (new, _) in RENAMED_VARIABLES.items() if new == variable and old in environ]
        set_by = variable if variable in environ else next(iter(old_names), None)
        where = f" (set by {set_by})" if set_by else ""
        if item["type"] == "extra_forbidden":
            problems.append(f"unknown config key {key!r}{where}")
        else:
            problems.append(f"{key}{where}: {item['msg']}")
    return "; ".join(problems)
