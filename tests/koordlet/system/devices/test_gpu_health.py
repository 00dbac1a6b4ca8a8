"""GPU health from NVML's critical Xid events (upstream's ``gpuHealCheck``): the watcher
against the real ``pynvml`` and the fake driver built with NVML's event entry points, and the
koordlet's Device report fed by it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest

from koordinator.kube import resources as res
from koordlet.statesinformer.device import DeviceReporter, DeviceSources
from koordlet.system.devices import nvml
from koordlet.system.devices.nvml import GPUFault, GPUHealthWatcher
from tests.koordlet.statesinformer.device_apiserver import validating_apiserver
from tests.polling import eventually
from testsupport.nvml import FakeError, FakeGPU, FakeNVML

NOT_SUPPORTED = 3
GPU_IS_LOST = 15
DRIVER_NOT_LOADED = 9
A = FakeGPU("NVIDIA A100-SXM4-80GB", "GPU-a", 0, "0000:3B:00.0")
B = FakeGPU("NVIDIA A100-SXM4-80GB", "GPU-b", 1, "0000:AF:00.0")
TWO = FakeNVML(gpus=(A, B), driver_version="550.54.15")
BUS_A, BUS_B = "0000:3b:00.0", "0000:af:00.0"


def xid(code: int) -> GPUFault:
    return GPUFault(f"Xid{code}", f"Xid error detected on device, error code: {code}")


def wait_for(predicate: Callable[[], object], within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.fixture
def watch(nvml_events_fake):
    """``watch()`` starts a watcher (waits 100 ms per event wait); all are stopped and joined
    after the test, and must have shut NVML down."""
    started: list[GPUHealthWatcher] = []

    def start(**kwargs: Any) -> GPUHealthWatcher:
        watcher = GPUHealthWatcher(wait_ms=100, **kwargs)
        watcher.start()
        started.append(watcher)
        assert watcher.ready.wait(20)
        return watcher

    yield start
    for watcher in started:
        watcher.stop()
        assert watcher.join(20)
    assert nvml_events_fake.open_inits() == 0


def test_a_critical_xid_marks_its_gpu_and_application_xids_do_not(nvml_events_fake, watch):
    nvml_events_fake.configure(TWO)
    watcher = watch()
    assert watcher.watched == (BUS_A, BUS_B)
    for code in sorted(nvml.APPLICATION_XIDS):
        nvml_events_fake.xid(0, code)
    nvml_events_fake.xid(1, 79)
    wait_for(watcher.faults)
    # the application errors came first, in the same file: none marked GPU 0
    assert watcher.faults() == {BUS_B: xid(79)}


def test_the_first_fault_stays(nvml_events_fake, watch):
    nvml_events_fake.configure(TWO)
    fired: list[int] = []
    watcher = watch(on_fault=lambda: fired.append(1))
    nvml_events_fake.xid(1, 79)
    nvml_events_fake.xid(1, 48)
    nvml_events_fake.xid(0, 48)
    wait_for(lambda: BUS_A in watcher.faults())
    assert watcher.faults() == {BUS_B: xid(79), BUS_A: xid(48)}
    assert len(fired) == 2  # once per GPU that became unhealthy


def test_an_event_naming_no_device_marks_every_gpu(nvml_events_fake, watch):
    nvml_events_fake.configure(TWO)
    watcher = watch()
    nvml_events_fake.xid(-1, 62)
    wait_for(lambda: len(watcher.faults()) == 2)
    assert watcher.faults() == {BUS_A: xid(62), BUS_B: xid(62)}


def test_a_gpu_that_cannot_report_xids_is_unhealthy_from_the_start(nvml_events_fake, watch):
    nvml_events_fake.configure(
        FakeNVML(gpus=(A, B), errors=(FakeError("nvmlDeviceRegisterEvents", NOT_SUPPORTED, 1),))
    )
    watcher = watch()
    assert watcher.watched == (BUS_A,)
    assert watcher.faults() == {
        BUS_B: GPUFault("DeviceHealthCheckNotSupported", "device does not support health checking")
    }


def test_after_an_xid_a_gpu_that_no_longer_answers_is_marked_too(nvml_events_fake, watch):
    nvml_events_fake.configure(TWO)
    watcher = watch()
    # GPU 1 falls off the bus: from the next nvmlInit on, its PCI info query fails
    lost = FakeError("nvmlDeviceGetPciInfo_v3", GPU_IS_LOST, 1)
    nvml_events_fake.configure(FakeNVML(gpus=(A, B), errors=(lost,)))
    assert nvml.summary()[0] is not None  # an init of its own reloads the driver's state
    nvml_events_fake.xid(0, 79)
    wait_for(lambda: len(watcher.faults()) == 2)
    assert watcher.faults() == {
        BUS_A: xid(79),
        BUS_B: GPUFault("Xid79", "failed to get device, error: GPU is lost"),
    }


def test_without_a_driver_nothing_is_watched_and_it_says_so_once(nvml_events_fake, watch, caplog):
    nvml_events_fake.configure(FakeNVML(gpus=(A,), init_error=DRIVER_NOT_LOADED))
    with caplog.at_level(logging.WARNING, logger=nvml.__name__):
        first, second = watch(), watch()
    assert first.join(20)
    assert second.join(20)
    assert (first.watched, first.faults()) == ((), {})
    assert [r.getMessage() for r in caplog.records] == [
        "GPU health check off: NVML init failed: Driver Not Loaded"
    ]


def test_a_driver_without_events_leaves_the_gpus_as_they_are(nvml_fake, caplog):
    nvml_fake.configure(FakeNVML(gpus=(A,)))  # the fake without the event entry points
    watcher = GPUHealthWatcher(wait_ms=100)
    with caplog.at_level(logging.WARNING, logger=nvml.__name__):
        watcher.start()
        assert watcher.join(20)
    assert watcher.faults() == {}
    assert [r.getMessage() for r in caplog.records] == [
        "GPU health check off: NVML cannot create an event set: Function Not Found"
    ]
    assert nvml_fake.open_inits() == 0


def test_faults_make_the_inventorys_gpus_unhealthy(nvml_events_fake, tmp_path):
    nvml_events_fake.configure(TWO)
    inventory, _ = nvml.discover(tmp_path / "sys")
    assert inventory is not None
    marked = nvml.with_faults(inventory, {BUS_B: xid(79)})
    assert [(g.uuid, g.healthy, g.err_code) for g in marked.gpus] == [
        ("GPU-a", True, ""),
        ("GPU-b", False, "Xid79"),
    ]
    assert nvml.with_faults(inventory, {}) is inventory


async def test_the_koordlet_reports_an_xid_in_its_device(nvml_events_fake, tmp_path):
    """The reporter starts the watcher itself, as upstream's states informer starts
    gpuHealCheck with the device report."""
    nvml_events_fake.configure(TWO)
    inventory, _ = nvml.discover(tmp_path / "sys")
    sources = DeviceSources(gpus=lambda: inventory)
    async with validating_apiserver() as fake, fake.client() as client:
        node = {"metadata": {"name": "n1", "uid": "node-uid"}}
        reporter = DeviceReporter(
            client,
            "n1",
            lambda: node,
            sources,
            interval=0.05,
            watch_gpu_health=lambda: GPUHealthWatcher(wait_ms=100),
        )
        task = asyncio.create_task(reporter.run())
        try:
            await eventually(
                lambda: reporter.health_watcher is not None and reporter.health_watcher.ready.is_set()
            )
            nvml_events_fake.xid(1, 79)

            def devices() -> dict[str, Any]:
                with contextlib.suppress(Exception):
                    return {d["id"]: d for d in fake.get(res.DEVICES, "n1")["spec"]["devices"]}
                return {}

            await eventually(lambda: devices().get("GPU-b", {}).get("health") is False, within=20)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        watcher = reporter.health_watcher
        assert watcher is not None
        assert await asyncio.to_thread(watcher.join, 20)
        found = devices()
    assert found["GPU-a"]["health"] is True
    assert "conditions" not in found["GPU-a"]
    (condition,) = found["GPU-b"]["conditions"]
    assert (condition["type"], condition["status"], condition["reason"], condition["message"]) == (
        "Healthy",
        "False",
        "Xid79",
        "Xid error detected on device, error code: 79",
    )
    assert nvml_events_fake.open_inits() == 0
