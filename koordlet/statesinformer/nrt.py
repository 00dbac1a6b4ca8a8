"""NodeResourceTopology reporting: NUMA zones, CPU topology and the CPU share pools.

Every ``--node-topology-sync-interval`` (3 s) the koordlet computes its node's topology
from the NodeInfoCollector's facts, the kubelet's configuration and CPU manager state,
the Node's annotations and the pods, and, with the NodeTopologyReport gate, creates the
NodeResourceTopology named after the node (``app.kubernetes.io/managed-by=Koordinator``,
owned by the Node) or updates it when the result changed. Consumers on this node are
told through the NodeTopology callback.

The kubelet (upstream's ``calcNodeTopo``): each sync asks the kubelet's ``/configz``
(:mod:`koordlet.statesinformer.kubeletconfig`) for the CPU manager policy, its options and
reserved CPUs (``kubelet.koordinator.sh/cpu-manager-policy``) and the topology manager
policy and scope (``topologyPolicies``). When ``/configz`` does not answer, the last
configuration read stands (one warning, until it answers again); before any answer, the
policy is the ``policyName`` of the CPU manager's checkpoint
``<var-lib-kubelet>/cpu_manager_state`` (without options or reserved CPUs) and the
topology policy ``None``. With ``--disable-query-kubelet-config`` the kubelet is not
asked and its CPU manager is ignored, as upstream: no policy, no kubelet allocations.
Under the static policy, ``node.koordinator.sh/pod-cpu-allocs`` lists the checkpoint's
assignments of the pods the koordlet does not manage (``managedByKubelet``).

Node annotations copied onto the NRT, as upstream's managed annotation keys:
``node.koordinator.sh/reservation`` (``{}`` when absent or malformed; its
``reservedCPUs`` in canonical form, or, for a reservation by count
``{"resources": {"cpu": "2"}}``, that many CPUs picked by topology as upstream's
``GetReservedCPUs``/``getNodeReserved`` pick them) and
``node.koordinator.sh/system-qos-resource`` (``null`` when absent or malformed).

Share pools, as upstream computes them (per NUMA node, ordered by socket then node):

* LS pool: every CPU, minus CPUs the kubelet's static policy pinned (the pods of
  ``pod-cpu-allocs``), minus the cpusets the scheduler recorded in ``resource-status``,
  minus the node's reserved CPUs, minus exclusive system-QoS CPUs;
* BE pool: the same, but of the recorded cpusets only those of LSE pods are removed.

Each sync also sets ``koordlet_cpuset_share_pool_cpu_cores`` and
``koordlet_cpuset_be_share_pool_cpu_cores`` to the number of CPUs in the pools it
computed (upstream counts them when the cpuset hook reads the NodeResourceTopology), and,
with the PerCPUMetric gate, ``koordlet_cpuset_share_pool_info`` and
``koordlet_cpuset_be_share_pool_info`` to 1 for each CPU in the pools (a CPU that leaves a
pool loses its series).

The apiserver is asked only when the NRT to write differs from the last one written or
seen there, or every :data:`RESYNC_SECONDS` (to repair what another writer changed or
deleted): an unchanged sync makes no request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from koordinator.api.cpuset import CPUSetError, cpus_or_empty, format_cpuset, parse_cpuset
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.node import ANNOTATION_NODE_RESERVATION, NodeReservation, get_node_reservation
from koordinator.api.extension.numa import get_resource_status
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_raw
from koordinator.api.extension.topology import (
    ANNOTATION_BE_CPU_SHARED_POOLS,
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_SHARED_POOLS,
    ANNOTATION_CPU_TOPOLOGY,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
    ANNOTATION_POD_CPU_ALLOCS,
    KubeletCPUManagerPolicy,
    PodCPUAlloc,
    SystemQOSResource,
    get_system_qos_resource,
)
from koordinator.api.jsonutil import marshal
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import AlreadyExistsError, ConflictError, NotFoundError
from koordlet.metrics import KoordletMetrics, prune
from koordlet.statesinformer.cpu_assignment import take_by_topology
from koordlet.statesinformer.kubelet import KubeletError
from koordlet.statesinformer.kubeletconfig import (
    CPU_MANAGER_POLICY_STATIC,
    NO_TOPOLOGY_POLICY,
    KubeletConfigError,
    KubeletConfiguration,
    ReservedCPUsError,
)
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.topology import CPUTopology, NodeCPUInfo, NUMANodeInfo

log = logging.getLogger(__name__)

MANAGED_BY = {"app.kubernetes.io/managed-by": "Koordinator"}
MANAGED_ANNOTATIONS = (
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_TOPOLOGY,
    ANNOTATION_CPU_SHARED_POOLS,
    ANNOTATION_BE_CPU_SHARED_POOLS,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_POD_CPU_ALLOCS,
    ANNOTATION_NODE_RESERVATION,
    ANNOTATION_NODE_SYSTEM_QOS_RESOURCE,
)
#: how often the NRT is read back from the apiserver although nothing changed here
RESYNC_SECONDS = 300.0


@dataclass(frozen=True)
class KubeletCPUState:
    """The kubelet's CPU manager as the NRT reports it: policy (empty with
    ``--disable-query-kubelet-config``), its options and reserved CPUs, and the static
    assignments by pod UID."""

    policy: str = "none"
    options: Mapping[str, str] = field(default_factory=dict)
    reserved_cpus: str = ""
    assignments: Mapping[str, frozenset[int]] = field(default_factory=dict)


def read_cpu_manager_state(path: Path) -> KubeletCPUState:
    """The kubelet's CPU manager as its checkpoint ``<var-lib-kubelet>/cpu_manager_state``
    records it: the policy (``policyName``, ``none`` or ``static``) and the CPUs of the
    static assignments by pod UID (``entries``: pod UID -> container -> cpuset).

    The policy is read on its own, not inferred from the assignments: a static-policy node
    has no entries until a pod gets exclusive CPUs, yet its kubelet already owns the
    containers' cpusets. A missing, unreadable or malformed checkpoint is the ``none``
    policy without assignments; a malformed entry is skipped."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return KubeletCPUState()
    if not isinstance(data, dict):
        return KubeletCPUState()
    policy = data.get("policyName")
    policy = policy.strip() if isinstance(policy, str) else ""
    entries = data.get("entries")
    assignments: dict[str, frozenset[int]] = {}
    for uid, containers in entries.items() if isinstance(entries, dict) else ():
        if not isinstance(containers, dict):
            continue
        cpus: set[int] = set()
        for text in containers.values():
            try:
                cpus.update(parse_cpuset(str(text)))
            except CPUSetError:
                continue
        assignments[str(uid)] = frozenset(cpus)
    return KubeletCPUState(policy=policy or "none", assignments=assignments)


def node_reservation(topology: CPUTopology, node_annotations: Mapping[str, Any]) -> NodeReservation:
    """The node's ``node.koordinator.sh/reservation`` as the NRT reports it (upstream's
    ``getNodeReserved``): ``reservedCPUs`` in canonical form (none when it is not a CPU
    list), or, when it names none, ``ceil(resources.cpu)`` CPUs picked by topology from all
    of the node's; empty when absent or malformed."""
    try:
        reservation = get_node_reservation(node_annotations)
    except (AnnotationError, ValueError) as err:
        log.warning("node annotation ignored for the NodeResourceTopology: %s", err)
        return NodeReservation()
    if reservation is None:
        return NodeReservation()
    if reservation.reserved_cpus:
        cpus = format_cpuset(cpus_or_empty(reservation.reserved_cpus))
        return dataclasses.replace(reservation, reserved_cpus=cpus)
    cpu = reservation.resources.get("cpu")
    count = math.ceil(cpu.milli_value() / 1000) if cpu is not None and cpu.milli_value() > 0 else 0
    if not count:
        return reservation
    picked = take_by_topology(topology, topology.cpus(), count)
    return dataclasses.replace(reservation, reserved_cpus=format_cpuset(picked or ()))


def system_qos_resource(node_annotations: Mapping[str, Any]) -> SystemQOSResource | None:
    """The node's ``node.koordinator.sh/system-qos-resource``; None when absent or malformed."""
    try:
        return get_system_qos_resource(node_annotations)
    except (AnnotationError, ValueError) as err:
        log.warning("node annotation ignored for the NodeResourceTopology: %s", err)
        return None


def _status_cpuset(pod: PodMeta) -> set[int]:
    """The cpuset the scheduler recorded in the pod's ``resource-status``."""
    try:
        return cpus_or_empty(get_resource_status(pod.annotations).cpuset)
    except (AnnotationError, ValueError):
        return set()


def managed_by_koordlet(pod: PodMeta) -> bool:
    """Whether the koordlet, not the kubelet's static policy, owns the pod's CPUs
    (upstream's ``calGuaranteedCpu``): labelled LS or BE, or given a cpuset by the scheduler."""
    return get_pod_qos_class_raw(pod.pod) in (QoSClass.LS, QoSClass.BE) or bool(_status_cpuset(pod))


def pod_cpu_allocs(pods: list[PodMeta], kubelet: KubeletCPUState) -> list[PodCPUAlloc]:
    """The static policy's assignments of the pods the koordlet does not manage, by pod
    UID (a pod the koordlet does not know is listed by UID alone); none under another
    policy."""
    if kubelet.policy != CPU_MANAGER_POLICY_STATIC:
        return []
    by_uid = {pod.uid: pod for pod in pods}
    allocs = []
    for uid in sorted(kubelet.assignments):
        cpus = kubelet.assignments[uid]
        pod = by_uid.get(uid)
        if not cpus or (pod is not None and managed_by_koordlet(pod)):
            continue
        allocs.append(
            PodCPUAlloc(
                namespace=pod.namespace if pod else "",
                name=pod.name if pod else "",
                uid=uid,
                cpuset=format_cpuset(cpus),
                managed_by_kubelet=True,
            )
        )
    return allocs


@dataclass(frozen=True)
class SharePools:
    """The CPUs of the LS and BE share pools."""

    ls: frozenset[int]
    be: frozenset[int]


def share_pools(
    cpu_info: NodeCPUInfo,
    pods: list[PodMeta],
    allocs: list[PodCPUAlloc],
    reserved: set[int],
) -> SharePools:
    """Every CPU minus the kubelet's allocations and ``reserved``, and minus the recorded
    cpusets (all of them for LS, the LSE pods' for BE)."""
    all_cpus = set(cpu_info.topology.cpus())
    kubelet_pinned: set[int] = set()
    for alloc in allocs:
        kubelet_pinned |= cpus_or_empty(alloc.cpuset)
    koord_pinned: set[int] = set()
    lse_pinned: set[int] = set()
    for pod in pods:
        cpuset = _status_cpuset(pod)
        koord_pinned |= cpuset
        if cpuset and pod.qos is QoSClass.LSE:
            lse_pinned |= cpuset
    unavailable = kubelet_pinned | reserved
    return SharePools(
        frozenset(all_cpus - unavailable - koord_pinned), frozenset(all_cpus - unavailable - lse_pinned)
    )


def _by_numa(cpu_info: NodeCPUInfo, cpus: frozenset[int]) -> list[dict[str, Any]]:
    groups: dict[tuple[int, int], list[int]] = {}
    for p in cpu_info.topology.processors:
        if p.cpu in cpus:
            groups.setdefault((p.socket, p.node), []).append(p.cpu)
    return [
        {"socket": socket, "node": node, "cpuset": format_cpuset(members)}
        for (socket, node), members in sorted(groups.items(), key=lambda kv: (kv[0][0] << 32) | kv[0][1])
    ]


def _topology(
    cpu_info: NodeCPUInfo,
    pods: list[PodMeta],
    node_annotations: Mapping[str, Any],
    kubelet: KubeletCPUState,
) -> tuple[dict[str, str], SharePools]:
    basic = cpu_info.basic
    reservation = node_reservation(cpu_info.topology, node_annotations)
    system = system_qos_resource(node_annotations)
    # the two node annotations are read independently, as upstream: one malformed still
    # leaves the other's CPUs out of the pools
    reserved = cpus_or_empty(reservation.reserved_cpus)
    if system is not None and system.is_cpuset_exclusive():
        reserved |= cpus_or_empty(system.cpuset)
    allocs = pod_cpu_allocs(pods, kubelet)
    pools = share_pools(cpu_info, pods, allocs, reserved)
    detail = [
        {"id": p.cpu, "core": p.core, "socket": p.socket, "node": p.node}
        for p in sorted(cpu_info.topology.processors, key=lambda p: p.cpu)
    ]
    policy = KubeletCPUManagerPolicy(
        policy=kubelet.policy, options=dict(kubelet.options), reserved_cpus=kubelet.reserved_cpus
    )
    annotations = {
        ANNOTATION_CPU_BASIC_INFO: marshal(
            {
                "cpuModel": basic.model_name,
                "hyperThreadEnabled": basic.hyper_threading,
                "turboEnabled": basic.turbo,
                "catL3CbmMask": cpu_info.cat_l3_cbm_mask,
                "vendorID": basic.vendor_id,
            }
        ),
        ANNOTATION_CPU_TOPOLOGY: marshal({"detail": detail}),
        ANNOTATION_CPU_SHARED_POOLS: marshal(_by_numa(cpu_info, pools.ls)),
        ANNOTATION_BE_CPU_SHARED_POOLS: marshal(_by_numa(cpu_info, pools.be)),
        ANNOTATION_KUBELET_CPU_MANAGER_POLICY: policy.to_json(),
        ANNOTATION_POD_CPU_ALLOCS: marshal([alloc.to_dict() for alloc in allocs]),
        ANNOTATION_NODE_RESERVATION: reservation.to_json(),
        ANNOTATION_NODE_SYSTEM_QOS_RESOURCE: system.to_json() if system is not None else "null",
    }
    return annotations, pools


def topology_annotations(
    cpu_info: NodeCPUInfo,
    pods: list[PodMeta],
    node_annotations: Mapping[str, Any],
    kubelet: KubeletCPUState,
) -> dict[str, str]:
    """The annotations of the NRT (every key of :data:`MANAGED_ANNOTATIONS`)."""
    return _topology(cpu_info, pods, node_annotations, kubelet)[0]


def zones(cpu_info: NodeCPUInfo, numa: list[NUMANodeInfo]) -> list[dict[str, Any]]:
    """One ``node-<id>`` zone per NUMA node with its CPUs and memory."""
    memory = {n.node_id: n.mem_total_bytes for n in numa}
    out = []
    for node, cpus in cpu_info.topology.cpus_by_node().items():
        count = str(len(cpus))
        resources = [{"name": "cpu", "capacity": count, "allocatable": count, "available": count}]
        if node in memory:
            mem = str(memory[node])
            resources.append({"name": "memory", "capacity": mem, "allocatable": mem, "available": mem})
        out.append({"name": f"node-{node}", "type": "Node", "resources": resources})
    return out


def merge_zones(reported: Any, desired: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The zones to write: the koordlet's, each keeping the resources another writer put in
    the same zone (koord-manager's NUMA-level ``batch-cpu``/``batch-memory``), the
    koordlet's own values winning, resources in name order (upstream's ``MergeZoneList``).
    Zones the koordlet no longer reports are dropped."""
    old = {
        zone.get("name"): zone.get("resources") or () for zone in reported or () if isinstance(zone, Mapping)
    }
    out = []
    for zone in desired:
        mine = {info["name"] for info in zone["resources"]}
        kept = [
            info
            for info in old.get(zone["name"], ())
            if isinstance(info, Mapping) and info.get("name") not in mine
        ]
        resources = sorted([*zone["resources"], *kept], key=lambda info: str(info.get("name") or ""))
        out.append({**zone, "resources": resources})
    return out


class TopologyStates(Protocol):
    node_name: str

    def get_node(self) -> Mapping[str, Any] | None: ...
    def get_all_pods(self) -> list[PodMeta]: ...


#: an async getter of the kubelet's ``/configz`` ``kubeletconfig`` object
KubeletConfigSource = Callable[[], Awaitable[Mapping[str, Any]]]


class NodeTopologyReporter:
    """The NRT loop. ``kubelet_state`` reads the CPU manager's checkpoint; ``kubelet_config``
    asks the kubelet's ``/configz`` (None: no kubelet to ask, as in standalone mode: the
    checkpoint's policy); ``query_kubelet_config=False`` is ``--disable-query-kubelet-config``."""

    def __init__(
        self,
        states: TopologyStates,
        cpu_info: Callable[[], NodeCPUInfo | None],
        numa_info: Callable[[], list[NUMANodeInfo] | None],
        kubelet_state: Callable[[], KubeletCPUState],
        *,
        client: ApiClient | None,
        report: bool,
        on_change: Callable[[], None] | None = None,
        interval: float = 3.0,
        metrics: KoordletMetrics | None = None,
        kubelet_config: KubeletConfigSource | None = None,
        query_kubelet_config: bool = True,
        per_cpu_metrics: bool = False,
        resync_seconds: float = RESYNC_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.states = states
        self.cpu_info = cpu_info
        self.numa_info = numa_info
        self.kubelet_state = kubelet_state
        self.client = client
        self.report = report and client is not None
        self.on_change = on_change
        self.interval = interval
        self.metrics = metrics
        self.kubelet_config = kubelet_config
        self.query_kubelet_config = query_kubelet_config
        #: set ``cpuset_{,be_}share_pool_info`` (the PerCPUMetric gate)
        self.per_cpu_metrics = per_cpu_metrics
        self.resync_seconds = resync_seconds
        self.clock = clock
        self.current: dict[str, Any] | None = None
        #: the last configuration ``/configz`` answered, kept while it does not answer
        self.kubelet_configuration: KubeletConfiguration | None = None
        #: the CPU manager policy of the last NRT computed (None before the first)
        self.kubelet_cpu_policy: str | None = None
        self._configz_failing = False
        self._reserved_cpus_error = ""
        #: the NRT content last written to or read from the apiserver, and when (clock)
        self._remote: dict[str, Any] | None = None
        self._remote_at = -math.inf

    # --- the kubelet ----------------------------------------------------------------------

    async def refresh_kubelet_configuration(self) -> None:
        """Ask ``/configz`` again; on failure keep the last answer (one warning per outage)."""
        if self.kubelet_config is None or not self.query_kubelet_config:
            return
        try:
            config = KubeletConfiguration.from_configz(await self.kubelet_config())
        except (KubeletError, KubeletConfigError) as err:
            if not self._configz_failing:
                self._configz_failing = True
                kept = (
                    "the last configuration read"
                    if self.kubelet_configuration is not None
                    else "the CPU manager policy of cpu_manager_state"
                )
                log.warning("kubelet /configz: %s; the NodeResourceTopology reports %s", err, kept)
            return
        if self._configz_failing:
            self._configz_failing = False
            log.info("kubelet /configz answers again")
        self.kubelet_configuration = config

    def _kubelet(self, topology: CPUTopology) -> tuple[KubeletCPUState, str]:
        """The CPU manager state and the topology policy to report."""
        if not self.query_kubelet_config:
            return KubeletCPUState(policy=""), NO_TOPOLOGY_POLICY
        config = self.kubelet_configuration
        if config is None:
            return self.kubelet_state(), NO_TOPOLOGY_POLICY
        if config.cpu_manager_policy != CPU_MANAGER_POLICY_STATIC:
            state = KubeletCPUState(config.cpu_manager_policy, dict(config.cpu_manager_policy_options))
            return state, config.topology_policy
        try:
            reserved = format_cpuset(config.static_reserved_cpus(topology))
            self._reserved_cpus_error = ""
        except ReservedCPUsError as err:
            reserved = ""
            if str(err) != self._reserved_cpus_error:
                self._reserved_cpus_error = str(err)
                log.error("the kubelet's reserved CPUs (static policy) are not reported: %s", err)
        state = KubeletCPUState(
            config.cpu_manager_policy,
            dict(config.cpu_manager_policy_options),
            reserved,
            self.kubelet_state().assignments,
        )
        return state, config.topology_policy

    def cpu_manager_policy(self) -> str:
        """The kubelet's CPU manager policy as the NRT reports it (the cpuset hook and
        CPUSuppress read it from there upstream); before the first sync, what it would be."""
        if self.kubelet_cpu_policy is not None:
            return self.kubelet_cpu_policy
        return self.kubelet_state().policy if self.query_kubelet_config else ""

    # --- the report -----------------------------------------------------------------------

    def _compute(self) -> tuple[dict[str, Any], SharePools, str] | None:
        cpu_info = self.cpu_info()
        if cpu_info is None:
            return None
        node = self.states.get_node() or {}
        kubelet, policy = self._kubelet(cpu_info.topology)
        annotations, pools = _topology(
            cpu_info,
            self.states.get_all_pods(),
            (node.get("metadata") or {}).get("annotations") or {},
            kubelet,
        )
        desired = {
            "annotations": annotations,
            "zones": zones(cpu_info, self.numa_info() or []),
            "topologyPolicies": [policy],
        }
        return desired, pools, kubelet.policy

    def compute(self) -> dict[str, Any] | None:
        """The desired NRT (annotations, zones, policies), or None before the node info
        exists; with the kubelet configuration last read (see :meth:`sync`)."""
        computed = self._compute()
        return computed[0] if computed is not None else None

    def _record_pools(self, pools: SharePools) -> None:
        if self.metrics is None:
            return
        metrics, node = self.metrics, self.metrics.node
        metrics.cpuset_share_pool_cpu_cores.labels(node).set(len(pools.ls))
        metrics.cpuset_be_share_pool_cpu_cores.labels(node).set(len(pools.be))
        if not self.per_cpu_metrics:
            return
        for gauge, cpus in (
            (metrics.cpuset_share_pool_info, pools.ls),
            (metrics.cpuset_be_share_pool_info, pools.be),
        ):
            keep: set[tuple[str, ...]] = {(node, str(cpu)) for cpu in cpus}
            for labels in keep:
                gauge.labels(*labels).set(1)
            prune(gauge, keep)

    async def sync(self) -> bool:
        await self.refresh_kubelet_configuration()
        computed = self._compute()
        if computed is None:
            return False
        desired, pools, policy = computed
        self._record_pools(pools)
        self.kubelet_cpu_policy = policy
        if desired != self.current:
            self.current = desired
            if self.on_change is not None:
                self.on_change()
        if self.report:
            await self._write(desired)
        return True

    async def _write(self, desired: dict[str, Any]) -> None:
        """Make the NRT on the apiserver hold ``desired``: no request when it is what was
        last written or seen there, unless :attr:`resync_seconds` have passed since."""
        assert self.client is not None
        now = self.clock()
        if desired == self._remote and now - self._remote_at < self.resync_seconds:
            return
        self._remote = None  # until the apiserver is known to hold it
        name = self.states.node_name
        for _ in range(3):
            try:
                existing = await self.client.get(res.NODE_RESOURCE_TOPOLOGIES, name)
            except NotFoundError:
                try:
                    await self.client.create(res.NODE_RESOURCE_TOPOLOGIES, self._new_object(desired))
                except AlreadyExistsError:
                    continue
                break
            metadata = existing.get("metadata") or {}
            annotations = {**(metadata.get("annotations") or {}), **desired["annotations"]}
            labels = {**(metadata.get("labels") or {}), **MANAGED_BY}
            zones = merge_zones(existing.get("zones"), desired["zones"])
            if (
                annotations == (metadata.get("annotations") or {})
                and labels == (metadata.get("labels") or {})
                and existing.get("zones") == zones
                and existing.get("topologyPolicies") == desired["topologyPolicies"]
            ):
                break
            updated = {
                **existing,
                "metadata": {**metadata, "annotations": annotations, "labels": labels},
                "zones": zones,
                "topologyPolicies": desired["topologyPolicies"],
            }
            try:
                await self.client.replace(res.NODE_RESOURCE_TOPOLOGIES, updated)
            except ConflictError:
                continue
            break
        else:
            log.warning("NodeResourceTopology %s: update kept conflicting", name)
            return
        self._remote, self._remote_at = desired, now

    def _new_object(self, desired: dict[str, Any]) -> dict[str, Any]:
        node = self.states.get_node() or {}
        metadata: dict[str, Any] = {
            "name": self.states.node_name,
            "labels": dict(MANAGED_BY),
            "annotations": desired["annotations"],
        }
        uid = (node.get("metadata") or {}).get("uid")
        if uid:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": self.states.node_name,
                    "uid": uid,
                    "controller": True,
                }
            ]
        return {
            "apiVersion": res.NODE_RESOURCE_TOPOLOGIES.api_version,
            "kind": res.NODE_RESOURCE_TOPOLOGIES.kind,
            "metadata": metadata,
            "topologyPolicies": desired["topologyPolicies"],
            "zones": desired["zones"],
        }

    async def run(self) -> None:
        while True:
            try:
                await self.sync()
            except Exception:
                log.exception("NodeResourceTopology sync failed")
            await asyncio.sleep(self.interval)
