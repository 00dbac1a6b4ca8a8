"""Packaging: with ``KOORDLET_NO_EXTENSIONS=1`` the package builds and runs on a host without a C
compiler (a pure wheel, no compiled module; the koordlet on its Python twins)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_extensions_builds_a_pure_wheel_without_a_compiler_and_the_koordlet_runs_on_twins(tmp_path):
    # no compiler: any attempt to compile fails the build
    env = {**os.environ, "KOORDLET_NO_EXTENSIONS": "1", "CC": "/bin/false", "CXX": "/bin/false"}
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*build, "--wheel-dir", str(tmp_path / "dist"), str(ROOT)],
        check=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert [n for n in names if n.endswith((".so", ".pyd", ".c"))] == []
        assert "koordlet/system/native.py" in names
        archive.extractall(tmp_path / "site")

    run_env = {k: v for k, v in os.environ.items() if k != "KOORDLET_NO_EXTENSIONS"}
    run_env["PYTHONPATH"] = str(tmp_path / "site")
    probe = (
        "import koordlet.system.native as n, koordlet; "
        "print(koordlet.__file__); print(n.backend_name()); print(n.backend_report())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, env=run_env, cwd=tmp_path, capture_output=True, text=True
    ).stdout.splitlines()
    assert out[0].startswith(str(tmp_path / "site")), out
    assert out[1] == "python", out
    assert "extension not built" in out[2], out
