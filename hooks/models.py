"""What the HTTP API takes and answers, as pydantic models: the OpenAPI document is made from them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

State = Literal["queued", "running", "retrying", "done", "failed"]


class Problem(BaseModel):
    """Every error answer: what is wrong, and where it can, what to do."""

    error: str


class LakeFSEvent(BaseModel):
    """lakeFS's action event (the webhook body); other fields lakeFS sends are kept and ignored."""

    model_config = ConfigDict(extra="allow")
    event_type: str = Field(examples=["post-commit"])
    repository_id: str
    branch_id: str | None = None
    tag_id: str | None = None
    commit_id: str | None = None
    source_ref: str | None = None


class EventQueued(BaseModel):
    status: Literal["queued"]
    task_id: str
    repository: str
    ref: str
    commit_id: str


class EventIgnored(BaseModel):
    status: Literal["ignored"]
    event_type: str


class IcebergOutcome(BaseModel):
    """With `iceberg.enabled`: the export (or branch table) as an Iceberg table beside its Delta log."""

    state: Literal["pending", "written", "refused", "failed"] = Field(
        description="`pending`: the export is complete and its Iceberg table is written next, by a task of its own; "
                    "`refused`: Iceberg cannot represent the table (the reason names the column or feature); "
                    "the Delta export is complete either way")
    metadata_location: str | None = Field(None, description="the metadata.json to give an Iceberg reader")
    snapshot_ids: dict[str, int] | None = Field(None, description="Delta version -> Iceberg snapshot id")
    reason: str | None = None
    rewritten: str | None = Field(None, description="a branch table's Iceberg table written anew rather than "
                                                     "appended to, and why (its log no longer held the commits)")
    recorded_at: float | None = Field(None, description="when the worker recorded it (Unix seconds)")


class BranchTableOutcome(BaseModel):
    state: Literal["appended", "unchanged", "refused", "failed"] = Field(
        description="`refused`: the branch keeps no branch tables, or the commit is not on its first-parent line")
    reason: str | None = None
    head_version: int | None = None
    appended: list[int] | None = None
    iceberg: IcebergOutcome | None = None


class ExportRecord(BaseModel):
    """One (ref, commit, table)'s export, or the commit-level record of a ref."""

    model_config = ConfigDict(extra="allow")
    state: State
    ref: str
    table: str
    updated_at: float | None = None
    reason: str | None = None
    location: str | None = None
    checkpoint_version: int | None = None
    head_version: int | None = None
    files_rewritten: int | None = None
    retries: int | None = None
    permanent: bool | None = None
    branch_table: BranchTableOutcome | None = Field(None, description="for a branch that keeps branch tables: what "
                                                    "the append did with this commit's export")
    iceberg: IcebergOutcome | None = None


class RefExports(BaseModel):
    commit: ExportRecord | None
    tables: dict[str, ExportRecord]


class ExportStatus(BaseModel):
    repository: str
    commit_id: str
    refs: dict[str, RefExports]


class BranchTableCommit(BaseModel):
    """A lakeFS commit the branch table followed, and the branch-table version equal to the source at it."""

    commit_id: str
    version: int = Field(description="the branch-table version that reads as the table at this commit")
    source_version: int = Field(description="the source table's version at this commit")
    appended: list[int] | None = Field(description="first and last branch-table version this commit appended, "
                                                   "null when it added none")
    synthetic: str | None = Field(description="why this commit needed a synthetic version (the source's log "
                                              "was replaced: revert, reset, new table), else null")
    at: str = Field(description="when it was appended (UTC, ISO 8601)")
    interrupted: bool = Field(False, description="its append was interrupted after writing some versions; the "
                                                 "next append took them in (they are never taken back)")


class BranchTableVersions(BaseModel):
    """A branch table: one Delta table per (branch, table) whose log follows the branch."""

    repository: str
    branch: str
    table: str
    table_path: str = Field(description="the table's path in the repository now (its descriptor's)")
    table_paths: list[str] = Field(description="every path in the repository the branch table's versions were read "
                                   "from (its descriptor re-pointed adds one), the current one last: a reader reads "
                                   "what each held")
    location: str = Field(description="the table's location: it never changes")
    first_version: int = Field(description="the first version the branch table holds")
    head_version: int
    offset: int = Field(description="branch-table version minus source version, since the last synthetic version")
    last_commit: str
    commits: list[BranchTableCommit] = Field(description="oldest first")
    iceberg: IcebergOutcome | None = Field(None, description="with `iceberg.enabled`: the branch table as an Iceberg "
                                           "table, a snapshot per version (`snapshot_ids`: branch-table version -> "
                                           "snapshot id)")


class Operation(BaseModel):
    """A Delta version on the right that is not on the left."""

    id: str
    timestamp: int | None
    operation: str
    operation_content: dict[str, Any]
    operation_type: Literal["create", "update", "delete", "unknown"]


class SchemaChange(BaseModel):
    change: str
    column: str
    left: str | bool | None
    right: str | bool | None


class Pair(BaseModel):
    left: Any
    right: Any


class RowCount(BaseModel):
    left: int | None
    right: int | None
    difference: int | None
    in_files_removed: int | None = Field(None, description=(
        "rows in the files only the left side has (a file whose deletion vector changed: the rows it newly "
        "deletes): at most the rows the change removes; null when the logs cannot tell"))
    in_files_added: int | None = Field(None, description=(
        "rows in the files only the right side has (or that a changed deletion vector brings back): at most "
        "the rows the change adds; null when the logs cannot tell"))


class FileCount(BaseModel):
    count: int
    bytes: int


class Files(BaseModel):
    left: FileCount | None
    right: FileCount | None


class Versions(BaseModel):
    left: int | None
    right: int | None
    base: int | None


class Pagination(BaseModel):
    has_more: bool
    next_offset: str
    max_per_page: int
    results: int


DiffType = Literal["created", "dropped", "replaced", "changed", "none"]


class TableIds(BaseModel):
    """Each side's metaData.id: they differ when the table was dropped and created again."""

    left: str | None
    right: str | None


class TableDiff(BaseModel):
    """How a Delta table changed from the left ref to the right one."""

    diff_type: DiffType = Field(description="`replaced`: both refs have a table at the path, but not the same "
                                            "one (`table_ids`); every version of the right one is listed")
    results: list[Operation]
    history_truncated: bool
    schema_changes: list[SchemaChange]
    partition_columns: Pair | None
    properties_changed: dict[str, Pair]
    protocol_changed: Pair | None
    row_count: RowCount
    files: Files
    versions: Versions
    table_ids: TableIds
    table_path: str
    left_commit: str | None
    right_commit: str
    base_commit: str | None
    computed_seconds: float
    pagination: Pagination
    cached: bool


class ChangeCounts(BaseModel):
    added: int
    removed: int
    updated: int = Field(description="rows removed and added with the same key (only with `key`)")


class ChangedRow(BaseModel):
    id: int = Field(description="the row's position in the whole answer: `after` pages from it")
    change: Literal["added", "removed", "updated"]
    partition: str = Field(description="`column=value/...` of the file the row is in; empty when unpartitioned")
    values: dict[str, Any] = Field(description="the row (after the change, for an update); a column the side's "
                                               "schema does not have is absent")
    before: dict[str, Any] | None = Field(None, description="an update's row before the change")


class ChangedFile(BaseModel):
    path: str
    size: int
    rows: int = Field(description="rows of the file that are live (its deletion vector applied)")
    partition: dict[str, str | None]


class VectorChange(BaseModel):
    path: str
    rows_deleted: int = Field(description="rows the right side's deletion vector deletes and the left's does not")
    rows_restored: int


class RowDiffFiles(BaseModel):
    added: list[ChangedFile]
    removed: list[ChangedFile]
    deletion_vector_changed: list[VectorChange]


class RenamedColumn(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    from_: str = Field(alias="from", description="the column's name on the left")
    to: str = Field(description="its name on the right, under which rows show it")


class RowDiffColumns(BaseModel):
    left: list[str] = Field(description="the left side's columns, under the right side's names where they are "
                                        "the same column (column-mapping id, else name)")
    right: list[str]
    matched_on: list[str] = Field(description="the columns rows are matched on: the same column on both sides")
    renamed: list[RenamedColumn] = Field(default_factory=list, description="columns renamed from left to right")


class RowDiff(BaseModel):
    """Which rows of a Delta table differ between the left ref and the right one."""

    table_path: str
    left_commit: str | None
    right_commit: str
    key: list[str]
    columns: RowDiffColumns
    counts: ChangeCounts
    partitions: dict[str, ChangeCounts]
    files: RowDiffFiles
    rows: list[ChangedRow]
    engine: Literal["in-process", "spark"] = Field(description="where it was computed: in the worker, or as the "
                                                              "Spark job (above the row_diff limits)")
    rows_location: str | None = Field(description="the rows (Parquet, next to the exports; null when none "
                                                   "changed), which the API pages from")
    bytes_read: int
    computed_seconds: float
    pagination: Pagination
    cached: bool


class ChangedTable(BaseModel):
    name: str
    path: str
    source: Literal["descriptor", "detected"]
    diff_type: DiffType
    rows: RowCount
    files: Pair = Field(description="live files on each side (null where the table is absent)")
    schema_changed: bool
    operations: int = Field(description="Delta versions on the right not on the left")


class RefsOverview(BaseModel):
    """Every table that differs between two refs."""

    repository: str
    left_ref: str
    right_ref: str
    left_commit: str
    right_commit: str
    tables: list[ChangedTable]
    cached: bool


class Computing(BaseModel):
    """A result a worker is computing: ask again (the `Retry-After` header says when)."""

    status: Literal["computing"]
    retry_after_seconds: int
    progress: dict[str, Any] | None = Field(None, description="how far a long computation is (a Spark job's "
                                                              "tasks done), when known")


class Dataset(BaseModel):
    name: str
    type: Literal["delta"]
    path: str
    source: Literal["descriptor", "detected"]
    latest_version: int | None = None


class Datasets(BaseModel):
    repository: str
    ref: str
    results: list[Dataset]


class Health(BaseModel):
    status: Literal["ok"]


class Readiness(BaseModel):
    ready: bool
    checks: dict[str, bool]
    warnings: list[str]


class Keys(BaseModel):
    """lakeFS credentials, exchanged through lakeFS's login API; never stored."""

    access_key_id: str = Field(min_length=1)
    secret_access_key: str = Field(min_length=1)


class SignInCode(BaseModel):
    code: str = Field(min_length=1)


class Session(BaseModel):
    signed_in: bool
    expires_at: int | None = None


class SignInLink(BaseModel):
    code: str
    expires_in: int


def validation_message(errors: list[dict]) -> str:
    """The first of FastAPI's validation errors, as one line naming the parameter."""
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    where = ".".join(str(part) for part in first["loc"] if part not in ("query", "path", "body", "header"))
    return f"{where}: {first['msg']}" if where else first["msg"]


class CheckFinding(BaseModel):
    table: str = Field(description="the table's name (its descriptor's path when the descriptor itself is wrong)")
    path: str
    rule: Literal["rules", "schema", "rows", "readers", "keys", "columns"]
    found: str
    rows: list[dict[str, Any]] = Field(default_factory=list, description=(
        "some of the rows a keys or columns finding is about (at most 10, each column's value as the row diff "
        "has it): the written rows of the keys it names, the added or updated rows with a null or a value not "
        "accepted"))


class CheckReport(BaseModel):
    """The merge gate's answer for merging `source` into `destination` (README, "Merge gates"):
    `passed` is what lakeFS's pre-merge hook is answered; `findings` and `tables` hold only the tables
    the caller may read."""

    repository: str
    source: str
    destination: str
    source_commit: str
    destination_commit: str
    passed: bool
    tables: list[str]
    findings: list[CheckFinding]
