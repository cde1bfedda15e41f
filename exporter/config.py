"""The one configuration loader (pydantic-settings): a YAML file, then `LAKEFS_DELTA_*` overrides.

Every key can be set either way; the environment wins. Names: the YAML path in upper case joined
by `_`, e.g. `lakefs.endpoint` -> `LAKEFS_DELTA_LAKEFS_ENDPOINT`. Lists are comma-separated.
Secrets are `SecretStr`: they print as `**********`, and `masked()` hides them, a password inside
`redis_url` included. Errors name the bad key.
"""

from __future__ import annotations

import os
import re
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
    # The workers' beat runs prune over `catch_up_repositories` every this many seconds; 0: never
    # (prune deletes: it runs on a schedule only when asked to).
    interval_seconds: int = Field(0, ge=0)


class RowDiffSparkConfig(_Section):
    """The Spark job a row diff runs as when its differing data is above `row_diff_max_bytes`."""

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


class Config(BaseSettings):
    model_config = SettingsConfigDict(extra="forbid", frozen=True)

    lakefs: LakeFSConfig = LakeFSConfig()
    object_store: ObjectStoreConfig = ObjectStoreConfig()
    extra_object_stores: tuple[ObjectStoreConfig, ...] = ()
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:16379/0")  # may hold a password
    webhook_tokens: tuple[SecretStr, ...] = ()
    # Who may call the API: "lakefs" (callers sign in with their own lakeFS identity, and lakeFS
    # decides which repositories they read; `api_tokens` for automation), or "none" (anyone: only
    # behind a gateway that authenticates; the service warns at start and in /readyz).
    api_auth: Literal["lakefs", "none"] = "lakefs"
    api_tokens: tuple[ApiToken, ...] = ()
    auth_cache_seconds: int = Field(30, ge=0)  # how long lakeFS's answer "may X read repository R" is reused
    sign_in_link_seconds: int = Field(900, ge=30)  # a one-time sign-in link for the diff page expires after this
    export_prefix: str = "_lakefs/exported"
    # Branches (patterns) that keep a branch table: one Delta table per (branch, table) at
    # `<export_prefix>/<branch>/latest/<table>/` that follows the branch's commits.
    # `install-actions --branch-tables` puts patterns in the action instead; both apply.
    branch_tables: tuple[str, ...] = ()
    events: tuple[str, ...] = KNOWN_EVENTS
    worker_concurrency: int = Field(2, ge=1)
    retry: RetryConfig = RetryConfig()
    retention: RetentionConfig = RetentionConfig()
    diff_cache_ttl_seconds: int = 7 * 24 * 3600
    # A diff not in the cache is computed by a worker; the API waits this long for it, then answers
    # 202 (ask again) so the web process never replays table logs itself.
    diff_wait_seconds: float = Field(15.0, ge=0)
    # The row diff reads only the files that differ, in one process; above this many bytes of them
    # it is refused (the message says so) rather than run the worker out of memory.
    row_diff_max_bytes: int = Field(512 * 2**20, ge=0)
    # After an export, the row diff against the parent is precomputed when it reads at most this much.
    row_diff_precompute_bytes: int = Field(64 * 2**20, ge=0)
    row_diff_spark: RowDiffSparkConfig = RowDiffSparkConfig()
    sharing: SharingConfig = SharingConfig()
    # Catch-up (lakeFS never retries a post-hook): on by default, in every worker started with beat.
    catch_up_repositories: tuple[str, ...] = ()  # empty: every repository the service's lakeFS user can read
    catch_up_branches: tuple[str, ...] = ()  # branch patterns; empty: those the installed action names
    catch_up_interval_seconds: int = Field(300, ge=1)
    catch_up_depth: int = Field(50, ge=1)  # newest first-parent commits per branch (and newest tags) checked
    catch_up_max_per_run: int = Field(100, ge=1)  # commits queued by one run at most; the next run takes the rest
    visibility_timeout_seconds: int = 300  # an unacknowledged task (worker killed) is redelivered after this
    lock_ttl_seconds: int = Field(30, ge=5)  # a dead worker's per-table lock frees itself (renewed while alive)
    task_time_limit_seconds: int = Field(240, ge=5)  # a task is stopped after this; below the visibility timeout
    # Per task kind (`export_table`, `compute_row_diff`, ...: the name after `lakefs_delta.`), in
    # place of `task_time_limit_seconds`; each below the visibility timeout too.
    task_time_limits: tuple[tuple[str, int], ...] = ()  # (kind, seconds); YAML: a mapping
    # A worker process whose memory grew past this is replaced after its task (Celery's
    # worker_max_memory_per_child); an export whose worker died this many times is failed, not looped.
    worker_max_memory_per_child_mib: int = Field(2048, ge=64)
    max_deliveries: int = Field(3, ge=1)
    # Tables whose newest checkpoint holds at least this many files are exported from their own
    # queue, so a few big exports cannot hold every worker while small ones wait; run workers with
    # `--queues` to give that queue its own (`lakefs-delta worker` consumes both by default).
    large_table_files: int = Field(500_000, ge=1)
    large_table_queue: str = "lakefs_delta.large"

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        """The environment over the YAML file (both given to `load_config`)."""
        document, environ = _SOURCES.get(({}, os.environ))
        return init_settings, _Environment(settings_cls, environ), _Document(settings_cls, document)

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

    @model_validator(mode="after")
    def _time_limit_below_visibility(self) -> "Config":
        if self.task_time_limit_seconds >= self.visibility_timeout_seconds:
            raise ValueError(f"task_time_limit_seconds ({self.task_time_limit_seconds}) must be below "
                             f"visibility_timeout_seconds ({self.visibility_timeout_seconds}), "
                             "or a running task is delivered twice")
        for kind, seconds in self.task_time_limits:
            if kind not in TASK_KINDS:
                raise ValueError(f"task_time_limits: unknown task kind {kind!r}; known: {', '.join(TASK_KINDS)}")
            if not 5 <= seconds < self.visibility_timeout_seconds:
                raise ValueError(f"task_time_limits.{kind} ({seconds}) must be at least 5 and below "
                                 f"visibility_timeout_seconds ({self.visibility_timeout_seconds})")
        return self

    @field_validator("task_time_limits", mode="before")
    @classmethod
    def _limits_from_mapping(cls, value: Any) -> Any:
        """YAML: a mapping `{export_table: 600}`; the environment: `export_table=600,catch_up=60`.
        Kept as sorted pairs: the config is frozen and hashable."""
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, (list, tuple)) and all(isinstance(part, str) for part in value):
            pairs = [part.partition("=") for part in value if part.strip()]
            if any(not separator for _, separator, _ in pairs):
                raise ValueError("task_time_limits is KIND=SECONDS[,KIND=SECONDS...]")
            value = {kind.strip(): seconds.strip() for kind, _, seconds in pairs}
        if isinstance(value, dict):
            return sorted(value.items())
        return value

    def time_limit(self, kind: str) -> int:
        """The hard time limit of a task kind (`export_table`, or `lakefs_delta.export_table`)."""
        return dict(self.task_time_limits).get(kind.removeprefix("lakefs_delta."), self.task_time_limit_seconds)

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


_SOURCES: ContextVar[tuple[dict[str, Any], Mapping[str, str]]] = ContextVar("config_sources")


class _Document(PydanticBaseSettingsSource):
    """The YAML file's document (read by `load_config`, which reports a broken file precisely)."""

    def __init__(self, settings_cls: type[BaseSettings], document: dict[str, Any]):
        super().__init__(settings_cls)
        self.document = document

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # __call__ gives the whole document

    def __call__(self) -> dict[str, Any]:
        return self.document


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
        return _from_environment(self.settings_cls, self.environ, ENV_PREFIX)


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
        where = f" (set by {variable})" if variable in environ else ""
        if item["type"] == "extra_forbidden":
            problems.append(f"unknown config key {key!r}{where}")
        else:
            problems.append(f"{key}{where}: {item['msg']}")
    return "; ".join(problems)
