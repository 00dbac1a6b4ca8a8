"""PressureProbe: a jump of node CPU or memory past the NodeSLO's BE thresholds between two
collections asks the runner for the node and pod usage at once; hovering at a threshold,
a stale collection, a failing read or nothing to watch asks for nothing."""

from __future__ import annotations

import itertools
import logging
import random
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
    jumped,
    thresholds,
)
from koordlet.metricsadvisor.framework import CollectorRunner, UsagePoint
from koordlet.system import kernel
from tests.fakes.host import FakeHost
from tests.koordlet.metricsadvisor.conftest import FakeStates, make_context
from tests.polling import eventually

T0 = 1_700_000_000.0
GIB = 1 << 30
#: a node of 8 CPUs and 16 GiB: the CPU threshold is 5.2 cores (65 %), memory 11.2 GiB (70 %);
#: a jump is a rise of 0.8 cores or 1.6 GiB
NODE = {"status": {"capacity": {"cpu": "8", "memory": "16Gi"}}}
BOTH = {NodeResourceCollector.NAME, PodResourceCollector.NAME}


def _slo(**threshold: object) -> NodeSLOSpec:
    return merge_node_slo_spec(NodeSLOSpec.from_dict({"resourceUsedThresholdWithBE": threshold}))


class Node:
    """The fake host's /proc/stat and /proc/meminfo, advanced by cores and GiB, and the
    probe's monotonic clock (seconds from 0; the wall clock is ``T0`` later)."""

    def __init__(self, host: FakeHost) -> None:
        self.host = host
        self.busy = 0
        self.t = 0.0

    def run(self, cores: float, seconds: float, used_gib: float = 8) -> None:
        self.t += seconds
        self.busy += round(cores * seconds * kernel.clock_ticks())
        self.host.set_proc_stat([self.busy, 0, 0, 10**9, 0, 0, 0, 0])
        available = round((16 - used_gib) * (1 << 20))
        self.host.set_meminfo(MemTotal=16 << 20, MemFree=available, MemAvailable=available)


@pytest.fixture
def node(fake_host: FakeHost) -> Node:
    node = Node(fake_host)
    node.run(0, 0)
    return node


@pytest.fixture
def probe(fake_host: FakeHost, states: FakeStates, node: Node) -> PressureProbe:
    """A probe that has read once, after a collection (2 cores, 8 GiB) it has seen."""
    states.node = NODE
    states.slo = _slo(enable=True)
    ctx = make_context(fake_host, states, gates={"BEMemoryEvict": True})
    probe = PressureProbe(ctx, monotonic=lambda: node.t)
    collect(probe, 2.0, 8.0)
    probe.collect(T0 + node.t)
    return probe


def collect(probe: PressureProbe, cpu: float, memory_gib: float, at: float | None = None) -> None:
    """A collection of the usage collectors, as the probe sees it."""
    wall = T0 + (probe._monotonic() if at is None else at)
    probe.ctx.shared.node = UsagePoint(cpu, memory_gib * GIB, wall)


def tick(
    probe: PressureProbe, node: Node, cores: float, used_gib: float = 8, now: float | None = None
) -> set[str]:
    """A quarter second at ``cores`` and ``used_gib``, then a probe tick: what it asked for."""
    node.run(cores, 0.25, used_gib)
    probe.collect(T0 + node.t if now is None else now)
    return probe.ctx.hastening.take()


def test_a_jump_is_a_rise_of_a_tenth_of_the_capacity_to_or_past_the_threshold():
    assert jumped(6.0, 2.0, 65, 8)
    assert jumped(5.2, 2.0, 65, 8)  # at the threshold counts, as MemoryEvict's ">="
    assert not jumped(5.0, 2.0, 65, 8)  # below it
    assert not jumped(5.5, 5.1, 65, 8)  # hovering at the threshold: not a jump
    assert jumped(6.0, 5.1, 65, 8)  # rose by more than 0.8 cores
    assert not jumped(8.0, 2.0, None, 8)  # not watched
    assert not jumped(8.0, 2.0, 65, None)  # no capacity to compare with


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
    # BECPUManager: CPUSuppress only resets, so CPU is not watched
    assert thresholds(custom, FeatureGates(KOORDLET_FEATURES, {"BECPUManager": True})) == (None, None)


def test_capacity_reads_the_nodes_quantities():
    assert capacity(NODE, "cpu") == 8.0
    assert capacity({"status": {"capacity": {"cpu": "3500m"}}}, "cpu") == 3.5
    assert capacity(NODE, "memory") == 16 * GIB
    assert capacity(None, "cpu") is None
    assert capacity({"status": {"capacity": None}}, "cpu") is None
    assert capacity({"status": {"capacity": {"cpu": "lots"}}}, "cpu") is None
    assert capacity({"status": {"capacity": {"cpu": "0"}}}, "cpu") is None


def test_cpu_jump_past_the_suppress_threshold_hastens_the_usage_collectors(probe, node):
    assert tick(probe, node, cores=3) == set()  # below 5.2 cores
    assert tick(probe, node, cores=6) == BOTH


def test_memory_jump_past_the_eviction_threshold_hastens_the_usage_collectors(probe, node):
    assert tick(probe, node, cores=2, used_gib=11) == set()  # 69 %
    assert tick(probe, node, cores=2, used_gib=11.25) == BOTH  # 70.3 %, 3.25 GiB more


def test_hovering_at_a_threshold_is_not_a_jump(probe, node):
    collect(probe, 5.1, 11.0)
    assert tick(probe, node, cores=5.5, used_gib=11.3) == set()  # the first tick after it
    for _ in range(8):
        assert tick(probe, node, cores=5.5, used_gib=11.3) == set()


def test_not_on_the_first_tick_after_a_collection(probe, node):
    collect(probe, 2.0, 8.0)
    assert tick(probe, node, cores=6) == set()  # the strategies have just seen a collection
    assert tick(probe, node, cores=6) == BOTH


def test_at_most_once_every_two_collect_intervals(probe, node):
    assert tick(probe, node, cores=6) == BOTH
    asked = [node.t]
    collect(probe, 2.0, 8.0)  # the hastened collection (with the load of before)
    for _ in range(16):  # four seconds; the load stays a jump away from each collection
        if tick(probe, node, cores=6):
            asked.append(node.t)
            collect(probe, 2.0, 8.0)
    assert [b - a for a, b in itertools.pairwise(asked)] == [2.0, 2.0]


def test_nothing_while_the_usage_collectors_deliver_nothing(probe, node):
    for _ in range(9):  # the last collection is 2.25 s old at the end
        tick(probe, node, cores=2)
    assert tick(probe, node, cores=6) == set()
    collect(probe, 2.0, 8.0)
    tick(probe, node, cores=6)
    assert tick(probe, node, cores=6) == BOTH


def test_with_nothing_to_watch_it_looks_again_every_ten_intervals_and_reads_nothing(probe, node, states):
    assert probe.interval == 0.25
    states.slo = _slo(enable=False)
    node.host.write("proc/stat", "garbage\n")  # not read: no error
    node.t += 0.25
    probe.collect(T0 + node.t)
    assert probe.interval == 10.0  # one tick in ten seconds
    states.slo = _slo(enable=True)
    collect(probe, 2.0, 8.0)
    node.run(0, 10.0)
    probe.collect(T0 + node.t)  # primes again: no rate across the pause
    assert probe.interval == 0.25
    assert tick(probe, node, cores=6) == BOTH


def test_a_shorter_probe_interval_still_waits_a_quarter_interval_after_a_collection(fake_host, states, node):
    states.node = NODE
    states.slo = _slo(enable=True)
    ctx = make_context(fake_host, states, {"BEMemoryEvict": True}, pressure_probe_interval=0.05)
    probe = PressureProbe(ctx, monotonic=lambda: node.t)
    collect(probe, 2.0, 8.0)
    probe.collect(T0)
    for _ in range(4):  # 0.05 to 0.2 s after the collection
        node.run(6, 0.05)
        probe.collect(T0 + node.t)
        assert ctx.hastening.take() == set()
    node.run(6, 0.05)
    probe.collect(T0 + node.t)  # 0.25 s
    assert ctx.hastening.take() == BOTH


def test_a_failing_read_is_logged_once_until_it_reads_again(probe, node, caplog):
    caplog.set_level(logging.INFO, "koordlet.metricsadvisor.collectors.pressureprobe")
    node.host.write("proc/stat", "garbage\n")
    for _ in range(5):
        node.t += 0.25
        probe.collect(T0 + node.t)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "no probing until it can be read" in caplog.text
    node.run(2, 0)
    probe.collect(T0 + node.t)
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    assert tick(probe, node, cores=6) == BOTH  # primed by the read that came back


def test_off_at_zero_or_at_the_collect_interval(fake_host, states):
    assert PressureProbe(make_context(fake_host, states)).enabled()  # 250ms by default
    assert not PressureProbe(make_context(fake_host, states, pressure_probe_interval=0)).enabled()
    assert not PressureProbe(make_context(fake_host, states, pressure_probe_interval=1.0)).enabled()


def test_a_busy_node_hovering_at_the_threshold_gets_few_extra_collections(probe, node):
    """BE pods using all CPUSuppress leaves them keep the node at the threshold; with a
    second of noise of up to a core and a half either way, over ten minutes, collections
    every second plus the hastened ones (each moving the next regular one a second on)."""
    noise = random.Random(7)
    collections, hastened, due, last = 0, 0, 1.0, (node.busy, node.t)
    cores = 5.2
    for step in range(2400):  # 600 s of probe ticks
        if step % 4 == 0:
            cores = 5.2 + noise.uniform(-1.5, 1.5)
        asked = tick(probe, node, cores=cores)
        if asked or node.t >= due - 1e-9:
            cpu = (node.busy - last[0]) / (node.t - last[1]) / kernel.clock_ticks()
            collect(probe, cpu, 8.0)
            collections, hastened = collections + 1, hastened + bool(asked)
            due, last = node.t + 1.0, (node.busy, node.t)
    assert hastened > 0  # it does bring some forward
    assert collections <= 600 * 1.1  # 629 with this noise


async def test_in_the_runner_a_jump_brings_the_next_collection_forward(fake_host, states, node):
    """Wired as the agent wires it: collections every 60 s, the probe every 50 ms; memory
    jumping past the threshold is collected, and the listeners told, long before a minute."""
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
        assert ctx.shared.node.memory == 8 * GIB
        node.run(2, 0.05, used_gib=12)  # 75 %: past the 70 % eviction threshold, 4 GiB more
        await eventually(lambda: told.count(NodeResourceCollector.NAME) == 2, within=30)
    finally:
        await runner.stop()
    assert ctx.shared.node.memory == 12 * GIB  # the jump, collected ahead of the minute
    assert told.count(PodResourceCollector.NAME) == 2  # the strategies' wake needs both
