"""Host tier: TCNetworkQoS converges a real link (a veth in a throwaway network namespace) and
the qdisc, classes and filters are read back through netlink (and with the ``tc`` binary
when it is installed); removing pods and disabling the policy leave nothing behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from koordlet.executor import CgroupUpdate, ResourceUpdateExecutor
from koordlet.runtimehooks.framework import HookManager
from koordlet.runtimehooks.hooks.tc import BE_CLASS, LS_CLASS, QDISC, ROOT_CLASS, SYSTEM_CLASS, TCNetworkQoS
from koordlet.runtimehooks.protocol import PodContext
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.system.netqos import TC_H_ROOT, AddressFilter, HTBClass, TCState, TrafficControl, minor_of
from tests.fakes.host import FakeHost
from tests.koordlet.runtimehooks.hookenv import node_facts
from tests.koordlet.runtimehooks.netns import Namespace, tc_classes, tc_filters, throwaway_netns
from tests.koordlet.runtimehooks.test_tc import ON, meta_all, pod, slo

pytestmark = pytest.mark.host

SLO = slo(
    "1G", ls={"egressRequest": 30, "egressLimit": "500M"}, be={"egressRequest": "100M", "egressLimit": 50}
)
BASE_CLASSES = (
    HTBClass(ROOT_CLASS, TC_H_ROOT, 125_000_000, 125_000_000, 0),
    HTBClass(SYSTEM_CLASS, ROOT_CLASS, 75_000_000, 125_000_000, 1),
    HTBClass(LS_CLASS, ROOT_CLASS, 37_500_000, 62_500_000, 2),
    HTBClass(BE_CLASS, ROOT_CLASS, 12_500_000, 62_500_000, 3),
)


@pytest.fixture
def ns() -> Iterator[Namespace]:
    with throwaway_netns() as namespace:
        yield namespace


@pytest.fixture
def host(tmp_path) -> FakeHost:
    return FakeHost(tmp_path, "v1", features={"net_cls"})


def read(ns: Namespace) -> TCState | None:
    return TrafficControl(ns.link, netns=ns.name).read()


def cgroup_filters_supported(hook: TCNetworkQoS) -> bool:
    assert hook.last_result is not None
    return not hook.last_result.unsupported


def test_tree_built_read_back_and_pods_removed(ns, host):
    hook = TCNetworkQoS(link=ns.link, netns=ns.name)
    facts = node_facts(host, slo=SLO, gates=ON)
    dual = pod("web", "LS", ip="10.1.0.2")
    dual.build()["status"]["podIPs"] = [{"ip": "10.1.0.2"}, {"ip": "fd00::2"}]
    pods = meta_all(
        host,
        dual,
        pod("batch", "BE", ip="10.1.0.3"),
        pod("capped", "BE", ip="10.1.0.4", egress="10M"),
        pod("agent", "SYSTEM", ip="10.99.0.1", host_network=True, egress="20M"),
    )
    assert hook.enabled(facts) == (True, "")
    assert hook.all_pods(pods, facts) == []

    got = read(ns)
    assert got is not None
    assert got.handle == QDISC
    assert got.default_minor == 2
    own = {c.handle: c for c in got.classes if minor_of(c.handle) >= 0x100}
    capped = hook.classid(pods[2], facts, 10**9) or 0
    agent = hook.classid(pods[3], facts, 10**9) or 0
    assert set(own) == {capped, agent}
    assert own[capped] == HTBClass(capped, ROOT_CLASS, 1_250_000, 1_250_000, 3)  # 10 Mbit/s, /8 once
    assert own[agent] == HTBClass(agent, ROOT_CLASS, 2_500_000, 2_500_000, 1)
    agent_ctx = PodContext(pods[3], facts)
    hook.pod(agent_ctx)
    assert agent_ctx.response.resources.net_cls_classid == agent  # hostNetwork: through net_cls
    assert tuple(c for c in got.classes if c.handle not in own) == BASE_CLASSES
    assert got.address_filters == (
        AddressFilter(4, "10.1.0.2", LS_CLASS),
        AddressFilter(4, "10.1.0.3", BE_CLASS),
        AddressFilter(4, "10.1.0.4", capped),
        AddressFilter(5, "fd00::2", LS_CLASS),
    )  # the hostNetwork pod is classified by its net_cls.classid, not by the node's address
    if cgroup_filters_supported(hook):
        assert [(f.prio, f.handle) for f in got.cgroup_filters] == [(1, 2), (2, 3), (3, 4)]
    else:
        assert got.cgroup_filters == ()
        assert len(hook.last_result.unsupported) == 3  # type: ignore[union-attr]
    assert got.foreign_filters == ()

    classes = tc_classes(ns)
    if classes is not None:  # the tc binary agrees
        assert classes == {"1:1": "root", "1:2": "1:1", "1:3": "1:1", "1:4": "1:1"} | {
            f"1:{minor_of(h):x}": "1:1" for h in own
        }
        flowids = sorted(f["options"]["flowid"] for f in tc_filters(ns) or () if "flowid" in f["options"])
        assert flowids == sorted(["1:3", "1:4", f"1:{minor_of(capped):x}", "1:3"])

    # a second pass changes nothing
    hook.all_pods(pods, facts)
    assert hook.last_result is not None
    assert hook.last_result.changes == []

    # the capped pod and the BE pod go; the web pod changes class
    web = meta_all(host, pod("web", "BE", ip="10.1.0.2"))[0]
    hook.all_pods([web, pods[3]], facts)
    got = read(ns)
    assert got is not None
    assert {c.handle for c in got.classes} == {c.handle for c in BASE_CLASSES} | {agent}
    assert got.address_filters == (AddressFilter(4, "10.1.0.2", BE_CLASS),)  # no IPv6 filter, no hash table
    assert got.foreign_filters == ()


def test_disabling_the_policy_removes_everything(ns, host):
    hook = TCNetworkQoS(link=ns.link, netns=ns.name)
    pods = meta_all(host, pod("capped", "BE", ip="10.1.0.4", egress="10M"))
    on = node_facts(host, slo=SLO, gates=ON)
    ctx = PodContext(pods[0], on)  # the reconciler's pod level
    hook.pod(ctx)
    for update in ctx.response.resources.updates(pods[0].cgroup_dir):
        host.set(update.key, update.relative, update.value)
    hook.all_pods(pods, on)
    assert read(ns) is not None

    terway = slo()
    terway["resourceQOSStrategy"]["policies"] = {"netQOSPolicy": "terway-qos"}
    facts = node_facts(host, slo=terway, gates=ON)
    updates = hook.all_pods(pods, facts)
    assert read(ns) is None  # qdisc, classes and filters are gone
    assert updates == [CgroupUpdate("net_cls.classid", pods[0].cgroup_dir, 0, "TCNetworkQoS cleanup")]
    assert hook.all_pods(pods, facts) == []  # once


def test_the_gate_off_from_the_start_touches_nothing(ns, host):
    mine = TCState(QDISC, 2, classes=(HTBClass(ROOT_CLASS, TC_H_ROOT, 1000, 1000, 0),))
    assert TrafficControl(ns.link, netns=ns.name).converge(mine).ok
    hook = TCNetworkQoS(link=ns.link, netns=ns.name)
    assert hook.all_pods([], node_facts(host, slo=SLO)) == []
    assert read(ns) == mine


def test_another_root_qdisc_is_not_replaced(ns, host):
    from pyroute2 import IPRoute

    with IPRoute(netns=ns.name, flags=0) as ipr:
        ipr.tc(
            "replace",
            "tbf",
            ipr.link_lookup(ifname=ns.link)[0],
            0x20000,
            rate="1mbit",
            burst=4096,
            latency="50ms",
        )
    hook = TCNetworkQoS(link=ns.link, netns=ns.name)
    with pytest.raises(OSError, match="root qdisc tbf 2:0"):
        hook.all_pods([], node_facts(host, slo=SLO, gates=ON))
    assert read(ns) is None


def test_nothing_leaks_across_100_pod_lifecycles(ns, host):
    hook = TCNetworkQoS(link=ns.link, netns=ns.name)
    facts = node_facts(host, slo=SLO, gates=ON)
    steady = meta_all(host, pod("steady", "LS", ip="10.2.0.1"))
    hook.all_pods(steady, facts)
    baseline = read(ns)
    assert baseline is not None
    for i in range(100):
        builder = pod(f"churn-{i}", "BE", ip=f"10.3.{i // 250}.{i % 250 + 1}", egress="3M")
        if i % 2:
            builder.build()["status"]["podIPs"].append({"ip": f"fd00::{i + 1:x}"})
        churn = meta_all(host, builder)
        hook.all_pods(steady + churn, facts)
        during = read(ns)
        assert during is not None
        assert len(during.classes) == len(baseline.classes) + 1
        hook.all_pods(steady, facts)
        host.remove_cgroup(churn[0].cgroup_dir)
    assert read(ns) == baseline
    assert hook._minors == {}  # the churned pods' class minors are forgotten


def test_through_the_reconciler(ns, host):
    """The reconciler transport: net_cls.classid written at the pod level through the executor,
    the tree converged at the all-pods level."""
    hook = TCNetworkQoS(link=ns.link, netns=ns.name)
    facts = node_facts(host, slo=SLO, gates=ON)
    pods = meta_all(host, pod("web", "LS", ip="10.1.0.2"), pod("capped", "BE", ip="10.1.0.4", egress="10M"))
    reconciler = Reconciler(
        HookManager([hook]), lambda: facts, lambda: pods, ResourceUpdateExecutor(facts.cgroups)
    )
    outcomes = reconciler.reconcile()
    assert [o.error for o in outcomes if o.error is not None] == []
    capped = hook.classid(pods[1], facts, 10**9) or 0
    assert host.get("net_cls.classid", pods[0].cgroup_dir) == LS_CLASS
    assert host.get("net_cls.classid", pods[1].cgroup_dir) == capped
    got = read(ns)
    assert got is not None
    assert got.address_filters == (
        AddressFilter(4, "10.1.0.2", LS_CLASS),
        AddressFilter(4, "10.1.0.4", capped),
    )
