"""Table descriptors: what lakeFS's `_lakefs_tables/<name>.yaml` convention allows, and clear errors."""

import pytest

from exporter.errors import DescriptorError
from exporter.lakefs.descriptors import changes_under, discover_tables, parse_descriptor, tables_to_export
from tests.fakes import FakeLakeFS

pytestmark = pytest.mark.unit


def test_valid_descriptor_is_normalised():
    table = parse_descriptor("_lakefs_tables/t.yaml", b"name: events\ntype: delta\npath: tables//events/\n")
    assert (table.name, table.path, table.prefix) == ("events", "tables/events", "tables/events/")


def test_other_table_types_are_not_exported():
    assert parse_descriptor("_lakefs_tables/h.yaml", b"name: h\ntype: hive\npath: tables/h\n") is None


@pytest.mark.parametrize("content, message", [
    (b"name: [unclosed\n", "not valid YAML"),
    (b"- name: a\n", "expected a mapping"),
    (b"type: delta\npath: tables/x\n", "`name` is required"),
    (b"name: x\ntype: delta\n", "`path` is required"),
    (b"name: x\npath: ../outside\n", "escapes the repository"),
    (b"name: x\npath: tables/../../x\n", "escapes the repository"),
    (b"name: x\npath: /abs/x\n", "relative to the repository root"),
    (b"name: x\npath: s3://bucket/x\n", "relative to the repository root"),
    (b"name: a/b\npath: tables/x\n", "must not contain `/`"),
    (b"name: '..'\npath: tables/x\n", "be `.` or `..`"),
    (b"name: ' ..'\npath: tables/x\n", "be `.` or `..`"),  # checked as it is used: stripped first
    (b"name: '. '\npath: tables/x\n", "be `.` or `..`"),
])
def test_invalid_descriptors_name_the_file_and_the_problem(content, message):
    with pytest.raises(DescriptorError, match=message) as raised:
        parse_descriptor("_lakefs_tables/bad.yaml", content)
    assert "_lakefs_tables/bad.yaml" in str(raised.value)


def repository_with(files: dict[str, bytes]) -> tuple[FakeLakeFS, str]:
    """A lakeFS repository `repo` whose `main` holds `files` in one commit; that commit's id."""
    lakefs = FakeLakeFS()
    lakefs.create_repository("repo", "s3://bucket/repo")
    return lakefs, lakefs.commit_files("repo", "main", files)


def test_one_bad_descriptor_does_not_stop_the_others_and_duplicates_export_neither():
    lakefs, _ = repository_with({
        "_lakefs_tables/a.yaml": b"name: a\ntype: delta\npath: tables/a\n",
        "_lakefs_tables/b.yaml": b"name: [broken\n",
        "_lakefs_tables/c1.yaml": b"name: c\ntype: delta\npath: tables/c1\n",
        "_lakefs_tables/c2.yaml": b"name: c\ntype: delta\npath: tables/c2\n",
        "_lakefs_tables/readme.md": b"not a descriptor",
        "_lakefs_tables/old/x.yaml": b"name: x\ntype: delta\npath: tables/x\n",  # in a folder: not a descriptor
    })
    discovery = discover_tables(lakefs, "repo", "main")
    assert [t.name for t in discovery.tables] == ["a"]
    assert len(discovery.errors) == 2
    assert any("b.yaml" in str(e) for e in discovery.errors)
    assert any("'c'" in str(e) and "neither" in str(e) for e in discovery.errors)


def test_the_tables_a_commit_exports_are_named_all_or_changed_and_refusals_keep_their_descriptor():
    lakefs, _ = repository_with({"_lakefs_tables/a.yaml": b"name: a\ntype: delta\npath: tables/a\n",
                                 "_lakefs_tables/b.yaml": b"name: b\ntype: delta\npath: tables/b\n",
                                 "_lakefs_tables/bad:name.yaml": b"name: [broken\n",
                                 "tables/a/_delta_log/00000000000000000000.json": b"{}",
                                 "tables/b/_delta_log/00000000000000000000.json": b"{}"})
    c1 = lakefs.commit_files("repo", "main", {"tables/b/_delta_log/00000000000000000001.json": b"{}"})
    named = tables_to_export(lakefs, "repo", c1, ["a", "nope"])
    assert [t.name for t in named.tables] == ["a"]
    assert named.refused["nope"] == "no such table in _lakefs_tables/"
    assert named.refused["_lakefs_tables/bad:name.yaml"].startswith("_lakefs_tables/bad:name.yaml: not valid YAML")
    assert [t.name for t in tables_to_export(lakefs, "repo", c1, every_table=True).tables] == ["a", "b"]
    assert [t.name for t in tables_to_export(lakefs, "repo", c1).tables] == ["b"]


def test_the_changed_tables_come_from_one_diff_of_the_commit_unless_it_runs_past_a_page():
    descriptors = {f"_lakefs_tables/{n}.yaml": f"name: {n}\ntype: delta\npath: tables/{n}\n".encode() for n in "abcd"}
    lakefs, first = repository_with({**descriptors, **{f"tables/{n}/_delta_log/{0:020d}.json": b"{}" for n in "abcd"}})
    tables_to_export(lakefs, "repo", first)  # each descriptor read once
    small = lakefs.commit_files("repo", "main", {"tables/b/_delta_log/00000000000000000001.json": b"{}",
                                                 "_lakefs_tables/c.yaml": b"name: c\ntype: delta\npath: tables/c/\n",
                                                 "tables/ab/x.parquet": b"x"})  # not under tables/a/
    before = lakefs.calls
    assert [t.name for t in tables_to_export(lakefs, "repo", small).tables] == ["b", "c"]
    one_diff = lakefs.calls - before
    big = lakefs.commit_files("repo", "main", {f"tables/d/part-{i:05d}.parquet": b"x" for i in range(1_200)})
    before = lakefs.calls
    assert [t.name for t in tables_to_export(lakefs, "repo", big).tables] == ["d"]
    past_a_page = lakefs.calls - before

    assert one_diff == 4, one_diff  # the listing, the commit, one diff, and the descriptor whose content changed
    assert past_a_page == 4 + 1 + 4, past_a_page  # listing, commit, two pages; then the descriptors' diff, one a table


def test_a_tables_changes_come_from_the_commits_whole_diff_once_the_process_has_it():
    descriptors = {f"_lakefs_tables/{n}.yaml": f"name: {n}\ntype: delta\npath: tables/{n}\n".encode() for n in "ab"}
    lakefs, first = repository_with({**descriptors, **{f"tables/{n}/_delta_log/{0:020d}.json": b"{}" for n in "ab"}})
    second = lakefs.commit_files("repo", "main", {"tables/a/_delta_log/00000000000000000001.json": b"{}",
                                                  "tables/ab/x.parquet": b"x"})
    before = lakefs.calls
    assert [c["path"] for c in changes_under(lakefs, "repo", first, second, "tables/a/")] == [
        "tables/a/_delta_log/00000000000000000001.json"]
    assert lakefs.calls == before + 1  # not known here yet: a diff of the prefix

    tables_to_export(lakefs, "repo", second)  # the commit's whole diff, for the tables it changed
    before = lakefs.calls
    assert [(c["path"], c["type"]) for c in changes_under(lakefs, "repo", first, second, "tables/a/")] == [
        ("tables/a/_delta_log/00000000000000000001.json", "added")]
    assert list(changes_under(lakefs, "repo", first, second, "tables/b/")) == []
    assert lakefs.calls == before  # answered from it
