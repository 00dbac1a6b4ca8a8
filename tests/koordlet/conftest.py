"""Fixtures for koordlet tests: fake host trees, the two I/O backends and the fake NVML driver.

``fake_nvml`` compiles ``testsupport/nvml/fake_nvml.c`` into ``libnvidia-ml.so.1`` once per
session (skipped, with the reason, where there is no C compiler). ``nvml_fake`` loads it into
this process so that NVIDIA's real ``pynvml`` runs against it, and lets a test configure its GPUs.
"""

from __future__ import annotations

import ctypes
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import testsupport.nvml as fake
from koordlet.system import native
from koordlet.system.devices import nvml
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


@pytest.fixture(scope="session")
def fake_nvml(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built fake ``libnvidia-ml.so.1``."""
    if fake.compiler() is None:
        pytest.skip("no C compiler (cc or gcc) to build the fake libnvidia-ml.so.1")
    return fake.build(tmp_path_factory.mktemp("fake-nvml"))


@dataclass
class NVMLFake:
    library: Path
    handle: ctypes.CDLL
    config_path: Path
    monkeypatch: pytest.MonkeyPatch

    def configure(self, config: fake.FakeNVML) -> Path:
        """What the driver reports from the next nvmlInit on."""
        fake.write_config(config, self.config_path)
        self.monkeypatch.setenv(fake.CONFIG_ENV, str(self.config_path))
        return self.config_path

    def open_inits(self) -> int:
        """nvmlInit calls not yet matched by an nvmlShutdown."""
        return int(self.handle.fakeNvmlRefcount())


@pytest.fixture
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    # nvml logs each reason once per process; every test starts as a new process would
    monkeypatch.setattr(nvml, "_warned", set())


@pytest.fixture
def nvml_fake(
    fake_nvml: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _fresh_warnings: None
) -> Iterator[NVMLFake]:
    """pynvml loaded with the fake driver; no GPUs until :meth:`NVMLFake.configure`."""
    pytest.importorskip("pynvml")
    monkeypatch.delenv(fake.CONFIG_ENV, raising=False)
    handle = fake.preload(fake_nvml)
    yield NVMLFake(fake_nvml, handle, tmp_path / "fake-nvml.conf", monkeypatch)
    handle.fakeNvmlReset()
    fake.forget()
