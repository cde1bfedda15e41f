"""The one configuration loader (pydantic-settings): a YAML file, then `LAKEFS_DELTA_*` overrides.

Every key can be set either way; the environment wins. Names: the YAML path in upper case joined
by `_`, e.g. `lakefs.endpoint` -> `LAKEFS_DELTA_LAKEFS_ENDPOINT`, `tasks.retry.max_retries` ->
`LAKEFS_DELTA_TASKS_RETRY_MAX_RETRIES`. Lists are comma-separated. Settings are grouped by
capability (`api`, `catch_up`, `row_diff`, `tasks`, `workers`, ...); the previous release's flat
keys (`RENAMED_KEYS`) still load, with a warning naming the new key, and given both ways are an error.
Secrets are `SecretStr`: they print as `**********`, and `masked()` hides them, a password inside
`redis_url` included. Errors name the bad key.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from exporter.errors import ConfigError

ENV_PREFIX = "LAKEFS_DELTA_"
CONFIG_ENV = "LAKEFS_DELTA_CONFIG"
KNOWN_EVENTS = ("post-commit", "post-merge", "post-create-tag")
# The workers' task kinds (Celery task `lakefs_delta.<kind>`), for per-kind settings
TASK_KINDS = ("export_commit", "export_table", "precompute_diff", "compute_diff", "compute_row_diff", "compare_refs",
              "list_datasets", "append_branch_table", "catch_up", "prune")
_URL_PASSWORD = re.compile(r"(?<=://)([^:/@]*):([^@/]+)@")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LakeFSConfig(_Section):
    endpoint: str = "http://127.0.0.1:18000"
    access_key_id: str = ""
    secret_access_key: SecretStr = SecretStr("")
    timeout_seconds: float = Field(30.0, gt=0)  # per request: a lakeFS that accepts connections but never answers

    @field_validator("endpoint")
    @classmethod
    def _http(cls, endpoint: str) -> str:
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"expected an http(s) URL, got {endpoint!r}")
        return endpoint


class ObjectStoreConfig(_Section):
    """Where boto3 writes exports for storage namespaces starting with `prefix`."""

    prefix: str = "s3://"
    endpoint: str = ""  # empty: AWS's own endpoint
    region: str = "us-east-1"
    access_key_id: str = ""
    secret_access_key: SecretStr = SecretStr("")


class RetryConfig(_Section):
    max_retries: int = Field(5, ge=0)
    backoff_seconds: float = Field(2.0, gt=0)
    backoff_max_seconds: float = Field(60.0, gt=0)


class RetentionConfig(_Section):
    """Which per-commit exports `lakefs-delta prune` keeps; branch tables and tags' exports always stay."""

    keep_last: int = Field(20, ge=0)  # the newest first-parent commits of each branch
    keep_hours: float = Field(168.0, ge=0)  # exports written less than this long ago
    # The workers' beat runs prune over `catch_up.repositories` every this many seconds; 0: never
    # (prune deletes: it runs on a schedule only when asked to).
    interval_seconds: int = Field(0, ge=0)


class RowDiffSparkConfig(_Section):
    """The Spark job a row diff runs as when its differing data is above `row_diff.max_bytes`."""

    master: str = ""  # e.g. local[2], spark://host:7077, yarn; empty: no job, such a diff is refused
    packages: str = "org.apache.hadoop:hadoop-aws:3.5.0"  # S3A, for the data files' s3:// addresses
    ivy_dir: str = ""  # where Spark caches those packages (empty: Spark's default)


class ShareConfig(_Section):
    """A Delta Sharing share: repositories, and which of their refs (schemas) and tables it offers.
    Patterns are fnmatch patterns; a branch is offered through its branch table, a tag through its export."""

    name: str = Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")  # a share name is a URL path segment, no `.`
    repositories: tuple[str, ...] = Field(min_length=1)
    refs: tuple[str, ...] = ("*",)
    tables: tuple[str, ...] = ("*",)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        """In the environment (or as a YAML string): `NAME=repo1+repo2[:ref1+ref2[:table1+table2]]`."""
        if isinstance(value, str):
            name, separator, rest = value.partition("=")
            if not separator or not name:
                raise ValueError("a share is NAME=repo1+repo2[:refs[:tables]], patterns joined by +")
            parts = [_plus_list(part) for part in rest.split(":")]
            if len(parts) > 3:
                raise ValueError("a share is NAME=repo1+repo2[:refs[:tables]]: too many `:`")
            return {"name": name, **{key: part for key, part in zip(("repositories", "refs", "tables"), parts)}}
        return value


class SharingConfig(_Section):
    """The Delta Sharing server (`/delta-sharing`): its shares, and what the profiles it hands out say."""

    shares: tuple[ShareConfig, ...] = ()
    # The URL recipients reach the server at, written into their profile files; empty: the address
    # `serve` listens on, with `/delta-sharing`.
    endpoint: str = ""
    url_lifetime_seconds: int = Field(3600, ge=60, le=7 * 24 * 3600)  # presigned file URLs (S3 allows 7 days)
    recipient_days: int = Field(90, ge=1)  # a recipient's token expires after this unless told otherwise
    # Objects a shared table's log may reference and the server may presign, besides the
    # repository's storage namespace (e.g. the bucket of data lakeFS imported): URI prefixes.
    allowed_locations: tuple[str, ...] = ()


class ApiToken(_Section):
    """A service token for automation, and the repositories it may read (`*`: every repository).
    In the environment (or as a YAML string): `TOKEN=repo1+repo2`, or `TOKEN=*`."""

    token: SecretStr
    repositories: tuple[str, ...] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, value: Any) -> Any:
        if isinstance(value, str):
            token, separator, repositories = value.rpartition("=")
            if not separator or not token:
                raise ValueError("an API token names the repositories it may read: TOKEN=repo1+repo2, or TOKEN=* "
                                 "for every repository")
            return {"token": token, "repositories": _plus_list(repositories)}
        return value

    def allows(self, repository: str) -> bool:
        return "*" in self.repositories or repository in self.repositories


class ApiConfig(_Section):
    """The HTTP API: who may call it, and how long it waits for (and keeps) a worker's results."""

    # "lakefs": callers sign in with their own lakeFS identity, and lakeFS decides which
    # repositories they read (`tokens` for automation); "none": anyone (only behind a gateway that
    # authenticates; the service warns at start and in /readyz).
    auth: Literal["lakefs", "none"] = "lakefs"
    tokens: tuple[ApiToken, ...] = ()
    auth_cache_seconds: int = Field(30, ge=0)  # how long lakeFS's answer "may X read repository R" is reused
    sign_in_link_seconds: int = Field(900, ge=30)  # a one-time sign-in link for the diff page expires after this
    diff_cache_ttl_seconds: int = 7 * 24 * 3600  # computed diffs, row diffs, overviews and datasets in Redis
    # A diff not in the cache is computed by a worker; the API waits this long for it, then answers
    # 202 (ask again) so the web process never replays table logs itself.
    diff_wait_seconds: float = Field(15.0, ge=0)


class RowDiffConfig(_Section):
    """Which rows changed: in the worker up to `max_bytes` of differing files, above it a Spark job."""

    # Above this many bytes of files to read the row diff runs as the Spark job, or (no
    # `spark.master`) is refused with a message saying so, rather than run the worker out of memory.
    max_bytes: int = Field(512 * 2**20, ge=0)
    # After an export, the row diff against the parent is precomputed when it reads at most this much.
    precompute_bytes: int = Field(64 * 2**20, ge=0)
    spark: RowDiffSparkConfig = RowDiffSparkConfig()


class CatchUpConfig(_Section):
    """Catch-up (lakeFS never retries a post-hook): on by default, in every worker started with beat."""

    repositories: tuple[str, ...] = ()  # empty: every repository the service's lakeFS user can read
    branches: tuple[str, ...] = ()  # branch patterns; empty: those the installed action names
    interval_seconds: int = Field(300, ge=1)
    depth: int = Field(50, ge=1)  # newest first-parent commits per branch (and newest tags) checked
    max_per_run: int = Field(100, ge=1)  # commits queued by one run at most; the next run takes the rest


class TasksConfig(_Section):
    """How the workers' tasks are delivered, limited in time, locked and retried."""

    time_limit_seconds: int = Field(240, ge=5)  # a task is stopped after this; below the visibility timeout
    # Per task kind (`export_table`, `compute_row_diff`, ...: the name after `lakefs_delta.`), in
    # place of `time_limit_seconds`; each below the visibility timeout too.
    time_limits: tuple[tuple[str, int], ...] = ()  # (kind, seconds); YAML: a mapping
    visibility_timeout_seconds: int = 300  # an unacknowledged task (worker killed) is redelivered after this
    lock_ttl_seconds: int = Field(30, ge=5)  # a dead worker's per-table lock frees itself (renewed while alive)
    max_deliveries: int = Field(3, ge=1)  # an export whose worker died this many times is failed, not looped
    retry: RetryConfig = RetryConfig()  # transient errors (lakeFS 5xx/429, timeouts, the store, Redis)

    @field_validator("time_limits", mode="before")
    @classmethod
    def _limits_from_mapping(cls, value: Any) -> Any:
        """YAML: a mapping `{export_table: 600}`; the environment: `export_table=600,catch_up=60`.
        Kept as sorted pairs: the config is frozen and hashable."""
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, (list, tuple)) and all(isinstance(part, str) for part in value):
            pairs = [part.partition("=") for part in value if part.strip()]
            if any(not separator for _, separator, _ in pairs):
                raise ValueError("time_limits is KIND=SECONDS[,KIND=SECONDS...]")
            value = {kind.strip(): seconds.strip() for kind, _, seconds in pairs}
        if isinstance(value, dict):
            return sorted(value.items())
        return value

    @model_validator(mode="after")
    def _time_limit_below_visibility(self) -> "TasksConfig":
        if self.time_limit_seconds >= self.visibility_timeout_seconds:
            raise ValueError(f"time_limit_seconds ({self.time_limit_seconds}) must be below "
                             f"visibility_timeout_seconds ({self.visibility_timeout_seconds}), "
                             "or a running task is delivered twice")
        for kind, seconds in self.time_limits:
            if kind not in TASK_KINDS:
                raise ValueError(f"time_limits: unknown task kind {kind!r}; known: {', '.join(TASK_KINDS)}")
            if not 5 <= seconds < self.visibility_timeout_seconds:
                raise ValueError(f"time_limits.{kind} ({seconds}) must be at least 5 and below "
                                 f"visibility_timeout_seconds ({self.visibility_timeout_seconds})")
        return self

    def time_limit(self, kind: str) -> int:
        """The hard time limit of a task kind (`export_table`, or `lakefs_delta.export_table`)."""
        return dict(self.time_limits).get(kind.removeprefix("lakefs_delta."), self.time_limit_seconds)


class WorkersConfig(_Section):
    """The worker processes, and the queue big tables are exported from."""

    concurrency: int = Field(2, ge=1)
    # A worker process whose memory grew past this is replaced after its task (Celery's
    # worker_max_memory_per_child).
    max_memory_per_child_mib: int = Field(2048, ge=64)
    # Tables whose newest checkpoint holds at least this many files are exported from their own
    # queue, so a few big exports cannot hold every worker while small ones wait; run workers with
    # `--queues` to give that queue its own (`lakefs-delta worker` consumes both by default).
    large_table_files: int = Field(500_000, ge=1)
    large_table_queue: str = "lakefs_delta.large"


class Config(BaseSettings):
    model_config = SettingsConfigDict(extra="forbid", frozen=True)

    lakefs: LakeFSConfig = LakeFSConfig()
    object_store: ObjectStoreConfig = ObjectStoreConfig()
    extra_object_stores: tuple[ObjectStoreConfig, ...] = ()
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:16379/0")  # may hold a password
    webhook_tokens: tuple[SecretStr, ...] = ()
    export_prefix: str = "_lakefs/exported"
    # Branches (patterns) that keep a branch table: one Delta table per (branch, table) at
    # `<export_prefix>/<branch>/latest/<table>/` that follows the branch's commits.
    # `install-actions --branch-tables` puts patterns in the action instead; both apply.
    branch_tables: tuple[str, ...] = ()
    events: tuple[str, ...] = KNOWN_EVENTS
    api: ApiConfig = ApiConfig()
    catch_up: CatchUpConfig = CatchUpConfig()
    row_diff: RowDiffConfig = RowDiffConfig()
    retention: RetentionConfig = RetentionConfig()
    sharing: SharingConfig = SharingConfig()
    tasks: TasksConfig = TasksConfig()
    workers: WorkersConfig = WorkersConfig()

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
        return _upgrade_document(values) if isinstance(values, dict) else values

    @field_validator("events")
    @classmethod
    def _known_events(cls, events: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [e for e in events if e not in KNOWN_EVENTS]
        if unknown:
            raise ValueError(f"unknown event {unknown[0]!r}; known: {', '.join(KNOWN_EVENTS)}")
        return events

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


def _plus_list(text: str) -> list[str]:
    """`a+b+c` (how a list inside one environment value is written) -> [a, b, c]."""
    return [item for item in text.split("+") if item]


def mask_url(url: str) -> str:
    """`redis://:pw@host/0` -> `redis://:***@host/0`."""
    return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:***@", url)


def _stars(document: Any) -> Any:
    if isinstance(document, dict):
        return {k: _stars(v) for k, v in document.items()}
    if isinstance(document, list):
        return [_stars(v) for v in document]
    return "***" if document == "**********" else document


# The previous release's flat keys and where they live now: still read, with a warning naming the
# new key, until the next release.
RENAMED_KEYS: dict[str, str] = {
    "api_auth": "api.auth",
    "api_tokens": "api.tokens",
    "auth_cache_seconds": "api.auth_cache_seconds",
    "sign_in_link_seconds": "api.sign_in_link_seconds",
    "diff_cache_ttl_seconds": "api.diff_cache_ttl_seconds",
    "diff_wait_seconds": "api.diff_wait_seconds",
    "catch_up_repositories": "catch_up.repositories",
    "catch_up_branches": "catch_up.branches",
    "catch_up_interval_seconds": "catch_up.interval_seconds",
    "catch_up_depth": "catch_up.depth",
    "catch_up_max_per_run": "catch_up.max_per_run",
    "row_diff_max_bytes": "row_diff.max_bytes",
    "row_diff_precompute_bytes": "row_diff.precompute_bytes",
    "row_diff_spark": "row_diff.spark",
    "task_time_limit_seconds": "tasks.time_limit_seconds",
    "task_time_limits": "tasks.time_limits",
    "visibility_timeout_seconds": "tasks.visibility_timeout_seconds",
    "lock_ttl_seconds": "tasks.lock_ttl_seconds",
    "max_deliveries": "tasks.max_deliveries",
    "retry": "tasks.retry",
    "worker_concurrency": "workers.concurrency",
    "worker_max_memory_per_child_mib": "workers.max_memory_per_child_mib",
    "large_table_files": "workers.large_table_files",
    "large_table_queue": "workers.large_table_queue",
}


class RenamedConfigKey(FutureWarning):
    """A config key or variable under its previous release's name: it still works, for one release."""


def _warn_renamed(old: str, new: str) -> None:
    # One message per key: Python's warnings registry shows each once per process.
    warnings.warn(f"{old} is renamed {new}; the old name works until the next release", RenamedConfigKey, stacklevel=2)


def _upgrade_document(document: dict[str, Any]) -> dict[str, Any]:
    """The document with each renamed key moved to its section; a key given both ways is an error."""
    if not any(old in document for old in RENAMED_KEYS):
        return document
    document = dict(document)
    for old, new in RENAMED_KEYS.items():
        if old not in document:
            continue
        *sections, leaf = new.split(".")
        target = document
        for section in sections:
            existing = target.get(section) or {}
            if not isinstance(existing, dict):
                break  # a malformed section: validation names it
            target[section] = target = dict(existing)
        else:
            if leaf in target:
                raise ConfigError(f"config key {old!r} is the old name of {new!r}: give only {new!r}")
            target[leaf] = document.pop(old)
            _warn_renamed(f"config key {old!r}", repr(new))
    return document


def _variable(key: str) -> str:
    """`catch_up.interval_seconds` -> `LAKEFS_DELTA_CATCH_UP_INTERVAL_SECONDS`."""
    return ENV_PREFIX + key.replace(".", "_").upper()


def _leaf_keys(annotation: Any, key: str) -> list[str]:
    """The keys under `key` a variable sets: the key itself, or each key of its section."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [leaf for name, field in annotation.model_fields.items()
                for leaf in _leaf_keys(field.annotation, f"{key}.{name}")]
    return [key]


def _renamed_variables() -> dict[str, tuple[str, str]]:
    """Old variable -> (its new variable, the new key), where a key's move changed its variable
    (`catch_up_depth` -> `catch_up.depth` did not: both are LAKEFS_DELTA_CATCH_UP_DEPTH)."""
    renamed = {}
    for old, new in RENAMED_KEYS.items():
        section, name = new.split(".")
        annotation = Config.model_fields[section].annotation.model_fields[name].annotation
        for leaf in _leaf_keys(annotation, new):
            old_variable, new_variable = _variable(old + leaf.removeprefix(new)), _variable(leaf)
            if old_variable != new_variable:
                renamed[old_variable] = (new_variable, leaf)
    return renamed


RENAMED_VARIABLES = _renamed_variables()


def _upgrade_environment(environ: Mapping[str, str]) -> Mapping[str, str]:
    """The environment with each renamed variable under its new name; both names set is an error."""
    if not any(old in environ for old in RENAMED_VARIABLES):
        return environ
    environ = dict(environ)
    for old, (new, key) in RENAMED_VARIABLES.items():
        if old in environ:
            if new in environ:
                raise ConfigError(f"{old} is the old name of {new} ({key}): set only {new}")
            environ[new] = environ.pop(old)
            _warn_renamed(old, f"{new} ({key})")
    return environ


_SOURCES: ContextVar[tuple[dict[str, Any], Mapping[str, str]]] = ContextVar("config_sources")


class _Document(PydanticBaseSettingsSource):
    """The YAML file's document (read by `load_config`, which reports a broken file precisely)."""

    def __init__(self, settings_cls: type[BaseSettings], document: dict[str, Any]):
        super().__init__(settings_cls)
        self.document = document

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ gives the whole document

    def __call__(self) -> dict[str, Any]:
        return _upgrade_document(self.document)


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
        return _from_environment(self.settings_cls, _upgrade_environment(self.environ), ENV_PREFIX)


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
