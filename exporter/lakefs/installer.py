"""Installing the lakeFS action and table descriptors into a repository."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import yaml

from exporter.config import Config
from exporter.errors import ActionError, ExporterError, NotFound
from exporter.lakefs.client import LakeFS
from exporter.lakefs.descriptors import DESCRIPTORS_PREFIX, parse_descriptor

ACTION_PATH = "_lakefs_actions/delta-export.yaml"
CHECKS_ACTION_PATH = "_lakefs_actions/delta-checks.yaml"
TEMPLATES = resources.files("actions")  # the top-level actions/ folder, package data in the wheel too


def render_action(url: str, branches: list[str], branch_tables: list[str] = (), path: str = ACTION_PATH) -> bytes:
    template = (TEMPLATES / path).read_text()
    if any("," in pattern or '"' in pattern for pattern in branch_tables):
        raise ExporterError(f"branch table patterns cannot hold ',' or '\"': {branch_tables}")
    return (template.replace("{{URL}}", url).replace("{{BRANCHES}}", json.dumps(branches))
            .replace("{{BRANCH_TABLES}}", ",".join(branch_tables)).encode())


def branch_table_patterns(action: dict) -> list[str]:
    """The branch patterns an installed action asks branch tables for (its webhook's query)."""
    patterns: list[str] = []
    for hook in action.get("hooks") or []:
        query = ((hook or {}).get("properties") or {}).get("query_params") or {}
        value = query.get("branch_tables") or ""
        patterns += [p.strip() for p in (value if isinstance(value, list) else str(value).split(",")) if p.strip()]
    return patterns


def webhook_urls(action: dict) -> list[str]:
    """The URLs an installed action's webhooks call."""
    return [str(((hook or {}).get("properties") or {}).get("url", "")) for hook in action.get("hooks") or []
            if (hook or {}).get("type") == "webhook"]


def installed_action(lakefs: LakeFS, repository: str) -> dict | None:
    """The action `install-actions` committed to the default branch; None when absent or unreadable,
    `ActionError` when a field this service reads has another shape."""
    try:
        action = yaml.safe_load(lakefs.get_object(repository, lakefs.default_branch(repository), ACTION_PATH))
    except (NotFound, yaml.YAMLError):
        return None
    return _checked(action) if isinstance(action, dict) else {}


def _checked(action: dict) -> dict:
    """The action, once each field its readers (`branch_table_patterns`, `webhook_urls`, catch-up's
    branches) take is of the shape lakeFS documents: lakeFS itself accepts others when it is committed."""
    def expect(value: Any, kind: type, where: str, what: str) -> None:
        if value is not None and not isinstance(value, kind):
            raise ActionError(f"{ACTION_PATH}: `{where}` must be {what}, not {value!r}")

    def strings(value: Any, where: str) -> None:
        for position, item in enumerate(value if isinstance(value, list) else []):
            if not isinstance(item, str):
                raise ActionError(f"{ACTION_PATH}: `{where}[{position}]` must be a string, not {item!r}")

    events = action.get("on", action.get(True))  # YAML 1.1 reads a bare `on` key as true
    expect(events, dict, "on", "a mapping of events")
    for event, settings in (events or {}).items():
        expect(settings, dict, f"on.{event}", "a mapping")
        expect((settings or {}).get("branches"), list, f"on.{event}.branches", "a list of branch patterns")
        strings((settings or {}).get("branches"), f"on.{event}.branches")
    expect(action.get("hooks"), list, "hooks", "a list")
    for position, hook in enumerate(action.get("hooks") or []):
        where = f"hooks[{position}]"
        expect(hook, dict, where, "a mapping")
        properties = (hook or {}).get("properties")
        expect(properties, dict, f"{where}.properties", "a mapping")
        query = (properties or {}).get("query_params")
        expect(query, dict, f"{where}.properties.query_params", "a mapping")
        strings((query or {}).get("branch_tables"), f"{where}.properties.query_params.branch_tables")
    return action


def branch_tables_kept(config: Config, action: dict | None) -> list[str]:
    """The branch patterns that keep branch tables in a repository: the config's and those of its
    installed action (`installed_action`), never what an event's request claims alone."""
    return [*config.branch_tables, *branch_table_patterns(action or {})]


def render_descriptor(name: str, path: str) -> bytes:
    content = f"name: {name}\ntype: delta\npath: {path}\n".encode()
    parse_descriptor(f"{DESCRIPTORS_PREFIX}{name}.yaml", content)  # refuse what discovery would refuse
    return content


def action_files(url: str, branches: list[str], tables: dict[str, str],
                 branch_tables: list[str] = (), checks: list[str] = ()) -> dict[str, bytes]:
    """The files `install_actions` puts in a repository: the action calling `url` on commits, merges
    and tags of `branches` (keeping branch tables on `branch_tables`), the merge gates' action
    calling `<url>/checks` before merges into and commits on `checks` when any, and a descriptor per
    table (name -> path)."""
    files = {ACTION_PATH: render_action(url, branches, branch_tables)}
    if checks:
        files[CHECKS_ACTION_PATH] = render_action(url.rstrip("/") + "/checks", list(checks), path=CHECKS_ACTION_PATH)
    files.update({f"{DESCRIPTORS_PREFIX}{name}.yaml": render_descriptor(name, path) for name, path in tables.items()})
    return files


def install_actions(lakefs: LakeFS, repository: str, branch: str, wanted: dict[str, bytes],
                    force: bool = False) -> str | None:
    """Upload the action and descriptors (`action_files`), then commit. Returns the commit id, or
    None if all was in place.

    A different file already at one of the paths is an error unless `force`.
    """
    changes = {}
    for path, content in wanted.items():
        try:
            existing = lakefs.get_object(repository, branch, path)
        except NotFound:
            existing = None
        if existing == content:
            continue
        if existing is not None and not force:
            raise ExporterError(f"{repository}/{branch}/{path} exists with different content; pass --force to replace it")
        changes[path] = content
    if not changes:
        return None
    for path, content in changes.items():
        lakefs.upload_object(repository, branch, path, content)
    return lakefs.commit_branch(repository, branch, "lakefs-delta: install export action and table descriptors",
                                {"lakefs-delta.installed": ",".join(sorted(changes))})
