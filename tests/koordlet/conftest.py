"""Fixtures for koordlet tests: fake host trees and the two I/O backends."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from koordlet.system import native
from koordlet.system.paths import HostPaths
from tests.fakes.host import FakeHost


@pytest.fixture(params=["v1", "v2"])
def fake_host(request, tmp_path) -> FakeHost:
    return FakeHost(tmp_path, request.param)


@pytest.fixture
def fake_host_v1(tmp_path) -> FakeHost:
    return FakeHost(tmp_path, "v1")


@pytest.fixture(params=["native", "python"])
def backend(request, monkeypatch) -> Iterator[str]:
    """Run the test body once per backend: the compiled extensions, then their Python twins."""
    native.load.cache_clear()
    if request.param == "python":
        monkeypatch.setenv(native.NO_EXTENSIONS_ENV, "1")
    else:
        monkeypatch.delenv(native.NO_EXTENSIONS_ENV, raising=False)
        if native.load("_cgroupfs") is None:
            pytest.fail("the native extension is not built; run `make install`")
    yield request.param
    native.load.cache_clear()


def _remove_cgroup_tree(top: Path) -> None:
    """rmdir a cgroup subtree bottom-up (cgroup files cannot be unlinked; empty dirs can be removed)."""
    if not top.exists():
        return
    for dirpath, _dirnames, _files in sorted(os.walk(top), key=lambda e: -len(e[0])):
        os.rmdir(dirpath)


@pytest.fixture
def host_cgroup_parent() -> Iterator[Callable[[str], Path]]:
    """Make a test-owned cgroup under a real v1 controller; everything made is removed afterwards.

    Only directories this fixture created are touched; no process is ever moved.
    """
    if os.geteuid() != 0:
        pytest.skip("host tier needs root to create cgroups")
    created: list[Path] = []
    name = f"koord-test-{uuid.uuid4().hex[:12]}"

    def make(controller: str) -> Path:
        base = HostPaths.host().cgroup(controller)
        if not (base / "cgroup.procs").is_file():
            pytest.skip(f"no cgroup v1 {controller} hierarchy at {base}")
        path = base / name
        path.mkdir()
        created.append(path)
        return path

    yield make
    for path in reversed(created):
        _remove_cgroup_tree(path)
    leaked = [str(p) for p in created if p.exists()]
    assert not leaked, f"test cgroups left behind: {leaked}"
