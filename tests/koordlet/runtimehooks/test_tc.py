"""TCNetworkQoS plans: class rates from the NodeSLO, per-pod classes, classids and address filters
(no netlink here; tests/koordlet/runtimehooks/test_tc_host.py converges real links)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from koordinator.api.extension.constants import ANNOTATION_NETWORK_QOS
from koordlet.runtimehooks.hooks.tc import (
    BE_CLASS,
    LS_CLASS,
    MIN_RATE,
    QDISC,
    ROOT_CLASS,
    SYSTEM_CLASS,
    NetQoSConfig,
    TCNetworkQoS,
    bandwidth,
    class_plan,
    node_config,
)
from koordlet.runtimehooks.protocol import PodContext
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.netqos import TC_H_ROOT, AddressFilter, CgroupFilter, HTBClass, major_of, minor_of
from tests.fakes.host import FakeHost
from tests.fakes.pods import PodBuilder, make_pod
from tests.koordlet.runtimehooks.hookenv import node_facts, pod_of

G = 1_000_000_000  # bits/s
ON = {"TCNetworkQoS": True}


def slo(
    total: str = "1G", ls: dict[str, Any] | None = None, be: dict[str, Any] | None = None
) -> dict[str, Any]:
    strategy: dict[str, Any] = {}
    if ls is not None:
        strategy["lsClass"] = {"networkQOS": {"enable": True, **ls}}
    if be is not None:
        strategy["beClass"] = {"networkQOS": {"enable": True, **be}}
    return {"systemStrategy": {"totalNetworkBandwidth": total}, "resourceQOSStrategy": strategy}


def pod(name: str, qos: str | None = "LS", ip: str | None = "10.0.0.1", **extra: Any) -> PodBuilder:
    builder = (
        make_pod(name).kube_qos("Burstable").container("main", cid="containerd://" + name.ljust(64, "0"))
    )
    if qos is not None:
        builder.qos(qos)
    if ip is not None:
        builder.build()["status"]["podIP"] = ip
        builder.build()["status"]["podIPs"] = [{"ip": ip}]
    if extra.get("egress") or extra.get("ingress"):
        limits = {
            k + "Limit": v
            for k, v in (("egress", extra.get("egress")), ("ingress", extra.get("ingress")))
            if v
        }
        builder.annotation(ANNOTATION_NETWORK_QOS, json.dumps(limits))
    if extra.get("host_network"):
        builder.build()["spec"]["hostNetwork"] = True
    return builder


@pytest.fixture
def host(tmp_path) -> FakeHost:
    return FakeHost(tmp_path, "v1", features={"net_cls"})


def meta_all(host: FakeHost, *builders: PodBuilder) -> list[PodMeta]:
    metas = []
    for builder in builders:
        m = pod_of(host, builder.build())
        host.add_pod("Burstable", m.uid, [c.container_id for c in m.containers])
        metas.append(m)
    return metas


# --- rates ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "bits"),
    [
        (None, 0),
        (30, 300_000_000),
        (0, 0),
        (100, G),
        (101, 0),
        (-1, 0),
        ("100M", 100_000_000),
        ("1Gi", 1 << 30),
    ],
)
def test_bandwidth_int_is_a_percent_string_a_quantity(value, bits):
    assert bandwidth(G, value) == bits


def test_unparsable_quantity_is_zero():
    assert bandwidth(G, "lots") == 0


def test_class_rates_from_the_node_slo(host):
    facts = node_facts(
        host,
        slo=slo(
            "1G",
            ls={"egressRequest": 30, "egressLimit": "500M"},
            be={"egressRequest": "100M", "egressLimit": 50},
        ),
    )
    cfg = node_config(facts.node_slo, G)
    assert cfg == NetQoSConfig(G, 300_000_000, 500_000_000, 100_000_000, 500_000_000, True, True)
    # bits/s divided by 8 once: bytes/s as netlink wants them
    assert class_plan(cfg) == (
        HTBClass(ROOT_CLASS, TC_H_ROOT, 125_000_000, 125_000_000, 0),
        HTBClass(SYSTEM_CLASS, ROOT_CLASS, 75_000_000, 125_000_000, 1),  # 1G - 300M - 100M
        HTBClass(LS_CLASS, ROOT_CLASS, 37_500_000, 62_500_000, 2),
        HTBClass(BE_CLASS, ROOT_CLASS, 12_500_000, 62_500_000, 3),
    )


def test_disabled_classes_get_no_guarantee_and_no_cap(host):
    facts = node_facts(host, slo=slo("800M"))
    cfg = node_config(facts.node_slo, 800_000_000)
    assert not cfg.ls_enabled
    assert not cfg.be_enabled
    classes = {c.handle: c for c in class_plan(cfg)}
    assert classes[SYSTEM_CLASS].rate == 100_000_000  # everything
    assert (classes[LS_CLASS].rate, classes[LS_CLASS].ceil) == (MIN_RATE, 100_000_000)
    assert (classes[BE_CLASS].rate, classes[BE_CLASS].ceil) == (MIN_RATE, 100_000_000)


def test_requests_above_the_total_leave_the_system_class_the_minimum(host):
    facts = node_facts(host, slo=slo("100M", ls={"egressRequest": "80M"}, be={"egressRequest": "80M"}))
    classes = {c.handle: c for c in class_plan(node_config(facts.node_slo, 100_000_000))}
    assert classes[SYSTEM_CLASS].rate == MIN_RATE
    # an unset limit (0 after the NodeSLO merge) is no cap
    assert classes[LS_CLASS].ceil == classes[BE_CLASS].ceil == 12_500_000
    assert all(c.ceil >= c.rate > 0 for c in classes.values())


# --- pods -----------------------------------------------------------------------------------


def test_pod_classids_by_qos(host):
    hook = TCNetworkQoS(link="eth0")
    facts = node_facts(host, slo=slo(), gates=ON)
    pods = meta_all(
        host, pod("sys", "SYSTEM"), pod("lsr", "LSR"), pod("ls", "LS"), pod("be", "BE"), pod("none", None)
    )
    got = {}
    for m in pods:
        ctx = PodContext(m, facts)
        hook.pod(ctx)
        got[m.name] = ctx.response.resources.net_cls_classid
    assert got == {"sys": 0x10002, "lsr": 0x10003, "ls": 0x10003, "be": 0x10004, "none": None}
    update = PodContext(pods[3], facts)
    hook.pod(update)
    assert [(u.key, u.value) for u in update.response.resources.updates(pods[3].cgroup_dir)] == [
        ("net_cls.classid", 0x10004)
    ]


def test_no_net_cls_no_classid(tmp_path):
    host = FakeHost(tmp_path, "v2")
    hook = TCNetworkQoS(link="eth0")
    (m,) = meta_all(host, pod("be", "BE"))
    ctx = PodContext(m, node_facts(host, slo=slo(), gates=ON))
    hook.pod(ctx)
    assert ctx.response.resources.net_cls_classid is None


def test_pod_limit_is_divided_by_eight_once(host):
    """Upstream divided the annotation's bits by 8 twice ("10M" -> 156250 B/s, 1.25 Mbit/s);
    a pod limited to 10 Mbit/s gets 1250000 bytes/s here."""
    hook = TCNetworkQoS(link="eth0")
    facts = node_facts(host, slo=slo(), gates=ON)
    (m,) = meta_all(host, pod("be", "BE", egress="10M"))
    state = hook.desired([m], facts, G)
    own = [c for c in state.classes if minor_of(c.handle) >= 0x100]
    assert len(own) == 1
    assert (own[0].rate, own[0].ceil, own[0].parent, own[0].prio) == (1_250_000, 1_250_000, ROOT_CLASS, 3)
    assert state.address_filters == (AddressFilter(4, "10.0.0.1", own[0].handle),)
    ctx = PodContext(m, facts)
    hook.pod(ctx)
    assert ctx.response.resources.net_cls_classid == own[0].handle


def test_percent_pod_limit(host):
    hook = TCNetworkQoS(link="eth0")
    (m,) = meta_all(host, pod("be", "BE", egress=10))
    state = hook.desired([m], node_facts(host, slo=slo(), gates=ON), G)
    assert [c.rate for c in state.classes if minor_of(c.handle) >= 0x100] == [12_500_000]


def test_ingress_only_limit_is_not_a_class(host):
    hook = TCNetworkQoS(link="eth0")
    (m,) = meta_all(host, pod("ls", "LS", ingress="10M"))
    state = hook.desired([m], node_facts(host, slo=slo(), gates=ON), G)
    assert [c.handle for c in state.classes] == [ROOT_CLASS, SYSTEM_CLASS, LS_CLASS, BE_CLASS]
    assert state.address_filters == (AddressFilter(4, "10.0.0.1", LS_CLASS),)


def test_malformed_annotation_is_ignored(host):
    hook = TCNetworkQoS(link="eth0")
    builder = pod("be", "BE").annotation(ANNOTATION_NETWORK_QOS, "{not json")
    (m,) = meta_all(host, builder)
    state = hook.desired([m], node_facts(host, slo=slo(), gates=ON), G)
    assert state.address_filters == (AddressFilter(4, "10.0.0.1", BE_CLASS),)
    assert len(state.classes) == 4


def test_address_filters(host):
    hook = TCNetworkQoS(link="eth0")
    dual = pod("dual", "LS", ip="10.0.0.2")
    dual.build()["status"]["podIPs"] = [{"ip": "10.0.0.2"}, {"ip": "fd00::2"}]
    pods = meta_all(
        host,
        pod("sys", "SYSTEM", ip="10.0.0.1"),
        dual,
        pod("be", "BE", ip="10.0.0.3"),
        pod("pending", "BE", ip=None),
        pod("hostnet", "BE", ip="192.168.1.10", host_network=True),
        pod("unlabelled", None, ip="10.0.0.9"),
    )
    state = hook.desired(pods, node_facts(host, slo=slo(), gates=ON), G)
    assert state.handle == QDISC
    assert state.default_minor == 2
    assert state.address_filters == (
        AddressFilter(4, "10.0.0.1", SYSTEM_CLASS),
        AddressFilter(4, "10.0.0.2", LS_CLASS),
        AddressFilter(4, "10.0.0.3", BE_CLASS),
        AddressFilter(5, "fd00::2", LS_CLASS),
    )
    assert state.cgroup_filters == (CgroupFilter(1, 2), CgroupFilter(2, 3), CgroupFilter(3, 4))


def test_a_removed_pod_takes_its_class_with_it(host):
    hook = TCNetworkQoS(link="eth0")
    facts = node_facts(host, slo=slo(), gates=ON)
    a, b = meta_all(
        host, pod("a", "LS", ip="10.0.0.1", egress="5M"), pod("b", "BE", ip="10.0.0.2", egress="7M")
    )
    both = hook.desired([a, b], facts, G)
    only_a = hook.desired([a], facts, G)
    assert len(both.classes) == 6
    assert len(only_a.classes) == 5
    assert [f.address for f in only_a.address_filters] == ["10.0.0.1"]
    # a's class keeps its handle while b comes and goes
    assert {c.handle for c in only_a.classes} < {c.handle for c in both.classes}


def test_minor_is_stable_across_restarts_and_recovered_from_net_cls(host):
    facts = node_facts(host, slo=slo(), gates=ON)
    (m,) = meta_all(host, pod("be", "BE", egress="10M"))
    first = TCNetworkQoS(link="eth0").classid(m, facts, G)
    assert first is not None
    assert major_of(first) == 1
    assert minor_of(first) >= 0x100
    assert TCNetworkQoS(link="eth0").classid(m, facts, G) == first
    host.set("net_cls.classid", m.cgroup_dir, 0x10ABC)  # what a previous run gave the pod
    assert TCNetworkQoS(link="eth0").classid(m, facts, G) == 0x10ABC


def test_colliding_uids_get_different_minors(host):
    hook = TCNetworkQoS(link="eth0")
    facts = node_facts(host, slo=slo(), gates=ON)
    pods = meta_all(host, *(pod(f"p{i}", "BE", ip=f"10.0.1.{i}", egress="1M") for i in range(50)))
    state = hook.desired(pods, facts, G)
    own = [c.handle for c in state.classes if minor_of(c.handle) >= 0x100]
    assert len(own) == len(set(own)) == 50


# --- enabled --------------------------------------------------------------------------------


def test_enabled_reasons(host):
    hook = TCNetworkQoS(link="eth0")
    assert hook.enabled(node_facts(host, slo=slo())) == (False, "feature gate TCNetworkQoS is off")
    terway = slo()
    terway["resourceQOSStrategy"]["policies"] = {"netQOSPolicy": "terway-qos"}
    assert hook.enabled(node_facts(host, slo=terway, gates=ON)) == (
        False,
        "NodeSLO netQOSPolicy is terway-qos",
    )
    assert hook.enabled(node_facts(host, slo=slo("0"), gates=ON)) == (
        False,
        "systemStrategy.totalNetworkBandwidth is 0 and the speed of eth0 is unknown",
    )
    assert hook.enabled(node_facts(host, slo=slo(), gates=ON)) == (True, "")


def test_total_from_the_link_speed(host):
    hook = TCNetworkQoS(link="eth0")
    host.write("sys/class/net/eth0/speed", "25000\n")
    facts = node_facts(host, slo=slo("0"), gates=ON)
    assert hook.enabled(facts) == (True, "")
    assert hook.total_bandwidth(facts, "eth0") == 25 * G
