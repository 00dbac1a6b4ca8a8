"""PressureProbe: a jump of node CPU or memory past the NodeSLO's BE thresholds between two
collections asks the runner for the node and pod usage at once (and nothing otherwise)."""

from __future__ import annotations

import time

import pytest

from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.metricsadvisor.collectors.noderesource import NodeResourceCollector
from koordlet.metricsadvisor.collectors.podresource import PodResourceCollector
from koordlet.metricsadvisor.collectors.pressureprobe import (
    PressureProbe,
    capacity,
    crossed,
    thresholds,
)
from koordlet.metricsadvisor.framework import CollectorRunner, UsagePoint
from koordlet.system import kernel
from tests.fakes.host import FakeHost
from tests.koordlet.metricsadvisor.conftest import FakeStates, make_context
from tests.polling import eventually

T0 = 1_700_000_000.0
GIB_KIB = 1 << 20
#: a node of 8 CPUs and 16 GiB: the CPU threshold is 5.2 cores (65 %), memory 11.2 GiB (70 %)
NODE = {"status": {"capacity": {"cpu": "8", "memory": "16Gi"}}}
BOTH = {NodeResourceCollector.NAME, PodResourceCollector.NAME}


def _slo(**threshold: object) -> NodeSLOSpec:
    return merge_node_slo_spec(NodeSLOSpec.from_dict({"resourceUsedThresholdWithBE": threshold}))


class Node:
    """The fake host's /proc/stat and /proc/meminfo, advanced by whole cores and GiB."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.busy = 0

    def run(self, cores: float, seconds: float, used_gib: float = 8) -> None:
        self.busy += int(cores * seconds * kernel.clock_ticks())
        self.host.set_proc_stat([self.busy, 0, 0, 10**9, 0, 0, 0, 0])
        available = int((16 - used_gib) * GIB_KIB)
        self.host.set_meminfo(MemTotal=16 * GIB_KIB, MemFree=available, MemAvailable=available)


@pytest.fixture
def node(fake_host: FakeHost) -> Node:
    node = Node(fake_host)
    node.run(0, 0)
    return node


@pytest.fixture
def probe(fake_host: FakeHost, states: FakeStates, node: Node) -> PressureProbe:
    states.node = NODE
    states.slo = _slo(enable=True)
    ctx = make_context(fake_host, states, gates={"BEMemoryEvict": True})
    probe = PressureProbe(ctx)
    probe.collect(T0)  # primes the CPU counter
    # the last collection, just before the priming read: 2 cores and 8 GiB
    ctx.shared.node = UsagePoint(2.0, 8.0 * (1 << 30), T0 - 0.25)
    return probe


def _probe(probe: PressureProbe, node: Node, now: float, cores: float, used_gib: float = 8) -> set[str]:
    node.run(cores, 0.25, used_gib)
    probe.collect(now)
    return probe.ctx.hastening.take()


def test_crossing_and_rising_further():
    # 65 % of 8 cores: 5.2
    assert crossed(6.0, 2.0, 65, 8)  # crossed since the collection
    assert crossed(5.2, 2.0, 65, 8)  # at the threshold counts, as MemoryEvict's ">="
    assert not crossed(5.0, 2.0, 65, 8)  # below it
    assert not crossed(6.0, 5.9, 65, 8)  # above, but the strategies already saw it
    assert crossed(6.5, 6.0, 65, 8)  # rose by a twentieth of the capacity while above
    assert not crossed(6.3, 6.0, 65, 8)
    assert not crossed(8.0, 2.0, None, 8)  # not watched
    assert not crossed(8.0, 2.0, 65, None)  # no capacity to compare with


def test_thresholds_follow_the_nodeslo_switch_the_gates_and_percents():
    gates = FeatureGates(KOORDLET_FEATURES, {"BEMemoryEvict": True})
    assert thresholds(None, gates) == (None, None)
    assert thresholds(merge_node_slo_spec(None), gates) == (None, None)  # the default switch is off
    assert thresholds(_slo(enable=True), gates) == (65, 70)
    custom = _slo(enable=True, cpuSuppressThresholdPercent=50, memoryEvictThresholdPercent=80)
    assert thresholds(custom, gates) == (50, 80)
    # BECPUSuppress is on by default; the memory evictions are off by default
    assert thresholds(custom, FeatureGates(KOORDLET_FEATURES, {})) == (50, None)
    assert thresholds(custom, FeatureGates(KOORDLET_FEATURES, {"MemoryEvict": True})) == (50, 80)
    off = FeatureGates(KOORDLET_FEATURES, {"BECPUSuppress": False, "BEMemoryEvict": True})
    assert thresholds(custom, off) == (None, 80)


def test_capacity_reads_the_nodes_quantities():
    assert capacity(NODE, "cpu") == 8.0
    assert capacity({"status": {"capacity": {"cpu": "3500m"}}}, "cpu") == 3.5
    assert capacity(NODE, "memory") == 16 * (1 << 30)
    assert capacity(None, "cpu") is None
    assert capacity({"status": {"capacity": None}}, "cpu") is None
    assert capacity({"status": {"capacity": {"cpu": "lots"}}}, "cpu") is None
    assert capacity({"status": {"capacity": {"cpu": "0"}}}, "cpu") is None


def test_cpu_jump_past_the_suppress_threshold_hastens_the_usage_collectors(probe, node):
    assert _probe(probe, node, T0 + 0.25, cores=3) == set()  # below 5.2 cores
    assert _probe(probe, node, T0 + 0.5, cores=6) == BOTH


def test_memory_reaching_the_eviction_threshold_hastens_the_usage_collectors(probe, node):
    assert _probe(probe, node, T0 + 0.25, cores=2, used_gib=11) == set()  # 69 %
    assert _probe(probe, node, T0 + 0.5, cores=2, used_gib=11.2) == BOTH  # 70 %


def test_at_most_once_per_collect_interval(probe, node):
    assert _probe(probe, node, T0 + 0.25, cores=6) == BOTH
    # the hastened collection has not run yet: pressure rises further, no second request
    assert _probe(probe, node, T0 + 0.5, cores=8, used_gib=14) == set()
    assert _probe(probe, node, T0 + 1.25, cores=8, used_gib=14) == BOTH  # an interval later


def test_nothing_right_after_a_collection(probe, node):
    probe.ctx.shared.node = UsagePoint(2.0, 8.0 * (1 << 30), T0 + 0.1)
    assert _probe(probe, node, T0 + 0.25, cores=6) == set()
    assert _probe(probe, node, T0 + 0.5, cores=6) == BOTH


def test_nothing_without_the_switch_a_collection_or_a_capacity(probe, node, states):
    states.slo = _slo(enable=False)
    assert _probe(probe, node, T0 + 0.25, cores=8, used_gib=15) == set()
    states.slo = _slo(enable=True)
    states.node = {"status": {}}  # no capacity: nothing to compare with
    assert _probe(probe, node, T0 + 0.5, cores=8, used_gib=15) == set()
    states.node = NODE
    probe.ctx.shared.node = None  # no collection yet
    assert _probe(probe, node, T0 + 0.75, cores=8, used_gib=15) == set()


def test_off_at_zero_or_at_the_collect_interval(fake_host, states):
    assert PressureProbe(make_context(fake_host, states)).enabled()  # 250ms by default
    assert not PressureProbe(make_context(fake_host, states, pressure_probe_interval=0)).enabled()
    assert not PressureProbe(make_context(fake_host, states, pressure_probe_interval=1.0)).enabled()


def test_reads_no_numa_files(fake_host, states, node):
    fake_host.write("sys/bus/node/devices/node0/meminfo", "garbage\n")
    probe = PressureProbe(make_context(fake_host, states))
    probe.collect(T0)
    assert probe._reader.read().numa == {}


def test_with_nothing_to_watch_it_ticks_with_the_collections_and_reads_nothing(probe, node, states):
    assert probe.interval == 0.25
    states.slo = _slo(enable=False)
    node.host.write("proc/stat", "garbage\n")  # not read: no error
    probe.collect(T0 + 0.25)
    assert probe.interval == 1.0  # in the collections' batch, no wake-up of its own
    states.slo = _slo(enable=True)
    node.run(0, 0)
    probe.collect(T0 + 1.25)  # primes again: no rate across the pause
    assert probe.interval == 0.25
    assert _probe(probe, node, T0 + 1.5, cores=6) == BOTH


async def test_in_the_runner_a_jump_brings_the_next_collection_forward(fake_host, states, node):
    """Wired as the agent wires it: collections every 60 s, the probe every 50 ms; memory
    crossing the threshold is collected, and the listeners told, long before a minute."""
    states.node = NODE
    states.slo = _slo(enable=True)
    intervals = {"collect_res_used_interval": 60.0, "pressure_probe_interval": 0.05}
    ctx = make_context(fake_host, states, {"BEMemoryEvict": True}, **intervals)
    usage = NodeResourceCollector(ctx)
    usage.collect(time.time() - 1)  # primed: the runner's first collection has a rate
    runner = CollectorRunner([usage, PodResourceCollector(ctx), PressureProbe(ctx)], hastening=ctx.hastening)
    told: list[str] = []
    runner.listeners.append(told.append)
    runner.start()
    try:
        await eventually(lambda: NodeResourceCollector.NAME in told, within=30)
        assert ctx.shared.node is not None
        assert ctx.shared.node.memory == 8 * (1 << 30)
        node.run(2, 0.05, used_gib=12)  # 75 %: past the 70 % eviction threshold
        await eventually(lambda: told.count(NodeResourceCollector.NAME) == 2, within=30)
    finally:
        await runner.stop()
    assert ctx.shared.node.memory == 12 * (1 << 30)  # the jump, collected ahead of the minute
    assert told.count(PodResourceCollector.NAME) == 2  # the strategies' wake needs both
