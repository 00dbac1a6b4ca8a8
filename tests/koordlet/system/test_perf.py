"""perf_event_open: availability with the reason, and cgroup counter groups (host tier,
with software events: this machine has no PMU)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from koordlet.system import perf


def test_reading_scales_for_multiplexing():
    assert perf.Reading(100, 200, 100).scaled() == 200.0
    assert perf.Reading(100, 0, 0).scaled() == 100.0


@pytest.mark.parametrize("use_native", [True, False], ids=["cffi", "ctypes"])
def test_software_counter_counts_this_process(monkeypatch, use_native):
    from koordlet.system import native

    native.load.cache_clear()
    perf._backend.cache_clear()
    if not use_native:
        monkeypatch.setenv(native.NO_EXTENSIONS_ENV, "1")
    try:
        fd = perf.open_counter(perf.TASK_CLOCK)
    except OSError as err:
        pytest.skip(f"perf events unavailable here: {err}")
    try:
        perf.enable(fd)
        sum(range(200_000))
        perf.disable(fd)
        reading = perf.read(fd)
    finally:
        os.close(fd)
        native.load.cache_clear()
        perf._backend.cache_clear()
    assert reading.value > 0
    assert reading.time_enabled >= reading.time_running > 0


def test_supported_gives_a_reason_either_way():
    ok, why = perf.supported(perf.CPU_CLOCK)
    assert isinstance(ok, bool)
    assert why
    ok, why = perf.supported(perf.CYCLES)
    assert why
    if not ok:
        assert "cycles" in why


def _perf_event_cgroup_root() -> Path | None:
    v1 = Path("/sys/fs/cgroup/perf_event")
    if (v1 / "cgroup.procs").is_file():
        return v1
    for candidate in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if (candidate / "cgroup.controllers").is_file():
            return candidate  # perf_event is implicit on cgroup v2
    return None


def _cpu_time_ns(pid: int) -> int:
    """The nanoseconds a process has run on a CPU (``/proc/<pid>/schedstat``, first field)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


@pytest.mark.host
def test_cgroup_group_counts_only_the_cgroup(host_spawned_child):
    root = _perf_event_cgroup_root()
    if root is None or os.geteuid() != 0:
        pytest.skip("needs root and a perf_event cgroup hierarchy")
    cgroup = root / f"koord-test-perf-{uuid.uuid4().hex[:8]}"
    cgroup.mkdir()
    child = host_spawned_child()
    try:
        (cgroup / "cgroup.procs").write_text(str(child.pid))
        cpus = list(range(os.cpu_count() or 1))
        with perf.CgroupCounters(cgroup, cpus, (perf.CPU_CLOCK, perf.TASK_CLOCK)) as counters:
            counters.reset()
            before = _cpu_time_ns(child.pid)
            counters.enable()
            # count until the child has run 0.1 s, however busy the machine is
            deadline = time.monotonic() + 30
            while _cpu_time_ns(child.pid) - before < 0.1e9 and time.monotonic() < deadline:
                time.sleep(0.05)
            counters.disable()
            used = _cpu_time_ns(child.pid) - before
            totals = counters.read()
        # the cgroup holds only the child: its counters match the CPU time the kernel charged it
        assert used >= 0.1e9
        for event in ("cpu-clock", "task-clock"):
            assert 0.8 * used < totals[event] < 1.2 * used, (event, totals[event], used)
    finally:
        child.kill()
        child.wait()
        (cgroup.parent / "cgroup.procs").write_text("") if False else None
        deadline = time.monotonic() + 5
        while True:
            try:
                cgroup.rmdir()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


@pytest.fixture
def host_spawned_child():
    children: list[subprocess.Popen[bytes]] = []

    def spawn() -> subprocess.Popen[bytes]:
        child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        children.append(child)
        return child

    yield spawn
    for child in children:
        if child.poll() is None:
            child.kill()
            child.wait()
