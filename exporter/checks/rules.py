"""The merge-gate rules a table declares beside itself: the `checks:` section of its descriptor.

```yaml
name: events
type: delta
path: tables/events
checks:
  schema:                       # a column removed, renamed, re-typed (but widened) or made non-null blocks
    allow: [renamed]            # ... except the changes named here
  rows:
    removed_at_most: 5%         # the table's row count may fall by at most this (a count or a percentage)
    added_at_most: 1000000      # ... and grow by at most this
    emptied_partitions_at_most: 0   # partitions the change leaves without a file
  readers: [spark-3.5, delta-rs, duckdb, delta-sharing, iceberg]
  keys: [order_id]              # non-null and unique after the change (changed rows, and existing rows that could clash)
  columns:                      # among the rows the change adds or updates
    status: {not_null: true, accepted: [new, paid, shipped]}
```

A rule file that cannot be read as rules is an error naming the key and what is expected (a typo
blocks the merge with the reason, never passes silently).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from exporter.checks.readers import CONSUMERS
from exporter.errors import DescriptorError

SCHEMA_CHANGES = ("removed", "renamed", "retyped", "nullability_tightened")
_AMOUNT = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(%?)\s*")


@dataclass(frozen=True)
class Amount:
    """At most `count` rows, or `percent` of the table's rows before the change."""

    count: int | None = None
    percent: float | None = None

    def limit(self, rows_before: int) -> float:
        return self.count if self.count is not None else rows_before * (self.percent or 0) / 100

    def __str__(self) -> str:
        return f"{self.count:,} rows" if self.count is not None else f"{self.percent:g}% of the rows"


@dataclass(frozen=True)
class TableChecks:
    schema: bool = False
    schema_allowed: frozenset[str] = frozenset()
    removed_at_most: Amount | None = None
    added_at_most: Amount | None = None
    readers: tuple[str, ...] = field(default_factory=tuple)
    emptied_partitions_at_most: int | None = None
    keys: tuple[str, ...] = field(default_factory=tuple)
    columns: dict[str, ColumnRule] = field(default_factory=dict)

    @property
    def reads_files(self) -> bool:
        """Whether a rule needs the files that differ (`exporter.checks.rows`), not only the history diff."""
        return bool(self.keys or self.columns) or self.emptied_partitions_at_most is not None


@dataclass(frozen=True)
class ColumnRule:
    """What every added or updated row's value of one column must be."""

    not_null: bool = False
    accepted: tuple | None = None  # the values allowed (None: any)


def parse_checks(descriptor: str, section: Any) -> TableChecks | None:
    """The `checks:` section of a descriptor (None when it has none); DescriptorError naming what is wrong."""
    if section is None:
        return None
    rules = _mapping(descriptor, "checks", section, ("schema", "rows", "readers", "keys", "columns"))
    schema = rules.get("schema")
    allowed: frozenset[str] = frozenset()
    if isinstance(schema, dict):
        allow = _mapping(descriptor, "checks.schema", schema, ("allow",)).get("allow") or []
        allowed = frozenset(_names(descriptor, "checks.schema.allow", allow, SCHEMA_CHANGES))
    elif schema is not None and not isinstance(schema, bool):
        raise DescriptorError(descriptor, f"`checks.schema` must be true, false or a mapping with `allow`, not {schema!r}")
    rows = _mapping(descriptor, "checks.rows", rules.get("rows") or {},
                    ("removed_at_most", "added_at_most", "emptied_partitions_at_most"))
    emptied = rows.get("emptied_partitions_at_most")
    if emptied is not None and (not isinstance(emptied, int) or isinstance(emptied, bool) or emptied < 0):
        raise DescriptorError(descriptor, f"`checks.rows.emptied_partitions_at_most` must be a count of "
                                          f"partitions (0), not {emptied!r}")
    readers = _names(descriptor, "checks.readers", rules.get("readers") or [], tuple(CONSUMERS))
    return TableChecks(schema=schema is not None and schema is not False, schema_allowed=allowed,
                       removed_at_most=_amount(descriptor, "checks.rows.removed_at_most", rows.get("removed_at_most")),
                       added_at_most=_amount(descriptor, "checks.rows.added_at_most", rows.get("added_at_most")),
                       readers=tuple(readers), emptied_partitions_at_most=emptied, keys=tuple(_columns(descriptor, "checks.keys", rules.get("keys") or [])),
                       columns=_column_rules(descriptor, rules.get("columns") or {}))


def _columns(descriptor: str, key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(name, str) and name for name in value):
        raise DescriptorError(descriptor, f"`{key}` must be a list of column names, not {value!r}")
    return value


def _column_rules(descriptor: str, value: Any) -> dict[str, ColumnRule]:
    if not isinstance(value, dict):
        raise DescriptorError(descriptor, f"`checks.columns` must map column names to rules, not {value!r}")
    rules = {}
    for column, rule in value.items():
        key = f"checks.columns.{column}"
        rule = _mapping(descriptor, key, rule, ("not_null", "accepted"))
        not_null, accepted = rule.get("not_null", False), rule.get("accepted")
        if not isinstance(not_null, bool):
            raise DescriptorError(descriptor, f"`{key}.not_null` must be true or false, not {not_null!r}")
        if accepted is not None and (not isinstance(accepted, list) or not accepted
                                     or any(isinstance(v, (dict, list)) for v in accepted)):
            raise DescriptorError(descriptor, f"`{key}.accepted` must be a non-empty list of values, not {accepted!r}")
        rules[str(column)] = ColumnRule(not_null, None if accepted is None else tuple(accepted))
    return rules


def _mapping(descriptor: str, key: str, value: Any, keys: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise DescriptorError(descriptor, f"`{key}` must be a mapping with any of {', '.join(keys)}, not {value!r}")
    _all_known(descriptor, value, keys, lambda name: f"`{key}.{name}` is not a rule", f"; `{key}` takes {', '.join(keys)}")
    return value


def _names(descriptor: str, key: str, value: Any, known: tuple[str, ...]) -> list[str]:
    if not isinstance(value, list):
        raise DescriptorError(descriptor, f"`{key}` must be a list of {', '.join(known)}, not {value!r}")
    _all_known(descriptor, value, known, lambda name: f"`{key}`: {name!r} is not one of {', '.join(known)}")
    return list(value)


def _all_known(descriptor: str, names, known: tuple[str, ...], unknown, tail: str = "") -> None:
    """DescriptorError for the first of `names` not `known`: what `unknown(name)` says, the closest known name."""
    for name in names:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            raise DescriptorError(descriptor, unknown(name) + (f" (did you mean {close[0]!r}?)" if close else "") + tail)


def _amount(descriptor: str, key: str, value: Any) -> Amount | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return Amount(count=value)
    found = _AMOUNT.fullmatch(value) if isinstance(value, str) else None
    if found and found.group(2) == "%" and float(found.group(1)) <= 100:
        return Amount(percent=float(found.group(1)))
    if found and not found.group(2) and "." not in found.group(1):
        return Amount(count=int(found.group(1)))
    raise DescriptorError(descriptor, f"`{key}` must be a row count (1000) or a percentage (5%), not {value!r}")
