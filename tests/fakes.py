"""The unit tests' one in-memory object store and one fake lakeFS client: for tests of pure logic.

`MemoryStore` answers as `exporter.storage.objectstore.ObjectStore` does (the same relative names,
URIs, listings and errors) over a dict, and records what it was asked. `FakeLakeFS` answers as
`exporter.lakefs.client.LakeFS` does over repositories, branches, commits and tags kept in memory;
the bytes of its objects live in a `MemoryStore` at their physical addresses, as lakeFS's do in
the object store. Integration tests use the real ones against real services.
"""

from __future__ import annotations

import hashlib
import itertools
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from exporter.delta.paths import physical_uri
from exporter.errors import ExporterError, NotFound
from exporter.lakefs.client import PAGE_SIZE, Commit, LakeFS, ObjectStats
from exporter.lakefs.lake import Lake, ObjectStores
from exporter.storage.objectstore import Upload, split_uri

# ---------------------------------------------------------------------------- the object store


@dataclass
class _Object:
    body: bytes
    modified: float  # epoch seconds


class _Buckets:
    """What every view of one memory store shares: the objects of every bucket, and a clock."""

    def __init__(self):
        self.objects: dict[tuple[str, str], _Object] = {}  # (bucket, key) -> object
        self.views: dict[str, MemoryStore] = {}  # storage namespace -> its store
        self.clock = 1_700_000_000.0

    def write(self, bucket: str, key: str, body: bytes) -> None:
        self.clock += 1  # modification times increase with every write, as a reader of mtimes expects
        self.objects[(bucket, key)] = _Object(bytes(body), self.clock)

    def read(self, uri: str) -> bytes:
        found = self.objects.get(split_uri(uri))
        if found is None:
            raise NotFound(f"object store: {uri} does not exist")
        return found.body


class MemoryStore:
    """An object store under one storage namespace, in memory: `ObjectStore`'s calls and errors.

    `objects` seeds it: names relative to the namespace, or absolute `s3://bucket/key` URIs.
    `at(namespace)` is the store of another namespace over the same buckets: a `Lake`'s stores
    (`lake_of`), as `ObjectStores` is in product code. What it was asked is recorded:
    `written` (relative names, in order), `deleted` (one list per delete call), `reads` (URIs read
    whole) and `range_reads` ((URI, start, end))."""

    def __init__(self, objects: Mapping[str, bytes] | None = None, namespace: str = "s3://bucket",
                 _buckets: _Buckets | None = None):
        self.namespace = namespace.rstrip("/")
        self.bucket, self.root = split_uri(self.namespace)
        self._buckets = _buckets or _Buckets()
        self._buckets.views.setdefault(self.namespace, self)
        self.written: list[str] = []
        self.deleted: list[list[str]] = []
        self.reads: list[str] = []
        self.range_reads: list[tuple[str, int, int]] = []
        self.listings: list[tuple[str, str, str]] = []  # (relative, start_after, stop_at) of each listing
        for name, body in (objects or {}).items():
            bucket, key = split_uri(name) if "://" in name else (self.bucket, self.key(name))
            self._buckets.write(bucket, key, body)

    def at(self, namespace: str) -> MemoryStore:
        """The store of `namespace` over the same buckets (one per namespace, so its records add up)."""
        namespace = namespace.rstrip("/")
        return self._buckets.views.get(namespace) or MemoryStore(namespace=namespace, _buckets=self._buckets)

    @property
    def objects(self) -> dict[str, bytes]:
        """Every object under the namespace, by relative name."""
        return {name: self._buckets.objects[(self.bucket, self.key(name))].body for name in self.list_keys("")}

    # ------------------------------------------------------------ ObjectStore's calls

    def key(self, relative: str) -> str:
        return f"{self.root}/{relative}" if self.root else relative

    def uri(self, relative: str) -> str:
        return physical_uri(self.address(relative))

    def address(self, relative: str) -> str:
        return f"s3://{self.bucket}/{self.key(relative)}"

    def put(self, relative: str, body: bytes, content_type: str = "application/octet-stream") -> None:
        self._buckets.write(self.bucket, self.key(relative), body)
        self.written.append(relative)

    def copy(self, source_relative: str, relative: str) -> None:
        self._buckets.write(self.bucket, self.key(relative), self._body(source_relative))
        self.written.append(relative)

    def copy_uri(self, source_uri: str, relative: str) -> None:
        self._buckets.write(self.bucket, self.key(relative), self._buckets.read(source_uri))
        self.written.append(relative)

    def get(self, relative: str) -> bytes:
        self.reads.append(self.uri(relative))
        return self._body(relative)

    def _body(self, relative: str) -> bytes:
        """By name, not through the encoded URI (as `ObjectStore` does)."""
        found = self._buckets.objects.get((self.bucket, self.key(relative)))
        if found is None:
            raise NotFound(f"object store: {self.uri(relative)} does not exist")
        return found.body

    def get_uri(self, uri: str) -> bytes:
        self.reads.append(uri)
        return self._buckets.read(uri)

    def get_range(self, uri: str, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        self.range_reads.append((uri, start, end))
        return self._buckets.read(uri)[start:end]

    def upload(self, relative: str) -> MemoryUpload:
        return MemoryUpload(self, relative)

    def exists(self, relative: str) -> bool:
        return (self.bucket, self.key(relative)) in self._buckets.objects

    def head_uri(self, uri: str) -> bool:
        return split_uri(uri) in self._buckets.objects

    def list_keys(self, relative: str) -> list[str]:
        return list(self.list_sizes(relative))

    def list_sizes(self, relative: str) -> dict[str, int]:
        return {name: size for name, size, _ in self.list_objects(relative)}

    def list_objects(self, relative: str, start_after: str = "", stop_at: str = "") -> list[tuple[str, int, float]]:
        self.listings.append((relative, start_after, stop_at))
        prefix, root, after = self.key(relative), self.key(""), self.key(start_after) if start_after else ""
        stop = self.key(stop_at) if stop_at else None
        return [(key[len(root):], len(found.body), found.modified)
                for (bucket, key), found in sorted(self._buckets.objects.items())
                if bucket == self.bucket and key.startswith(prefix) and key > after and (stop is None or key < stop)]

    def has_objects(self, relative: str) -> bool:
        prefix = self.key(relative)
        return any(bucket == self.bucket and key.startswith(prefix) for bucket, key in self._buckets.objects)

    def list_folders(self, relative: str) -> list[str]:
        prefix = self.key(relative)
        return sorted({key[len(prefix):].split("/", 1)[0] for bucket, key in self._buckets.objects
                       if bucket == self.bucket and key.startswith(prefix) and "/" in key[len(prefix):]})

    def delete(self, relatives: list[str]) -> None:
        for start in range(0, len(relatives), 1000):  # one call per 1000, as DeleteObjects takes
            batch = list(relatives[start:start + 1000])
            self.deleted.append(batch)
            for relative in batch:
                self._buckets.objects.pop((self.bucket, self.key(relative)), None)


class MemoryUpload:
    """`Upload` in memory: the object appears at `complete()`, never before; `abort()` leaves nothing."""

    PART_SIZE = Upload.PART_SIZE

    def __init__(self, store: MemoryStore, relative: str):
        self.store, self.relative = store, relative
        self.size = 0
        self._buffer = bytearray()
        self._copy_source: str | None = None

    def write(self, data: bytes) -> int:
        self._buffer += data
        self.size += len(data)
        return len(data)

    def copy_of(self, source_uri: str, size: int) -> None:
        self.abort()
        self._copy_source, self.size = source_uri, size

    def finish_writing(self) -> None:
        pass

    def complete(self) -> None:
        if self._copy_source is not None:
            self.store.copy_uri(self._copy_source, self.relative)
        else:
            self.store.put(self.relative, bytes(self._buffer))
        self._buffer = bytearray()

    def abort(self) -> None:
        self._buffer = bytearray()


def lake_of(config, lakefs: FakeLakeFS | LakeFS) -> Lake:
    """What a test passes the library: `lakefs` and its object stores, the in-memory ones of a fake
    lakeFS (`FakeLakeFS.store`), else those the configuration names (a real lakeFS's)."""
    return Lake(config, lakefs, lakefs.store if isinstance(lakefs, FakeLakeFS) else ObjectStores(config))


# ---------------------------------------------------------------------------- lakeFS


@dataclass(frozen=True)
class _Entry:
    physical_address: str
    size_bytes: int
    mtime: int


@dataclass
class _Repository:
    storage_namespace: str
    default_branch: str
    commits: dict[str, Commit] = field(default_factory=dict)
    trees: dict[str, dict[str, _Entry]] = field(default_factory=dict)  # commit id -> path -> entry
    branches: dict[str, str] = field(default_factory=dict)  # name -> head commit id
    staged: dict[str, dict[str, _Entry | None]] = field(default_factory=dict)  # branch -> path -> entry (None: deleted)
    tags: dict[str, str] = field(default_factory=dict)


class FakeLakeFS:
    """`LakeFS`'s calls over repositories kept in memory, its objects' bytes in `store`.

    Like lakeFS: a new repository has one parentless commit; reading a branch sees its uncommitted
    changes; commit ids are 64 hex digits; a missing repository, ref or object is `NotFound`.
    `calls` counts requests as the real client does (one per listing page); `requests` records
    each (method, arguments...). `unavailable[method] = error` makes that method raise `error`."""

    def __init__(self, store: MemoryStore | None = None, endpoint: str = "http://lakefs.example:8000"):
        self.store = store or MemoryStore()
        self.endpoint = endpoint
        self.calls = 0
        self.requests: list[tuple] = []
        self.unavailable: dict[str, ExporterError] = {}
        self._repositories: dict[str, _Repository] = {}
        self._serial = itertools.count(1)
        self._salt = uuid.uuid4().hex  # ids unique across fakes, as lakeFS's are: a process keeps commits by id

    # ------------------------------------------------------------ reading

    def storage_namespace(self, repository: str) -> str:
        return self._repository("storage_namespace", repository).storage_namespace

    def default_branch(self, repository: str) -> str:
        return self._repository("default_branch", repository).default_branch

    def commit(self, repository: str, ref: str) -> Commit:
        found = self._repository("commit", repository, ref)
        return found.commits[self._commit_id(found, repository, ref)]

    def list_objects(self, repository: str, ref: str, prefix: str, delimiter: str | None = None,
                     after: str = "") -> Iterator[ObjectStats]:
        for page in self.object_pages(repository, ref, prefix, delimiter, after):
            yield from page

    def object_pages(self, repository: str, ref: str, prefix: str, delimiter: str | None = None,
                     after: str = "") -> Iterator[list[ObjectStats]]:
        found = self._repository("list_objects", repository, ref, prefix)  # a generator: called when read, as the client's
        tree = self._tree(found, repository, ref)
        entries: dict[str, ObjectStats] = {}
        for path, entry in sorted(tree.items()):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix):]
            if delimiter and delimiter in rest:
                folder = prefix + rest.split(delimiter, 1)[0] + delimiter
                entries.setdefault(folder, ObjectStats(folder, "common_prefix"))
            else:
                entries[path] = ObjectStats(
                    path, "object", entry.physical_address,
                    hashlib.md5(self.store._buckets.read(entry.physical_address)).hexdigest(), entry.size_bytes,
                    entry.mtime)
        listed = [entries[path] for path in sorted(entries) if path > after]
        for start in range(0, max(len(listed), 1), PAGE_SIZE):
            self.calls += start > 0  # one call per page of 1000, as each is read (the first counted above)
            yield listed[start:start + PAGE_SIZE]

    def physical_address(self, repository: str, ref: str, path: str) -> str | None:
        found = self._repository("physical_address", repository, ref, path)
        entry = self._tree(found, repository, ref).get(path)
        return None if entry is None else entry.physical_address

    def get_object(self, repository: str, ref: str, path: str) -> bytes:
        found = self._repository("get_object", repository, ref, path)
        entry = self._tree(found, repository, ref).get(path)
        if entry is None:
            raise NotFound(f"lakeFS: get object {repository}@{ref}/{path}: not found")
        return self.store._buckets.read(entry.physical_address)

    def diff(self, repository: str, left: str, right: str, prefix: str = "", diff_type: str = "two_dot",
             amount: int = PAGE_SIZE) -> Iterator[dict]:
        found = self._repository("diff", repository, left, right, prefix)  # a generator, as the client's
        if diff_type == "three_dot":
            left = self._merge_base(found, repository, left, right)
        before, after = self._tree(found, repository, left), self._tree(found, repository, right)
        changes = []
        for path in sorted(set(before) | set(after)):
            if not path.startswith(prefix) or before.get(path) == after.get(path):
                continue
            kind = "added" if path not in before else "removed" if path not in after else "changed"
            changes.append({"path": path, "path_type": "object", "type": kind,
                            "size_bytes": (after.get(path) or before[path]).size_bytes})
        if amount < PAGE_SIZE:  # one short page, as the client asks it
            yield from changes[:amount]
            return
        self.calls += max(1, -(-len(changes) // PAGE_SIZE)) - 1  # one call per page of 1000
        yield from changes

    def merge_base(self, repository: str, source: str, destination: str) -> str:
        found = self._repository("merge_base", repository, source, destination)
        return self._merge_base(found, repository, source, destination)

    def log(self, repository: str, ref: str, amount: int = 100, first_parent: bool = False) -> list[Commit]:
        found = self._repository("log", repository, ref)
        head = self._commit_id(found, repository, ref)
        if first_parent:
            return self._first_parents(found, head)[:amount]
        seen, frontier = {}, [head]
        while frontier:
            commit = found.commits[frontier.pop()]
            if commit.id not in seen:
                seen[commit.id] = commit
                frontier += commit.parents
        order = {commit_id: position for position, commit_id in enumerate(found.commits)}
        return sorted(seen.values(), key=lambda c: (c.creation_date, order[c.id]), reverse=True)[:amount]

    def first_parent_line(self, repository: str, branch: str, stop_at: str | None = None,
                          limit: int = PAGE_SIZE) -> tuple[list[Commit], bool]:
        found = self._repository("first_parent_line", repository, branch, stop_at)
        line = []
        for commit in self._first_parents(found, self._commit_id(found, repository, branch)):
            if len(line) == limit:
                return line, False
            line.append(commit)
            if commit.id == stop_at:
                break
        return line, True

    def list_repositories(self) -> list[str]:
        return list(self.storage_namespaces())

    def storage_namespaces(self) -> dict[str, str]:
        self._request("list_repositories")
        return {name: self._repositories[name].storage_namespace for name in sorted(self._repositories)}

    def list_branches(self, repository: str) -> list[str]:
        return sorted(self._repository("list_branches", repository).branches)

    def list_tags(self, repository: str, amount: int | None = None) -> list[tuple[str, str]]:
        tags = sorted(self._repository("list_tags", repository).tags.items())
        return tags if amount is None else tags[:amount]

    # ------------------------------------------------------------ writing

    def create_repository(self, name: str, storage_namespace: str, default_branch: str = "main") -> None:
        self._request("create_repository", name, storage_namespace)
        if name in self._repositories:
            raise ExporterError(f"lakeFS answered 409 to create repository {name}: repository already exists")
        repository = self._repositories[name] = _Repository(storage_namespace.rstrip("/"), default_branch)
        first = self._new_commit(repository, name, [], "Repository created", {}, {}, None)
        repository.branches[default_branch] = first
        repository.staged[default_branch] = {}

    def create_branch(self, repository: str, name: str, source: str) -> None:
        found = self._repository("create_branch", repository, name, source)
        found.branches[name] = self._commit_id(found, repository, source)
        found.staged[name] = {}

    def create_tag(self, repository: str, tag: str, ref: str) -> str:
        found = self._repository("create_tag", repository, tag, ref)
        found.tags[tag] = self._commit_id(found, repository, ref)
        return found.tags[tag]

    def upload_object(self, repository: str, branch: str, path: str, content: bytes) -> None:
        found = self._repository("upload_object", repository, branch, path)
        self._branch(found, repository, branch)
        address = f"{found.storage_namespace}/data/{uuid.uuid4().hex}"  # like lakeFS: a new object, never reused
        bucket, key = split_uri(address)
        self.store._buckets.write(bucket, key, content)
        found.staged[branch][path] = _Entry(address, len(content), int(self.store._buckets.clock))

    def delete_object(self, repository: str, branch: str, path: str) -> None:
        found = self._repository("delete_object", repository, branch, path)
        if path not in self._tree(found, repository, branch):
            raise NotFound(f"lakeFS: delete {repository}/{branch}/{path}: not found")
        found.staged[branch][path] = None

    def commit_branch(self, repository: str, branch: str, message: str, metadata: dict[str, str] | None = None,
                      creation_date: int | None = None) -> str:
        """`creation_date` (epoch seconds; now by default) is the fake's own, for tests of age."""
        found = self._repository("commit_branch", repository, branch, message)
        tree = self._tree(found, repository, branch)
        found.branches[branch] = self._new_commit(found, repository, [found.branches[branch]], message,
                                                  metadata or {}, tree, creation_date)
        found.staged[branch] = {}
        return found.branches[branch]

    def merge(self, repository: str, source: str, destination: str, message: str = "") -> str:
        found = self._repository("merge", repository, source, destination)
        source_id, destination_id = self._commit_id(found, repository, source), found.branches[destination]
        base = found.trees[self._merge_base(found, repository, source_id, destination_id)]
        tree = dict(found.trees[destination_id])
        for path in set(base) | set(found.trees[source_id]):
            theirs = found.trees[source_id].get(path)
            if theirs == base.get(path):
                continue
            if theirs is None:
                tree.pop(path, None)
            else:
                tree[path] = theirs
        found.branches[destination] = self._new_commit(found, repository, [destination_id, source_id],
                                                       message or f"Merge '{source}' into '{destination}'", {},
                                                       tree, None)
        return found.branches[destination]

    def commit_files(self, repository: str, branch: str, files: Mapping[str, bytes | None], message: str = "commit",
                     creation_date: int | None = None) -> str:
        """Upload (bytes) or delete (None) each of `files` on `branch`, then commit: the commit's id."""
        for path, content in files.items():
            if content is None:
                self.delete_object(repository, branch, path)
            else:
                self.upload_object(repository, branch, path, content)
        return self.commit_branch(repository, branch, message, creation_date=creation_date)

    def reset_branch(self, repository: str, branch: str, ref: str) -> None:
        """Point `branch` at `ref` (lakeFS's hard reset): the fake's own, for tests of a moved branch."""
        found = self._repository("reset_branch", repository, branch, ref)
        found.branches[branch] = self._commit_id(found, repository, ref)
        found.staged[branch] = {}

    # ------------------------------------------------------------ the model

    def _request(self, method: str, *arguments) -> None:
        self.calls += 1
        self.requests.append((method, *arguments))
        if method in self.unavailable:
            raise self.unavailable[method]

    def _repository(self, method: str, repository: str, *arguments) -> _Repository:
        self._request(method, repository, *arguments)
        if repository not in self._repositories:
            raise NotFound(f"lakeFS: {method} {repository}: repository not found")
        return self._repositories[repository]

    def _commit_id(self, found: _Repository, repository: str, ref: str) -> str:
        commit_id = found.branches.get(ref) or found.tags.get(ref) or (ref if ref in found.commits else None)
        if commit_id is None:
            raise NotFound(f"lakeFS: {repository}@{ref}: ref not found")
        return commit_id

    def _branch(self, found: _Repository, repository: str, branch: str) -> None:
        if branch not in found.branches:
            raise NotFound(f"lakeFS: {repository}/{branch}: branch not found")

    def _tree(self, found: _Repository, repository: str, ref: str) -> dict[str, _Entry]:
        tree = dict(found.trees[self._commit_id(found, repository, ref)])
        for path, entry in found.staged.get(ref, {}).items():  # a branch reads its uncommitted changes
            if entry is None:
                tree.pop(path, None)
            else:
                tree[path] = entry
        return tree

    def _new_commit(self, found: _Repository, repository: str, parents: list[str], message: str,
                    metadata: dict[str, str], tree: dict[str, _Entry], creation_date: int | None) -> str:
        commit_id = hashlib.sha256(f"{self._salt}/{repository}/{next(self._serial)}/{message}".encode()).hexdigest()
        found.commits[commit_id] = Commit(commit_id, parents, int(time.time()) if creation_date is None else creation_date,
                                          message, dict(metadata))
        found.trees[commit_id] = dict(tree)
        return commit_id

    def _first_parents(self, found: _Repository, head: str) -> list[Commit]:
        line, commit_id = [], head
        while commit_id is not None:
            commit = found.commits[commit_id]
            line.append(commit)
            commit_id = commit.parents[0] if commit.parents else None
        return line

    def _merge_base(self, found: _Repository, repository: str, source: str, destination: str) -> str:
        ancestors, frontier = set(), [self._commit_id(found, repository, destination)]
        while frontier:
            commit_id = frontier.pop()
            if commit_id not in ancestors:
                ancestors.add(commit_id)
                frontier += found.commits[commit_id].parents
        queue = [self._commit_id(found, repository, source)]
        for commit_id in queue:  # breadth first: the nearest common ancestor
            if commit_id in ancestors:
                return commit_id
            queue += found.commits[commit_id].parents
        raise NotFound(f"lakeFS: merge base {repository} {source}/{destination}: no common ancestor")
