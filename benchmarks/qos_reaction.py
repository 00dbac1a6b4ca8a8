"""K4: how fast the koordlet reacts to pressure, in collect intervals.

The real collectors (node and pod resources, 1 s interval, and the pressure probe, every
250 ms), metric cache, QoS runner, CPUSuppress (policy cfsQuota) and MemoryEvict run
in-process on a fake host tree whose counters a feeder thread advances like a busy node
would, wired as the agent wires them (the strategies are woken once both usage collectors
have delivered; the probe's requests go to the runner). Two situations, each repeated:

* LS usage jumps from 1 to 5 cores at t0 (node CPU from 2.2 to 6.2 of 8 cores, past the
  65 % suppress threshold) -> time until the BE tier's CFS quota file holds a smaller
  value (``cpu_reaction_ms``);
* node memory goes from 50 % to 80 % at t0 (past the 70 % eviction threshold) -> time
  until the evictor is asked to evict the BE pod (``memory_reaction_ms``).

Each trial starts the collectors afresh and lets them settle for 3.5 s plus a share of
the interval that differs from trial to trial (``i * 0.37`` modulo the interval), so the
pressure lands at spread points of the collection and probe cycles.
``reaction_to_interval_ratio`` is the slower of the two medians over the collect interval
(K4 target <= 0.5); ``*_reaction_max_ms`` are the slowest trials. The same trials without
the probe (the strategies then wait for the next regular collection) give
``*_reaction_no_probe_ms`` and ``no_probe_reaction_to_interval_ratio``, in the same run.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from benchmarks._fakehost import write_in_place
from benchmarks.harness import Result
from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.kubeqos import KubeQOSClass
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.executor import ResourceUpdateExecutor
from koordlet.metriccache import KVStore, MetricCache, kinds
from koordlet.metrics import KoordletMetrics
from koordlet.metricsadvisor.collectors.nodeinfo import NodeInfoCollector
from koordlet.metricsadvisor.collectors.noderesource import NodeResourceCollector
from koordlet.metricsadvisor.collectors.podresource import PodResourceCollector
from koordlet.metricsadvisor.collectors.pressureprobe import PressureProbe
from koordlet.metricsadvisor.framework import CollectContext, Collector, CollectorConfig, CollectorRunner
from koordlet.qosmanager.framework import (
    CgroupView,
    Eviction,
    HostFacts,
    MetricsView,
    NodeView,
    QoSManager,
    Snapshot,
)
from koordlet.qosmanager.strategies.cpu_suppress import CPUSuppress
from koordlet.qosmanager.strategies.memory_evict import MemoryEvict
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.system import kernel
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.paths import HostPaths

NAME = "qos_reaction"
INTERVAL = 1.0
CAPACITY_CORES = 8
MEM_TOTAL_KIB = 16 * 1024 * 1024
LS_UID, BE_UID = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"


def _write(path: Path, text: str) -> None:
    # in place, as the kernel's files: the koordlet keeps descriptors of the ones it reads every tick
    write_in_place(path, text)


class Node:
    """A fake v1 host whose CPU counters advance at the configured rates."""

    def __init__(self, root: Path) -> None:
        self.paths = HostPaths.rooted(root)
        self.root = root
        self.ls_cores, self.be_cores = 1.0, 1.0
        self.mem_used_kib = MEM_TOTAL_KIB // 2
        self._busy = {"node": 0.0, LS_UID: 0.0, BE_UID: 0.0}
        self._last = time.monotonic()
        self.stopped = threading.Event()
        #: the feeder thread and a trial both advance the counters (and share temp files)
        self._advancing = threading.Lock()
        self.cgroups = CgroupFS(self.paths, 1)
        self.be_dir = self.cgroups.layout.qos_dir(KubeQOSClass.BEST_EFFORT)
        self.pod_dirs = {
            LS_UID: self.cgroups.layout.pod_dir(KubeQOSClass.BURSTABLE, LS_UID),
            BE_UID: self.cgroups.layout.pod_dir(KubeQOSClass.BEST_EFFORT, BE_UID),
        }
        for rel in (self.cgroups.layout.root, self.be_dir, *self.pod_dirs.values()):
            for subsystem, files in {
                "cpu": {
                    "cpu.cfs_quota_us": "-1\n",
                    "cpu.cfs_period_us": "100000\n",
                    "cpu.stat": "nr_periods 0\n",
                },
                "cpuacct": {"cpuacct.usage": "0\n"},
                "cpuset": {"cpuset.cpus": "0-7\n", "cpuset.mems": "0\n"},
                "memory": {
                    "memory.stat": "total_inactive_anon 0\ntotal_active_anon 0\ntotal_unevictable 0\n"
                    "total_inactive_file 0\ntotal_active_file 0\n"
                },
            }.items():
                for name, content in files.items():
                    _write(self.cgroups.directory(subsystem, rel) / name, content)
        _write(self.paths.cgroup_root / "cpuset" / "cpuset.cpus", "0-7\n")
        for cpu in range(CAPACITY_CORES):
            _write(root / f"sys/devices/system/cpu/cpu{cpu}/topology/core_id", f"{cpu}\n")
            _write(root / f"sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id", "0\n")
        _write(root / "sys/devices/system/cpu/online", f"0-{CAPACITY_CORES - 1}\n")
        self.advance()

    def advance(self) -> None:
        with self._advancing:
            self._advance()

    def _advance(self) -> None:
        now = time.monotonic()
        elapsed, self._last = now - self._last, now
        self._busy["node"] += (self.ls_cores + self.be_cores + 0.2) * elapsed
        self._busy[LS_UID] += self.ls_cores * elapsed
        self._busy[BE_UID] += self.be_cores * elapsed
        ticks = int(self._busy["node"] * kernel.clock_ticks())
        _write(self.paths.proc("stat"), f"cpu  {ticks} 0 0 999999 0 0 0 0 0 0\n")
        available = MEM_TOTAL_KIB - self.mem_used_kib
        _write(
            self.paths.proc("meminfo"),
            f"MemTotal: {MEM_TOTAL_KIB} kB\nMemFree: {available} kB\nMemAvailable: {available} kB\n",
        )
        for uid, rel in self.pod_dirs.items():
            _write(
                self.cgroups.directory("cpuacct", rel) / "cpuacct.usage", f"{int(self._busy[uid] * 1e9)}\n"
            )
        _write(
            self.cgroups.directory("memory", self.pod_dirs[BE_UID]) / "memory.stat",
            f"total_inactive_anon 0\ntotal_active_anon {4 << 30}\ntotal_unevictable 0\n"
            "total_inactive_file 0\ntotal_active_file 0\n",
        )

    def feed(self) -> None:
        while not self.stopped.wait(0.01):
            self.advance()

    def quota(self) -> int | None:
        """The BE quota; None while the executor is between truncating and writing the
        (plain, fake) file, which a kernel file never shows."""
        fields = (self.cgroups.directory("cpu", self.be_dir) / "cpu.cfs_quota_us").read_text().split()
        return int(fields[0]) if fields else None


class States:
    def __init__(self, pods: list[PodMeta], node: Mapping[str, Any], slo: NodeSLOSpec) -> None:
        self.pods, self.node, self.slo = pods, node, slo

    def get_all_pods(self) -> list[PodMeta]:
        return self.pods

    def get_node(self) -> Mapping[str, Any]:
        return self.node

    def get_node_slo(self) -> NodeSLOSpec:
        return self.slo


class RecordingEvictor:
    def __init__(self) -> None:
        self.asked_at: float | None = None

    async def evict(self, evictions: Sequence[Eviction]) -> int:
        if evictions and self.asked_at is None:
            self.asked_at = time.monotonic()
        return 0


def _pod(uid: str, qos: str, kube_qos: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": qos.lower(),
            "namespace": "default",
            "uid": uid,
            "labels": {"koordinator.sh/qosClass": qos},
        },
        "status": {"phase": "Running", "qosClass": kube_qos},
    }


async def _trial(node: Node, cpu: bool, settle: float, probe: bool = True) -> float:
    cache = MetricCache()
    cgroups = node.cgroups
    metas = [
        m
        for m in (
            pod_meta(_pod(LS_UID, "LS", "Burstable"), cgroups.layout),
            pod_meta(_pod(BE_UID, "BE", "BestEffort"), cgroups.layout),
        )
        if m is not None
    ]
    node_obj = {
        "status": {
            "capacity": {"cpu": str(CAPACITY_CORES), "memory": f"{MEM_TOTAL_KIB}Ki"},
            "allocatable": {"cpu": str(CAPACITY_CORES), "memory": f"{MEM_TOTAL_KIB}Ki"},
        }
    }
    spec = NodeSLOSpec.from_dict(
        {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": "cfsQuota"}}
    )
    states = States(metas, node_obj, merge_node_slo_spec(spec))
    gates = FeatureGates(KOORDLET_FEATURES, {"BEMemoryEvict": True})
    metrics = KoordletMetrics(CollectorRegistry(), "bench")
    ctx = CollectContext(
        node.paths, cgroups, cache, KVStore(), states, metrics, gates, CollectorConfig(INTERVAL)
    )
    NodeInfoCollector(ctx).collect(time.time())
    collectors: list[Collector] = [NodeResourceCollector(ctx), PodResourceCollector(ctx)]
    if probe:
        collectors.append(PressureProbe(ctx))
    runner = CollectorRunner(collectors, hastening=ctx.hastening)
    host = HostFacts(1, cgroups.layout, ctx.kv.get(kinds.NODE_CPU_INFO))

    def snapshot() -> Snapshot:
        return Snapshot(
            time.time(),
            NodeView.decode(node_obj),
            states.slo,
            metas,
            MetricsView(cache),
            host,
            CgroupView(cgroups),
            gates,
            INTERVAL,
        )

    evictor = RecordingEvictor()
    strategy = CPUSuppress(INTERVAL) if cpu else MemoryEvict(INTERVAL, 0.0)
    qos = QoSManager(
        [strategy],
        snapshot,
        ResourceUpdateExecutor(cgroups),
        evictor,
        metrics,
        wake_on=(NodeResourceCollector.NAME, PodResourceCollector.NAME),
    )
    runner.listeners.append(qos.collected)
    runner.start()
    qos.start()
    try:
        await asyncio.sleep(settle)  # steady state: quota settled, memory below the threshold
        before = None
        while before is None:
            before = node.quota()
        t0 = time.monotonic()
        if cpu:
            node.ls_cores = 5.0
        else:
            node.mem_used_kib = MEM_TOTAL_KIB * 80 // 100
        node.advance()
        deadline = t0 + 10 * INTERVAL
        while time.monotonic() < deadline:
            now_quota = node.quota() if cpu else None
            if now_quota is not None and now_quota < before:
                return time.monotonic() - t0
            if not cpu and evictor.asked_at is not None:
                return evictor.asked_at - t0
            await asyncio.sleep(0.005)
        raise RuntimeError(f"qos_reaction: no reaction within 10 intervals ({'cpu' if cpu else 'memory'})")
    finally:
        await qos.stop()
        await runner.stop()
        node.ls_cores, node.mem_used_kib = 1.0, MEM_TOTAL_KIB // 2


def run(quick: bool = False) -> Result:
    trials = 2 if quick else 10
    settle = 2.5 if quick else 3.5
    reactions: dict[str, list[float]] = {"cpu": [], "memory": [], "cpu_no_probe": [], "memory_no_probe": []}
    with tempfile.TemporaryDirectory(prefix="koord-bench-") as tmp:
        node = Node(Path(tmp))
        feeder = threading.Thread(target=node.feed, daemon=True)
        feeder.start()
        try:
            for i in range(trials):
                # the pressure lands at a different point of the collection cycle each trial
                phase = (i * 0.37) % INTERVAL
                for probe, suffix in ((True, ""), (False, "_no_probe")):
                    for cpu, kind in ((True, "cpu"), (False, "memory")):
                        reaction = asyncio.run(_trial(node, cpu, settle + phase, probe))
                        reactions[kind + suffix].append(reaction)
        finally:
            node.stopped.set()
            feeder.join()
    median_ms = {kind: statistics.median(values) * 1000 for kind, values in reactions.items()}
    cpu_ms, memory_ms = median_ms["cpu"], median_ms["memory"]
    ratio = max(cpu_ms, memory_ms) / (INTERVAL * 1000)
    no_probe = max(median_ms["cpu_no_probe"], median_ms["memory_no_probe"]) / (INTERVAL * 1000)
    result = Result(
        NAME,
        params={
            "interval_s": INTERVAL,
            "pressure_probe_interval_s": CollectorConfig().pressure_probe_interval,
            "trials": trials,
            "policy": "cfsQuota",
            "memory_threshold_percent": 70,
        },
        results={
            "cpu_reaction_ms": round(cpu_ms, 1),
            "memory_reaction_ms": round(memory_ms, 1),
            "cpu_reaction_max_ms": round(max(reactions["cpu"]) * 1000, 1),
            "memory_reaction_max_ms": round(max(reactions["memory"]) * 1000, 1),
            "cpu_reaction_no_probe_ms": round(median_ms["cpu_no_probe"], 1),
            "memory_reaction_no_probe_ms": round(median_ms["memory_no_probe"], 1),
        },
        ratios={
            "reaction_to_interval_ratio": round(ratio, 2),
            "no_probe_reaction_to_interval_ratio": round(no_probe, 2),
        },
    )
    result.headline = (
        f"qos_reaction: median {cpu_ms:.0f} ms (LS jump -> BE quota), "
        f"{memory_ms:.0f} ms (memory -> eviction); {ratio:.2f} of the {INTERVAL:g}s interval "
        f"(K4 target: reaction_to_interval_ratio <= 0.5); {no_probe:.2f} without the pressure probe"
    )
    return result
