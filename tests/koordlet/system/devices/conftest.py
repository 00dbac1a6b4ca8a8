"""Fixtures for the device discovery tests.

``pynvml_opens`` points pynvml's loader at any file, to try a missing or broken library. The
fake NVML driver library itself (``fake_nvml``, ``nvml_fake``) is in ``tests/koordlet/conftest.py``,
for the collector and agent tests too.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import testsupport.nvml as fake


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
