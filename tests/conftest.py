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
ARTIFACTS = ROOT / "tests" / "artifacts"


@pytest.fixture(scope="session")
def stack_env() -> dict[str, str]:
    from lakefs_delta import stack

    state = stack.up()
    env = state.environment()
    os.environ.update(env)  # the config loader and child processes read these
    return env


@pytest.fixture(scope="session")
def config(stack_env):
    from exporter.config import load_config

    return load_config()


@pytest.fixture(scope="session")
def lakefs(config):
    from exporter.lakefs import LakeFS

    return LakeFS(config.lakefs)


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
    from lakefs_delta.spark import stack_spark_session

    session = stack_spark_session(stack_env, app_name="tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def celery_worker(stack_env):
    """A real `celery worker` process consuming from the stack's Redis."""
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "celery-worker.log", "ab")
    process = subprocess.Popen([sys.executable, "-m", "celery", "-A", "workers.app", "worker", "--loglevel=INFO",
                                "--concurrency=2", "--without-gossip", "--without-mingle", "-n", f"test-{uuid.uuid4().hex[:6]}@%h"],
                               cwd=ROOT, env={**os.environ, **stack_env}, stdout=log, stderr=subprocess.STDOUT)
    time.sleep(0.5)
    yield process
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
