"""Collectors on fake hosts (cgroup v1 and v2): each formula against hand-computed values."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from koordinator.api.types.slo import CgroupPath, HostApplicationSpec
from koordlet.metriccache import MetricKind, kinds
from koordlet.metrics import render
from koordlet.metricsadvisor.collectors.beresource import BEResourceCollector
from koordlet.metricsadvisor.collectors.hostapplication import (
    HostApplicationCollector,
    host_application_cgroup_dir,
)
from koordlet.metricsadvisor.collectors.nodeinfo import NodeInfoCollector
from koordlet.metricsadvisor.collectors.noderesource import NodeResourceCollector
from koordlet.metricsadvisor.collectors.performance import PSICollector
from koordlet.metricsadvisor.collectors.podresource import PodResourceCollector
from koordlet.metricsadvisor.collectors.sysresource import SystemResourceCollector
from koordlet.metricsadvisor.framework import (
    CollectContext,
    Collector,
    CounterDeltas,
    PodCgroups,
    RateCache,
    UsagePoint,
)
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system import kernel
from koordlet.system.cgroup.layout import CgroupDriver, KubepodsLayout
from koordlet.system.topology import NodeCPUInfo
from tests.fakes.host import FakeHost
from tests.fakes.pods import make_pod
from tests.koordlet.floatcolumns import listed
from tests.koordlet.metricsadvisor.conftest import FakeStates, make_context

T0 = 1_000_000.0
GIB = 1 << 30


def _last(ctx: CollectContext, kind: MetricKind, **labels: str) -> float | None:
    result = ctx.cache.query(kind, 0, 1e12, **labels)
    return result.value("last") if result.count() else None


def test_rate_cache_primes_then_rates():
    rates = RateCache(ttl=10)
    assert rates.rate("a", 0.0, 100) is None
    assert rates.rate("a", 2.0, 300) == 100.0
    assert rates.rate("a", 3.0, 50) is None  # counter went back: prime again
    assert rates.rate("a", 4.0, 150) == 100.0
    rates.sweep(100.0)
    assert len(rates) == 0


def test_counter_deltas_prime_then_give_growth_per_second_per_object(backend):
    deltas = CounterDeltas()
    ids = ["a", "b", "c"]
    assert listed(deltas.rates(ids, 10.0, [100, 200, None])) == [None, None, None]
    # b went backwards (a restarted cgroup), c could not be read last time
    assert listed(deltas.rates(ids, 12.0, [160, 150, 5])) == [30.0, None, None]
    assert listed(deltas.rates(ids, 13.0, [170, 160, None], unit=2.0)) == [5.0, 5.0, None]
    # d arrived and b left: the others keep their counters, matched by id
    assert listed(deltas.rates(["d", "a", "c"], 14.0, [1, 171, 9])) == [None, 1.0, None]
    assert listed(deltas.rates(["a", "b"], 15.0, [172, 500])) == [1.0, None]  # b forgotten
    assert listed(deltas.rates(["a"], 15.0, [180])) == [None]  # no time passed
    with pytest.raises(ValueError, match="2 objects for 1 counters"):
        deltas.rates(["a", "b"], 16.0, [1])


def test_counter_deltas_shift_hands_back_the_previous_values_matched_by_id():
    deltas = CounterDeltas()
    assert deltas.shift(["a", "b"], 10.0, [(1, 2), (3, 4)]) == (None, [None, None])
    ids = ["b", "c"]
    assert deltas.shift(ids, 12.0, [(5, 6), (7, 8)]) == (2.0, [(3, 4), None])
    assert deltas.shift(ids, 12.0, [(9, 9), (9, 9)])[0] is None  # no time passed
    with pytest.raises(ValueError, match="1 objects for 2 counters"):
        deltas.shift(["a"], 13.0, [1, 2])


def test_node_cpu_and_memory(fake_host, states):
    hz = kernel.clock_ticks()
    fake_host.set_cpu_topology(sockets=1, cores_per_socket=2, threads_per_core=1)
    fake_host.set_meminfo(MemTotal=16_000_000, MemFree=4_000_000, MemAvailable=10_000_000)
    ctx = make_context(fake_host, states, enable_pagecache_collector=True)
    collector = NodeResourceCollector(ctx)
    fake_host.set_proc_stat(
        [100, 0, 100, 5000, 0, 0, 0, 0], {0: [50, 0, 50, 2500, 0, 0, 0, 0], 1: [50, 0, 50, 2500, 0, 0, 0, 0]}
    )
    collector.collect(T0)
    assert _last(ctx, kinds.NODE_CPU_USAGE) is None  # the first tick only primes
    assert [collector.started] == [False]
    # two seconds later: cpu0 busy +2*hz ticks (one core), cpu1 +hz (half a core); idle moves too
    fake_host.set_proc_stat(
        [100 + 3 * hz, 0, 100, 9000, 50, 0, 0, 30],
        {0: [50 + 2 * hz, 0, 50, 2500, 0, 0, 0, 0], 1: [50 + hz, 0, 50, 4500, 0, 0, 0, 0]},
    )
    collector.collect(T0 + 2)
    assert _last(ctx, kinds.NODE_CPU_USAGE) == pytest.approx(1.5)
    assert _last(ctx, kinds.NODE_NUMA_CPU_USAGE, numa_node_id="0") == pytest.approx(1.5)
    assert _last(ctx, kinds.NODE_MEMORY_USAGE) == 6_000_000 * 1024
    assert _last(ctx, kinds.NODE_MEMORY_USAGE_WITH_PAGE_CACHE) == 12_000_000 * 1024
    assert collector.started
    assert ctx.shared.node is not None
    assert ctx.shared.node.cpu == pytest.approx(1.5)
    assert ctx.shared.node.memory == 6_000_000 * 1024
    assert ctx.metrics.node_used_cpu_cores.labels("node-1")._value.get() == pytest.approx(1.5)


def _pod_with_containers(
    fake_host: FakeHost,
    states: FakeStates,
    name: str,
    qos: str = "Burstable",
    containers: int = 1 + 1,
    **kwargs: Any,
) -> PodMeta:
    builder = make_pod(name).kube_qos(qos)
    for i in range(containers):
        builder.container(f"c{i}", cid=f"containerd://{name}{i:062d}"[:77], **kwargs)
    pod = builder.build()
    meta = states.add(pod)
    fake_host.add_pod(qos, meta.uid, [c.container_id for c in meta.containers])
    return meta


def test_pod_and_container_usage_and_throttling(fake_host, states):
    a = _pod_with_containers(fake_host, states, "a")
    b = _pod_with_containers(fake_host, states, "b", qos="BestEffort", containers=1)
    ctx = make_context(fake_host, states)
    collector = PodResourceCollector(ctx)
    for meta in (a, b):
        fake_host.set_cpu_usage(meta.cgroup_dir, 10_000_000_000)
        fake_host.set_throttling(meta.cgroup_dir, 100, 10, 1_000_000)
        for c in meta.containers:
            fake_host.set_cpu_usage(c.cgroup_dir, 1_000_000_000)
    collector.collect(T0)
    assert _last(ctx, kinds.POD_CPU_USAGE, pod_uid=a.uid) is None
    fake_host.set_cpu_usage(a.cgroup_dir, 10_000_000_000 + 500_000_000)  # +0.5 s of CPU in 1 s
    fake_host.set_cpu_usage(b.cgroup_dir, 10_000_000_000 + 250_000_000)
    fake_host.set_cpu_usage(a.containers[0].cgroup_dir, 1_000_000_000 + 300_000_000)
    fake_host.set_throttling(a.cgroup_dir, 200, 30, 5_000_000)
    fake_host.set_memory_stat(
        a.cgroup_dir, inactive_anon=GIB, active_anon=GIB, unevictable=4096, inactive_file=GIB, active_file=GIB
    )
    collector.collect(T0 + 1)
    assert _last(ctx, kinds.POD_CPU_USAGE, pod_uid=a.uid) == pytest.approx(0.5)
    assert _last(ctx, kinds.POD_CPU_USAGE, pod_uid=b.uid) == pytest.approx(0.25)
    assert _last(ctx, kinds.CONTAINER_CPU_USAGE, container_id=a.containers[0].container_id) == pytest.approx(
        0.3
    )
    assert _last(ctx, kinds.CONTAINER_CPU_USAGE, container_id=a.containers[1].container_id) == 0.0
    assert _last(ctx, kinds.POD_MEMORY_USAGE, pod_uid=a.uid) == 2 * GIB + 4096
    assert _last(ctx, kinds.POD_CPU_THROTTLED, pod_uid=a.uid) == pytest.approx(0.2)
    assert _last(ctx, kinds.POD_CPU_THROTTLED, pod_uid=b.uid) == 0.0  # no new periods
    assert ctx.shared.pods is not None
    assert ctx.shared.pods.cpu == pytest.approx(0.75)
    assert collector.started


def test_throttling_counters_going_back_prime_the_ratio_again(fake_host, states):
    a = _pod_with_containers(fake_host, states, "a", containers=1)
    ctx = make_context(fake_host, states)
    collector = PodResourceCollector(ctx)
    fake_host.set_throttling(a.cgroup_dir, 100, 10, 0)
    collector.collect(T0)
    fake_host.set_throttling(a.cgroup_dir, 50, 20, 0)  # a restarted cgroup: periods went back
    collector.collect(T0 + 1)
    assert _last(ctx, kinds.POD_CPU_THROTTLED, pod_uid=a.uid) is None
    fake_host.set_throttling(a.cgroup_dir, 150, 45, 0)
    collector.collect(T0 + 2)
    assert _last(ctx, kinds.POD_CPU_THROTTLED, pod_uid=a.uid) == pytest.approx(0.25)


def test_pods_coming_and_going_keep_the_others_rates(fake_host, states):
    a = _pod_with_containers(fake_host, states, "a", containers=1)
    b = _pod_with_containers(fake_host, states, "b", containers=1)
    ctx = make_context(fake_host, states)
    collector = PodResourceCollector(ctx)
    collector.collect(T0)
    states.pods.remove(a)  # a ended, c started
    c = _pod_with_containers(fake_host, states, "c", containers=1)
    fake_host.set_cpu_usage(b.cgroup_dir, 2_000_000_000)
    fake_host.set_cpu_usage(c.cgroup_dir, 5_000_000_000)
    collector.collect(T0 + 2)
    assert _last(ctx, kinds.POD_CPU_USAGE, pod_uid=b.uid) == pytest.approx(1.0)  # carried over by id
    assert _last(ctx, kinds.POD_CPU_USAGE, pod_uid=c.uid) is None  # primed
    fake_host.set_cpu_usage(c.cgroup_dir, 5_500_000_000)
    collector.collect(T0 + 3)
    assert _last(ctx, kinds.POD_CPU_USAGE, pod_uid=c.uid) == pytest.approx(0.5)
    assert ctx.cache.query(kinds.POD_CPU_USAGE, T0 + 2, T0 + 3, pod_uid=a.uid).count() == 0
    assert ctx.shared.pods is not None
    assert ctx.shared.pods.cpu == pytest.approx(0.5)  # b's counter stood still


def test_pod_cgroups_list_containers_then_pods_and_stay_the_same_object(states, fake_host):
    a = _pod_with_containers(fake_host, states, "a")
    b = _pod_with_containers(fake_host, states, "b", containers=1)
    cgroups = PodCgroups.of(states.get_all_pods())
    assert cgroups.ids == [
        *(c.container_id for c in a.containers),
        b.containers[0].container_id,
        a.uid,
        b.uid,
    ]
    assert cgroups.dirs[-1] == b.cgroup_dir
    assert cgroups.split() == (cgroups.ids[:3], [a.uid, b.uid])
    assert PodCgroups.of(states.get_all_pods(), cgroups) is cgroups
    # new PodMeta objects of the same pods: still the same cgroups, the same object
    renewed = [dataclasses.replace(pod) for pod in states.get_all_pods()]
    assert PodCgroups.of(renewed, cgroups) is cgroups
    assert cgroups.pods == tuple(renewed)
    states.pods.remove(a)
    assert PodCgroups.of(states.get_all_pods(), cgroups).ids == [b.containers[0].container_id, b.uid]


def test_a_container_vanishing_mid_collection_is_skipped(fake_host, states):
    a = _pod_with_containers(fake_host, states, "a")
    ctx = make_context(fake_host, states)
    collector = PodResourceCollector(ctx)
    collector.collect(T0)
    fake_host.remove_cgroup(a.containers[1].cgroup_dir)
    fake_host.set_cpu_usage(a.containers[0].cgroup_dir, 2_000_000_000)
    collector.collect(T0 + 1)
    assert _last(ctx, kinds.CONTAINER_CPU_USAGE, container_id=a.containers[0].container_id) == pytest.approx(
        2.0
    )
    assert _last(ctx, kinds.CONTAINER_CPU_USAGE, container_id=a.containers[1].container_id) is None
    assert (
        _last(ctx, kinds.CONTAINER_MEMORY_USAGE, container_id=a.containers[1].container_id) == 0.0
    )  # first tick


def test_system_usage_is_node_minus_pods_minus_host_apps(fake_host, states):
    ctx = make_context(fake_host, states)
    collector = SystemResourceCollector(ctx)
    ctx.shared.update(
        node=UsagePoint(2.0, 8 * GIB, T0),
        pods=UsagePoint(0.5, 3 * GIB, T0),
        host_apps=UsagePoint(0.2, 1 * GIB, T0),
    )
    collector.collect(T0 + 1)
    assert _last(ctx, kinds.SYS_CPU_USAGE) == pytest.approx(1.3)
    assert _last(ctx, kinds.SYS_MEMORY_USAGE) == 4 * GIB
    ctx.shared.update(pods=UsagePoint(5.0, 20 * GIB, T0 + 2))
    collector.collect(T0 + 2)
    assert _last(ctx, kinds.SYS_CPU_USAGE) == 0.0  # floored
    assert _last(ctx, kinds.SYS_MEMORY_USAGE) == 0.0


def test_system_numa_memory_leaves_out_the_pods_memory_on_that_node(fake_host, states):
    fake_host.set_cpu_topology(sockets=2, cores_per_socket=1, threads_per_core=1)
    fake_host.set_meminfo(MemTotal=16_000_000, MemFree=4_000_000, MemAvailable=10_000_000)
    for node in (0, 1):
        fake_host.set_numa_meminfo(node, MemTotal=8 * 1024 * 1024, MemFree=4 * 1024 * 1024)
    a = _pod_with_containers(fake_host, states, "a", containers=1)
    b = _pod_with_containers(fake_host, states, "b", containers=1)
    fake_host.set_memory_numa(a.cgroup_dir, anon={0: GIB, 1: GIB // 2}, file={})
    fake_host.set_memory_numa(b.cgroup_dir, anon={0: GIB}, file={1: GIB // 4})
    ctx = make_context(fake_host, states)
    collectors: list[Collector] = [
        NodeResourceCollector(ctx),
        PodResourceCollector(ctx),
        SystemResourceCollector(ctx),
    ]
    for tick in (T0, T0 + 1):
        busy = [50 + int(tick - T0) * 25, 0, 0, 2500, 0, 0, 0, 0]
        fake_host.set_proc_stat([2 * busy[0], 0, 0, 5000, 0, 0, 0, 0], {0: busy, 1: busy})
        for collector in collectors:
            collector.collect(tick)
    assert ctx.shared.pods_numa_memory == {0: 2 * GIB, 1: GIB * 3 // 4}
    # each node uses 4 GiB (no page cache): minus the pods' share of it
    assert _last(ctx, kinds.SYS_NUMA_MEMORY_USAGE, numa_node_id="0") == 2 * GIB
    assert _last(ctx, kinds.SYS_NUMA_MEMORY_USAGE, numa_node_id="1") == 4 * GIB - GIB * 3 // 4


def test_system_usage_waits_for_fresh_inputs(fake_host, states):
    ctx = make_context(fake_host, states)
    collector = SystemResourceCollector(ctx)
    collector.collect(T0)
    assert not collector.started
    ctx.shared.update(node=UsagePoint(2.0, GIB, T0), pods=UsagePoint(0.5, GIB, T0 - 60))
    collector.collect(T0)
    assert _last(ctx, kinds.SYS_CPU_USAGE) is None  # the pod sum is older than 10 s


def test_be_real_limit_request_and_usage(fake_host, states):
    layout = fake_host.layout
    be_dir = layout.qos_dir("BestEffort")
    be = (
        make_pod("be-1")
        .qos("BE")
        .kube_qos("BestEffort")
        .container("c0", cid="containerd://" + "1" * 64, requests={"kubernetes.io/batch-cpu": "1000"})
        .container("c1", cid="containerd://" + "2" * 64, requests={"kubernetes.io/batch-cpu": "500"})
        .build()
    )
    # init containers: a sidecar's request counts, a finished init container's does not
    be["spec"]["initContainers"] = [
        {
            "name": "proxy",
            "restartPolicy": "Always",
            "resources": {"requests": {"kubernetes.io/batch-cpu": "200"}},
        },
        {"name": "setup", "resources": {"requests": {"kubernetes.io/batch-cpu": "4000"}}},
    ]
    meta = states.add(be)
    states.add(
        make_pod("ls")
        .kube_qos("Burstable")
        .container("c", requests={"kubernetes.io/batch-cpu": "9000"})
        .build()
    )
    fake_host.add_pod("BestEffort", meta.uid, [c.container_id for c in meta.containers])
    fake_host.set("cpuset.cpus", be_dir, "0-3")
    for c in meta.containers:
        fake_host.set("cpuset.cpus", c.cgroup_dir, "0-1")
    fake_host.set("cpu.cfs_quota_us", be_dir, 150000)
    ctx = make_context(fake_host, states)
    collector = BEResourceCollector(ctx)
    fake_host.set_cpu_usage(be_dir, 1_000_000_000)
    collector.collect(T0)
    fake_host.set_cpu_usage(be_dir, 1_250_000_000)
    collector.collect(T0 + 1)
    assert _last(ctx, kinds.NODE_BE, be_resource="cpu", be_allocation="real-limit") == 1500.0
    assert _last(ctx, kinds.NODE_BE, be_resource="cpu", be_allocation="request") == 1700.0
    assert _last(ctx, kinds.NODE_BE, be_resource="cpu", be_allocation="usage") == pytest.approx(250.0)
    fake_host.set("cpu.cfs_quota_us", be_dir, -1)
    collector.collect(T0 + 2)
    assert _last(ctx, kinds.NODE_BE, be_resource="cpu", be_allocation="real-limit") == 2000.0
    # the cpusets are read on kept descriptors: a change, a new container, one gone and
    # one emptied are all seen at the next tick
    first, second = meta.containers
    fake_host.set("cpuset.cpus", first.cgroup_dir, "0-2")
    fake_host.set("cpuset.cpus", second.cgroup_dir, "0-2")
    collector.collect(T0 + 3)
    assert _last(ctx, kinds.NODE_BE, be_resource="cpu", be_allocation="real-limit") == 3000.0
    newcomer = f"{meta.cgroup_dir}/cri-containerd-{'3' * 64}.scope"
    fake_host.set("cpuset.cpus", newcomer, "5")
    collector.collect(T0 + 4)
    assert _last(ctx, kinds.NODE_BE, be_resource="cpu", be_allocation="real-limit") == 1000.0
    fake_host.remove_cgroup(newcomer)
    fake_host.remove_cgroup(first.cgroup_dir)
    fake_host.set("cpuset.cpus", second.cgroup_dir, "")
    collector.collect(T0 + 5)  # only the QoS cgroup's cpuset is left
    assert _last(ctx, kinds.NODE_BE, be_resource="cpu", be_allocation="real-limit") == 4000.0
    collector.close()


@pytest.mark.parametrize(
    ("app", "expected"),
    [
        (HostApplicationSpec(name="nginx", qos="LS"), "host-latency-sensitive/nginx"),
        (HostApplicationSpec(name="batch", qos="BE"), "host-best-effort/batch"),
        (HostApplicationSpec(name="plain"), "plain"),
        (
            HostApplicationSpec(
                name="x",
                cgroup_path=CgroupPath(base="KubepodsBesteffort", parent_dir="host", relative_path="x/"),
            ),
            "kubepods.slice/kubepods-besteffort.slice/host/x",
        ),
        (
            HostApplicationSpec(
                name="y", cgroup_path=CgroupPath(base="CgroupRoot", relative_path="system.slice")
            ),
            "system.slice",
        ),
    ],
)
def test_host_application_dirs(app, expected):
    assert host_application_cgroup_dir(app, KubepodsLayout.default(CgroupDriver.SYSTEMD)) == expected


def test_host_application_usage(fake_host, states):
    states.slo.host_applications = [HostApplicationSpec(name="nginx", qos="LS")]
    rel = fake_host.make_cgroup("host-latency-sensitive/nginx")
    ctx = make_context(fake_host, states)
    collector = HostApplicationCollector(ctx)
    fake_host.set_cpu_usage(rel, 0)
    collector.collect(T0)
    fake_host.set_cpu_usage(rel, 400_000_000)
    fake_host.set_memory_stat(rel, active_anon=GIB)
    collector.collect(T0 + 2)
    assert _last(ctx, kinds.HOST_APPLICATION_CPU_USAGE, host_app_name="nginx") == pytest.approx(0.2)
    assert _last(ctx, kinds.HOST_APPLICATION_MEMORY_USAGE, host_app_name="nginx") == GIB
    assert ctx.shared.host_apps is not None
    assert ctx.shared.host_apps.memory == GIB


def test_host_application_usage_gauge(fake_host, states):
    states.slo.host_applications = [
        HostApplicationSpec(name="nginx", qos="LS", priority="koord-prod"),
        HostApplicationSpec(name="agent", qos="BE"),
    ]
    nginx = fake_host.make_cgroup("host-latency-sensitive/nginx")
    fake_host.make_cgroup("host-best-effort/agent")
    ctx = make_context(fake_host, states)
    registry = ctx.metrics.registry
    collector = HostApplicationCollector(ctx)

    def usage(app: str, resource: str, priority: str = "", qos: str = "") -> float | None:
        labels = {"node": "node-1", "host_application_name": app, "resource": resource}
        labels |= {"priority_class": priority, "qos": qos}
        return registry.get_sample_value("koordlet_host_application_resource_usage", labels)

    fake_host.set_cpu_usage(nginx, 0)
    collector.collect(T0)
    assert usage("nginx", "cpu", "koord-prod", "LS") is None  # the first round primes the CPU counter
    fake_host.set_cpu_usage(nginx, 400_000_000)
    fake_host.set_memory_stat(nginx, active_anon=GIB, active_file=GIB)
    collector.collect(T0 + 2)
    assert usage("nginx", "cpu", "koord-prod", "LS") == pytest.approx(0.2)
    assert usage("nginx", "memory", "koord-prod", "LS") == GIB  # without the page cache
    assert usage("agent", "cpu", qos="BE") == 0.0
    # an application no longer declared loses its series
    states.slo.host_applications = [HostApplicationSpec(name="agent", qos="BE")]
    collector.collect(T0 + 3)
    assert usage("nginx", "cpu", "koord-prod", "LS") is None
    assert usage("nginx", "memory", "koord-prod", "LS") is None
    assert usage("agent", "memory", qos="BE") == 0.0


def _psi_labels(degree: str, precision: str, resource: str, full: str) -> dict[str, str]:
    return {
        "psi_resource_type": resource,
        "psi_precision": precision,
        "psi_degree": degree,
        "cpu_full_supported": full,
    }


def test_psi_gauges_hold_the_last_round(tmp_path):
    host = FakeHost(tmp_path, "v2")
    states = FakeStates(host)
    builder = make_pod("p").kube_qos("Burstable").container("main", cid="containerd://" + "a" * 64)
    builder.container("setup", cid="containerd://" + "b" * 64, init=True)
    meta = states.add(builder.build())
    host.add_pod("Burstable", meta.uid, [c.container_id for c in meta.containers])
    main, setup = (next(c for c in meta.containers if c.name == name) for name in ("main", "setup"))
    host.set_pressure(meta.cgroup_dir, "cpu", (12.5, 6.25, 2.5, 100), None)  # no "full" line
    host.set_pressure(main.cgroup_dir, "memory", (0.5, 0.25, 0.75, 10), (0.25, 0.5, 1.5, 5))
    ctx = make_context(host, states, gates={"PSICollector": True})
    registry = ctx.metrics.registry
    collector = PSICollector(ctx)
    collector.collect(T0)

    pod = {"node": "node-1", "pod_uid": meta.uid, "pod_name": "p", "pod_namespace": "default"}
    container = {**pod, "container_id": main.container_id, "container_name": "main"}

    def pod_psi(*labels: str) -> float | None:
        return registry.get_sample_value("koordlet_pod_psi", {**pod, **_psi_labels(*labels)})

    def container_psi(*labels: str) -> float | None:
        return registry.get_sample_value("koordlet_container_psi", {**container, **_psi_labels(*labels)})

    # avg10, avg60 and avg300 of "some"; "full" only where the file has it
    assert pod_psi("some", "avg10", "cpu", "false") == 12.5
    assert pod_psi("some", "avg60", "cpu", "false") == 6.25
    assert pod_psi("some", "avg300", "cpu", "false") == 2.5
    assert pod_psi("full", "avg10", "cpu", "false") is None
    assert pod_psi("full", "avg10", "mem", "true") == 0.0  # the default file has a full line
    assert container_psi("some", "avg300", "mem", "true") == 0.75
    assert container_psi("full", "avg10", "mem", "true") == 0.25
    assert container_psi("full", "avg60", "mem", "true") == 0.5
    assert container_psi("full", "avg300", "mem", "true") == 1.5
    assert container_psi("some", "avg10", "io", "true") == 0.0
    families = {f.name: f for f in registry.collect()}
    # 3 resources x (some + full) x 3 precisions, less cpu "full" for the pod
    assert len(families["koordlet_pod_psi"].samples) == 15
    # the init container is read for the metric cache, but not exported (upstream: statuses only)
    exported = {s.labels["container_id"] for s in families["koordlet_container_psi"].samples}
    assert exported == {main.container_id}
    assert setup.container_id not in exported
    text = render(registry).decode()
    assert (
        'koordlet_pod_psi{cpu_full_supported="false",node="node-1",pod_name="p",pod_namespace="default",'
        f'pod_uid="{meta.uid}",psi_degree="some",psi_precision="avg10",psi_resource_type="cpu"}} 12.5\n'
    ) in text
    # the next round: new values; then the pod goes away and its series with it
    host.set_pressure(meta.cgroup_dir, "cpu", (50.0, 6.25, 2.5, 200), None)
    collector.collect(T0 + 10)
    assert pod_psi("some", "avg10", "cpu", "false") == 50.0
    states.pods.clear()
    collector.collect(T0 + 20)
    assert "koordlet_pod_psi{" not in render(registry).decode()
    families = {f.name: f for f in registry.collect()}
    assert families["koordlet_pod_psi"].samples == []
    assert families["koordlet_container_psi"].samples == []


def test_psi_of_pods_and_containers(tmp_path, request):
    from tests.fakes.host import FakeHost
    from tests.koordlet.metricsadvisor.conftest import FakeStates

    host = FakeHost(tmp_path, "v2")
    states = FakeStates(host)
    meta = _pod_with_containers(host, states, "p", containers=1)
    host.set_pressure(meta.cgroup_dir, "cpu", (12.5, 1, 1, 100), None)
    host.set_pressure(meta.containers[0].cgroup_dir, "memory", (0.5, 0, 0, 10), (0.25, 0, 0, 5))
    ctx = make_context(host, states, gates={"PSICollector": True})
    collector = PSICollector(ctx)
    assert collector.enabled()
    collector.collect(T0)
    labels = {"psi_precision": "10"}
    assert (
        _last(ctx, kinds.POD_PSI, pod_uid=meta.uid, psi_resource="cpu", psi_degree="some", **labels) == 12.5
    )
    assert (
        _last(ctx, kinds.POD_PSI, pod_uid=meta.uid, psi_resource="cpu", psi_degree="full", **labels) is None
    )
    assert _last(ctx, kinds.POD_PSI_CPU_FULL_SUPPORTED, pod_uid=meta.uid) == 0.0
    cid = meta.containers[0].container_id
    assert (
        _last(ctx, kinds.CONTAINER_PSI, container_id=cid, psi_resource="mem", psi_degree="full", **labels)
        == 0.25
    )
    assert not PSICollector(make_context(host, states)).enabled()


def test_psi_is_idle_on_v1_without_per_cgroup_pressure(fake_host_v1):
    from tests.koordlet.metricsadvisor.conftest import FakeStates

    states = FakeStates(fake_host_v1)
    ctx = make_context(fake_host_v1, states, gates={"PSICollector": True})
    collector = PSICollector(ctx)
    collector.collect(T0)
    assert collector.started
    assert ctx.cache.stats()["samples"] == 0


def test_node_info(fake_host, states):
    fake_host.set_cpu_topology(sockets=2, cores_per_socket=2, threads_per_core=2)
    fake_host.set_numa_meminfo(0, MemTotal=4000, MemFree=1000)
    fake_host.add_resctrl("7ff")
    ctx = make_context(fake_host, states)
    collector = NodeInfoCollector(ctx)
    collector.collect(T0)
    info = ctx.kv.get(kinds.NODE_CPU_INFO)
    assert isinstance(info, NodeCPUInfo)
    assert info.topology.number_cpus == 8
    assert info.cat_l3_cbm_mask == "7ff"
    assert ctx.kv.get(kinds.NODE_NUMA_INFO)[0].mem_total_bytes == 4000 * 1024
    assert collector.started


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_optional_stat_files_are_asked_of_the_registry(tmp_path, version):
    """PSI and memory.numa_stat exist only on some kernels: a collector asks
    CgroupFS.supported (kubepods, else the controller root), never probes a path itself."""
    host = FakeHost(tmp_path, version)
    states = FakeStates(host)
    for name in ("cpuacct/cpu.pressure", "cpu.pressure", "memory/memory.numa_stat", "memory.numa_stat"):
        for found in tmp_path.rglob(name.split("/")[-1]):
            found.unlink()
    ctx = make_context(host, states, gates={"PSICollector": True})
    assert PSICollector(ctx).supported() is False
    # a pod added later has the file; the kernel's answer (kubepods) is what counts
    _pod_with_containers(host, states, "a", containers=1)
    collector = PodResourceCollector(ctx)
    for tick in (T0, T0 + 1):
        collector.collect(tick)
    assert ctx.shared.pods_numa_memory == {}  # no numa_stat: nothing, and no error
    # the kernel has them in kubepods: supported (the answer is per registry, looked up once)
    fresh = make_context(host, states, gates={"PSICollector": True})
    host.set_pressure(host.layout.root, "cpu", (1.0, 1.0, 1.0, 1), None)
    assert PSICollector(fresh).supported() is True
