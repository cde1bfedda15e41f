"""A local lakeFS + MinIO + Redis stack on 127.0.0.1, built from source and started idempotently.

Binaries are built once into a cache outside the repository; state (data, logs, PID files,
generated keys) lives in the stack directory. `down` stops exactly the processes `up` started.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from devtools.spark import IVY_DIR, session_jars

LAKEFS_VERSION = "v1.86.0"  # newest release the Go module proxy serves
# lakeFS's go.mod replaces delta-go; `go install` refuses that, so the build carries the same replace.
LAKEFS_DELTA_GO_REPLACE = "github.com/treeverse/delta-go@v0.0.0-20260323095047-d2f80252d945"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"  # the proxy serves no RELEASE tag; newest commit it has
CACHE_DIR = Path(os.environ.get("LAKEFS_DELTA_CACHE", Path.home() / ".cache" / "lakefs-delta-exporter"))
STACK_DIR = Path(os.environ.get("LAKEFS_DELTA_STACK_DIR", CACHE_DIR / "stack"))
BUCKET = "lakefs-data"  # must differ from every repository name
# Where MinIO keeps its objects and Redis its append-only file when set (CI sets a tmpfs, `.ci/run`):
# folders named after the stack's directory (`minio_data`, `redis_data`). MinIO stored 50,000 small
# objects in 8-10 s and 15-19 s of its CPU on tmpfs where it took 33-43 s and 39-58 s on this
# machine's disk. Unset: in the stack's directory,
# on disk, kept across restarts of the machine (a local stack's lakeFS names them). Read when a
# stack directory is first used and kept in it (`_objects_root`): a service restarted later (a test's
# restart, `up` from another shell) finds its data where the stack began, whatever this says then.
OBJECTS_ROOT = os.environ.get("LAKEFS_DELTA_STACK_OBJECTS_ROOT", "")
HOST = "127.0.0.1"


class StackError(RuntimeError):
    """A service did not build or start; the message says which and how to fix it."""


@dataclass
class StackState:
    lakefs_port: int
    acl_port: int
    minio_port: int
    minio_console_port: int
    redis_port: int
    minio_user: str
    minio_password: str
    lakefs_access_key_id: str
    lakefs_secret_access_key: str
    lakefs_encrypt_secret: str
    webhook_token: str
    objects_root: str = ""  # OBJECTS_ROOT as the stack was first started ("": the stack's directory), `_objects_root`

    @property
    def lakefs_endpoint(self) -> str:
        return f"http://{HOST}:{self.lakefs_port}"

    @property
    def acl_endpoint(self) -> str:
        return f"http://{HOST}:{self.acl_port}"

    @property
    def minio_endpoint(self) -> str:
        return f"http://{HOST}:{self.minio_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://{HOST}:{self.redis_port}/0"

    def environment(self) -> dict[str, str]:
        """Variables that point this project's config (and tests) at the running stack."""
        return {
            "LAKEFS_DELTA_LAKEFS_ENDPOINT": self.lakefs_endpoint,
            "LAKEFS_DELTA_LAKEFS_ACCESS_KEY_ID": self.lakefs_access_key_id,
            "LAKEFS_DELTA_LAKEFS_SECRET_ACCESS_KEY": self.lakefs_secret_access_key,
            "LAKEFS_DELTA_OBJECT_STORE_ENDPOINT": self.minio_endpoint,
            "LAKEFS_DELTA_OBJECT_STORE_REGION": "us-east-1",
            "LAKEFS_DELTA_OBJECT_STORE_ACCESS_KEY_ID": self.minio_user,
            "LAKEFS_DELTA_OBJECT_STORE_SECRET_ACCESS_KEY": self.minio_password,
            "LAKEFS_DELTA_REDIS_URL": self.redis_url,
            "LAKEFS_DELTA_WEBHOOK_TOKENS": self.webhook_token,
            "LAKEFS_DELTA_API_TOKENS": f"{self.webhook_token}=*",  # a service token for every repository
            "LAKEFS_DELTA_STACK_BUCKET": BUCKET,
            # a row diff above row_diff.max_bytes runs as a local Spark job, with the jars the stack caches:
            # the sessions' (S3A, and Delta's, which the job does not use), so that a job's JVM starts
            # with the sessions' class path and maps their class archive (`devtools.spark.class_archive`)
            "LAKEFS_DELTA_ROW_DIFF_SPARK_MASTER": "local[2]",
            "LAKEFS_DELTA_ROW_DIFF_SPARK_IVY_DIR": str(IVY_DIR),
            "LAKEFS_DELTA_ROW_DIFF_SPARK_JARS": session_jars(),  # no Ivy resolution per job
        }


def _say(message: str) -> None:
    print(f"[stack] {message}", file=sys.stderr, flush=True)


def _random_key(length: int, alphabet: str = string.ascii_uppercase + string.digits) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


def _port(name: str, default: int) -> int:
    return int(os.environ.get(f"LAKEFS_DELTA_STACK_{name}_PORT", default))


def _in_objects_root(root: str, stack_dir: Path, service: str) -> Path:
    """`<root>/<stack folder's name>-<its path's hash>-<service>-data` (what `.ci/run` removes)."""
    folder = stack_dir.resolve()
    return Path(root) / f"{folder.name}-{hashlib.sha256(str(folder).encode()).hexdigest()[:8]}-{service}-data"


def minio_data(state: StackState, stack_dir: Path) -> Path:
    """MinIO's data folder: in the stack's objects root when it has one, else in the stack's folder."""
    return _in_objects_root(state.objects_root, stack_dir, "minio") if state.objects_root else stack_dir / "minio-data"


def redis_data(state: StackState, stack_dir: Path) -> Path:
    """The folder of Redis's append-only file: in the stack's objects root when it has one (each answer
    waits for an fsync there, which a tmpfs does at once), else the stack's folder."""
    return _in_objects_root(state.objects_root, stack_dir, "redis") if state.objects_root else stack_dir


def _objects_root(stack_dir: Path) -> str:
    """The stack's objects root, recorded in its folder (`objects-root`) when first asked: OBJECTS_ROOT
    then, or "" for a stack begun before it was recorded whose objects are in its folder. A file of
    its own, not a field of `stack.json`, which an older checkout writes without it."""
    recorded = stack_dir / "objects-root"
    if not recorded.exists():
        stack_dir.mkdir(parents=True, exist_ok=True)
        recorded.write_text("" if (stack_dir / "minio-data").exists() else OBJECTS_ROOT)
    return recorded.read_text()


def load_state(stack_dir: Path = STACK_DIR) -> StackState:
    """Keys are generated once per stack directory and reused; ports follow the environment."""
    state_file = stack_dir / "stack.json"
    saved = json.loads(state_file.read_text()) if state_file.exists() else {}
    state = StackState(
        lakefs_port=_port("LAKEFS", 18000),
        acl_port=_port("ACL", 18001),
        minio_port=_port("MINIO", 19000),
        minio_console_port=_port("MINIO_CONSOLE", 19001),
        redis_port=_port("REDIS", 16379),
        minio_user=saved.get("minio_user") or "minio" + _random_key(8).lower(),
        minio_password=saved.get("minio_password") or secrets.token_urlsafe(24),
        lakefs_access_key_id=saved.get("lakefs_access_key_id") or "AKIAJ" + _random_key(15),
        lakefs_secret_access_key=saved.get("lakefs_secret_access_key") or secrets.token_urlsafe(30),
        lakefs_encrypt_secret=saved.get("lakefs_encrypt_secret") or secrets.token_urlsafe(32),
        webhook_token=saved.get("webhook_token") or secrets.token_urlsafe(24),
        objects_root=_objects_root(stack_dir),
    )
    if OBJECTS_ROOT and state.objects_root != OBJECTS_ROOT:
        _say(f"LAKEFS_DELTA_STACK_OBJECTS_ROOT={OBJECTS_ROOT} is for a new stack: this one keeps its objects in "
             f"{state.objects_root or stack_dir}, where it began")
    stack_dir.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps(asdict(state), indent=2))
    state_file.chmod(0o600)
    return state


# ---------------------------------------------------------------- building


def _go(args: list[str], cwd: Path, env: dict[str, str], what: str) -> None:
    _say(f"$ go {' '.join(args)}")
    process = subprocess.Popen(["go", *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    tail: list[str] = []
    started = time.monotonic()
    for line in process.stdout:  # stream go's own progress so a first build never looks hung
        tail = (tail + [line.rstrip()])[-30:]
        if line.startswith("go: downloading") and len(tail) % 10:
            continue
        _say(f"  {what} ({time.monotonic() - started:.0f}s): {line.rstrip()}")
    if process.wait() != 0:
        raise StackError(f"building {what} failed (go {' '.join(args)}):\n" + "\n".join(tail) +
                         "\nCheck `go version` (needs Go >= 1.26) and that the Go module proxy is reachable.")


def build_minio() -> Path:
    binary = CACHE_DIR / "bin" / f"minio-{MINIO_VERSION}"
    if binary.exists():
        return binary
    if shutil.which("go") is None:
        raise StackError("building MinIO needs Go on PATH; install Go >= 1.26")
    _say(f"building MinIO {MINIO_VERSION} from its Go module (first time only, several minutes)")
    started = time.monotonic()
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as gobin:
        env = {**os.environ, "CGO_ENABLED": "0", "GOBIN": gobin}
        _go(["install", f"github.com/minio/minio@{MINIO_VERSION}"], Path(gobin), env, "minio")
        shutil.move(Path(gobin) / "minio", binary)
    _say(f"built minio in {time.monotonic() - started:.0f} s")
    return binary


def build_lakefs() -> Path:
    return _build_from_lakefs_module("lakefs", "github.com/treeverse/lakefs/cmd/lakefs")


def build_acl_server() -> Path:
    """lakeFS's own ACL server (contrib/auth/acl): users, groups and per-repository permissions
    for lakeFS's "simplified" authorization, so the stack has real users who read some repositories
    and not others."""
    return _build_from_lakefs_module("acl", "github.com/treeverse/lakefs/contrib/auth/acl/cmd/acl")


def _build_from_lakefs_module(name: str, package: str) -> Path:
    binary = CACHE_DIR / "bin" / f"{name}-{LAKEFS_VERSION}"
    if binary.exists():
        return binary
    if shutil.which("go") is None:
        raise StackError(f"building {name} needs Go on PATH; install Go >= 1.26")
    _say(f"building {name} from lakeFS {LAKEFS_VERSION}'s Go module (first time only, several minutes)")
    started = time.monotonic()
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as wrapper:
        cwd = Path(wrapper)
        env = {**os.environ, "CGO_ENABLED": "0"}
        _go(["mod", "init", "example.invalid/lakefsbuild"], cwd, env, name)
        _go(["mod", "edit", f"-replace=github.com/csimplestring/delta-go={LAKEFS_DELTA_GO_REPLACE}"], cwd, env, name)
        # The checksum database has no entry for some of lakeFS's pseudo-versioned dependencies;
        # lakeFS's own go.sum has them, so the wrapper verifies against that.
        _go(["mod", "download", f"github.com/treeverse/lakefs@{LAKEFS_VERSION}"], cwd, env, name)
        modcache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, env=env).stdout.strip()
        shutil.copy(Path(modcache) / f"github.com/treeverse/lakefs@{LAKEFS_VERSION}" / "go.sum", cwd / "go.sum")
        (cwd / "go.sum").chmod(0o644)
        _go(["get", f"{package}@{LAKEFS_VERSION}"], cwd, env, name)
        _go(["build", "-o", str(binary) + ".tmp", package], cwd, env, name)
    Path(str(binary) + ".tmp").rename(binary)
    _say(f"built {name} in {time.monotonic() - started:.0f} s")
    return binary


def build_all() -> list[Path]:
    """MinIO beside lakeFS and its ACL server (one lakeFS module, built one after the other): the
    two Go builds overlap one's downloads with the other's compiling."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        minio = pool.submit(build_minio)
        lakefs = pool.submit(lambda: [build_lakefs(), build_acl_server()])
        return [minio.result(), *lakefs.result()]


def redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() != 0:
        raise StackError("redis-server is missing: run `sudo apt-get install -y redis-server`")
    _say("installing Debian's redis-server")
    for args in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "redis-server"]):
        result = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if result.returncode != 0:
            raise StackError(f"`{' '.join(args)}` failed:\n{result.stderr[-2000:]}")
    return shutil.which("redis-server") or "/usr/bin/redis-server"


# ---------------------------------------------------------------- processes


def _pid_file(stack_dir: Path, service: str) -> Path:
    return stack_dir / f"{service}.pid"


def _start_time(pid: int) -> str | None:
    """The kernel's start time of a process: with the PID, it names one process (PIDs are reused)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]


def _running_pid(stack_dir: Path, service: str) -> int | None:
    """The PID `up` recorded, if that same process is still alive."""
    pid_file = _pid_file(stack_dir, service)
    if not pid_file.exists():
        return None
    recorded = json.loads(pid_file.read_text())
    started = _start_time(recorded["pid"])
    return recorded["pid"] if started is not None and started == recorded.get("started") else None


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def _port_released(port: int, wait: float = 10.0) -> bool:
    """Whether nothing accepts on `port`, waiting up to `wait` seconds for a process just stopped to
    let it go: a killed multi-threaded process (Redis) shows as a zombie, which `_running_pid` counts
    as stopped, while its other threads still exit and its listening socket still accepts."""
    deadline = time.monotonic() + wait
    while _port_open(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _start(stack_dir: Path, service: str, args: list[str], env: dict[str, str], ports: list[int]) -> None:
    for port in ports:
        if not _port_released(port):
            raise StackError(f"{service}: port {port} on {HOST} is already in use by another process; "
                             f"stop it or choose another port with LAKEFS_DELTA_STACK_{service.upper()}_PORT")
    log = open(stack_dir / f"{service}.log", "ab")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=stack_dir,
                               start_new_session=True)
    _pid_file(stack_dir, service).write_text(json.dumps({"pid": process.pid, "started": _start_time(process.pid)}))


def _wait_healthy(stack_dir: Path, service: str, check, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if _running_pid(stack_dir, service) is None:
            break
        time.sleep(0.3)
    log_tail = (stack_dir / f"{service}.log").read_text(errors="replace")[-3000:]
    raise StackError(f"{service} did not become healthy (log {stack_dir / (service + '.log')}):\n{log_tail}")


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError):
        return False


def _redis_ok(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


HEALTH = {
    "minio": lambda s: _http_ok(f"{s.minio_endpoint}/minio/health/live"),
    "acl": lambda s: _http_ok(f"{s.acl_endpoint}/api/v1/healthcheck"),
    "lakefs": lambda s: _http_ok(f"{s.lakefs_endpoint}/_health"),
    "redis": lambda s: _redis_ok(s.redis_port),
}


def _lakefs_config(state: StackState, stack_dir: Path) -> Path:
    config = {
        "listen_address": f"{HOST}:{state.lakefs_port}",
        "logging": {"level": "WARN"},
        # metadata-acl: a stack made before the ACL server kept its single user in lakeFS's own store
        "database": {"type": "local", "local": {"path": str(stack_dir / "lakefs" / "metadata-acl")}},
        # users, groups and per-repository ACLs live in the ACL server next to it
        "auth": {"encrypt": {"secret_key": state.lakefs_encrypt_secret}, "ui_config": {"rbac": "simplified"},
                 "api": {"endpoint": f"{state.acl_endpoint}/api/v1"}},
        "blockstore": {
            "type": "s3",
            "s3": {
                "endpoint": state.minio_endpoint,
                "force_path_style": True,
                "discover_bucket_region": False,
                "region": "us-east-1",
                "credentials": {"access_key_id": state.minio_user, "secret_access_key": state.minio_password},
            },
        },
        "committed": {"local_cache": {"dir": str(stack_dir / "lakefs" / "cache")}},
        "installation": {"user_name": "admin", "access_key_id": state.lakefs_access_key_id,
                         "secret_access_key": state.lakefs_secret_access_key},
        "actions": {"enabled": True, "lua": {"net_http_enabled": True}},
        "stats": {"enabled": False},
        "security": {"check_latest_version": False},
        "usage_report": {"enabled": False},
    }
    path = stack_dir / "lakefs.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    path.chmod(0o600)
    return path


def _acl_config(state: StackState, stack_dir: Path) -> Path:
    config = {
        "listen_address": f"{HOST}:{state.acl_port}",
        "database": {"type": "local", "local": {"path": str(stack_dir / "acl" / "metadata")}},
        "encrypt": {"secret_key": state.lakefs_encrypt_secret},
    }
    path = stack_dir / "acl.yaml"
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path


def _ensure_bucket(state: StackState) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=state.minio_endpoint, region_name="us-east-1",
                      aws_access_key_id=state.minio_user, aws_secret_access_key=state.minio_password)
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    if BUCKET not in existing:
        s3.create_bucket(Bucket=BUCKET)


def up(stack_dir: Path = STACK_DIR) -> StackState:
    state = load_state(stack_dir)
    (minio, lakefs, acl), redis = build_all(), redis_server()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LAKEFS_"))}

    if _running_pid(stack_dir, "minio") is None:
        minio_data(state, stack_dir).mkdir(parents=True, exist_ok=True)
        _say(f"starting MinIO on {state.minio_endpoint}")
        env = {**base_env, "MINIO_ROOT_USER": state.minio_user, "MINIO_ROOT_PASSWORD": state.minio_password,
               "MINIO_BROWSER": "off", "MINIO_UPDATE": "off",
               # the scanner (usage totals, lifecycle, healing: none of which a local stack uses) walks every
               # object each minute by default; after the 200,000-file tests it took a fifth of a core for good
               "MINIO_SCANNER_SPEED": "slowest"}
        _start(stack_dir, "minio", [str(minio), "server", str(minio_data(state, stack_dir)), "--quiet",
                                    "--address", f"{HOST}:{state.minio_port}",
                                    "--console-address", f"{HOST}:{state.minio_console_port}"],
               env, [state.minio_port, state.minio_console_port])
    _wait_healthy(stack_dir, "minio", lambda: HEALTH["minio"](state))
    _ensure_bucket(state)

    if _running_pid(stack_dir, "acl") is None:
        _say(f"starting lakeFS's ACL server on {state.acl_endpoint}")
        _start(stack_dir, "acl", [str(acl), "run", "-c", str(_acl_config(state, stack_dir))], base_env, [state.acl_port])
    _wait_healthy(stack_dir, "acl", lambda: HEALTH["acl"](state))

    if _running_pid(stack_dir, "lakefs") is None:
        _say(f"starting lakeFS {LAKEFS_VERSION} on {state.lakefs_endpoint}")
        config = _lakefs_config(state, stack_dir)
        # the actions template sends this token; lakeFS resolves only LAKEFSACTION_* variables
        env = {**base_env, "LAKEFSACTION_DELTA_EXPORT_TOKEN": state.webhook_token}
        _start(stack_dir, "lakefs", [str(lakefs), "run", "-c", str(config)], env, [state.lakefs_port])
    _wait_healthy(stack_dir, "lakefs", lambda: HEALTH["lakefs"](state))

    if _running_pid(stack_dir, "redis") is None:
        _say(f"starting Redis on {state.redis_url}")
        redis_data(state, stack_dir).mkdir(parents=True, exist_ok=True)
        _start(stack_dir, "redis", [redis, "--bind", HOST, "--port", str(state.redis_port), "--save", "",
                                    # durable queue: answered events and retry countdowns survive a crash.
                                    # `always`: Redis answers a write once it is in the file; `everysec`
                                    # answers before that while an fsync runs, and a crash then loses it
                                    "--appendonly", "yes", "--appendfsync", "always",
                                    "--dir", str(redis_data(state, stack_dir))],
               base_env, [state.redis_port])
    _wait_healthy(stack_dir, "redis", lambda: HEALTH["redis"](state))
    _say("stack is up")
    return state


SPARK_MASTER_PORT, SPARK_MASTER_UI_PORT, SPARK_WORKER_UI_PORT = (_port(name, default) for name, default in (
    ("SPARK_MASTER", 17077), ("SPARK_MASTER_UI", 17080), ("SPARK_WORKER_UI", 17081)))


def spark_cluster(stack_dir: Path = STACK_DIR, cores: int = 1, memory: str = "2g") -> str:
    """Spark's own standalone cluster on 127.0.0.1, from the PySpark installed (`spark-class`): a
    master and one worker of `cores` and `memory`, its executors' logs under `spark-work/`. Started
    when not running (`down` stops it with the rest); the master's URL, once the worker registered."""
    import pyspark

    home = Path(pyspark.__file__).parent
    spark_class = str(home / "bin" / "spark-class")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "LAKEFS_"))}, "SPARK_HOME": str(home),
           "SPARK_LOCAL_IP": HOST, "SPARK_NO_DAEMONIZE": "1"}
    master = f"spark://{HOST}:{SPARK_MASTER_PORT}"
    if _running_pid(stack_dir, "spark-master") is None:
        _say(f"starting Spark's standalone master on {master}")
        _start(stack_dir, "spark-master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", HOST,
                                           "--port", str(SPARK_MASTER_PORT), "--webui-port", str(SPARK_MASTER_UI_PORT)],
               env, [SPARK_MASTER_PORT, SPARK_MASTER_UI_PORT])
    _wait_healthy(stack_dir, "spark-master", lambda: _http_ok(f"http://{HOST}:{SPARK_MASTER_UI_PORT}/json/"))
    if _running_pid(stack_dir, "spark-worker") is None:
        _say(f"starting a Spark worker ({cores} core(s), {memory}) for {master}")
        (stack_dir / "spark-work").mkdir(exist_ok=True)
        _start(stack_dir, "spark-worker", [spark_class, "org.apache.spark.deploy.worker.Worker", master, "--host", HOST,
                                           "--cores", str(cores), "--memory", memory, "--webui-port",
                                           str(SPARK_WORKER_UI_PORT), "--work-dir", str(stack_dir / "spark-work")],
               env, [SPARK_WORKER_UI_PORT])
    _wait_healthy(stack_dir, "spark-worker", lambda: spark_workers_alive() > 0)
    return master


def spark_workers_alive() -> int:
    """How many workers the standalone master counts alive (0 when it cannot be asked)."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{SPARK_MASTER_UI_PORT}/json/", timeout=2) as response:
            return int(json.loads(response.read()).get("aliveworkers", 0))
    except (urllib.error.URLError, OSError, ValueError):
        return 0


def down(stack_dir: Path = STACK_DIR) -> None:
    """Stops every process `up` (or the demo) recorded, the service and worker first."""
    recorded = sorted(p.stem for p in stack_dir.glob("*.pid"))
    order = [s for s in recorded if s not in ("lakefs", "acl", "redis", "minio")] + ["lakefs", "acl", "redis", "minio"]
    for service in order:
        pid = _running_pid(stack_dir, service)
        if pid is not None:
            _say(f"stopping {service} (pid {pid})")
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while _running_pid(stack_dir, service) is not None and time.monotonic() < deadline:
                time.sleep(0.2)
            if _running_pid(stack_dir, service) is not None:
                os.killpg(pid, signal.SIGKILL)
        _pid_file(stack_dir, service).unlink(missing_ok=True)


def stop_service(service: str, stack_dir: Path = STACK_DIR) -> None:
    """Stop one service (tests use it to simulate an outage); `up` starts it again."""
    pid = _running_pid(stack_dir, service)
    if pid is not None:
        os.killpg(pid, signal.SIGKILL)
        while _running_pid(stack_dir, service) is not None:
            time.sleep(0.1)
    _pid_file(stack_dir, service).unlink(missing_ok=True)


def status(stack_dir: Path = STACK_DIR) -> dict[str, dict]:
    state = load_state(stack_dir)
    report = {}
    for service, check in HEALTH.items():
        pid = _running_pid(stack_dir, service)
        report[service] = {"pid": pid, "healthy": bool(pid) and check(state)}
    return report


def main(argv: list[str] | None = None) -> int:
    """`python -m devtools.stack up|down|status|env|build|spark-cluster`."""
    parser = argparse.ArgumentParser(prog="python -m devtools.stack", description=__doc__)
    parser.add_argument("action", choices=["up", "down", "status", "env", "build", "spark-cluster"])
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            state = up()
            print(f"lakeFS  {state.lakefs_endpoint}  (access key {state.lakefs_access_key_id})")
            print(f"MinIO   {state.minio_endpoint}  (bucket {BUCKET})")
            print(f"Redis   {state.redis_url}")
            print("Run `eval \"$(.venv/bin/python -m devtools.stack env)\"` to point this shell at the stack.")
        elif args.action == "down":
            down()
        elif args.action == "spark-cluster":  # row_diff.spark.master for a real cluster of one worker
            print(spark_cluster())
        elif args.action == "status":
            report = status()
            for service, facts in report.items():
                state = "healthy" if facts["healthy"] else ("running, not healthy" if facts["pid"] else "stopped")
                print(f"{service:7} {state}" + (f" (pid {facts['pid']})" if facts["pid"] else ""))
            return 0 if all(facts["healthy"] for facts in report.values()) else 1
        elif args.action == "env":
            for name, value in load_state().environment().items():
                print(f"export {name}={shlex.quote(value)}")
        elif args.action == "build":
            for binary in build_all():
                print(binary)
    except StackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
