"""Fixtures for the device discovery tests.

``pynvml_opens`` points pynvml's loader at any file, to try a missing or broken library. The
fake NVML driver library itself (``fake_nvml``, ``nvml_fake``) is in ``tests/koordlet/conftest.py``,
for the collector and agent tests too; ``nvml_events`` loads the fake built with NVML's event
entry points (:mod:`tests.koordlet.system.devices.nvml_events`) for the GPU health watcher.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import testsupport.nvml as fake
from tests.koordlet.system.devices import nvml_events


@pytest.fixture
def pynvml_opens(monkeypatch: pytest.MonkeyPatch, _fresh_warnings: None) -> Iterator[Callable[[Path], None]]:
    """``pynvml_opens(path)``: pynvml's next library load dlopens ``path`` instead of the soname,
    so a test sees the real loader's failure for a missing or broken file."""
    pynvml = pytest.importorskip("pynvml")

    def opens(path: Path) -> None:
        def load(name: str, *args: Any, **kwargs: Any) -> ctypes.CDLL:
            assert name == fake.SONAME
            return ctypes.CDLL(str(path), *args, **kwargs)

        fake.forget()
        monkeypatch.setattr(pynvml, "CDLL", load)

    yield opens
    fake.forget()


@pytest.fixture(scope="session")
def fake_nvml_with_events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake ``libnvidia-ml.so.1`` with NVML's event entry points."""
    if fake.compiler() is None:
        pytest.skip("no C compiler (cc or gcc) to build the fake libnvidia-ml.so.1")
    return nvml_events.build(tmp_path_factory.mktemp("fake-nvml-events"))


@dataclass
class NVMLEvents:
    library: Path
    handle: ctypes.CDLL
    config_path: Path
    events: Path
    monkeypatch: pytest.MonkeyPatch

    def configure(self, config: fake.FakeNVML) -> Path:
        """What the driver reports from the next nvmlInit on."""
        fake.write_config(config, self.config_path)
        self.monkeypatch.setenv(fake.CONFIG_ENV, str(self.config_path))
        return self.config_path

    def xid(self, device: int, code: int) -> None:
        nvml_events.xid(self.events, device, code)

    def open_inits(self) -> int:
        """nvmlInit calls not yet matched by an nvmlShutdown."""
        return int(self.handle.fakeNvmlRefcount())

    def environ(self) -> dict[str, str]:
        """A child process's environment: this library, configuration and events file."""
        return {**fake.environ(self.library, self.config_path), nvml_events.EVENTS_ENV: str(self.events)}


@pytest.fixture
def nvml_events_fake(
    fake_nvml_with_events: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _fresh_warnings: None
) -> Iterator[NVMLEvents]:
    """pynvml loaded with the fake driver that delivers Xid events from a file."""
    pytest.importorskip("pynvml")
    events = tmp_path / "nvml-events"
    events.touch()
    monkeypatch.setenv(nvml_events.EVENTS_ENV, str(events))
    monkeypatch.delenv(fake.CONFIG_ENV, raising=False)
    handle = fake.preload(fake_nvml_with_events)
    yield NVMLEvents(fake_nvml_with_events, handle, tmp_path / "fake-nvml.conf", events, monkeypatch)
    handle.fakeNvmlReset()
    fake.forget()
