"""The fake NVIDIA driver library with NVML's event entry points: ``testsupport/nvml``'s
``fake_nvml.c`` compiled together with ``fake_nvml_events.c`` (beside this file) into a
``libnvidia-ml.so.1`` of its own, so the GPU health watcher runs against the real ``pynvml``.

Events are lines appended to the file named by ``$FAKE_NVML_EVENTS`` (:data:`EVENTS_ENV`);
:func:`xid` writes one.
"""

from __future__ import annotations

from pathlib import Path

import testsupport.nvml as fake

EVENTS_ENV = "FAKE_NVML_EVENTS"
SOURCE = Path(__file__).with_name("fake_nvml_events.c")


def build(dest_dir: Path) -> Path:
    """Compile the fake with its event entry points into ``dest_dir/libnvidia-ml.so.1``."""
    combined = dest_dir / "fake_nvml_with_events.c"
    combined.write_text(
        "#define _POSIX_C_SOURCE 200809L\n"  # clock_gettime, nanosleep
        + fake.SOURCE.read_text()
        + "\n"
        + SOURCE.read_text()
    )
    return fake.compile_shared(combined, dest_dir / fake.SONAME, fake.SONAME)


def xid(events: Path, device: int, code: int) -> None:
    """Deliver a critical Xid ``code`` on GPU ``device`` (-1: an event naming no device)."""
    with events.open("a") as handle:
        handle.write(f"xid\t{device}\t{code}\n")
