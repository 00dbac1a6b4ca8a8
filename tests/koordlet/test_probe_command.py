"""`koordlet probe` as a user runs it: flags for host roots, JSON identical on both backends."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.fakes.host import FakeHost
from tests.koordinator.test_cli import script


def probe_json(
    *flags: str, no_extensions: bool, extra_env: dict[str, str] | None = None
) -> dict[str, object]:
    env = dict(os.environ, **(extra_env or {}))
    env.pop("KOORDLET_NO_EXTENSIONS", None)
    if no_extensions:
        env["KOORDLET_NO_EXTENSIONS"] = "1"
    result = subprocess.run(
        [script("koordlet"), "probe", "--output", "json", *flags],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    data: dict[str, object] = json.loads(result.stdout)
    return data


def root_flags(root: Path) -> list[str]:
    return [
        f"--cgroup-root-dir={root / 'cgroup'}",
        f"--proc-root-dir={root / 'proc'}",
        f"--sys-root-dir={root / 'sys'}",
        f"--sys-fs-root-dir={root / 'sys' / 'fs'}",
        f"--var-run-root-dir={root / 'var' / 'run'}",
        f"--run-root-dir={root / 'run'}",
        f"--var-lib-kubelet-dir={root / 'var' / 'lib' / 'kubelet'}",
    ]


def test_probe_reads_the_roots_given_by_flags(tmp_path):
    FakeHost(tmp_path, "v2")
    data = probe_json(*root_flags(tmp_path), no_extensions=False)
    rows = {r["name"]: r for r in data["capabilities"]}  # type: ignore[attr-defined]
    assert rows["kernel"]["reason"] == "6.1.0-fake"
    assert rows["cgroup mode"]["reason"].startswith("v2 (unified)")


def test_probe_json_is_identical_without_extensions(tmp_path):
    FakeHost(tmp_path, "v1")
    flags = root_flags(tmp_path)
    assert probe_json(*flags, no_extensions=False) == probe_json(*flags, no_extensions=True)


@pytest.mark.host
def test_probe_of_this_machine_is_identical_without_extensions():
    env = {"agent_mode": "hostMode"}
    native = probe_json(no_extensions=False, extra_env=env)
    python = probe_json(no_extensions=True, extra_env=env)
    assert native == python
    rows = {r["name"]: r for r in native["capabilities"]}  # type: ignore[attr-defined]
    assert rows["psi"]["supported"] == Path("/proc/pressure/cpu").exists()
    assert rows["perf software events"]["supported"] is True


def test_a_reader_that_goes_away_is_not_an_error(tmp_path):
    """``koordlet probe | head -1``: the rest of the table is dropped quietly."""
    FakeHost(tmp_path, "v1")
    reader, writer = os.pipe()
    os.close(reader)
    try:
        result = subprocess.run(
            [script("koordlet"), "probe", *root_flags(tmp_path)],
            stdout=writer,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(writer)
    assert (result.returncode, result.stderr) == (0, "")
