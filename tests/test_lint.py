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


def test_only_the_host_layer_imports_compiled_modules():
    offenders = []
    for path in sorted((ROOT / "koordlet").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[:2] in (("koordlet", "system"), ("koordlet", "_native")):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            if any(n == "koordlet._native" or n.startswith("koordlet._native.") for n in names):
                offenders.append(str(rel))
    assert not offenders, f"compiled modules imported outside koordlet.system: {offenders}"
