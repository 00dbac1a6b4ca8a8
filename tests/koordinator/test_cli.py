"""Every console script: --help, --version, klog -v, and one-line exit-2 usage errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = ["koordlet", "koord-manager", "koord-scheduler", "koord-descheduler", "koord-device-daemon"]


def script(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    assert found, f"console script {name} is not installed next to {sys.executable}"
    return found


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60, env=env, check=False)


@pytest.mark.parametrize("name", SCRIPTS)
def test_help(name):
    result = run(script(name), "--help")
    assert result.returncode == 0
    assert "--feature-gates" in result.stdout
    assert "--v LEVEL" in result.stdout


@pytest.mark.parametrize("name", SCRIPTS)
@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        pytest.param(["--feature-gates=Foo=maybe"], "must be a bool", id="not-a-bool"),
        pytest.param(
            ["--feature-gates=NoSuchGate=true"], "unrecognized feature gate: NoSuchGate", id="unknown-gate"
        ),
        pytest.param(["--no-such-flag"], "--no-such-flag", id="unknown-flag"),
        pytest.param(["-v=loud"], "invalid verbosity", id="bad-verbosity"),
    ],
)
def test_usage_errors_exit_2_with_one_line(name, args, fragment):
    result = run(script(name), *args)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert fragment in lines[0]
    assert lines[0].startswith(f"{name}: error:")


def test_koordlet_version_names_the_backend():
    result = run(script("koordlet"), "--version")
    assert result.returncode == 0
    assert result.stdout.startswith("koordlet 0.1.0 (backend: ")
    assert "_cgroupfs=" in result.stdout
    assert "_perf=" in result.stdout
