"""What ships: a wheel built from the repository holds the product and the lakeFS-side files of
actions/ (no stack, no demo), and works from a fresh environment; the image's health check fits
each role."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory) -> Path:
    """A fresh environment with only the wheel installed; its dependencies come from the test
    environment's site-packages, whose editable install of this repository stays inactive."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"  # a copy: setuptools leaves build/ in the tree it builds from
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("exporter", "hooks", "workers", "lakefs_delta", "actions", "devtools"):  # devtools: must stay out
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(work / "dist"), str(source)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    [wheel] = (work / "dist").glob("lakefs_delta_exporter-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], check=True)
    # --ignore-installed: else pip uninstalls the test environment's editable install of this repository first
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", "--prefix", str(work / "venv"),
                                str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-3000:]
    site = work / "venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # its .pth files are not run
    return work / "venv" / "bin" / "python"


def run(python: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    return subprocess.run([str(python), *args], capture_output=True, text=True, timeout=120, cwd="/",
                          env={**clean, **(env or {})})


def test_the_wheel_holds_the_product_and_the_actions_folder_and_no_development_tooling(installed_wheel):
    found = run(installed_wheel, "-c", "import exporter, hooks, workers, lakefs_delta, importlib.util as u; "
                                       "from exporter.lakefs.installer import TEMPLATES; "
                                       "print(exporter.__file__); print(u.find_spec('devtools')); print(TEMPLATES); "
                                       "print(sorted(p.relative_to(TEMPLATES).as_posix() for p in TEMPLATES.rglob('*.yaml')))")
    assert found.returncode == 0, found.stderr
    location, devtools, templates, shipped = found.stdout.splitlines()
    venv = str(installed_wheel.parent.parent)
    assert location.startswith(venv) and devtools == "None"
    assert templates.startswith(venv) and templates.endswith("/site-packages/actions")  # the wheel's, not the checkout's
    assert shipped == str(["_lakefs_actions/delta-checks.yaml", "_lakefs_actions/delta-export.yaml",
                           "_lakefs_tables/table.example.yaml"])
    assert not (Path(location).parent / "templates").exists()  # the templates' old place in exporter/ is gone
    assert run(installed_wheel, "-m", "lakefs_delta.cli", "serve", "--help").returncode == 0


def test_install_actions_from_the_wheel_needs_no_environment_variable(installed_wheel, lakefs, repository, stack_env):
    lakefs.upload_object(repository, "main", "README", b"x")
    lakefs.commit_branch(repository, "main", "first")
    done = run(installed_wheel, "-m", "lakefs_delta.cli", "install-actions", "--repo", repository, "--branch", "main",
               "--url", "http://127.0.0.1:18080/webhooks/lakefs", "--table", "t=tables/t", env=stack_env)
    assert done.returncode == 0, done.stderr
    action = lakefs.get_object(repository, "main", "_lakefs_actions/delta-export.yaml").decode()
    assert "http://127.0.0.1:18080/webhooks/lakefs" in action


def test_the_health_check_asks_the_service_or_the_worker_by_role(service, processes, tmp_path, stack_env):
    def health(*command: str) -> int:
        cmdline = tmp_path / "cmdline"
        cmdline.write_bytes(b"\0".join(part.encode() for part in command) + b"\0")
        return subprocess.run([sys.executable, "-m", "lakefs_delta.cli", "healthcheck", "--cmdline", str(cmdline)],
                              cwd=ROOT, env={**os.environ, **stack_env}, capture_output=True, timeout=60).returncode

    node = next(iter(processes.workers))  # a running worker's node name, before @host
    port = service.rsplit(":", 1)[1]
    assert health("lakefs-delta", "serve", "--port", port) == 0
    assert health("lakefs-delta", "serve", "--port", "1") == 1
    assert health("lakefs-delta", "worker", "--name", f"{node}@%h") == 0
    assert health("lakefs-delta", "worker", "--name", "nobody@%h") == 1
