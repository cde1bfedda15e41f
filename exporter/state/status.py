"""Export status, locks and counters in Redis, shared by the webhook service and the workers."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import redis

from exporter.errors import LockLost
from exporter.state.connection import PREFIX, connection
from exporter.threads import process_threads

STATES = ("queued", "running", "retrying", "done", "failed")
COMMIT_RECORD = "_commit"  # the commit-level record of a ref: which tables were queued, or why none
RECORD_TTL_SECONDS = 30 * 24 * 3600
# One atomic read-modify-write: facts merged into the record, retries counted, and a `done` record
# never changed back (a late or duplicate delivery must not overwrite a finished export). An empty
# state adds facts to an existing record and keeps its state.
_SET_STATE = """
local current = redis.call('hget', KEYS[1], ARGV[1])
local record = {retries = 0}
if current then record = cjson.decode(current) elseif ARGV[2] == '' then return 0 end
if record.state == 'done' and ARGV[2] ~= 'done' and ARGV[2] ~= '' then return 0 end
for k, v in pairs(cjson.decode(ARGV[3])) do record[k] = v end
if ARGV[2] ~= '' then record.state = ARGV[2] end
if ARGV[2] == 'retrying' then record.retries = (record.retries or 0) + 1 end
redis.call('hset', KEYS[1], ARGV[1], cjson.encode(record))
redis.call('expire', KEYS[1], ARGV[4])
return 1
"""
EXACT_IN_LUA = 2**53  # the Lua script's cjson holds numbers as doubles: exact up to here


def _exact(value):
    """`value` with every integer past `EXACT_IN_LUA` (an Iceberg snapshot id) as its decimal string,
    which the script keeps as it is: as a number it came back rounded to a double (another id). The
    API's models read such a string back as the integer."""
    if isinstance(value, dict):
        return {key: _exact(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_exact(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > EXACT_IN_LUA:
        return str(value)
    return value


# release or renew only our own lock, atomically
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('expire', KEYS[1], ARGV[2]) end return 0"


class HeldLock:
    """A lock: true when this caller holds it. `still_held()` raises LockLost once the lock expired
    (another caller may hold it now) or could not be renewed for its TTL: work under the lock calls
    it before each point after which a second writer would do harm. It asks Redis itself, so a
    holder that was paused (SIGSTOP, a long GC) past its TTL finds out before it writes."""

    def __init__(self, name: str, held: bool, owned: Callable[[], bool], ttl_seconds: int):
        self.name, self.held, self.lost = name, held, ""
        self.owned, self.ttl_seconds, self.renewed = owned, ttl_seconds, time.monotonic()

    def __bool__(self) -> bool:
        return self.held

    def still_held(self) -> None:
        self.confirm(self.owned, renewal=False)
        if self.lost:
            raise LockLost(f"{self.lost}: stopped before writing what marks the work done")

    def confirm(self, owned: Callable[[], bool], renewal: bool) -> None:
        """Ask Redis whether the lock is still this holder's (`renewal`: and extend it); it is lost
        when it is not, or when it could not be renewed for its TTL."""
        if self.lost:
            return
        try:
            if not owned():
                self.lost = f"the lock {self.name!r} expired and is no longer this worker's"
            elif renewal:
                self.renewed = time.monotonic()
        except redis.RedisError as exc:  # the next renewal tries again, until the lock may have expired
            if time.monotonic() - self.renewed >= self.ttl_seconds:
                self.lost = f"the lock {self.name!r} could not be renewed for {self.ttl_seconds} s ({exc})"


class StatusStore:
    def __init__(self, redis_url: str):
        self.redis = connection(redis_url)

    # ------------------------------------------------------------ per (ref, commit, table) status

    def _key(self, repository: str, commit_id: str) -> str:
        return f"{PREFIX}:export:{repository}:{commit_id}"

    def set_table(self, repository: str, ref: str, commit_id: str, table: str, state: str, **facts) -> bool:
        """Record a table's export state under its ref; False when refused: `done` is final."""
        assert state in STATES, state
        record = {**facts, "ref": ref, "table": table, "updated_at": round(time.time(), 3)}
        return bool(self.redis.eval(_SET_STATE, 1, self._key(repository, commit_id), f"{ref}/{table}", state,
                                    json.dumps(_exact(record)), RECORD_TTL_SECONDS))

    def add_facts(self, repository: str, ref: str, commit_id: str, table: str, **facts) -> bool:
        """Facts added to a table's existing record, its state and `updated_at` (when the state was
        set) kept; False when there is no record."""
        return bool(self.redis.eval(_SET_STATE, 1, self._key(repository, commit_id), f"{ref}/{table}", "",
                                    json.dumps(_exact(facts)), RECORD_TTL_SECONDS))

    def tables(self, repository: str, commit_id: str, ref: str | None = None) -> dict[str, dict[str, dict]]:
        """{ref: {table: record}} for one commit; `_commit` is the commit-level record of a ref."""
        return _by_ref(self.redis.hgetall(self._key(repository, commit_id)), ref)

    def tables_of_commits(self, repository: str, commit_ids: list[str]) -> list[dict[str, dict[str, dict]]]:
        """`tables()` of many commits in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for commit_id in commit_ids:
            pipe.hgetall(self._key(repository, commit_id))
        return [_by_ref(fields, None) for fields in pipe.execute()]

    def record(self, repository: str, ref: str, commit_id: str, table: str) -> dict | None:
        value = self.redis.hget(self._key(repository, commit_id), f"{ref}/{table}")
        return json.loads(value) if value else None

    # ------------------------------------------------------------ deliveries that never finished

    def started(self, work: str) -> int:
        """Count a start of `work`; the count is how many times it started without `finished`: a
        worker killed mid-task (out of memory, say) leaves it raised."""
        key = f"{PREFIX}:started:{work}"
        pipe = self.redis.pipeline()  # one round trip
        pipe.incr(key)
        pipe.expire(key, RECORD_TTL_SECONDS)
        count, _ = pipe.execute()
        return int(count)

    def finished(self, work: str) -> None:
        self.redis.delete(f"{PREFIX}:started:{work}")

    # ------------------------------------------------------------ locks

    @staticmethod
    def export_lock(repository: str, ref: str, commit_id: str, table: str) -> str:
        """The lock name of one export: whoever writes or discards its objects holds it."""
        return f"{repository}:{ref}:{commit_id}:{table}"

    @contextmanager
    def lock(self, name: str, ttl_seconds: int) -> Iterator[HeldLock]:
        """Yields a HeldLock, true when this caller holds the lock. It is renewed while held, so it
        frees itself within `ttl_seconds` of its holder dying, and is never taken over while its
        holder lives; `still_held()` raises LockLost once a renewal found it lost."""
        key, token = f"{PREFIX}:lock:{name}", uuid.uuid4().hex
        lock = HeldLock(name, bool(self.redis.set(key, token, nx=True, ex=ttl_seconds)),
                        lambda: self.redis.get(key) == token.encode(), ttl_seconds)
        stop = threading.Event()
        # on one of the process's kept threads: a thread started for each lock cost 180 us of CPU
        renewer = process_threads().submit(self._renew, lock, key, token, ttl_seconds, stop) if lock else None
        try:
            yield lock
        finally:
            if renewer is not None:
                stop.set()
                renewer.exception()  # waits for it to end, as a thread's join
                self.redis.eval(_RELEASE, 1, key, token)

    def _renew(self, lock: HeldLock, key: str, token: str, ttl_seconds: int, stop: threading.Event) -> None:
        while not lock.lost and not stop.wait(ttl_seconds / 3):
            lock.confirm(lambda: bool(self.redis.eval(_RENEW, 1, key, token, ttl_seconds)), renewal=True)

    # ------------------------------------------------------------ one-time codes (the diff page's sign-in links)

    def put_once(self, key: str, value: str, ttl_seconds: int) -> None:
        """Keep `value` under `key` for `ttl_seconds`, for one `take_once`."""
        self.redis.set(key, value, ex=ttl_seconds)

    def take_once(self, key: str) -> str | None:
        """The value under `key`, deleted as it is read: a second take finds nothing."""
        found = self.redis.getdel(key)
        return found.decode() if found else None

    # ------------------------------------------------------------ counters (rendered by GET /metrics)

    def count(self, metric: str, labels: dict[str, str] | None = None, amount: float = 1) -> None:
        self.tally([counted(metric, labels, amount)])

    def observe(self, metric: str, value: float, labels: dict[str, str] | None = None) -> None:
        self.tally(observed(metric, value, labels))

    def tally(self, counts: Iterable[Counted]) -> None:
        """Counters raised together, in one round trip (`counted`, `observed`)."""
        pipe = self.redis.pipeline(transaction=False)
        for series, amount in counts:
            pipe.hincrbyfloat(f"{PREFIX}:metrics", series, amount)
        pipe.execute()

    def set_gauge(self, metric: str, value: float, labels: dict[str, str] | None = None) -> None:
        """A value that is replaced, not summed (rendered as a gauge: its name ends in `GAUGE`)."""
        self.redis.hset(f"{PREFIX}:metrics", _series(metric + GAUGE, labels), value)

    def metrics(self) -> dict[str, float]:
        return {k.decode(): float(v) for k, v in self.redis.hgetall(f"{PREFIX}:metrics").items()}

    def ping(self) -> bool:
        try:
            return bool(self.redis.ping())
        except redis.RedisError:
            return False


GAUGE = "_current"


def _by_ref(fields: dict[bytes, bytes], ref: str | None) -> dict[str, dict[str, dict]]:
    """Records grouped by the ref and table each names: a field `<ref>/<table>` cannot be split back,
    since tags (`v1/rc`) and tables (`_lakefs_tables/x.yaml`, a refused descriptor's) hold `/` too."""
    found: dict[str, dict[str, dict]] = {}
    for value in fields.values():
        record = json.loads(value)
        if ref is None or record["ref"] == ref:
            found.setdefault(record["ref"], {})[record["table"]] = record
    return found


Counted = tuple[str, float]  # (series, amount)


def counted(metric: str, labels: dict[str, str] | None = None, amount: float = 1) -> Counted:
    return _series(metric, labels), amount


def observed(metric: str, value: float, labels: dict[str, str] | None = None) -> list[Counted]:
    """A summary: `_sum` and `_count` series, enough for rates and means."""
    return [(_series(metric + "_sum", labels), value), (_series(metric + "_count", labels), 1)]


def _series(metric: str, labels: dict[str, str] | None) -> str:
    if not labels:
        return metric
    inner = ",".join(f'{k}="{str(v).replace(chr(34), "")}"' for k, v in sorted(labels.items()))
    return f"{metric}{{{inner}}}"
