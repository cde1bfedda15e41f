"""The merge gates' rules (`exporter.checks`): read from a descriptor's `checks:` section, and held
against a change's history diff."""

from __future__ import annotations

import pytest
import yaml

from exporter.checks.gate import Report, table_findings
from exporter.checks.readers import unreadable
from exporter.checks.rules import Amount, ColumnRule, TableChecks, parse_checks
from exporter.errors import DescriptorError
from exporter.lakefs.descriptors import parse_descriptor

pytestmark = pytest.mark.unit

DESCRIPTOR = "_lakefs_tables/events.yaml"


def checks_of(text: str) -> TableChecks | None:
    table = parse_descriptor(DESCRIPTOR, f"name: events\ntype: delta\npath: tables/events\n{text}".encode())
    return parse_checks(table.descriptor, table.checks)


def test_the_rules_are_read_from_the_descriptor():
    checks = checks_of("checks:\n  schema:\n    allow: [renamed]\n  rows:\n    removed_at_most: 5%\n"
                       "    added_at_most: 1000\n  readers: [delta-sharing, duckdb]\n")
    assert checks == TableChecks(schema=True, schema_allowed=frozenset({"renamed"}), removed_at_most=Amount(percent=5),
                                 added_at_most=Amount(count=1000), readers=("delta-sharing", "duckdb"))
    assert checks_of("checks:\n  keys: [order_id, line]\n  columns:\n    status: {not_null: true, accepted: [new, 1]}\n"
                     "    note: {not_null: false}\n") == TableChecks(
        keys=("order_id", "line"), columns={"status": ColumnRule(True, ("new", 1)), "note": ColumnRule(False, None)})
    assert checks_of("checks:\n  rows:\n    emptied_partitions_at_most: 0\n").emptied_partitions_at_most == 0
    assert checks_of("") is None
    assert checks_of("checks:\n  schema: true\n").schema


@pytest.mark.parametrize("section,says", [
    ("checks:\n  schmea: true\n", "`checks.schmea` is not a rule (did you mean 'schema'?)"),
    ("checks:\n  readers: [delta_rs]\n", "'delta_rs' is not one of spark-3.5, delta-rs, duckdb, delta-sharing, "
                                         "iceberg (did you mean 'delta-rs'?)"),
    ("checks:\n  rows:\n    removed_at_most: five percent\n", "`checks.rows.removed_at_most` must be a row count"),
    ("checks:\n  rows:\n    removed_at_most: 150%\n", "must be a row count (1000) or a percentage (5%)"),
    ("checks:\n  rows:\n    remove_at_most: 5%\n", "(did you mean 'removed_at_most'?)"),
    ("checks:\n  schema:\n    allow: [dropped]\n", "'dropped' is not one of removed, renamed, retyped"),
    ("checks: [schema]\n", "`checks` must be a mapping"),
    ("checks:\n  key: [id]\n", "`checks.key` is not a rule (did you mean 'keys'?)"),
    ("checks:\n  keys: id\n", "`checks.keys` must be a list of column names, not 'id'"),
    ("checks:\n  columns:\n    status: {not_nul: true}\n", "`checks.columns.status.not_nul` is not a rule (did you mean 'not_null'?)"),
    ("checks:\n  columns:\n    status: {accepted: []}\n", "`checks.columns.status.accepted` must be a non-empty list"),
    ("checks:\n  columns:\n    status: {not_null: yes please}\n", "`checks.columns.status.not_null` must be true or false"),
    ("checks:\n  columns: [status]\n", "`checks.columns` must map column names to rules"),
    ("checks:\n  rows:\n    emptied_partitions_at_most: none\n", "must be a count of partitions (0), not 'none'"),
])
def test_a_rule_file_with_a_typo_is_an_error_naming_it(section, says):
    with pytest.raises(DescriptorError) as error:
        checks_of(section)
    assert says in str(error.value) and str(error.value).startswith(DESCRIPTOR)


def diff(schema_changes=(), rows=(100, 100), before=None, after=None, in_files=None) -> dict:
    """A history diff; `in_files`: the rows of the files only each side has, by default those of a
    change that only deletes or only appends (as many as the count moved)."""
    protocol = None if before == after else {"left": before, "right": after}
    net = None if None in rows else rows[1] - rows[0]
    in_files = in_files or ((None, None) if net is None else (max(0, -net), max(0, net)))
    return {"schema_changes": list(schema_changes), "protocol_changed": protocol, "versions": {"left": 1, "right": 2},
            "row_count": {"left": rows[0], "right": rows[1], "in_files_removed": in_files[0],
                          "in_files_added": in_files[1]}}


def change(kind: str, column: str, left, right) -> dict:
    return {"change": kind, "column": column, "left": left, "right": right}


def test_schema_changes_that_break_readers_are_found_and_widenings_pass():
    checks = TableChecks(schema=True)
    found = table_findings("events", checks, diff([
        change("removed", "amount", "double", None), change("renamed", "ts", "time", "ts"),
        change("type_changed", "id", "integer", "long"), change("type_changed", "price", "decimal(10,2)", "decimal(12,2)"),
        change("type_changed", "code", "integer", "string"), change("nullability_changed", "user", True, False),
        change("nullability_changed", "note", False, True), change("added", "extra", None, "string")]))
    assert [f.found for f in found] == [
        "column `amount` removed (double)", "column `time` renamed to `ts`",
        "column `code` re-typed from integer to string (not a widening)", "column `user` made non-nullable"]
    allowed = TableChecks(schema=True, schema_allowed=frozenset({"removed", "renamed"}))
    assert [f.found for f in table_findings("events", allowed, diff([change("removed", "amount", "double", None)]))] == []


def test_rows_removed_or_added_past_their_bound_are_found():
    checks = TableChecks(removed_at_most=Amount(percent=5), added_at_most=Amount(count=10))
    assert [f.found for f in table_findings("t", checks, diff(rows=(1000, 700)))] == [
        "300 rows removed (30.0% of 1,000): more than 5% of the rows"]
    assert table_findings("t", checks, diff(rows=(1000, 960))) == []
    assert [f.found for f in table_findings("t", checks, diff(rows=(1000, 1011)))] == [
        "11 rows added (1.1% of 1,000): more than 10 rows"]
    unknown = table_findings("t", checks, diff(rows=(None, 5)))
    assert len(unknown) == 2 and "the row count is unknown" in unknown[0].found
    created = {**diff(rows=(None, 20), in_files=(0, 20)), "versions": {"left": None, "right": 1}}  # no table before: 0 rows
    assert [f.found for f in table_findings("t", checks, created)] == ["20 rows added: more than 10 rows"]


def test_a_rewrite_that_leaves_the_count_as_it_was_is_counted_in_its_rows_only_when_the_logs_cannot_tell():
    checks = TableChecks(removed_at_most=Amount(percent=5))
    asked = []

    def counted(removed: int):
        return lambda: asked.append(removed) or {"removed": removed, "added": 300, "updated": 0}

    merge = diff(rows=(1000, 1000), in_files=(400, 400))  # 400 rows' files rewritten: up to 400 removed
    assert [f.found for f in table_findings("t", checks, merge, counted(300))] == [
        "300 rows removed (30.0% of 1,000) (counted in the changed rows): more than 5% of the rows"]
    assert table_findings("t", checks, merge, counted(20)) == []
    assert asked == [300, 20]
    assert table_findings("t", checks, diff(rows=(1000, 1000), in_files=(50, 50)), counted(0)) == []  # at most 50
    assert [f.found for f in table_findings("t", checks, diff(rows=(1000, 900), in_files=(400, 300)), counted(0))] == [
        "100 rows removed (10.0% of 1,000): more than 5% of the rows"]  # at least the net change: no count needed
    assert asked == [300, 20]
    [unknown] = table_findings("t", checks, merge)  # nothing to count with: never a silent pass
    assert unknown.found == "the rows removed cannot be told from the logs: cannot hold them to at most 5% of the rows"


def test_a_feature_a_declared_reader_cannot_read_is_found_naming_both():
    before = {"minReaderVersion": 1, "minWriterVersion": 2}
    with_dv = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["deletionVectors"],
               "writerFeatures": ["deletionVectors"]}
    checks = TableChecks(readers=("delta-sharing", "spark-3.5"))
    assert [f.found for f in table_findings("t", checks, diff(before=before, after=with_dv))] == [
        "delta-sharing cannot read deletionVectors, which this change brings"]
    variant = {**with_dv, "readerFeatures": ["deletionVectors", "variantType"]}
    assert unreadable(with_dv, variant, ("spark-3.5", "iceberg", "duckdb")) == [
        ("spark-3.5", ["variantType"]), ("iceberg", ["variantType"]), ("duckdb", ["variantType"])]
    assert unreadable(with_dv, with_dv, ("delta-sharing",)) == []  # what the table had already is not this change's
    assert unreadable(before, {"minReaderVersion": 2, "minWriterVersion": 5}, ("delta-sharing",)) == [
        ("delta-sharing", ["columnMapping"])]
    assert unreadable(before, with_dv, ("delta-rs", "duckdb")) == [("delta-rs", ["deletionVectors"])]


def test_the_report_says_what_blocked_and_links_the_diff():
    from exporter.checks.gate import Finding

    report = Report("repo", "feature", "main", "b" * 64, "a" * 64, tables=["events"],
                    findings=[Finding("events", "schema", "column `amount` removed (double)")])
    text = report.text("https://delta.example.com/")
    assert text.splitlines() == [
        "lakefs-delta checks: feature into main (repo): blocked, 1 finding(s), 1 table(s) checked",
        "- events: schema: column `amount` removed (double)",
        f"diff: https://delta.example.com/diff?repository=repo&left={'a' * 64}&right={'b' * 64}"]
    assert Report("repo", "feature", "main", "b", "a", tables=["events"]).passed


def test_a_merges_diff_comes_from_the_cache_a_staged_ones_never_and_redis_down_computes_it(redis_url, monkeypatch):
    """`_table_diff`: the diff the workers cached for (destination, source) is the gate's, with no
    log read; a miss is computed once and cached (for the diff page, the next check); a staged change
    is not a commit (no cache); Redis unreachable, the diff is computed as without a cache."""
    from exporter.checks import gate
    from exporter.diff.table import DiffCache

    computed = []

    def compute(lake, repository, left, right, table_path):
        computed.append((left, right))
        return {"row_count": {"left": 10, "right": 40}, "from": "computed"}

    monkeypatch.setattr(gate, "compute_diff", compute)
    diffs = DiffCache(redis_url, 60)
    diffs.put({"row_count": {"left": 10, "right": 11}, "from": "cache"}, "repo", "m" * 64, "c" * 64, "tables/events")

    assert gate._table_diff(None, diffs, "repo", "m" * 64, "c" * 64, "tables/events")["from"] == "cache"
    assert computed == []
    assert gate._table_diff(None, diffs, "repo", "m" * 64, "d" * 64, "tables/events")["from"] == "computed"
    assert diffs.get("repo", "m" * 64, "d" * 64, "tables/events")["from"] == "computed"
    assert gate._table_diff(None, None, "repo", "m" * 64, "c" * 64, "tables/events")["from"] == "computed"
    down = DiffCache("redis://127.0.0.1:1/0", 60)
    assert gate._table_diff(None, down, "repo", "m" * 64, "c" * 64, "tables/events")["from"] == "computed"
    assert computed == [("m" * 64, "d" * 64), ("m" * 64, "c" * 64), ("m" * 64, "c" * 64)]
