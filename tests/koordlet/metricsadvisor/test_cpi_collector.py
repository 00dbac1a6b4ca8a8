"""CPICollector: a window opened by one tick and read by the next; on the real kernel with
software events (this kind of host has no PMU), and where hardware counters are absent;
its gauge holds exactly the containers of the last round; a cgroup v1 host without the
perf_event hierarchy says so once; a round that runs out of file descriptors stops there."""

from __future__ import annotations

import errno
import logging
import math
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import ClassVar

import pytest
from prometheus_client import CollectorRegistry

from koordinator.api.extension.qos import QoSClass
from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.kubeqos import KubeQOSClass
from koordlet.metriccache import KVStore, MetricCache, kinds
from koordlet.metrics import KoordletMetrics, render
from koordlet.metricsadvisor.collectors.cpi import FD_RESERVE, CPICollector
from koordlet.metricsadvisor.framework import CollectContext, CollectorConfig
from koordlet.statesinformer.podmeta import ContainerMeta, PodMeta
from koordlet.system import perf
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.paths import HostPaths
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.metricsadvisor.conftest import FakeStates, make_context

T0 = 1_000_000.0
CID = "containerd://" + "a" * 64


def _value(ctx: CollectContext, container_id: str, resource: str) -> float | None:
    result = ctx.cache.query(kinds.CONTAINER_CPI, 0, 1e12, container_id=container_id, cpi_resource=resource)
    return result.value("last") if result.count() else None


class FakeCounters:
    opened: ClassVar[list[FakeCounters]] = []

    def __init__(self, directory: Path, cpus: list[int], events: tuple[perf.Event, ...]) -> None:
        if not directory.is_dir():
            raise FileNotFoundError(errno.ENOENT, "no such cgroup", str(directory))
        self.directory, self.cpus, self.events = directory, cpus, events
        self.enabled = False
        self.closed = False
        FakeCounters.opened.append(self)

    def reset(self) -> None:
        pass

    def enable(self) -> None:
        self.enabled = True

    def disable(self) -> None:
        self.enabled = False

    def read(self) -> dict[str, float]:
        return {self.events[0].name: 3000.0 * len(self.cpus), self.events[1].name: 1000.0 * len(self.cpus)}

    def close(self) -> None:
        self.closed = True


def test_a_round_is_two_ticks_and_stores_both_counts(fake_host, states):
    fake_host.set_cpu_topology(sockets=1, cores_per_socket=2, threads_per_core=1)
    builder = make_pod("web").kube_qos("Burstable")
    builder.container("app", cid=CID).container("gone", cid="containerd://" + "b" * 64)
    builder.container("setup", cid="containerd://" + "c" * 64, init=True)
    meta = states.add(builder.build())
    fake_host.add_pod("Burstable", meta.uid, [CID])  # "gone" has no cgroup any more
    app = next(c for c in meta.containers if c.container_id == CID)
    fake_host.mkdir_cgroup("perf_event", app.cgroup_dir)
    ctx = make_context(fake_host, states, {"CPICollector": True})
    FakeCounters.opened = []
    collector = CPICollector(ctx, open_counters=FakeCounters, supported=lambda event: (True, "fake"))
    assert collector.enabled()
    assert collector.interval == 60.0

    collector.collect(T0)  # opens the window: nothing stored yet, next tick one window later
    assert collector.interval == 10.0
    assert [c.directory.name for c in FakeCounters.opened] == [Path(app.cgroup_dir).name]
    assert FakeCounters.opened[0].enabled
    assert FakeCounters.opened[0].cpus == [0, 1]
    assert _value(ctx, CID, "cycle") is None

    collector.collect(T0 + 10)  # reads and closes
    assert collector.interval == 50.0
    assert FakeCounters.opened[0].closed
    assert _value(ctx, CID, "cycle") == 6000.0
    assert _value(ctx, CID, "instruction") == 2000.0
    text = render(ctx.metrics.registry).decode()
    assert 'cpi_field="cycles"' in text
    assert 'cpi_field="instructions"' in text
    assert f'container_id="{CID}"' in text
    assert 'pod_name="web"' in text
    assert collector.started


def test_absent_hardware_counters_are_reported_once_and_nothing_is_collected(fake_host, states, caplog):
    caplog.set_level(logging.WARNING)
    fake_host.set_cpu_topology()
    meta = states.add(make_pod("web").kube_qos("Burstable").container("app", cid=CID).build())
    fake_host.add_pod("Burstable", meta.uid, [CID])
    ctx = make_context(fake_host, states, {"CPICollector": True})
    why = "no PMU for cycles: perf_event_open returned ENOENT (VM without a virtual PMU?)"
    collector = CPICollector(ctx, supported=lambda event: (False, why))
    for tick in range(3):
        collector.collect(T0 + 60 * tick)
    assert collector.unsupported_reason == why
    assert collector.started
    assert _value(ctx, CID, "cycle") is None
    assert ctx.cache.label_values(kinds.CONTAINER_CPI) == []
    assert [r.getMessage() for r in caplog.records] == [f"CPICollector collects nothing on this node: {why}"]


def test_this_hosts_hardware_counters_answer_with_a_reason(fake_host, states):
    ok, _ = perf.supported(perf.CYCLES)
    if ok:
        pytest.skip("this host has hardware counters")
    ctx = make_context(fake_host, states, {"CPICollector": True})
    collector = CPICollector(ctx)  # the real check, hardware events
    collector.collect(T0)
    assert collector.unsupported_reason
    assert "cycles" in collector.unsupported_reason
    assert ctx.cache.label_values(kinds.CONTAINER_CPI) == []


def test_disabled_without_the_gate(fake_host, states):
    assert not CPICollector(make_context(fake_host, states)).enabled()


def _cpi_series(ctx: CollectContext) -> set[tuple[str, str]]:
    """``koordlet_container_cpi`` as scraped: (container_id, cpi_field) of each series."""
    [family] = [m for m in ctx.metrics.registry.collect() if m.name == "koordlet_container_cpi"]
    return {(s.labels["container_id"], s.labels["cpi_field"]) for s in family.samples}


@pytest.mark.parametrize("gone", ["pod-deleted", "cgroup-removed"])
def test_a_round_with_nothing_to_count_empties_the_gauge(fake_host, states, gone):
    fake_host.set_cpu_topology(sockets=1, cores_per_socket=2, threads_per_core=1)
    meta = states.add(make_pod("web").kube_qos("Burstable").container("app", cid=CID).build())
    fake_host.add_pod("Burstable", meta.uid, [CID])
    container_dir = meta.containers[0].cgroup_dir
    fake_host.mkdir_cgroup("perf_event", container_dir)
    ctx = make_context(fake_host, states, {"CPICollector": True})
    collector = CPICollector(ctx, open_counters=FakeCounters, supported=lambda event: (True, "fake"))
    collector.collect(T0)
    collector.collect(T0 + 10)
    assert _cpi_series(ctx) == {(CID, "cycles"), (CID, "instructions")}
    if gone == "pod-deleted":
        states.pods.clear()
    else:  # still listed, but every counter fails to open
        fake_host.remove_cgroup(container_dir)
        fake_host.remove_cgroup(meta.cgroup_dir)
    collector.collect(T0 + 60)  # nothing to count: the round ends at once
    assert collector.interval == 60.0
    assert _cpi_series(ctx) == set()
    assert f'container_id="{CID}"' not in render(ctx.metrics.registry).decode()
    assert _value(ctx, CID, "cycle") == 6000.0  # the cache keeps the last round's samples


def test_cgroup_v1_without_the_perf_event_hierarchy_says_why_once(fake_host_v1, caplog):
    caplog.set_level(logging.INFO)
    states = FakeStates(fake_host_v1)
    fake_host_v1.set_cpu_topology(sockets=1, cores_per_socket=2, threads_per_core=1)
    meta = states.add(make_pod("web").kube_qos("Burstable").container("app", cid=CID).build())
    fake_host_v1.add_pod("Burstable", meta.uid, [CID])  # cpu, memory, ... but no perf_event
    ctx = make_context(fake_host_v1, states, {"CPICollector": True})
    FakeCounters.opened = []
    collector = CPICollector(ctx, open_counters=FakeCounters, supported=lambda event: (True, "fake"))
    for tick in range(3):
        collector.collect(T0 + 60 * tick)
    root = fake_host_v1.cgroup_dir("perf_event")
    why = f"no perf_event cgroup hierarchy at {root} (cgroup v1 without the perf_event controller)"
    assert collector.unsupported_reason == why
    assert collector.started
    assert FakeCounters.opened == []
    assert _cpi_series(ctx) == set()
    messages = [r.getMessage() for r in caplog.records if r.name.endswith(".cpi")]
    assert messages == [f"CPICollector collects nothing on this node: {why}"]


def test_cgroup_v2_needs_no_perf_event_directory(tmp_path):
    host = FakeHost(tmp_path, "v2")
    host.set_cpu_topology(sockets=1, cores_per_socket=2, threads_per_core=1)
    ctx = make_context(host, FakeStates(host), {"CPICollector": True})
    collector = CPICollector(ctx, open_counters=FakeCounters, supported=lambda event: (True, "fake"))
    collector.collect(T0)
    assert collector.unsupported_reason is None


class LimitedCounters(FakeCounters):
    """Counter groups on a process whose descriptors run out after ``limit`` groups."""

    limit: ClassVar[int] = 0

    def __init__(self, directory: Path, cpus: list[int], events: tuple[perf.Event, ...]) -> None:
        if len(FakeCounters.opened) >= LimitedCounters.limit:
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))
        super().__init__(directory, cpus, events)


def test_a_round_out_of_descriptors_stops_there_and_gives_some_back(fake_host, states, caplog):
    fake_host.set_cpu_topology(sockets=1, cores_per_socket=2, threads_per_core=1)  # 2 CPUs x 2 events
    per_container = 4
    given_back = math.ceil(FD_RESERVE / per_container)
    LimitedCounters.limit = given_back + 4  # 4 containers counted once some are given back
    containers = LimitedCounters.limit + 5
    builder = make_pod("big").kube_qos("Burstable")
    cids = [f"containerd://{i:064x}" for i in range(containers)]
    for i, cid in enumerate(cids):
        builder.container(f"c{i}", cid=cid)
    meta = states.add(builder.build())
    fake_host.add_pod("Burstable", meta.uid, cids)
    for container in meta.containers:
        fake_host.mkdir_cgroup("perf_event", container.cgroup_dir)
    ctx = make_context(fake_host, states, {"CPICollector": True})
    FakeCounters.opened = []
    collector = CPICollector(ctx, open_counters=LimitedCounters, supported=lambda event: (True, "fake"))
    for round_start in (T0, T0 + 60):
        collector.collect(round_start)  # opens until EMFILE, gives back FD_RESERVE descriptors
        collector.collect(round_start + 10)
        FakeCounters.opened = []
    assert {cid for cid, _ in _cpi_series(ctx)} == set(cids[:4])
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    left_out = containers - 4
    assert len(warnings) == 2  # once a round
    for message in warnings:
        assert message.startswith("CPICollector ran out of file descriptors (Too many open files;")
        assert message.endswith(
            f"{per_container} per container): {left_out} containers left out of this round, 4 counted"
        )


# --- host tier: a real cgroup2 directory, a busy child, software events --------------------


def _unified_root() -> Path | None:
    for candidate in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if (candidate / "cgroup.controllers").is_file():
            return candidate
    return None


def _cpu_time_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


class _States:
    def __init__(self, pods: list[PodMeta]) -> None:
        self.pods = pods

    def get_all_pods(self) -> list[PodMeta]:
        return self.pods

    def get_node(self) -> None:
        return None

    def get_node_slo(self) -> None:
        return None


@pytest.mark.host
def test_software_events_count_a_busy_container_on_the_real_kernel():
    root = _unified_root()
    if root is None or os.geteuid() != 0:
        pytest.skip("needs root and a cgroup2 hierarchy (perf cgroup events)")
    if not perf.supported(perf.CPU_CLOCK)[0]:
        pytest.skip("perf software events unavailable")
    parent = root / f"koord-test-cpi-{uuid.uuid4().hex[:8]}"
    container_dir = parent / "ctr"
    container_dir.mkdir(parents=True)
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        (container_dir / "cgroup.procs").write_text(str(child.pid))
        paths = HostPaths.host().with_overrides(cgroup_root=root)
        relative = str(container_dir.relative_to(root))
        pod = PodMeta(
            {},
            "uid-1",
            "default",
            "busy",
            KubeQOSClass.BEST_EFFORT,
            QoSClass.BE,
            parent.name,
            (ContainerMeta("busy", CID, relative),),
        )
        ctx = CollectContext(
            paths=paths,
            cgroups=CgroupFS(paths, 2),
            cache=MetricCache(),
            kv=KVStore(),
            states=_States([pod]),
            metrics=KoordletMetrics(CollectorRegistry(), "node-1"),
            gates=FeatureGates(KOORDLET_FEATURES, {"CPICollector": True}),
            config=CollectorConfig(),
        )
        collector = CPICollector(ctx, events=(perf.CPU_CLOCK, perf.TASK_CLOCK))
        collector.collect(T0)
        assert collector.unsupported_reason is None
        assert collector.interval == 10.0
        before = _cpu_time_ns(child.pid)
        deadline = time.monotonic() + 30  # until the child ran 0.1 s, however busy the machine
        while _cpu_time_ns(child.pid) - before < 0.1e9 and time.monotonic() < deadline:
            time.sleep(0.05)
        collector.collect(T0 + 10)
        used = _cpu_time_ns(child.pid) - before
    finally:
        child.kill()
        child.wait()
        deadline = time.monotonic() + 5
        for directory in (container_dir, parent):
            while directory.exists():
                try:
                    directory.rmdir()
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
    cycle, instruction = _value(ctx, CID, "cycle"), _value(ctx, CID, "instruction")
    assert cycle is not None
    assert instruction is not None
    # cpu-clock and task-clock of a cgroup holding only the child: the nanoseconds it ran
    assert used >= 0.1e9
    assert cycle > 0.5 * used
    assert instruction > 0.5 * used
    assert f'container_id="{CID}"' in render(ctx.metrics.registry).decode()
