"""The service image, linted (no Docker engine runs here) and checked for what operators rely on."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
DOCKERFILE = Path(__file__).resolve().parents[3] / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    lines = DOCKERFILE.read_text().replace("\\\n", " ").splitlines()
    return [tuple(line.split(None, 1)) for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_hadolint_passes():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    result = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_final_stage_runs_as_non_root_with_a_healthcheck_and_no_build_tools():
    steps = instructions()
    final = steps[max(i for i, (op, _) in enumerate(steps) if op == "FROM"):]
    ops = {op for op, _ in final}
    assert "HEALTHCHECK" in ops and '["lakefs-delta", "healthcheck"]' in dict(final)["HEALTHCHECK"]
    users = [arg for op, arg in final if op == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert not any(op == "RUN" and ("pip install" in arg or "apt-get" in arg) for op, arg in final)
    assert dict(final)["ENTRYPOINT"] == '["lakefs-delta"]'
