"""The fake libnvidia-ml.so.1 behaves as NVML does where the real pynvml can tell.

If the fake drifted from NVML (a struct layout, a return code, the init count or a buffer
protocol), the discovery tests would pass against a driver that does not exist; these pin
the fake to what ``pynvml`` expects, through ``pynvml`` itself.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from testsupport.nvml import SONAME, FakeGPU, FakeNVML, FakeProcess, FakeSample

GiB = 1 << 30
GPU = FakeGPU(
    "NVIDIA H100 80GB HBM3",
    "GPU-11111111-2222-3333-4444-555555555555",
    5,
    "0000:9A:00.0",
    memory_total=80 * GiB,
    memory_used=3 * GiB,
    util_gpu=42,
    util_memory=17,
    pci_device_id=0x233010DE,
    processes=(FakeProcess(4242, 3 * GiB), FakeProcess(4343, None)),
    samples=(FakeSample(4242, 9_000, sm_util=55, mem_util=12),),
)


@pytest.fixture
def pynvml(nvml_fake):
    nvml_fake.configure(FakeNVML(gpus=(GPU,), driver_version="550.54.15"))
    import pynvml

    return pynvml


def test_every_call_before_init_is_uninitialized(pynvml):
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlSystemGetDriverVersion()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlShutdown()


def test_inits_are_counted(pynvml, nvml_fake):
    pynvml.nvmlInit()
    pynvml.nvmlInit()
    pynvml.nvmlShutdown()
    assert pynvml.nvmlDeviceGetCount() == 1  # still initialised once
    pynvml.nvmlShutdown()
    assert nvml_fake.open_inits() == 0
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_the_device_answers_through_the_real_structs(pynvml):
    pynvml.nvmlInit()
    try:
        assert pynvml.nvmlSystemGetDriverVersion() == "550.54.15"
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlDeviceGetName(handle) == "NVIDIA H100 80GB HBM3"
        assert pynvml.nvmlDeviceGetUUID(handle) == GPU.uuid
        assert pynvml.nvmlDeviceGetMinorNumber(handle) == 5
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        assert (memory.total, memory.used, memory.free) == (80 * GiB, 3 * GiB, 77 * GiB)
        memory_v2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
        assert (memory_v2.total, memory_v2.used, memory_v2.free) == (80 * GiB, 3 * GiB, 77 * GiB)
        pci = pynvml.nvmlDeviceGetPciInfo(handle)
        assert (pci.busIdLegacy, pci.busId) == ("0000:9A:00.0", "00000000:9A:00.0")
        assert (pci.domain, pci.bus, pci.device, pci.pciDeviceId) == (0, 0x9A, 0, 0x233010DE)
        rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
        assert (rates.gpu, rates.memory) == (42, 17)
        assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 0]
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        assert [(p.pid, p.usedGpuMemory, p.gpuInstanceId) for p in procs] == [
            (4242, 3 * GiB, 0xFFFFFFFF),
            (4343, None, 0xFFFFFFFF),  # NVML_VALUE_NOT_AVAILABLE
        ]
        samples = pynvml.nvmlDeviceGetProcessUtilization(handle, 1024)
        assert [(s.pid, s.timeStamp, s.smUtil, s.memUtil) for s in samples] == [(4242, 9_000, 55, 12)]
        with pytest.raises(pynvml.NVMLError_NotFound):  # nothing newer than the last sample
            pynvml.nvmlDeviceGetProcessUtilization(handle, 9_000)
        by_uuid = pynvml.nvmlDeviceGetHandleByUUID(GPU.uuid)
        assert pynvml.nvmlDeviceGetMinorNumber(by_uuid) == 5
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetHandleByUUID("GPU-nope")
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceGetHandleByIndex(1)
    finally:
        pynvml.nvmlShutdown()


def test_a_process_list_in_a_buffer_too_small_asks_for_more(pynvml, nvml_fake):
    import ctypes

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        count = ctypes.c_uint(1)
        infos = (pynvml.c_nvmlProcessInfo_v3_t * 1)()
        ret = nvml_fake.handle.nvmlDeviceGetComputeRunningProcesses_v3(handle, ctypes.byref(count), infos)
        assert (ret, count.value) == (pynvml.NVML_ERROR_INSUFFICIENT_SIZE, 2)
        name = ctypes.create_string_buffer(8)
        ret = nvml_fake.handle.nvmlDeviceGetName(handle, name, ctypes.c_uint(8))
        assert ret == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    finally:
        pynvml.nvmlShutdown()


PRELOADED = textwrap.dedent(
    """
    import ctypes, sys
    fake = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
    import pynvml
    pynvml.nvmlInit()
    print(pynvml.nvmlLib._handle == fake._handle, pynvml.nvmlSystemGetDriverVersion())
    pynvml.nvmlShutdown()
    """
)


def test_pynvml_finds_a_preloaded_fake_by_its_soname(fake_nvml, tmp_path):
    """What :func:`testsupport.nvml.preload` relies on, in a process with no other NVML loaded."""
    config = tmp_path / "fake-nvml.conf"
    config.write_text("driver\t1.2.3\n")
    done = subprocess.run(
        [sys.executable, "-c", PRELOADED, str(fake_nvml)],
        capture_output=True,
        text=True,
        env={"FAKE_NVML_CONFIG": str(config), "PATH": "/usr/bin:/bin"},
        timeout=60,
        check=True,
    )
    assert fake_nvml.name == SONAME
    assert done.stdout.split() == ["True", "1.2.3"]
