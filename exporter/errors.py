"""Errors a caller can catch. Each message says what is wrong and, where it can, what to do."""


class ExporterError(Exception):
    """Base class. `permanent` errors are not worth retrying: the input itself is wrong. An `outage`
    is a service the work needs being down: retried for a time, not a count (`tasks.retry`)."""

    permanent = True
    outage = False


class DescriptorError(ExporterError):
    """A table descriptor under `_lakefs_tables/` is unreadable or invalid."""

    def __init__(self, descriptor: str, problem: str):
        super().__init__(f"{descriptor}: {problem}")
        self.descriptor = descriptor  # its path, e.g. `_lakefs_tables/events.yaml`


class TableNotFound(ExporterError):
    """No Delta log where a table is expected."""


class CorruptLog(ExporterError):
    """A `_delta_log` file cannot be parsed, or versions have a gap."""


class UnsupportedTable(ExporterError):
    """The table uses a feature the exporter must refuse (catalog-managed, unknown reader feature)."""


class IcebergUnsupported(ExporterError):
    """A Delta table (a column's type, a feature) that Iceberg metadata cannot represent faithfully."""


class MissingDataFiles(ExporterError):
    """Objects an export needs (add files, their deletion vectors) are gone from the commit."""

    def __init__(self, table: str, paths: list[str]):
        self.table = table
        self.paths = sorted(paths)
        shown = ", ".join(self.paths[:20]) + (f" (+{len(self.paths) - 20} more)" if len(self.paths) > 20 else "")
        super().__init__(f"table {table!r}: {len(self.paths)} file(s) referenced by the log are missing: {shown}")


class PathIntoLakeFS(ExporterError):
    """A log path reads through lakeFS at a branch or tag: what it names changes after the commit."""


class PathOutsideRepository(ExporterError):
    """A log names by absolute path an object the service neither reads nor signs for its repository
    (`exporter.storage.scope`): outside the storage namespace, in its `_lakefs/`, or in another
    repository's. Refused before the object is read, so the message says nothing of it (size, existence)."""

    def __init__(self, path: str, namespace: str):
        shown = path if len(path) <= 300 else path[:300] + "..."
        super().__init__(f"log path {shown!r} is outside the objects this repository's logs may name: its storage "
                         f"namespace {namespace} (not its _lakefs/, nor another repository's namespace inside it) and "
                         "sharing.allowed_locations; the service reads and signs no other object for it")
        self.path, self.namespace = path, namespace


class ServiceUnavailable(ExporterError):
    """lakeFS or the object store could not be reached or answered 5xx/429: worth a retry."""

    permanent = False
    outage = True


class CredentialsRefused(ExporterError):
    """lakeFS answered 401 to the service's own credentials. It answers so to wrong keys, and also
    while it cannot authenticate anyone (seen right after lakeFS resumed from a freeze: "error
    authenticating request"): retried `tasks.retry.max_retries` times, then failed with the reason."""

    permanent = False


class LockLost(ExporterError):
    """The worker's lock on an export stopped being its own (it could not renew it, or it expired and
    another delivery took it): it stopped before its commit point, leaving the export to the holder."""

    permanent = False


class WorkerLost(ExporterError):
    """A task whose worker died on each of its last deliveries (killed for memory, past its hard time
    limit, or killed outright): it is not run again, since the next delivery would die the same way."""


class ActionError(ExporterError):
    """The lakeFS action installed in a repository (`_lakefs_actions/`) holds a field this service
    reads in a shape it cannot read (lakeFS accepts `branch_tables: [1]`, say)."""


class BadRequest(ExporterError):
    """lakeFS refused a request as malformed (HTTP 400): an invalid repository or ref name, say."""


class NotFound(ExporterError):
    """A repository, ref or object does not exist in lakeFS."""


class ConfigError(ExporterError):
    """The configuration is invalid; the message names the key."""


class BranchTableRefused(ExporterError):
    """An append a branch table must not take: the branch keeps no branch tables, or the commit is
    not on the branch's first-parent line (an event naming one branch with another's commit)."""


# Delta Sharing's refusals, by meaning: the sharing server maps them to the protocol's answers


class NotShared(ExporterError):
    """A share the recipient is not given, or a table its share does not offer."""


class ShareNotFound(ExporterError):
    """No share, schema or shared table by that name: or its repository, branch table or tag export is gone."""


class VersionOutOfRange(ExporterError):
    """A version, version range or timestamp outside the versions a shared table can answer for."""


class InvalidParameter(ExporterError):
    """A request a shared table cannot answer as asked: a timestamp not in ISO 8601, changes without a
    change data feed, arguments that exclude each other."""


class UnsupportedByClient(ExporterError):
    """The table needs what the client did not declare (reader features, the `delta` response format)."""


class UnshareableTable(ExporterError):
    """An export or branch table that cannot be shared as it is: its log has no start or no metaData,
    or a relative deletion vector (a path outside what sharing may presign: PathOutsideRepository)."""


# The Iceberg REST catalog's refusals, by meaning: the catalog maps them to the spec's error types


class NoSuchNamespace(NotFound):
    """No namespace by that name: not [repository, ref] of a repository and a branch or tag with exports."""


class NoSuchIcebergTable(NotFound):
    """No Iceberg table by that name at the ref's commit: no complete export, or one without Iceberg
    metadata. `table_paths`: the table paths the message tells about, when it names why (its readers'
    business only)."""

    def __init__(self, message: str, table_paths: tuple[str, ...] = ()):
        super().__init__(message)
        self.table_paths = table_paths


class SignatureRefused(ExporterError):
    """A request the catalog's S3 signer does not sign: not a GET or HEAD of one object its table's
    readers need (a data file its snapshots name, or a file of the table's own Iceberg location)."""


class CredentialsNotVended(ExporterError):
    """The catalog vends no credential for this request: vending is off, the caller may not read
    everything it would reach, the session is too short, or the object store has no STS (or refused)."""


def rebuilt(kind: str, message: str) -> ExporterError:
    """An error recorded by its class name and message (a worker's, read back by the API): the same
    class, so the one mapping to an HTTP answer applies; `ExporterError` for a name it does not know."""
    classes = {cls.__name__: cls for cls in _subclasses(ExporterError)}
    error = Exception.__new__(classes.get(kind, ExporterError))
    Exception.__init__(error, message)
    return error


def _subclasses(cls: type) -> list[type]:
    return [cls] + [sub for child in cls.__subclasses__() for sub in _subclasses(child)]
