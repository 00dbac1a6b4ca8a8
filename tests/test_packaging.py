"""Packaging: with ``KOORDLET_NO_EXTENSIONS=1`` the package builds and runs on a host without a C
compiler (a pure wheel, no compiled module; the koordlet on its Python twins), and the wheel
ships only what runs: no test support (the fake apiserver, envtest) and no tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: build output, caches and the virtualenv: a stale build/lib from an earlier build (say, of
#: a package since moved out of the wheel) would otherwise end up in the wheel
NOT_SOURCES = shutil.ignore_patterns(
    "build", ".venv", ".git", "*.egg-info", "__pycache__", ".*cache*", ".hypothesis", "out", "*.so"
)


def test_no_extensions_builds_a_pure_wheel_without_a_compiler_and_the_koordlet_runs_on_twins(tmp_path):
    # no compiler: any attempt to compile fails the build
    env = {**os.environ, "KOORDLET_NO_EXTENSIONS": "1", "CC": "/bin/false", "CXX": "/bin/false"}
    build = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    subprocess.run(
        [*build, "--wheel-dir", str(tmp_path / "dist"), str(source)],
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
        # the fake apiserver, envtest and the node tier serve tests only: they stay out of the wheel
        assert (ROOT / "testsupport" / "fake" / "server.py").is_file()
        assert [n for n in names if n.startswith(("testsupport/", "tests/", "benchmarks/"))] == []
        moved = ("koordinator/kube/fake/", "koordinator/kube/envtest/")
        assert [n for n in names if n.startswith(moved)] == []
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
