"""The previous release's flat config keys and variables: still read, each with a warning naming
its new key, until the next release; a key given both ways is an error."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from exporter.errors import ConfigError

ENV_PREFIX = "LAKEFS_DELTA_"


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


def upgrade_document(document: dict[str, Any]) -> dict[str, Any]:
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


def variable(key: str) -> str:
    """`catch_up.interval_seconds` -> `LAKEFS_DELTA_CATCH_UP_INTERVAL_SECONDS`."""
    return ENV_PREFIX + key.replace(".", "_").upper()


def _leaf_keys(annotation: Any, key: str) -> list[str]:
    """The keys under `key` a variable sets: the key itself, or each key of its section."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [leaf for name, field in annotation.model_fields.items()
                for leaf in _leaf_keys(field.annotation, f"{key}.{name}")]
    return [key]


def renamed_variables(config: type[BaseModel]) -> dict[str, tuple[str, str]]:
    """Old variable -> (its new variable, the new key), where a key's move changed its variable
    (`catch_up_depth` -> `catch_up.depth` did not: both are LAKEFS_DELTA_CATCH_UP_DEPTH)."""
    renamed = {}
    for old, new in RENAMED_KEYS.items():
        section, name = new.split(".")
        annotation = config.model_fields[section].annotation.model_fields[name].annotation
        for leaf in _leaf_keys(annotation, new):
            old_variable, new_variable = variable(old + leaf.removeprefix(new)), variable(leaf)
            if old_variable != new_variable:
                renamed[old_variable] = (new_variable, leaf)
    return renamed



def upgrade_environment(environ: Mapping[str, str], renamed: dict[str, tuple[str, str]]) -> Mapping[str, str]:
    """The environment with each renamed variable under its new name; both names set is an error."""
    if not any(old in environ for old in renamed):
        return environ
    environ = dict(environ)
    for old, (new, key) in renamed.items():
        if old in environ:
            if new in environ:
                raise ConfigError(f"{old} is the old name of {new} ({key}): set only {new}")
            environ[new] = environ.pop(old)
            _warn_renamed(old, f"{new} ({key})")
    return environ
