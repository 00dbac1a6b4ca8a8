"""GPUDeviceCollector against the fake NVML driver: the series it writes, NVML held open
between rounds, its gate, and its usage reaching the NodeMetric status."""

from __future__ import annotations

import logging

import pytest

from koordlet.metriccache import MetricKind, kinds
from koordlet.metricsadvisor.collectors.gpu import GPUDeviceCollector
from koordlet.metricsadvisor.framework import CollectContext, CollectorRunner, build_collectors
from koordlet.metricsadvisor.registry import COLLECTORS
from koordlet.statesinformer.nodemetric import CollectPolicy, node_metric_status
from tests.fakes.host import FakeHost
from tests.koordlet.metricsadvisor.conftest import FakeStates, make_context
from testsupport.nvml import FakeGPU, FakeNVML, FakeProcess, FakeSample

GiB = 1 << 30
T0 = 1_000_000.0
DRIVER_NOT_LOADED = 9
UUID_0 = "GPU-0b6c7d3e-aaaa-bbbb-cccc-000000000000"
UUID_1 = "GPU-0b6c7d3e-aaaa-bbbb-cccc-111111111111"

GPU_0 = FakeGPU(
    "NVIDIA A100-SXM4-80GB",
    UUID_0,
    0,
    "0000:3B:00.0",
    80 * GiB,
    processes=(FakeProcess(100, 2 * GiB), FakeProcess(200, 6 * GiB)),
    samples=(FakeSample(100, 2_000, sm_util=30), FakeSample(200, 2_500, sm_util=45)),
)
GPU_1 = FakeGPU(
    "NVIDIA A100-SXM4-80GB",
    UUID_1,
    1,
    "0000:AF:00.0",
    40 * GiB,
    processes=(FakeProcess(300, 10 * GiB),),
    samples=(FakeSample(300, 3_000, sm_util=70),),
)
TWO_GPUS = FakeNVML(gpus=(GPU_0, GPU_1))


@pytest.fixture
def ctx(fake_host_v1: FakeHost) -> CollectContext:
    return make_context(fake_host_v1, FakeStates(fake_host_v1), {"Accelerators": True})


def _values(ctx: CollectContext, kind: MetricKind, minor: int, uuid: str) -> list[float]:
    result = ctx.cache.query(kind, 0, 1e12, gpu_minor=str(minor), gpu_device_uuid=uuid)
    return list(result.values) if result.count() else []


def test_a_round_writes_each_gpus_core_memory_and_total(ctx, nvml_fake):
    nvml_fake.configure(TWO_GPUS)
    collector = GPUDeviceCollector(ctx)
    assert collector.interval == ctx.config.collect_res_used_interval
    before = collector.started

    collector.collect(T0)

    assert (before, collector.started) == (False, True)
    assert _values(ctx, kinds.NODE_GPU_CORE_USAGE, 0, UUID_0) == [75.0]
    assert _values(ctx, kinds.NODE_GPU_MEMORY_USAGE, 0, UUID_0) == [8 * GiB]
    assert _values(ctx, kinds.NODE_GPU_MEMORY_TOTAL, 0, UUID_0) == [80 * GiB]
    assert _values(ctx, kinds.NODE_GPU_CORE_USAGE, 1, UUID_1) == [70.0]
    assert _values(ctx, kinds.NODE_GPU_MEMORY_USAGE, 1, UUID_1) == [10 * GiB]
    assert _values(ctx, kinds.NODE_GPU_MEMORY_TOTAL, 1, UUID_1) == [40 * GiB]
    assert ctx.cache.query(kinds.NODE_GPU_CORE_USAGE, 0, 1e12).timestamps == (T0, T0)
    assert collector.gpus() == ((0, UUID_0), (1, UUID_1))


def test_nvml_stays_initialised_between_rounds_until_closed(ctx, nvml_fake):
    nvml_fake.configure(TWO_GPUS)
    collector = GPUDeviceCollector(ctx)
    collector.collect(T0)
    assert nvml_fake.open_inits() == 1  # the collector's own hold; usage() balanced its init
    # the driver's answers change: the next round sees them
    busier = FakeGPU(GPU_1.name, UUID_1, 1, GPU_1.bus_id, 40 * GiB, processes=(FakeProcess(300, 20 * GiB),))
    nvml_fake.configure(FakeNVML(gpus=(GPU_0, busier)))
    collector.collect(T0 + 1)
    assert nvml_fake.open_inits() == 1
    assert _values(ctx, kinds.NODE_GPU_MEMORY_USAGE, 1, UUID_1) == [10 * GiB, 20 * GiB]
    assert _values(ctx, kinds.NODE_GPU_CORE_USAGE, 1, UUID_1) == [70.0, 0.0]  # no sample: 0 %

    collector.close()
    collector.close()  # once only
    assert nvml_fake.open_inits() == 0
    collector.collect(T0 + 2)  # after close: nothing asked, nothing held
    assert nvml_fake.open_inits() == 0
    assert len(_values(ctx, kinds.NODE_GPU_CORE_USAGE, 0, UUID_0)) == 2


def test_gpus_seen_once_stay_known(ctx, nvml_fake):
    """A GPU skipped by a round (a failing query) keeps its samples reportable."""
    nvml_fake.configure(TWO_GPUS)
    collector = GPUDeviceCollector(ctx)
    collector.collect(T0)
    nvml_fake.configure(FakeNVML(gpus=(GPU_1,)))
    collector.collect(T0 + 1)
    assert collector.gpus() == ((0, UUID_0), (1, UUID_1))
    collector.close()


def test_no_gpus_is_started_after_the_first_round(ctx, nvml_fake):
    nvml_fake.configure(FakeNVML())
    collector = GPUDeviceCollector(ctx)
    collector.collect(T0)
    assert collector.started
    assert collector.gpus() == ()
    assert ctx.cache.query(kinds.NODE_GPU_CORE_USAGE, 0, 1e12).count() == 0
    collector.close()
    assert nvml_fake.open_inits() == 0


def test_an_unusable_nvml_is_not_retried(ctx, nvml_fake, caplog):
    nvml_fake.configure(FakeNVML(gpus=(GPU_0,), init_error=DRIVER_NOT_LOADED))
    collector = GPUDeviceCollector(ctx)
    with caplog.at_level(logging.INFO):
        collector.collect(T0)
    assert collector.started
    assert nvml_fake.open_inits() == 0
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "NVML init failed: Driver Not Loaded"
    ]
    nvml_fake.configure(TWO_GPUS)  # the driver comes back: as upstream, not looked at again
    collector.collect(T0 + 1)
    assert ctx.cache.query(kinds.NODE_GPU_CORE_USAGE, 0, 1e12).count() == 0
    assert nvml_fake.open_inits() == 0
    collector.close()


def test_the_accelerators_gate_enables_it(fake_host_v1):
    assert ("GPU", GPUDeviceCollector) in COLLECTORS
    states = FakeStates(fake_host_v1)
    off = build_collectors(make_context(fake_host_v1, states), COLLECTORS)
    on = build_collectors(make_context(fake_host_v1, states, {"Accelerators": True}), COLLECTORS)
    assert not any(isinstance(c, GPUDeviceCollector) for c in off)
    assert [c for c in on if isinstance(c, GPUDeviceCollector)]


async def test_the_runner_closes_it_when_stopped(ctx, nvml_fake):
    nvml_fake.configure(TWO_GPUS)
    collector = GPUDeviceCollector(ctx)
    runner = CollectorRunner([collector], clock=lambda: T0)
    runner.start()
    await runner.wait_started()
    assert nvml_fake.open_inits() == 1
    await runner.stop()
    assert nvml_fake.open_inits() == 0
    assert runner.failures == {"GPU": 0}


def test_collected_usage_reaches_the_node_metric_status(ctx, nvml_fake):
    nvml_fake.configure(TWO_GPUS)
    collector = GPUDeviceCollector(ctx)
    for second in range(10):
        collector.collect(T0 - 9 + second)
    collector.close()
    status = node_metric_status(
        ctx.cache.query, CollectPolicy.of(None), [], [], [], T0, collector.gpus()
    ).to_dict()
    assert status["nodeMetric"]["nodeUsage"] == {
        "devices": [
            {
                "type": "gpu",
                "id": UUID_0,
                "minor": 0,
                "health": False,
                "resources": {
                    "koordinator.sh/gpu-core": "75",
                    "koordinator.sh/gpu-memory": "8Gi",
                    "koordinator.sh/gpu-memory-ratio": "10",
                },
            },
            {
                "type": "gpu",
                "id": UUID_1,
                "minor": 1,
                "health": False,
                "resources": {
                    "koordinator.sh/gpu-core": "70",
                    "koordinator.sh/gpu-memory": "10Gi",
                    "koordinator.sh/gpu-memory-ratio": "25",
                },
            },
        ]
    }
