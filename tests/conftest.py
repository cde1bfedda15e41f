"""Fixtures. Integration fixtures bring the real stack up once per session (or reuse a running one)
and give each test its own lakeFS repository on a fresh storage namespace.

An integration test never skips because a service is missing: it errors, so CI cannot go green
without having run it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# `scripts/test.sh` runs the integration tests in several processes (pytest-xdist), each against a
# stack of its own (`devtools.parallel`): process gw<N>'s
_PROCESS = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
if _PROCESS:  # before anything reads them: `devtools.stack` reads its directory and ports on import
    from devtools.parallel import stack_of_process

    os.environ.update(stack_of_process(_PROCESS, dict(os.environ)))
    from devtools import stack as _stack

    os.environ.update(_stack.load_state().environment())  # not the first process's, inherited
ARTIFACTS = ROOT / "tests" / "artifacts" / (f"process-{_PROCESS}" if _PROCESS else "")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Every test is `unit` or `integration`: CI selects by marker (`scripts/test.sh`), so a test with
    neither would be left out of both runs without a word. Checked before `-m` deselects anything."""
    unmarked = [item.nodeid for item in items
                if not (item.get_closest_marker("unit") or item.get_closest_marker("integration"))]
    if unmarked:
        raise pytest.UsageError("tests marked neither unit nor integration (CI would run none of them): "
                                + ", ".join(unmarked))
    ranks = {name: rank for rank, name in enumerate(SLOWEST_MODULES)}
    items.sort(key=lambda item: ranks.get(item.path.stem, len(ranks)))  # stable: each module's own order kept


# The slowest integration modules, slowest first, collected first: with several test processes
# (`scripts/test.sh`, which turns off xdist's own reordering by test count: it had put the 819 s
# benchmark smoke test, one test, last, alone at the end) each module goes to whichever process is
# free, and one of these started last would run alone at the end. The order follows the modules'
# seconds in a CI run (`tests/artifacts/integration.xml`).
SLOWEST_MODULES = ("test_row_diff", "test_bench_smoke", "test_export_trust", "test_events", "test_branch_tables",
                   "test_every_engine", "test_export_scale", "test_export_delta_tables", "test_demo",
                   "test_foreign_writers", "test_iceberg_exports", "test_delta_sharing", "test_history_diff",
                   "test_webhooks", "test_others_tables", "test_branch_table_seams", "test_where_work_meets")


# The integration modules whose tests mostly wait (on workers, retries, timeouts, a browser, other
# engines' processes) rather than compute: in a CI run here `test_events` took 256 s and 43 s of
# CPU, `test_every_engine` 98 s and 22 s, `test_demo` 48 s and 12 s, `test_webhooks` 44 s. With
# three test processes the last one runs these first (`WaitersApart`), then what is left of the
# rest, while the other two run the rest on the machine's two cores. The benchmark smoke
# test with them too (its Spark jobs are JVMs of their own) made the run no shorter: 900 s against
# 846 s without it.
WAITING_MODULES = ("test_events", "test_every_engine", "test_webhooks", "test_demo", "test_merge_gates",
                   "test_packaging")


def pytest_xdist_make_scheduler(config, log):
    """With `--dist loadfile` and three processes or more, the last process takes the waiting
    modules first, then what is left of the rest; the others take the rest in collection order (the
    slowest first), and a waiting module only if the last process is gone (a crash: its modules are
    queued again). Each module runs whole in one process. In a CI run where the last process took
    the waiting modules alone, it ended 430 s before the others (730 s of tests against 1,160 s)."""
    processes = config.getoption("numprocesses")
    if config.getoption("dist") != "loadfile" or not isinstance(processes, int) or processes < 3:
        return None
    from xdist.scheduler import LoadFileScheduling

    class WaitersApart(LoadFileScheduling):
        def _next_scope(self, node) -> str | None:
            waiter = f"gw{processes - 1}"
            waiting = [scope for scope in self.workqueue if Path(scope).stem in WAITING_MODULES]
            rest = [scope for scope in self.workqueue if scope not in waiting]
            if node.gateway.id == waiter:  # its own first; then, not to idle while the others end, the rest
                return (waiting or rest or [None])[0]
            if rest:
                return rest[0]
            waiter_runs = any(other.gateway.id == waiter and not other.shutting_down for other in self.nodes)
            return None if waiter_runs or not waiting else waiting[0]  # a waiting module only if its process is gone

        def _assign_work_unit(self, node) -> None:
            scope = self._next_scope(node)
            if scope is not None:
                self.workqueue.move_to_end(scope, last=False)  # the unit the base class takes next
                super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            if self.workqueue and not node.shutting_down and self._next_scope(node) is None:
                node.shutdown()  # nothing of its kind left: it ends after what it holds
                return
            super()._reschedule(node)

    return WaitersApart(config, log)


@pytest.fixture(scope="session")
def stack_env() -> dict[str, str]:
    from devtools import stack

    state = stack.up()
    env = state.environment()
    os.environ.update(env)  # the config loader and child processes read these
    return env


@pytest.fixture(scope="session")
def config(stack_env):
    from exporter.config import load_config

    return load_config()


@pytest.fixture(scope="session")
def lakefs(stack_env):
    from exporter.config import load_config
    from exporter.lakefs.client import LakeFS

    return LakeFS(load_config().lakefs)  # not from `config`, which a module may override


@pytest.fixture
def repository(lakefs, stack_env, request) -> str:
    """A new repository on its own storage namespace, named after the test."""
    slug = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:30].strip("-")
    name = f"t-{slug}-{uuid.uuid4().hex[:6]}"
    lakefs.create_repository(name, f"s3://{stack_env['LAKEFS_DELTA_STACK_BUCKET']}/{name}")
    return name


@pytest.fixture(scope="session")
def s3(stack_env):
    """boto3 straight to MinIO: no lakeFS in the path."""
    import boto3

    return boto3.client("s3", endpoint_url=stack_env["LAKEFS_DELTA_OBJECT_STORE_ENDPOINT"], region_name="us-east-1",
                        aws_access_key_id=stack_env["LAKEFS_DELTA_OBJECT_STORE_ACCESS_KEY_ID"],
                        aws_secret_access_key=stack_env["LAKEFS_DELTA_OBJECT_STORE_SECRET_ACCESS_KEY"])


@pytest.fixture(scope="session")
def spark(stack_env):
    from devtools.spark import stack_spark_session

    session = stack_spark_session(stack_env, app_name="tests")
    yield session
    session.stop()


class Processes:
    """Service and worker processes tests start. Those a module starts are stopped when the module ends
    (an idle Celery worker polls Redis: twenty left running slowed every later test); those started
    for the session (`kept`) at the end of the session, and a session worker that exits is started
    again within a second, as its supervisor would (`supervise`)."""

    def __init__(self, env: dict[str, str]):
        import threading

        self.env = env
        self.started: list[subprocess.Popen] = []
        self.kept: set[subprocess.Popen] = set()  # the session's own processes
        self.workers: dict[str, subprocess.Popen] = {}  # Celery node name prefix -> process
        self._worker_args: dict[str, tuple[str, list[str] | None, dict[str, str] | None]] = {}
        self._lock = threading.RLock()  # the supervisor's thread and the tests' change these
        self._ending = threading.Event()

    def start(self, name: str, args: list[str], extra_env: dict[str, str] | None = None,
              kept: bool = False) -> subprocess.Popen:
        """`lakefs-delta <args>`; `kept`: the session's own, stopped only at the end of the session."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        log = open(ARTIFACTS / f"{name}.log", "ab")
        env = {**os.environ, **self.env, **(extra_env or {})}  # a None value removes the variable
        process = subprocess.Popen([sys.executable, "-m", "lakefs_delta.cli", *args], cwd=ROOT,
                                   env={k: v for k, v in env.items() if v is not None},
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        with self._lock:
            self.started.append(process)
            if kept:
                self.kept.add(process)
        return process

    def serve(self, name: str, port: int, extra_args: list[str] | None = None,
              extra_env: dict[str, str] | None = None, kept: bool = False) -> str:
        """`lakefs-delta serve` on `port`; its URL once it answers. A port another service of the
        session holds is an error: the test would be talking to that one, configured otherwise."""
        import socket

        import httpx

        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                raise RuntimeError(f"{name}: port {port} is taken (another service of this module or of the "
                                   "session holds it): give this one a port of its own")
        self.start(name, ["serve", "--port", str(port), *(extra_args or [])], extra_env, kept)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    return url
            except httpx.HTTPError:
                time.sleep(0.2)
        raise RuntimeError(f"{name} did not start; see {ARTIFACTS / (name + '.log')}")

    def worker(self, name: str, extra_args: list[str] | None = None,
               extra_env: dict[str, str] | None = None, kept: bool = False) -> subprocess.Popen:
        node = f"{name}-{uuid.uuid4().hex[:4]}"
        with self._lock:
            self.workers[node] = self.start(f"worker-{name}", ["worker", "--concurrency=2", "--no-beat", "--name",
                                                               f"{node}@%h", *(extra_args or [])], extra_env, kept)
            self._worker_args[node] = (name, extra_args, extra_env)
            return self.workers[node]

    def supervise(self) -> None:
        """A thread that starts again each session worker that exited: a Celery worker holding a
        delayed retry when Redis restarts can exit (kombu fails restoring it on the lost connection:
        "Unrecoverable error: AttributeError ... 'hostname'"), seconds after Redis is back."""
        import threading

        def watch() -> None:
            while not self._ending.wait(1.0):
                with self._lock:
                    for node, process in list(self.workers.items()):
                        if process in self.kept and process.poll() is not None:
                            self._again(node)

        threading.Thread(target=watch, name="supervisor", daemon=True).start()

    def revive(self) -> list[str]:
        """Start again, as a supervisor would, every worker that exited (the module's too); the names."""
        with self._lock:
            return [self._again(node) for node, process in list(self.workers.items()) if process.poll() is not None]

    def kill_worker(self, node: str) -> None:
        """SIGKILL a worker, as a crash would; a session worker is started again at once."""
        import signal

        with self._lock:
            process = self.workers[node]
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            if process in self.kept:
                self._again(node)
            else:
                del self.workers[node]
                del self._worker_args[node]

    def _again(self, node: str) -> str:
        """A new process in place of the worker `node` (kept if it was); its name."""
        process = self.workers.pop(node)
        name, extra_args, extra_env = self._worker_args.pop(node)
        self.worker(name, extra_args, extra_env, kept=process in self.kept)
        return name

    def stop_all(self, keep_session: bool = False) -> None:
        import signal

        with self._lock:
            if not keep_session:
                self._ending.set()
            stopping = [p for p in self.started if not (keep_session and p in self.kept)]
            for process in stopping:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGTERM)
            for process in stopping:
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
            self.started = [p for p in self.started if p not in stopping]
            for node, process in list(self.workers.items()):
                if process in stopping:
                    del self.workers[node]
                    self._worker_args.pop(node, None)


SERVICE_PORT = int(os.environ.get("LAKEFS_DELTA_TEST_SERVICE_PORT", "18080"))
# short timings so redelivery and retries happen within a test
SERVICE_ENV = {"LAKEFS_DELTA_TASKS_VISIBILITY_TIMEOUT_SECONDS": "15", "LAKEFS_DELTA_TASKS_LOCK_TTL_SECONDS": "6",
               "LAKEFS_DELTA_TASKS_RETRY_BACKOFF_SECONDS": "1", "LAKEFS_DELTA_TASKS_RETRY_BACKOFF_MAX_SECONDS": "4",
               "LAKEFS_DELTA_TASKS_RETRY_MAX_RETRIES": "8", "LAKEFS_DELTA_TASKS_TIME_LIMIT_SECONDS": "12",
               # a lakeFS, MinIO or Redis restart in a test is retried through (about 32 retries here)
               "LAKEFS_DELTA_TASKS_RETRY_OUTAGE_SECONDS": "60",
               "LAKEFS_DELTA_LAKEFS_TIMEOUT_SECONDS": "4",
               # a diff the API has not cached is computed by the worker: tests wait for it, not for a 202
               "LAKEFS_DELTA_API_DIFF_WAIT_SECONDS": "120",
               # catch-up runs when a test asks for it, not on a timer over every test's repository
               "LAKEFS_DELTA_CATCH_UP_INTERVAL_SECONDS": "86400"}


_RUNNING: list[Processes] = []  # the session's, once a test asked for it


@pytest.fixture(scope="session")
def processes(stack_env):
    os.environ.update(SERVICE_ENV)
    running = Processes({**stack_env, **SERVICE_ENV})
    running.supervise()
    _RUNNING.append(running)
    yield running
    running.stop_all()


@pytest.fixture(scope="module", autouse=True)
def stop_the_modules_processes():
    """What a module started is stopped when it ends; the session's own processes stay."""
    yield
    for running in _RUNNING:
        running.stop_all(keep_session=True)


@pytest.fixture(scope="session")
def service(processes, stack_env) -> str:
    """`lakefs-delta serve` on 127.0.0.1:18080 (the URL the installed action calls), and one worker."""
    processes.worker("main", kept=True)
    return processes.serve("service", SERVICE_PORT, kept=True)


@pytest.fixture(scope="session")
def celery_worker(processes):
    """A real `celery worker` process consuming from the stack's Redis."""
    return processes.worker("ping", kept=True)
