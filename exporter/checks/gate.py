"""Merge gates: what a change does to each table, against the rules the table declares.

The destination's head is compared with the source's commit (a merge), or a branch's head with its
staged state (a commit), through the history diff (`exporter.diff.table`): schema, protocol and
row counts come from the logs and their statistics, no data file is read. A merge's diff is the
cached one when there is one: the workers cache each exported commit's diff against its parent,
which is a merge's whole change when the source is one commit on the destination's head; a diff
computed here is cached for the diff page. Key and column rules read the changed rows
(`exporter.checks.rows`), and so does a rows rule the logs' bounds cannot settle (`_rows`: a
rewrite deleting as many rows as it inserts), counting them as the row diff does.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from urllib.parse import urlencode

import redis

from exporter.checks.readers import unreadable
from exporter.checks.rows import row_findings
from exporter.checks.rules import Amount, TableChecks, parse_checks
from exporter.diff.rows.compute import RowDiffQuery, RowDiffTooLarge, count_changes
from exporter.diff.table import DiffCache, compute_diff
from exporter.errors import BadRequest, DescriptorError
from exporter.lakefs.client import PAGE_SIZE, commit_id_of
from exporter.lakefs.descriptors import DESCRIPTORS_PREFIX, discover_tables
from exporter.lakefs.lake import Lake

log = logging.getLogger("lakefs_delta.checks")
# widening a reader of the old type reads the new one as (Delta's type widening, PROTOCOL.md#type-widening)
WIDENINGS = {("byte", "short"), ("byte", "integer"), ("byte", "long"), ("short", "integer"), ("short", "long"),
             ("integer", "long"), ("float", "double"), ("byte", "double"), ("short", "double"), ("integer", "double"),
             ("date", "timestamp_ntz")}


@dataclass(frozen=True)
class Finding:
    table: str
    rule: str  # "rules", "schema", "rows", "readers", "keys", "columns"
    found: str  # what was found, in words
    path: str = ""  # the table's path, or the descriptor's when the finding is the descriptor's own
    rows: tuple[dict, ...] = ()  # some of the rows a key or column rule's finding is about (`exporter.checks.rows`)

    @property
    def of_descriptor(self) -> bool:
        """A broken descriptor's own finding, about that object: it is named by its path, and a
        table's name never holds `/` (`parse_descriptor`)."""
        return "/" in self.table

    def as_dict(self) -> dict:
        return {"table": self.table, "path": self.path, "rule": self.rule, "found": self.found, "rows": list(self.rows)}


@dataclass
class Report:
    repository: str
    source: str  # the ref whose changes are checked
    destination: str
    source_commit: str
    destination_commit: str
    tables: list[str] = field(default_factory=list)  # those checked, by name
    table_paths: dict[str, str] = field(default_factory=dict)  # name -> path of those checked
    findings: list[Finding] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.findings

    def text(self, public_url: str = "") -> str:
        """What lakeFS shows the user who merged: one line per finding, and where to see the diff."""
        head = (f"lakefs-delta checks: {self.source} into {self.destination} ({self.repository}): "
                + ("passed" if self.passed else f"blocked, {len(self.findings)} finding(s)")
                + f", {len(self.tables)} table(s) checked")
        lines = [head, *(f"- {f.table}: {f.rule}: {f.found}" for f in self.findings)]
        if public_url and self.findings:
            query = urlencode({"repository": self.repository, "left": self.destination_commit,
                               "right": self.source_commit})
            lines.append(f"diff: {public_url.rstrip('/')}/diff?{query}")
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict:
        return {"repository": self.repository, "source": self.source, "destination": self.destination,
                "source_commit": self.source_commit, "destination_commit": self.destination_commit,
                "passed": self.passed, "tables": self.tables,
                "findings": [f.as_dict() for f in self.findings]}


def check_change(lake: Lake, repository: str, source: str, destination: str, staged: bool = False,
                 diffs: DiffCache | None = None) -> Report:
    """Every table the source declares checks for and whose files differ from the destination's,
    against its rules. A merge: `source` and `destination` are refs, each pinned to its commit. A
    commit (`staged`): `source` is the branch as staged (read as it is, uncommitted objects too) and
    `destination` the branch, pinned to its head. `diffs`: the history diffs' cache (`_table_diff`)."""
    lakefs = lake.lakefs
    destination_commit = commit_id_of(lakefs, repository, destination)
    source_commit = source if staged else commit_id_of(lakefs, repository, source)
    report = Report(repository, source, destination, source_commit, destination_commit)

    def changes(prefix: str, amount: int | None = None) -> list[str]:
        page = amount or PAGE_SIZE
        found = lakefs.uncommitted(repository, source, prefix, amount=page) if staged else \
            lakefs.diff(repository, destination_commit, source_commit, prefix=prefix, amount=page)
        return [c["path"] for c in itertools.islice(found, amount)]

    changed = changes(DESCRIPTORS_PREFIX)
    discovery = discover_tables(lakefs, repository, source_commit)
    for error in discovery.errors:
        if error.descriptor in changed:  # a descriptor this change breaks: its table would stop exporting
            report.findings.append(Finding(error.descriptor, "rules", str(error), error.descriptor))
    for table in discovery.tables:
        try:
            checks = parse_checks(table.descriptor, table.checks)
        except DescriptorError as exc:
            report.findings.append(Finding(table.name, "rules", str(exc), table.path))
            continue
        if checks is None or (table.descriptor not in changed and not changes(table.prefix, 1)):
            continue
        report.tables.append(table.name)
        report.table_paths[table.name] = table.path
        diff = _table_diff(lake, None if staged else diffs, repository, destination_commit, source_commit, table.path)
        query = RowDiffQuery(repository, destination_commit, source_commit, table.path, checks.keys)
        findings = table_findings(table.name, checks, diff, functools.cache(lambda query=query: count_changes(lake, query)))
        if checks.reads_files:
            findings += [Finding(table.name, found.rule, found.found, rows=found.rows) for found in
                         row_findings(lake, repository, destination_commit, source_commit, table.path, checks)]
        report.findings += [replace(f, path=table.path) for f in findings]
    return report


def _table_diff(lake: Lake, diffs: DiffCache | None, repository: str, left: str, right: str, table_path: str) -> dict:
    """The table's history diff of `left` and `right`: from `diffs` when cached, else computed (and
    cached). A staged change has no cache (`diffs` None: not a commit); Redis unreachable, the diff
    is computed as without one (the gate needs Redis for nothing else)."""
    try:
        found = diffs.get(repository, left, right, table_path) if diffs is not None else None
    except redis.RedisError as error:
        log.warning("diff cache unreachable, computing the diff: %s", error)
        diffs, found = None, None
    if found is not None:
        return found
    diff = compute_diff(lake, repository, left, right, table_path)
    try:
        if diffs is not None:
            diffs.put(diff, repository, left, right, table_path)
    except redis.RedisError as error:
        log.warning("diff not cached: %s", error)
    return diff


def table_findings(name: str, checks: TableChecks, diff: dict,
                   counted: Callable[[], dict[str, int]] | None = None) -> list[Finding]:
    """The table's rules against its history diff (`exporter.diff.history.diff_history`). `counted`:
    the changed rows' counts (`exporter.diff.rows.compute.count_changes`), asked only when the logs
    cannot tell a rows rule's answer."""
    findings = []
    if checks.schema:
        findings += [Finding(name, "schema", found) for found in _schema(diff["schema_changes"], checks.schema_allowed)]
    for amount, words in ((checks.removed_at_most, "removed"), (checks.added_at_most, "added")):
        if amount is not None:
            findings += [Finding(name, "rows", found) for found in _rows(diff, amount, words, counted)]
    protocol = diff["protocol_changed"]
    if checks.readers and protocol is not None:
        for consumer, features in unreadable(protocol.get("left") or {}, protocol.get("right") or {}, checks.readers):
            findings.append(Finding(name, "readers", f"{consumer} cannot read {', '.join(features)}, "
                                                     f"which this change brings"))
    return findings


def _rows(diff: dict, amount: Amount, words: str, counted: Callable[[], dict[str, int]] | None) -> list[str]:
    """A rows rule: the rows the change removes (or adds) against `amount`. The logs bound them: at
    least the row count's net change, at most the rows of the files only one side has. When the
    bounds do not settle it (a rewrite: a MERGE deleting as many rows as it inserts leaves the count
    as it was), the changed rows are counted (`counted`; an update is one when the table declares
    keys, else a removed and an added row)."""
    rows, versions = diff["row_count"], diff["versions"]
    before = 0 if versions["left"] is None else rows["left"]  # no table before: none of its rows
    after = 0 if versions["right"] is None else rows["right"]
    if before is None or after is None:
        return [f"the row count is unknown (a file without numRecords statistics): cannot hold rows {words} to "
                f"at most {amount}"]
    limit = amount.limit(before)
    changed = max(0, (after - before) * (1 if words == "added" else -1))  # at least this many
    at_most = rows.get(f"in_files_{words}")
    how = ""
    if changed <= limit and (at_most is None or at_most > limit):
        if counted is None:
            return [f"the rows {words} cannot be told from the logs: cannot hold them to at most {amount}"]
        try:
            changed, how = counted()[words], " (counted in the changed rows)"
        except (RowDiffTooLarge, BadRequest) as exceeded:  # too many rows to read; a key not in the schema
            return [f"the rows {words} could not be counted: {exceeded}: cannot hold them to at most {amount}"]
    if changed <= limit:
        return []
    share = f" ({100 * changed / before:.1f}% of {before:,})" if before else ""
    return [f"{changed:,} rows {words}{share}{how}: more than {amount}"]


def _schema(changes: list[dict], allowed: frozenset[str]) -> list[str]:
    found = []
    for change in changes:
        column, kind = change["column"], change["change"]
        if kind == "removed" and "removed" not in allowed:
            found.append(f"column `{column}` removed ({change['left']})")
        elif kind == "renamed" and "renamed" not in allowed:
            found.append(f"column `{change['left']}` renamed to `{change['right']}`")
        elif kind == "type_changed" and "retyped" not in allowed and (change["left"], change["right"]) not in WIDENINGS \
                and not _decimal_widened(change["left"], change["right"]):
            found.append(f"column `{column}` re-typed from {change['left']} to {change['right']} (not a widening)")
        elif kind == "nullability_changed" and change["left"] is not False and change["right"] is False \
                and "nullability_tightened" not in allowed:
            found.append(f"column `{column}` made non-nullable")
    return found


def _decimal_widened(left: str, right: str) -> bool:
    """decimal(p, s) to decimal(p + k1, s + k2) with k1 >= k2 >= 0: every old value fits."""
    def parts(name: str) -> tuple[int, int] | None:
        if not name.startswith("decimal(") or not name.endswith(")"):
            return None
        precision, _, scale = name[8:-1].partition(",")
        return int(precision), int(scale)

    old, new = parts(left), parts(right)
    return bool(old and new) and new[1] >= old[1] and new[0] - old[0] >= new[1] - old[1]
