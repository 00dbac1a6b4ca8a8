"""Lint inside the suite: ruff, mypy (strict), import-linter layers, and the native-import rule."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["ruff", "check", "."], id="ruff-check"),
        pytest.param(["ruff", "format", "--check", "."], id="ruff-format"),
        pytest.param(["mypy"], id="mypy"),
        pytest.param(["lint-imports"], id="import-linter"),
    ],
)
def test_tool_is_clean(command):
    result = run_tool(str(BIN / command[0]), *command[1:])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("package", "compiled", "loader"),
    [
        pytest.param("koordlet", "koordlet._native", ("koordlet", "system"), id="koordlet"),
        pytest.param(
            "controlplane",
            "controlplane.scheduler._native",
            ("controlplane", "scheduler", "kernel"),
            id="scheduler",
        ),
    ],
)
def test_only_the_loader_imports_compiled_modules(package, compiled, loader):
    offenders = []
    private = tuple(compiled.split("."))
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[: len(loader)] == loader or rel.parts[: len(private)] == private:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            if any(n == compiled or n.startswith(f"{compiled}.") for n in names):
                offenders.append(str(rel))
    assert not offenders, f"compiled modules imported outside {'.'.join(loader)}: {offenders}"
