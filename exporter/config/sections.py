"""The configuration's sections: one model per capability, each key with its default."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

# The workers' task kinds (Celery task `lakefs_delta.<kind>`), for per-kind settings
TASK_KINDS = ("export_commit", "export_table", "export_iceberg", "precompute_diff", "compute_diff", "compute_row_diff", "compare_refs",
              "list_datasets", "append_branch_table", "catch_up", "prune")
# The tasks that compute an answer the API waits for hold their work while they run (a copy of the
# message delivered again meanwhile ends without running it twice): their time limits may pass the
# visibility timeout, for row diffs run as Spark jobs of an hour.
SOLE_DELIVERY_KINDS = ("compute_diff", "compute_row_diff", "compare_refs", "list_datasets")
# Task kinds whose time limit is not `tasks.time_limit_seconds` unless `tasks.time_limits` says so: a
# row diff covers its Spark job's attempts (`row_diff.spark`: 2 of 900 s, within its soft limit).
KIND_TIME_LIMITS = {"compute_row_diff": 2100}


READER_KINDS = ("user", "group")  # the lakeFS identities `iceberg.vended_credentials_readers` names


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
    """How a task retries a transient error: after a backoff that doubles from `backoff_seconds` up
    to `backoff_max_seconds`, each drawn at random below it (full jitter). An outage (lakeFS, the
    object store or Redis unreachable, or answering 5xx/429: a restart, a deploy) is retried until the
    backoffs are expected to cover `outage_seconds`, however long that takes in retries; any other
    transient error (the task's soft time limit, a lost lock) `max_retries` times."""

    max_retries: int = Field(5, ge=0)
    backoff_seconds: float = Field(2.0, gt=0)
    backoff_max_seconds: float = Field(60.0, gt=0)
    outage_seconds: float = Field(600.0, ge=0)

    def backoff(self) -> tuple[int, int]:
        """(factor, most) in whole seconds, as Celery's autoretry takes them."""
        return max(1, round(self.backoff_seconds)), max(1, round(self.backoff_max_seconds))

    def outage_retries(self) -> int:
        """The retries whose expected backoffs (half of each cap, under full jitter) add up to
        `outage_seconds`; never fewer than `max_retries`."""
        factor, most = self.backoff()
        retries, expected = 0, 0.0
        while expected < self.outage_seconds:
            expected += min(most, factor * 2 ** retries) / 2
            retries += 1
        return max(retries, self.max_retries)


class RetentionConfig(_Section):
    """Which per-commit exports `lakefs-delta prune` keeps; branch tables and tags' exports always stay."""

    keep_last: int = Field(20, ge=0)  # the newest first-parent commits of each branch
    keep_hours: float = Field(168.0, ge=0)  # exports written less than this long ago
    # The workers' beat runs prune over `catch_up.repositories` every this many seconds; 0: never
    # (prune deletes: it runs on a schedule only when asked to).
    interval_seconds: int = Field(0, ge=0)


class IcebergConfig(_Section):
    """Iceberg metadata beside each export (`<export>/metadata/`), for engines that read Iceberg, not
    Delta (DuckDB, PyIceberg, Spark without Delta), and beside each branch table. On by default: an
    export is complete without it (its status `done`, the Iceberg record `pending`), and a task of its
    own writes it after, behind the exports waiting (or, with `same_task`, the export's own task when
    it is light), so a commit storm's exports are as fresh with it as without (README, "Where each
    export's Iceberg table is written"). A table Iceberg cannot represent is still exported as
    Delta, with the reason in its status."""

    enabled: bool = True
    # Each Iceberg table is written by a task of its own, behind the exports waiting; with
    # `same_task`, a light one (it continues the table of the export it was built on, or a cold
    # export's table is small) is written in the export's own task instead, right after it, from what
    # the export holds: in a commit storm, Iceberg tables sooner and a tenth less CPU in all, but the
    # Delta exports later (README, "Where each export's Iceberg table is written").
    same_task: bool = False
    # The catalog's vended credentials (`X-Iceberg-Access-Delegation: vended-credentials`, for DuckDB,
    # Trino, iceberg-rust): a temporary read-only credential from the object store's STS. It reaches
    # every object lakeFS wrote for the table's repository (S3 cannot narrow it to a table's files:
    # exporter/storage/vended.py), so it is off unless asked for, and then vended only to whom may
    # read the whole repository: a service token naming it, or a lakeFS identity named here
    # (`user:ID` or `group:ID`, asked of lakeFS at each vend). Readers that sign (PyIceberg, Spark)
    # need none of it; everyone else is answered for signing.
    vended_credentials: bool = False
    vended_credentials_readers: tuple[str, ...] = ()
    vended_credentials_seconds: int = Field(3600, ge=900, le=43200)  # at most the caller's session's rest
    vended_credentials_role_arn: str = ""  # the role STS AssumeRole takes on AWS; MinIO needs none

    @field_validator("vended_credentials_readers")
    @classmethod
    def _identities(cls, readers: tuple[str, ...]) -> tuple[str, ...]:
        for reader in readers:
            kind, _, name = reader.partition(":")
            if kind not in READER_KINDS or not name:
                raise ValueError(f"{reader!r} is not a lakeFS identity: name each whole-repository reader as "
                                 "user:ID or group:ID")
        return readers


class RowDiffSparkConfig(_Section):
    """The Spark job a row diff runs as when its differing data is above `row_diff.max_bytes`."""

    master: str = ""  # e.g. local[2], spark://host:7077, yarn; empty: no job, such a diff is refused
    packages: str = "org.apache.hadoop:hadoop-aws:3.5.0"  # S3A, for the data files' s3:// addresses
    ivy_dir: str = ""  # where Spark caches those packages (empty: Spark's default)
    # The jars themselves, as Spark's `spark.jars` (comma-separated local paths or URLs): when set,
    # `packages` is not resolved: no Maven access from the worker's host, and no Ivy resolution at
    # each job's start (about 1.8 s of CPU of an 8.2 s start here). With a `local` master, local jars
    # go on the driver's class path instead (`exporter.diff.rows.spark.jar_settings`)
    jars: str = ""
    # The job's own time budget: past it the job is stopped and the diff fails for good with the
    # reason (never started again from nothing). The `compute_row_diff` task's time limit
    # (`tasks.time_limits`) must cover `attempts` of it: a config where it cannot is refused.
    time_limit_seconds: int = Field(900, ge=60)
    # A job whose JVM died (killed, out of memory, a lost driver) is run this many times in all, each
    # from nothing; then the diff fails for good with the reason, never looping.
    attempts: int = Field(2, ge=1)
    # The driver's heap (`spark.driver.memory`): a `local[...]` master runs the executors in it too.
    driver_memory: str = "2g"
    # Adaptive execution's advisory partition size; the partitions themselves follow the rows read
    # (exporter.diff.rows.spark.shuffle_partitions): the driver holds one partition at a time.
    partition_bytes: str = "16m"


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
    # Objects a table's log may name by absolute path, besides the repository's storage namespace
    # (e.g. the bucket of data lakeFS imported): URI prefixes. The server presigns them for
    # recipients, and the row diff and the Iceberg step read them (`exporter.storage.scope`).
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
    """Which rows changed: in the worker up to the limits below, above them a Spark job (or a refusal)."""

    # Above this many bytes of files to read the row diff runs as the Spark job, or (no
    # `spark.master`) is refused with a message saying so, rather than run the worker out of memory.
    max_bytes: int = Field(512 * 2**20, ge=0)
    # ... or above this many rows to read: counted from the files' `numRecords` before reading, and
    # again while reading (files without stats) ...
    max_rows: int = Field(2_000_000, ge=0)
    # ... or once the rows read hold this much memory (Arrow; the worker's peak is a few times it).
    max_memory_mib: int = Field(512, ge=1)
    # After an export, the row diff against the parent is precomputed when it reads at most this much.
    precompute_bytes: int = Field(64 * 2**20, ge=0)
    spark: RowDiffSparkConfig = RowDiffSparkConfig()


class ChecksConfig(_Section):
    """The merge gates (`/webhooks/lakefs/checks`): a check answers within `timeout_seconds` (below
    the hook's own timeout in the action, 1 minute by default); one that cannot finish (too slow,
    lakeFS or the store unreachable) blocks, unless `pass_when_unfinished`."""

    timeout_seconds: float = Field(50.0, gt=0)
    pass_when_unfinished: bool = False


class CatchUpConfig(_Section):
    """Catch-up (lakeFS never retries a post-hook): on by default, in every worker started with beat."""

    repositories: tuple[str, ...] = ()  # empty: every repository the service's lakeFS user can read
    branches: tuple[str, ...] = ()  # branch patterns; empty: those the installed action names
    interval_seconds: int = Field(300, ge=1)
    depth: int = Field(50, ge=1)  # newest first-parent commits per branch (and newest tags) checked
    max_per_run: int = Field(100, ge=1)  # commits queued by one run at most; the next run takes the rest
    # An export queued, running or retrying is its delivery's for this long after its record last
    # changed; only then does catch-up take the message for lost and queue the export again.
    in_flight_seconds: int = Field(3600, ge=1)


class TasksConfig(_Section):
    """How the workers' tasks are delivered, limited in time, locked and retried."""

    time_limit_seconds: int = Field(240, ge=5)  # a task is stopped after this; below the visibility timeout
    # Per task kind (`export_table`, `compute_row_diff`, ...: the name after `lakefs_delta.`), in
    # place of `time_limit_seconds`; each below the visibility timeout too, but for the kinds in
    # SOLE_DELIVERY_KINDS (a row diff's Spark job may need an hour).
    time_limits: tuple[tuple[str, int], ...] = ()  # (kind, seconds); YAML: a mapping
    visibility_timeout_seconds: int = 300  # an unacknowledged task (worker killed) is redelivered after this
    lock_ttl_seconds: int = Field(30, ge=5)  # a dead worker's per-table lock frees itself (renewed while alive)
    max_deliveries: int = Field(3, ge=1)  # a task whose worker died this many times is failed, not looped
    # An export whose retries ran out this many times (each round queued again by catch-up or by an
    # event delivered again) is failed for good, with the last reason: catch-up leaves it.
    max_rounds: int = Field(3, ge=1)
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
            if seconds < 5 or (seconds >= self.visibility_timeout_seconds and kind not in SOLE_DELIVERY_KINDS):
                raise ValueError(f"time_limits.{kind} ({seconds}) must be at least 5 and below "
                                 f"visibility_timeout_seconds ({self.visibility_timeout_seconds}), or a running "
                                 f"task is delivered twice (only {', '.join(SOLE_DELIVERY_KINDS)} may run longer)")
        return self

    def time_limit(self, kind: str) -> int:
        """The hard time limit of a task kind (`export_table`, or `lakefs_delta.export_table`): its
        `time_limits` entry, else its default (KIND_TIME_LIMITS), else `time_limit_seconds`."""
        kind = kind.removeprefix("lakefs_delta.")
        return dict(self.time_limits).get(kind, KIND_TIME_LIMITS.get(kind, self.time_limit_seconds))


def soft_time_limit(hard: int) -> int:
    """The soft limit raises inside the task (which then retries with the reason) before the hard one kills it."""
    return max(hard - max(hard // 10, 3), 1)


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


def _plus_list(text: str) -> list[str]:
    """`a+b+c` (how a list inside one environment value is written) -> [a, b, c]."""
    return [item for item in text.split("+") if item]
