"""TCNetworkQoS: egress bandwidth per QoS class, and per pod, with an HTB tree on the node's NIC.

Enabled with the ``TCNetworkQoS`` gate when the NodeSLO's ``policies.netQOSPolicy`` is unset
or ``tc``. The hook computes the tree the link should have (:meth:`TCNetworkQoS.desired`, no
netlink) and the host layer (:class:`koordlet.system.netqos.TrafficControl`) converges the
link to it. The design -- the tree and its filters, what replaces upstream's ipsets and
iptables (and what that misses under SNAT), the deliberate differences from upstream, the
cleanup, the kernel options it needs -- is in ``docs/runtime-hooks.md``, section
"TCNetworkQoS: the HTB tree".
"""

from __future__ import annotations

import enum
import ipaddress
import logging
import threading
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.podqos import get_pod_network_qos
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.model import IntOrString
from koordinator.api.quantity import Quantity, QuantityError
from koordinator.api.types.slo import NetworkQOSCfg, NodeSLOSpec
from koordinator.kube.clock import SYSTEM_CLOCK, Now
from koordlet.executor import CgroupUpdate, Update
from koordlet.runtimehooks.framework import HookBase
from koordlet.runtimehooks.protocol import NodeFacts, PodContext
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.cgroup.registry import NET_CLS_CLASSID
from koordlet.system.errors import HostError
from koordlet.system.netqos import (
    TC_H_ROOT,
    AddressFilter,
    CgroupFilter,
    ConvergeResult,
    HTBClass,
    TCState,
    TrafficControl,
    default_route_link,
    link_speed_bps,
    major_of,
    make_handle,
    minor_of,
)

log = logging.getLogger(__name__)

NAME = "TCNetworkQoS"
POLICY_TC = "tc"
MAJOR = 1
QDISC = make_handle(MAJOR, 0)
ROOT_CLASS = make_handle(MAJOR, 1)
SYSTEM_CLASS = make_handle(MAJOR, 2)
LS_CLASS = make_handle(MAJOR, 3)
BE_CLASS = make_handle(MAJOR, 4)
SYSTEM_PRIO, LS_PRIO, BE_PRIO = 1, 2, 3
#: u32 address filters (upstream's POD_FILTER_PRIO is 4); IPv6 needs its own priority
IPV4_FILTER_PRIO, IPV6_FILTER_PRIO = 4, 5
#: per-pod class minors: [0x100, 0xffff]; 1-4 are the fixed classes, the rest stays free
POD_MINOR_FIRST, POD_MINOR_LAST = 0x100, 0xFFFF
#: the least rate a class gets, bytes/s (1 kbit/s): the kernel refuses a rate of 0
MIN_RATE = 125
LINK_TTL = 60.0


class NetClass(enum.StrEnum):
    """Upstream's network QoS classes (also its ipset names)."""

    SYSTEM = "system_class"
    LS = "ls_class"
    BE = "be_class"


CLASS_HANDLE = {NetClass.SYSTEM: SYSTEM_CLASS, NetClass.LS: LS_CLASS, NetClass.BE: BE_CLASS}
CLASS_PRIO = {NetClass.SYSTEM: SYSTEM_PRIO, NetClass.LS: LS_PRIO, NetClass.BE: BE_PRIO}


def net_class(pod: PodMeta) -> NetClass | None:
    """From the ``koordinator.sh/qosClass`` label only, as upstream (no label: not shaped)."""
    qos = get_pod_qos_class_raw(pod.pod)
    if qos is QoSClass.SYSTEM:
        return NetClass.SYSTEM
    if qos in (QoSClass.LSE, QoSClass.LSR, QoSClass.LS):
        return NetClass.LS
    if qos is QoSClass.BE:
        return NetClass.BE
    return None


def bits_to_bytes(bits: int) -> int:
    """Netlink takes HTB rates in bytes/s. Done once — upstream did it twice for pod limits."""
    return bits // 8


def bandwidth(total: int, value: IntOrString | None) -> int:
    """bits/s of an IntOrString: an int is a percent of ``total`` (0 outside 0-100), a string a
    quantity (0 when it does not parse)."""
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return total * value // 100 if 0 <= value <= 100 else 0
    try:
        return max(0, Quantity.parse(value).value())
    except QuantityError:
        return 0


@dataclass(frozen=True)
class NetQoSConfig:
    """Upstream's ``NetQosGlobalConfig`` (bits/s): L1 = the LS class, L2 = the BE class."""

    total: int
    ls_tx_min: int = 0
    ls_tx_max: int = 0
    be_tx_min: int = 0
    be_tx_max: int = 0
    ls_enabled: bool = False
    be_enabled: bool = False


def _class_qos(slo: NodeSLOSpec, name: str) -> NetworkQOSCfg | None:
    strategy = slo.resource_qos_strategy
    qos = getattr(strategy, name, None) if strategy is not None else None
    network = qos.network_qos if qos is not None else None
    return network if network is not None and network.enable else None


def node_config(slo: NodeSLOSpec, total: int) -> NetQoSConfig:
    ls, be = _class_qos(slo, "ls_class"), _class_qos(slo, "be_class")
    return NetQoSConfig(
        total=total,
        ls_tx_min=bandwidth(total, ls.egress_request) if ls else 0,
        ls_tx_max=bandwidth(total, ls.egress_limit) if ls else 0,
        be_tx_min=bandwidth(total, be.egress_request) if be else 0,
        be_tx_max=bandwidth(total, be.egress_limit) if be else 0,
        ls_enabled=ls is not None,
        be_enabled=be is not None,
    )


def _rate(bits: int) -> int:
    return max(MIN_RATE, bits_to_bytes(bits))


def _ceil(bits: int, total: int, rate: int) -> int:
    """A limit of 0 is no cap (the total); never below the rate."""
    return max(rate, bits_to_bytes(bits) if bits > 0 else bits_to_bytes(total))


def class_plan(cfg: NetQoSConfig) -> tuple[HTBClass, ...]:
    total = max(MIN_RATE, bits_to_bytes(cfg.total))
    system_rate = _rate(cfg.total - cfg.ls_tx_min - cfg.be_tx_min)
    ls_rate, be_rate = _rate(cfg.ls_tx_min), _rate(cfg.be_tx_min)
    return (
        HTBClass(ROOT_CLASS, TC_H_ROOT, total, total, 0),
        HTBClass(SYSTEM_CLASS, ROOT_CLASS, min(system_rate, total), total, SYSTEM_PRIO),
        HTBClass(LS_CLASS, ROOT_CLASS, ls_rate, _ceil(cfg.ls_tx_max, cfg.total, ls_rate), LS_PRIO),
        HTBClass(BE_CLASS, ROOT_CLASS, be_rate, _ceil(cfg.be_tx_max, cfg.total, be_rate), BE_PRIO),
    )


def pod_limits(pod: PodMeta, total: int) -> tuple[int, int]:
    """(ingress, egress) limits of ``koordinator.sh/networkQOS`` in bits/s (0: none); raises
    AnnotationError/ValueError when the annotation does not parse."""
    qos = get_pod_network_qos(pod.annotations)
    if qos is None:
        return 0, 0
    return bandwidth(total, qos.ingress_limit), bandwidth(total, qos.egress_limit)


def pod_addresses(pod: PodMeta) -> list[str]:
    """The pod's IPs (``status.podIPs``, else ``status.podIP``), without duplicates."""
    status: Mapping[str, Any] = pod.pod.get("status") or {}
    raw = [str(entry.get("ip") or "") for entry in status.get("podIPs") or () if isinstance(entry, Mapping)]
    if not raw and status.get("podIP"):
        raw = [str(status["podIP"])]
    out: list[str] = []
    for text in raw:
        try:
            address = str(ipaddress.ip_address(text))
        except ValueError:
            continue
        if address not in out:
            out.append(address)
    return out


def host_network(pod: PodMeta) -> bool:
    return bool((pod.pod.get("spec") or {}).get("hostNetwork"))


class TCNetworkQoS(HookBase):
    NAME = NAME
    GATE = NAME

    def __init__(
        self,
        *,
        link: str | None = None,
        netns: str | None = None,
        link_ttl: float = LINK_TTL,
        clock: Now = SYSTEM_CLOCK.monotonic,
    ) -> None:
        #: the link to shape; None follows the default route
        self.fixed_link = link
        #: a named network namespace to work in (tests); None is the agent's own
        self.netns = netns
        self.link_ttl = link_ttl
        self.clock = clock
        self._link: tuple[float, str | None, str] | None = None
        self._speed: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()
        #: pod UID -> minor of its own class
        self._minors: dict[str, int] = {}
        #: this process put a tree on the link
        self._applied = False
        #: what a previous run left was looked for (only with the gate on, as upstream)
        self._startup_cleanup_done = False
        self._reported: set[str] = set()
        self.last_result: ConvergeResult | None = None

    # --- node facts ------------------------------------------------------------------------

    def link(self) -> tuple[str | None, str]:
        """(the link to shape, why there is none), the default route's looked up at most
        every ``link_ttl`` seconds."""
        if self.fixed_link is not None:
            return self.fixed_link, ""
        now = self.clock()
        cached = self._link
        if cached is not None and now - cached[0] < self.link_ttl:
            return cached[1], cached[2]
        try:
            found = default_route_link(netns=self.netns)
            why = "" if found else "no default route to find the link to shape"
        except HostError as err:
            found, why = None, f"cannot read the default route: {err.strerror}"
        self._link = (now, found, why)
        return found, why

    def total_bandwidth(self, node: NodeFacts, link: str) -> int:
        """bits/s: the NodeSLO's total, else the link's speed (read at most every ``link_ttl``
        seconds; 0 when neither is known)."""
        strategy = node.node_slo.system_strategy
        configured = strategy.total_network_bandwidth.value() if strategy is not None else 0
        if configured > 0:
            return configured
        now = self.clock()
        cached = self._speed.get(link)
        if cached is None or now - cached[0] >= self.link_ttl:
            cached = (now, link_speed_bps(node.cgroups.paths, link) or 0)
            self._speed[link] = cached
        return cached[1]

    def enabled(self, node: NodeFacts) -> tuple[bool, str]:
        gated, why = super().enabled(node)
        if not gated:
            return gated, why
        strategy = node.node_slo.resource_qos_strategy
        policy = strategy.policies.net_qos_policy if strategy and strategy.policies else None
        if policy is not None and policy != POLICY_TC:
            return False, f"NodeSLO netQOSPolicy is {policy}"
        link, why = self.link()
        if link is None:
            return False, why
        if self.total_bandwidth(node, link) <= 0:
            return False, f"systemStrategy.totalNetworkBandwidth is 0 and the speed of {link} is unknown"
        return True, ""

    # --- per-pod classes -------------------------------------------------------------------

    def _limits(self, pod: PodMeta, total: int) -> tuple[int, int]:
        try:
            return pod_limits(pod, total)
        except (AnnotationError, ValueError) as err:
            log.warning("pod %s: network QoS annotation ignored: %s", pod.key, err)
            return 0, 0

    def _current_classid(self, pod: PodMeta, node: NodeFacts) -> int:
        if not node.cgroups.supported(NET_CLS_CLASSID)[0]:
            return 0
        try:
            return int(node.cgroups.read(NET_CLS_CLASSID, pod.cgroup_dir) or 0)
        except (HostError, ValueError, TypeError):
            return 0

    def _minor_for(self, pod: PodMeta, node: NodeFacts) -> int:
        """The pod's own class minor: kept while the pod lives, else the one its net_cls.classid
        names, else derived from its UID (the next free one on collision)."""
        with self._lock:
            minor = self._minors.get(pod.uid)
            if minor is not None:
                return minor
            used = set(self._minors.values())
            current = self._current_classid(pod, node)
            if (
                major_of(current) == MAJOR
                and minor_of(current) >= POD_MINOR_FIRST
                and minor_of(current) not in used
            ):
                minor = minor_of(current)
            else:
                span = POD_MINOR_LAST - POD_MINOR_FIRST + 1
                if len(used) >= span:
                    raise HostError(0, "no free tc class minor for another pod", "tc")
                minor = POD_MINOR_FIRST + zlib.crc32(pod.uid.encode()) % span
                while minor in used:
                    minor = POD_MINOR_FIRST + (minor - POD_MINOR_FIRST + 1) % span
            self._minors[pod.uid] = minor
            return minor

    def classid(self, pod: PodMeta, node: NodeFacts, total: int) -> int | None:
        """The class the pod's traffic goes to (its own when it has an egress limit)."""
        cls = net_class(pod)
        if cls is None:
            return None
        _ingress, egress = self._limits(pod, total)
        if egress > 0:
            return make_handle(MAJOR, self._minor_for(pod, node))
        return CLASS_HANDLE[cls]

    # --- levels ----------------------------------------------------------------------------

    def pod(self, ctx: PodContext) -> None:
        if not ctx.node.cgroups.supported(NET_CLS_CLASSID)[0]:
            return  # no net_cls hierarchy: only address filters classify
        link, _ = self.link()
        total = self.total_bandwidth(ctx.node, link) if link else 0
        classid = self.classid(ctx.pod, ctx.node, total)
        if classid is not None:
            ctx.response.resources.net_cls_classid = classid

    def desired(self, pods: Sequence[PodMeta], node: NodeFacts, total: int) -> TCState:
        """The tree the link should have for these pods (forgets the classes of pods gone)."""
        classes = list(class_plan(node_config(node.node_slo, total)))
        filters: dict[tuple[int, str], AddressFilter] = {}
        limited: set[str] = set()
        for pod in sorted(pods, key=lambda p: p.key):
            cls = net_class(pod)
            if cls is None:
                continue
            classid = self.classid(pod, node, total)
            if classid is None:
                continue
            if classid != CLASS_HANDLE[cls]:
                limited.add(pod.uid)
                rate = _rate(self._limits(pod, total)[1])
                classes.append(HTBClass(classid, ROOT_CLASS, rate, rate, CLASS_PRIO[cls]))
            if host_network(pod):
                continue  # the node's address: classified by net_cls.classid instead
            for address in pod_addresses(pod):
                prio = IPV4_FILTER_PRIO if ipaddress.ip_address(address).version == 4 else IPV6_FILTER_PRIO
                if (prio, address) in filters:
                    log.debug("pod %s: address %s already classified", pod.key, address)
                    continue
                filters[(prio, address)] = AddressFilter(prio, address, classid)
        with self._lock:
            for uid in [u for u in self._minors if u not in limited]:
                del self._minors[uid]
        return TCState(
            handle=QDISC,
            default_minor=minor_of(SYSTEM_CLASS),
            classes=tuple(sorted(classes)),
            cgroup_filters=tuple(
                CgroupFilter(prio, minor_of(handle))
                for prio, handle in ((SYSTEM_PRIO, SYSTEM_CLASS), (LS_PRIO, LS_CLASS), (BE_PRIO, BE_CLASS))
            ),
            address_filters=tuple(sorted(filters.values())),
        )

    def _report(self, message: str) -> None:
        if message not in self._reported:
            self._reported.add(message)
            log.info("%s: %s", NAME, message)

    def all_pods(self, pods: Sequence[PodMeta], node: NodeFacts) -> list[Update]:
        ok, _ = self.enabled(node)
        if not ok:
            gate_on = node.gates.enabled(NAME)
            if self._applied or (gate_on and not self._startup_cleanup_done):
                return self._clean_up(pods, node)
            return []
        link, _ = self.link()
        assert link is not None
        desired = self.desired(pods, node, self.total_bandwidth(node, link))
        self._applied = self._startup_cleanup_done = True
        result = TrafficControl(link, netns=self.netns).converge(desired)
        self.last_result = result
        for line in result.unsupported:
            self._report(line)
        if result.errors:
            first = result.errors[0]
            raise HostError(first.errno or 0, "; ".join(e.strerror or "" for e in result.errors), link)
        return []

    def _clean_up(self, pods: Sequence[PodMeta], node: NodeFacts) -> list[Update]:
        """Once after the hook turns off (or at start with the gate on and the policy off, for
        what a previous run left): our qdisc and the classids we gave. Nothing is touched
        while the gate has been off since the start."""
        self._applied = False
        self._startup_cleanup_done = True
        link, _ = self.link()
        with self._lock:
            self._minors.clear()
        if link is not None and TrafficControl(link, netns=self.netns).remove(QDISC):
            log.info("%s: removed qdisc htb 1: from %s", NAME, link)
        updates: list[Update] = []
        for pod in pods:
            if major_of(self._current_classid(pod, node)) == MAJOR:
                updates.append(CgroupUpdate(NET_CLS_CLASSID, pod.cgroup_dir, 0, f"{NAME} cleanup"))
        return updates
