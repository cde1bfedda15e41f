"""The one configuration loader: a YAML file, then `LAKEFS_DELTA_*` environment overrides.

Every key can be set either way; the environment wins. Names: the YAML path in upper case joined
by `_`, e.g. `lakefs.endpoint` -> `LAKEFS_DELTA_LAKEFS_ENDPOINT`. Lists are comma-separated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from exporter.errors import ConfigError

ENV_PREFIX = "LAKEFS_DELTA_"
CONFIG_ENV = "LAKEFS_DELTA_CONFIG"
KNOWN_EVENTS = ("post-commit", "post-merge", "post-create-tag")
SECRET_KEYS = {"secret_access_key", "webhook_tokens", "api_tokens"}


@dataclass(frozen=True)
class LakeFSConfig:
    endpoint: str = "http://127.0.0.1:18000"
    access_key_id: str = ""
    secret_access_key: str = ""


@dataclass(frozen=True)
class ObjectStoreConfig:
    """Where boto3 writes exports for storage namespaces starting with `prefix`."""

    prefix: str = "s3://"
    endpoint: str = ""  # empty: AWS's own endpoint
    region: str = "us-east-1"
    access_key_id: str = ""
    secret_access_key: str = ""


@dataclass(frozen=True)
class RetryConfig:
    max_retries: int = 5
    backoff_seconds: float = 2.0
    backoff_max_seconds: float = 60.0


@dataclass(frozen=True)
class Config:
    lakefs: LakeFSConfig = field(default_factory=LakeFSConfig)
    object_store: ObjectStoreConfig = field(default_factory=ObjectStoreConfig)
    extra_object_stores: tuple[ObjectStoreConfig, ...] = ()
    redis_url: str = "redis://127.0.0.1:16379/0"
    webhook_tokens: tuple[str, ...] = ()
    api_tokens: tuple[str, ...] = ()
    export_prefix: str = "_lakefs/exported"
    events: tuple[str, ...] = KNOWN_EVENTS
    worker_concurrency: int = 2
    retry: RetryConfig = field(default_factory=RetryConfig)
    diff_cache_ttl_seconds: int = 7 * 24 * 3600
    catch_up_branches: tuple[str, ...] = ()  # "repo:branch" pairs walked by the periodic catch-up
    catch_up_interval_seconds: int = 300
    catch_up_depth: int = 50  # newest commits per branch checked for a complete export
    visibility_timeout_seconds: int = 300  # an unacknowledged task (worker killed) is redelivered after this
    lock_ttl_seconds: int = 30  # a dead worker's per-table lock frees itself after this (renewed while alive)

    def object_store_for(self, storage_namespace: str) -> ObjectStoreConfig:
        """The most specific store whose prefix matches the namespace."""
        stores = sorted((self.object_store, *self.extra_object_stores), key=lambda s: len(s.prefix), reverse=True)
        for store in stores:
            if storage_namespace.startswith(store.prefix):
                return store
        raise ConfigError(f"object_store: no store configured for storage namespace {storage_namespace!r}")

    def masked(self) -> dict[str, Any]:
        """The configuration as a dict with every secret replaced by `***`."""
        return _mask(_as_dict(self))


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
    config = _build(Config, document, "")
    config = _apply_env(config, environ, ENV_PREFIX)
    _validate(config)
    return config


def _build(cls, document: Mapping[str, Any], where: str):
    known = {f.name: f for f in fields(cls)}
    for key in document:
        if key not in known:
            raise ConfigError(f"unknown config key {where}{key!r}; known keys: {', '.join(sorted(known))}")
    values = {}
    for name, value in document.items():
        values[name] = _coerce(cls, known[name], value, f"{where}{name}")
    return cls(**values)


def _coerce(owner, field_, value, key: str):
    default = getattr(owner(), field_.name)
    if field_.name == "extra_object_stores":
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list of object stores")
        return tuple(_build(ObjectStoreConfig, item, f"{key}[{i}].") for i, item in enumerate(value))
    if hasattr(default, "__dataclass_fields__"):
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping")
        return _build(type(default), value, f"{key}.")
    if isinstance(default, tuple):
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{key}: expected a list")
        return tuple(str(item) for item in value)
    if isinstance(default, bool):
        return str(value).lower() in ("1", "true", "yes")
    if isinstance(default, (int, float)):
        try:
            return type(default)(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
    return str(value)


def _apply_env(config, environ: Mapping[str, str], prefix: str):
    changes = {}
    for field_ in fields(config):
        current = getattr(config, field_.name)
        env_name = f"{prefix}{field_.name.upper()}"
        if hasattr(current, "__dataclass_fields__"):
            changes[field_.name] = _apply_env(current, environ, env_name + "_")
        elif env_name in environ and field_.name != "extra_object_stores":
            changes[field_.name] = _coerce(type(config), field_, environ[env_name], env_name)
    return replace(config, **changes)


def _validate(config: Config) -> None:
    for event in config.events:
        if event not in KNOWN_EVENTS:
            raise ConfigError(f"events: unknown event {event!r}; known: {', '.join(KNOWN_EVENTS)}")
    if not config.lakefs.endpoint.startswith(("http://", "https://")):
        raise ConfigError(f"lakefs.endpoint: expected an http(s) URL, got {config.lakefs.endpoint!r}")
    if not config.redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"redis_url: expected a redis:// URL, got {config.redis_url!r}")
    if config.worker_concurrency < 1:
        raise ConfigError("worker_concurrency: must be at least 1")
    for branch in config.catch_up_branches:
        if branch.count(":") != 1 or not all(branch.split(":")):
            raise ConfigError(f"catch_up_branches: {branch!r} must be written repository:branch")
    if config.lock_ttl_seconds < 5:
        raise ConfigError("lock_ttl_seconds: must be at least 5")
    if config.retry.max_retries < 0:
        raise ConfigError("retry.max_retries: must not be negative")


def _as_dict(value):
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _as_dict(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, tuple):
        return [_as_dict(item) for item in value]
    return value


def _mask(document, key: str = ""):
    if isinstance(document, dict):
        return {k: _mask(v, k) for k, v in document.items()}
    if isinstance(document, list):
        return [_mask(item, key) for item in document]
    if key in SECRET_KEYS and document:
        return "***"
    return document
