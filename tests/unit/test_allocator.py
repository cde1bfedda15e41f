"""Arrow's allocator: jemalloc unless the environment names one (`exporter._arrow_allocator`)."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

_BACKEND = "import exporter, pyarrow; print(pyarrow.default_memory_pool().backend_name)"
_IMPORTED_FIRST = "import pyarrow; pyarrow.array([1]); import exporter; print(pyarrow.default_memory_pool().backend_name)"


def _backend(code: str, **env: str) -> str:
    environment = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"} | env
    return subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize("code", [_BACKEND, _IMPORTED_FIRST], ids=["exporter first", "pyarrow first"])
def test_arrow_buffers_come_from_jemalloc(code):
    assert _backend(code) == "jemalloc"


def test_the_environment_chooses_another():
    assert _backend(_BACKEND, ARROW_DEFAULT_MEMORY_POOL="system") == "system"
