"""GPU discovery and usage through NVIDIA's real nvidia-ml-py, against the fake driver library.

Every test here runs the production code and the real ``pynvml`` binding; only
``libnvidia-ml.so.1`` is the suite's own (``testsupport/nvml``). The last test runs against the
real driver on a GPU machine.
"""

from __future__ import annotations

import ctypes.util
import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from koordlet.system.devices import nvml
from koordlet.system.devices.nvml import GPUInfo, GPUInventory, GPUUsage
from tests.fakes.host import FakeHost
from tests.koordlet.test_probe_command import probe_json, root_flags
from testsupport.nvml import (
    FakeError,
    FakeGPU,
    FakeNVML,
    FakeProcess,
    FakeSample,
    compile_shared,
    environ,
    write_config,
)

GiB = 1 << 30
DRIVER_NOT_LOADED = 9
NOT_SUPPORTED = 3
GPU_IS_LOST = 15

A100_0 = FakeGPU(
    "NVIDIA A100-SXM4-80GB", "GPU-0b6c7d3e-aaaa-bbbb-cccc-000000000000", 0, "0000:3B:00.0", 80 * GiB
)
A100_1 = FakeGPU(
    "NVIDIA A100-SXM4-80GB", "GPU-0b6c7d3e-aaaa-bbbb-cccc-111111111111", 1, "0000:AF:00.0", 80 * GiB
)
TWO_A100 = FakeNVML(gpus=(A100_0, A100_1), driver_version="535.161.08")


def sysfs_gpu(sys_root: Path, bdf: str, host_bridge: str, numa: str | None) -> None:
    """``devices/<host bridge>/<root port>/<bdf>`` and the ``bus/pci/devices/<bdf>`` link to it."""
    bus = host_bridge.removeprefix("pci")
    directory = sys_root / "devices" / host_bridge / f"{bus}:00.0" / bdf
    directory.mkdir(parents=True)
    if numa is not None:
        (directory / "numa_node").write_text(f"{numa}\n")
    link = sys_root / "bus" / "pci" / "devices" / bdf
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(f"../../../devices/{host_bridge}/{bus}:00.0/{bdf}")


@pytest.fixture
def sys_root(tmp_path):
    root = tmp_path / "sys"
    sysfs_gpu(root, "0000:3b:00.0", "pci0000:3a", "0")
    sysfs_gpu(root, "0000:af:00.0", "pci0000:ae", "1")
    return root


# --- discovery ------------------------------------------------------------------------------


def test_two_gpus_are_discovered_with_their_topology(nvml_fake, sys_root):
    assert os.readlink(sys_root / "bus/pci/devices/0000:3b:00.0") == (
        "../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"
    )
    nvml_fake.configure(TWO_A100)

    inventory, reason = nvml.discover(sys_root)

    assert inventory == GPUInventory(
        gpus=(
            GPUInfo(
                index=0,
                uuid="GPU-0b6c7d3e-aaaa-bbbb-cccc-000000000000",
                minor=0,
                name="NVIDIA A100-SXM4-80GB",
                memory_total=80 * GiB,
                bus_id="0000:3b:00.0",
                mig_enabled=False,
                healthy=True,
                numa_node=0,
                pcie_root="pci0000:3a",
            ),
            GPUInfo(
                index=1,
                uuid="GPU-0b6c7d3e-aaaa-bbbb-cccc-111111111111",
                minor=1,
                name="NVIDIA A100-SXM4-80GB",
                memory_total=80 * GiB,
                bus_id="0000:af:00.0",
                mig_enabled=False,
                healthy=True,
                numa_node=1,
                pcie_root="pci0000:ae",
            ),
        ),
        driver_version="535.161.08",
        model="A100-SXM4-80GB",
    )
    assert reason == "2 GPU(s), driver 535.161.08"
    assert nvml_fake.open_inits() == 0  # NVML was shut down again


def test_a_gpu_sysfs_does_not_know_has_no_topology(nvml_fake, tmp_path):
    nvml_fake.configure(FakeNVML(gpus=(A100_0,)))
    inventory, _ = nvml.discover(tmp_path / "empty-sys")
    assert inventory is not None
    assert (inventory.gpus[0].numa_node, inventory.gpus[0].pcie_root) == (None, "")


def test_no_numa_affinity_is_node_zero(nvml_fake, tmp_path):
    sysfs_gpu(tmp_path / "sys", "0000:3b:00.0", "pci0000:3a", "-1")
    nvml_fake.configure(FakeNVML(gpus=(A100_0,)))
    inventory, _ = nvml.discover(tmp_path / "sys")
    assert inventory is not None
    assert inventory.gpus[0].numa_node == 0


def test_a_driver_without_gpus_gives_an_empty_inventory(nvml_fake, sys_root):
    nvml_fake.configure(FakeNVML(driver_version="550.54.15"))
    assert nvml.discover(sys_root) == (
        GPUInventory(gpus=(), driver_version="550.54.15", model=""),
        "NVML driver 550.54.15 reports no GPUs",
    )


@pytest.mark.parametrize(
    ("names", "model"),
    [
        pytest.param(["NVIDIA A100-SXM4-80GB"] * 2, "A100-SXM4-80GB", id="prefix-dropped"),
        pytest.param(["A100 SXM4 80GB"], "A100-SXM4-80GB", id="spaces-to-dashes"),
        pytest.param(["Tesla T4", "Tesla T4"], "Tesla-T4", id="old-driver-name"),
        pytest.param(["NVIDIA H100 80GB HBM3"], "H100-80GB-HBM3", id="both"),
        pytest.param(["NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB"], "", id="mixed-models"),
        pytest.param(["", ""], "", id="no-name"),
        pytest.param([], "", id="no-gpus"),
    ],
)
def test_model_label(names, model):
    assert nvml.model_name(names) == model


def test_mixed_gpus_have_no_model(nvml_fake, sys_root):
    t4 = FakeGPU("Tesla T4", "GPU-t4", 1, "0000:AF:00.0", 15 * GiB)
    nvml_fake.configure(FakeNVML(gpus=(A100_0, t4)))
    inventory, _ = nvml.discover(sys_root)
    assert inventory is not None
    assert [g.name for g in inventory.gpus] == ["NVIDIA A100-SXM4-80GB", "Tesla T4"]
    assert inventory.model == ""


MIG_ON = FakeGPU("NVIDIA A100-SXM4-80GB", "GPU-a", 0, "0000:3B:00.0", mig_current=1, mig_pending=1)
MIG_PENDING = FakeGPU("NVIDIA A100-SXM4-80GB", "GPU-a", 0, "0000:3B:00.0", mig_pending=1)
NO_MIG = FakeGPU("Tesla T4", "GPU-a", 0, "0000:3B:00.0")


@pytest.mark.parametrize(
    ("gpu", "errors", "enabled"),
    [
        pytest.param(MIG_ON, (), True, id="enabled"),
        pytest.param(MIG_PENDING, (), False, id="pending-until-reset"),
        pytest.param(NO_MIG, (FakeError("nvmlDeviceGetMigMode", NOT_SUPPORTED),), False, id="not-supported"),
    ],
)
def test_mig_mode(nvml_fake, sys_root, gpu, errors, enabled):
    nvml_fake.configure(FakeNVML(gpus=(gpu,), errors=errors))
    inventory, _ = nvml.discover(sys_root)
    assert inventory is not None
    assert inventory.gpus[0].mig_enabled is enabled


# --- discovery failures -----------------------------------------------------------------------


def test_a_driver_that_is_not_loaded_gives_no_gpus_and_says_so_once(nvml_fake, sys_root, caplog):
    nvml_fake.configure(FakeNVML(gpus=(A100_0,), init_error=DRIVER_NOT_LOADED))
    with caplog.at_level(logging.WARNING, logger=nvml.__name__):
        first = nvml.discover(sys_root)
        second = nvml.discover(sys_root)
    assert first == second == (None, "NVML init failed: Driver Not Loaded")
    assert [r.getMessage() for r in caplog.records] == ["NVML init failed: Driver Not Loaded"]
    assert nvml_fake.open_inits() == 0


@pytest.mark.parametrize(
    ("function", "device", "reason"),
    [
        ("nvmlDeviceGetCount_v2", -1, "NVML query failed: GPU is lost"),
        ("nvmlSystemGetDriverVersion", -1, "NVML query failed: GPU is lost"),
        ("nvmlDeviceGetHandleByIndex_v2", -1, "NVML query of GPU 0 failed: GPU is lost"),
        ("nvmlDeviceGetUUID", 1, "NVML query of GPU 1 failed: GPU is lost"),
        ("nvmlDeviceGetMinorNumber", 1, "NVML query of GPU 1 failed: GPU is lost"),
        ("nvmlDeviceGetMemoryInfo", 0, "NVML query of GPU 0 failed: GPU is lost"),
        ("nvmlDeviceGetPciInfo_v3", 1, "NVML query of GPU 1 failed: GPU is lost"),
        ("nvmlDeviceGetMigMode", 0, "NVML query of GPU 0 failed: GPU is lost"),
    ],
)
def test_one_failing_device_call_fails_the_inventory(nvml_fake, sys_root, caplog, function, device, reason):
    """As upstream's initGPUData: a partial list would under-report the node."""
    nvml_fake.configure(FakeNVML(gpus=(A100_0, A100_1), errors=(FakeError(function, GPU_IS_LOST, device),)))
    with caplog.at_level(logging.WARNING, logger=nvml.__name__):
        assert nvml.discover(sys_root) == (None, reason)
    assert [r.getMessage() for r in caplog.records] == [reason]
    assert nvml_fake.open_inits() == 0  # shut down after the failure too


@pytest.mark.parametrize(
    ("function", "known"),
    [
        pytest.param(
            "nvmlDeviceGetMemoryInfo", {"name": "NVIDIA A100-SXM4-80GB", "memory_total": 0}, id="memory"
        ),
        pytest.param("nvmlDeviceGetName", {"name": "", "memory_total": 80 * GiB}, id="name"),
        pytest.param("nvmlDeviceGetMigMode", {"mig_enabled": False}, id="mig"),
        pytest.param("nvmlDeviceGetPciInfo_v3", {"bus_id": "", "numa_node": None, "pcie_root": ""}, id="pci"),
    ],
)
def test_per_gpu_a_failing_query_makes_only_that_gpu_unhealthy(nvml_fake, sys_root, function, known):
    """koord-device-daemon's discovery: upstream's managers skip the failing device, not the
    round."""
    nvml_fake.configure(FakeNVML(gpus=(A100_0, A100_1), errors=(FakeError(function, GPU_IS_LOST, 1),)))
    inventory, reason = nvml.discover(sys_root, per_gpu=True)
    assert inventory is not None
    good, failing = inventory.gpus
    assert (good.healthy, good.err_code, good.memory_total, good.numa_node) == (True, "", 80 * GiB, 0)
    assert (failing.uuid, failing.minor, failing.healthy) == (A100_1.uuid, 1, False)
    assert failing.err_code == "GpuIsLost"
    assert failing.err_message.endswith("query failed: GPU is lost")
    assert {k: getattr(failing, k) for k in known} == known
    assert reason == "2 GPU(s), driver 550.54.15; 1 unhealthy"
    assert inventory.model == ("" if function == "nvmlDeviceGetName" else "A100-SXM4-80GB")
    assert nvml_fake.open_inits() == 0


@pytest.mark.parametrize("function", ["nvmlDeviceGetUUID", "nvmlDeviceGetMinorNumber"])
def test_per_gpu_a_gpu_nvml_cannot_identify_is_left_out(nvml_fake, sys_root, caplog, function):
    nvml_fake.configure(FakeNVML(gpus=(A100_0, A100_1), errors=(FakeError(function, GPU_IS_LOST, 1),)))
    with caplog.at_level(logging.WARNING, logger=nvml.__name__):
        inventory, reason = nvml.discover(sys_root, per_gpu=True)
    assert inventory is not None
    assert [g.uuid for g in inventory.gpus] == [A100_0.uuid]
    assert inventory.dropped == ("GPU 1 left out: NVML cannot identify it: GPU is lost",)
    assert (
        reason
        == "2 GPU(s), driver 550.54.15; 1 left out (GPU 1 left out: NVML cannot identify it: GPU is lost)"
    )
    assert [r.getMessage() for r in caplog.records] == [
        "GPU 1 left out: NVML cannot identify it: GPU is lost"
    ]


def test_per_gpu_no_gpu_identified_is_an_empty_list_with_every_gpu_dropped(nvml_fake, sys_root):
    nvml_fake.configure(
        FakeNVML(gpus=(A100_0, A100_1), errors=(FakeError("nvmlDeviceGetHandleByIndex_v2", GPU_IS_LOST),))
    )
    inventory, _ = nvml.discover(sys_root, per_gpu=True)
    assert inventory is not None
    assert (inventory.gpus, len(inventory.dropped)) == ((), 2)


def test_per_gpu_nvml_failing_as_a_whole_still_gives_none(nvml_fake, sys_root):
    nvml_fake.configure(FakeNVML(gpus=(A100_0,), errors=(FakeError("nvmlDeviceGetCount_v2", GPU_IS_LOST),)))
    assert nvml.discover(sys_root, per_gpu=True) == (None, "NVML query failed: GPU is lost")


def test_a_missing_library_gives_no_gpus_and_one_clear_line(pynvml_opens, tmp_path, caplog):
    pynvml_opens(tmp_path / "lib" / "libnvidia-ml.so.1")  # nothing there
    with caplog.at_level(logging.WARNING, logger=nvml.__name__):
        inventory, reason = nvml.discover(tmp_path / "sys")
        used, usage_reason = nvml.usage()
    assert inventory is None
    assert reason.startswith("NVML library not found (libnvidia-ml.so.1 ")
    assert (used, usage_reason) == ([], reason)
    assert [r.getMessage() for r in caplog.records] == [reason]


def test_a_file_that_is_not_a_library_is_a_missing_library(pynvml_opens, tmp_path):
    broken = tmp_path / "libnvidia-ml.so.1"
    broken.write_bytes(b"\x7fELF but not really\n")
    pynvml_opens(broken)
    inventory, reason = nvml.discover(tmp_path / "sys")
    assert inventory is None
    assert reason.startswith("NVML library not found")


def test_a_library_without_nvml_symbols_gives_no_gpus(pynvml_opens, fake_nvml, tmp_path):
    source = tmp_path / "empty.c"
    source.write_text("int not_nvml(void) { return 0; }\n")
    pynvml_opens(compile_shared(source, tmp_path / "libempty.so", "libempty.so"))
    assert nvml.discover(tmp_path / "sys") == (None, "NVML init failed: Function Not Found")
    assert nvml.usage() == ([], "NVML init failed: Function Not Found")


# --- usage ---------------------------------------------------------------------------------------


def test_usage_sums_the_processes_of_each_gpu(nvml_fake):
    busy = FakeGPU(
        "A100",
        "GPU-busy",
        3,
        "0000:3B:00.0",
        40 * GiB,
        processes=(
            FakeProcess(100, 2 * GiB),
            FakeProcess(200, 1 * GiB),
            FakeProcess(300, None),  # memory not available: counts 0
        ),
        samples=(
            FakeSample(100, 2_000, sm_util=30),
            FakeSample(100, 3_000, sm_util=40),  # the latest sample of a pid wins
            FakeSample(200, 2_500, sm_util=25),
            FakeSample(999, 2_500, sm_util=50),  # a process that is gone: ignored
            FakeSample(300, 500, sm_util=90),  # before LAST_SEEN_US: not returned by NVML
        ),
    )
    idle = FakeGPU("A100", "GPU-idle", 4, "0000:AF:00.0", 40 * GiB)
    nvml_fake.configure(FakeNVML(gpus=(busy, idle)))

    used, reason = nvml.usage()

    assert used == [
        GPUUsage(
            uuid="GPU-busy",
            minor=3,
            core_percent=65.0,
            memory_used=3 * GiB,
            memory_total=40 * GiB,
            pid_usage={100: (40.0, 2 * GiB), 200: (25.0, 1 * GiB), 300: (0.0, 0)},
        ),
        GPUUsage(
            uuid="GPU-idle", minor=4, core_percent=0.0, memory_used=0, memory_total=40 * GiB, pid_usage={}
        ),
    ]
    assert reason == "2 of 2 GPU(s) sampled"
    assert nvml_fake.open_inits() == 0


def test_processes_without_samples_still_count_their_memory(nvml_fake):
    gpu = FakeGPU("A100", "GPU-a", 0, "0000:3B:00.0", processes=(FakeProcess(7, GiB),))
    nvml_fake.configure(FakeNVML(gpus=(gpu,)))
    used, _ = nvml.usage()
    assert [(u.core_percent, u.memory_used, dict(u.pid_usage)) for u in used] == [(0.0, GiB, {7: (0.0, GiB)})]


def test_many_processes_go_through_the_size_protocol(nvml_fake):
    processes = tuple(FakeProcess(1000 + i, GiB // 64) for i in range(60))
    samples = tuple(FakeSample(1000 + i, 5_000, sm_util=1) for i in range(60))
    gpu = FakeGPU("A100", "GPU-a", 0, "0000:3B:00.0", processes=processes, samples=samples)
    nvml_fake.configure(FakeNVML(gpus=(gpu,)))
    used, _ = nvml.usage()
    assert (used[0].core_percent, used[0].memory_used, len(used[0].pid_usage)) == (60.0, 60 * GiB // 64, 60)


@pytest.mark.parametrize(
    ("function", "code", "text"),
    [
        ("nvmlDeviceGetComputeRunningProcesses_v3", GPU_IS_LOST, "GPU is lost"),
        ("nvmlDeviceGetProcessUtilization", NOT_SUPPORTED, "Not Supported"),
        ("nvmlDeviceGetMemoryInfo", GPU_IS_LOST, "GPU is lost"),
    ],
)
def test_a_device_whose_usage_fails_is_skipped(nvml_fake, caplog, function, code, text):
    good = FakeGPU("A100", "GPU-good", 0, "0000:3B:00.0", processes=(FakeProcess(1, GiB),))
    bad = FakeGPU("A100", "GPU-bad", 1, "0000:AF:00.0", processes=(FakeProcess(2, GiB),))
    nvml_fake.configure(FakeNVML(gpus=(good, bad), errors=(FakeError(function, code, device=1),)))
    with caplog.at_level(logging.WARNING, logger=nvml.__name__):
        used, reason = nvml.usage()
        nvml.usage()
    assert [u.uuid for u in used] == ["GPU-good"]
    assert reason == f"1 of 2 GPU(s) sampled; GPU 1 skipped: {text}"
    assert [r.getMessage() for r in caplog.records] == [f"GPU 1 skipped: {text}"]


def test_usage_when_the_driver_is_not_loaded(nvml_fake):
    nvml_fake.configure(FakeNVML(gpus=(A100_0,), init_error=DRIVER_NOT_LOADED))
    assert nvml.usage() == ([], "NVML init failed: Driver Not Loaded")


# --- hold ----------------------------------------------------------------------------------------


def test_hold_keeps_one_init_until_released(nvml_fake):
    nvml_fake.configure(TWO_A100)
    release = nvml.hold()
    assert release is not None
    assert nvml_fake.open_inits() == 1
    used, _ = nvml.usage()  # its own init and shutdown, inside the held one
    assert [u.uuid for u in used] == [A100_0.uuid, A100_1.uuid]
    assert nvml_fake.open_inits() == 1
    release()
    release()  # once only
    assert nvml_fake.open_inits() == 0


def test_hold_without_a_usable_driver_is_none_and_says_why_once(nvml_fake, caplog):
    nvml_fake.configure(FakeNVML(gpus=(A100_0,), init_error=DRIVER_NOT_LOADED))
    with caplog.at_level(logging.WARNING, logger=nvml.__name__):
        assert nvml.hold() is None
        assert nvml.hold() is None
        assert nvml.usage() == ([], "NVML init failed: Driver Not Loaded")
    assert [r.getMessage() for r in caplog.records] == ["NVML init failed: Driver Not Loaded"]
    assert nvml_fake.open_inits() == 0


def test_hold_with_a_missing_library_is_none(pynvml_opens, tmp_path):
    pynvml_opens(tmp_path / "lib" / "libnvidia-ml.so.1")
    assert nvml.hold() is None


def test_hold_never_raises(monkeypatch):
    def broken() -> object:
        raise RuntimeError("boom")

    monkeypatch.setattr(nvml, "_pynvml", broken)
    monkeypatch.setattr(nvml, "_warned", set())
    assert nvml.hold() is None


# --- koordlet probe -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "row"),
    [
        pytest.param(TWO_A100, {"supported": True, "reason": "2 GPU(s), driver 535.161.08"}, id="two-gpus"),
        pytest.param(
            FakeNVML(gpus=(A100_0,), init_error=DRIVER_NOT_LOADED),
            {"supported": False, "reason": "NVML unavailable: Driver Not Loaded"},
            id="driver-not-loaded",
        ),
    ],
)
def test_probe_reports_the_gpus_of_the_library_on_the_loader_path(fake_nvml, tmp_path, config, row):
    FakeHost(tmp_path, "v2")
    config_path = write_config(config, tmp_path / "fake-nvml.conf")
    env = environ(fake_nvml, config_path)
    data = probe_json(*root_flags(tmp_path), no_extensions=False, extra_env=env)
    rows = {r["name"]: r for r in data["capabilities"]}  # type: ignore[attr-defined]
    assert rows["GPU (NVML)"] == {"name": "GPU (NVML)", **row}


# --- the real driver -----------------------------------------------------------------------------

DISCOVER_JSON = textwrap.dedent(
    """
    import dataclasses, json, sys
    from pathlib import Path
    from koordlet.system.devices import nvml
    inventory, reason = nvml.discover(Path("/sys"))
    print(json.dumps({"inventory": inventory and dataclasses.asdict(inventory), "reason": reason}))
    """
)


@pytest.mark.gpu
def test_the_real_driver_lists_this_machines_gpus():
    """In a fresh process, so that the fake this suite preloads cannot stand in for the driver."""
    if ctypes.util.find_library("nvidia-ml") is None:
        pytest.skip("no NVIDIA driver library (libnvidia-ml.so.1) on this machine")
    env = {k: v for k, v in os.environ.items() if k != "FAKE_NVML_CONFIG"}
    done = subprocess.run(
        [sys.executable, "-c", DISCOVER_JSON],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    found = json.loads(done.stdout)
    inventory = found["inventory"]
    assert inventory is not None, found["reason"]
    assert inventory["gpus"], found["reason"]
    assert inventory["driver_version"]
    for gpu in inventory["gpus"]:
        assert gpu["uuid"].startswith(("GPU-", "MIG-"))
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", gpu["bus_id"])
        assert gpu["memory_total"] > 0
        assert Path(f"/dev/nvidia{gpu['minor']}").exists()
        assert Path(f"/sys/bus/pci/devices/{gpu['bus_id']}").exists()
