"""NodeResourceTopology reporting: NUMA zones, CPU topology and the CPU share pools.

Every ``--node-topology-sync-interval`` (3 s) the koordlet computes its node's topology
from the NodeInfoCollector's facts, the kubelet's CPU manager state and the pods, and, with
the NodeTopologyReport gate, creates the NodeResourceTopology named after the node
(``app.kubernetes.io/managed-by=Koordinator``, owned by the Node) or updates it when the
result changed. Consumers on this node are told through the NodeTopology callback.

Share pools, as upstream computes them (per NUMA node, ordered by socket then node):

* LS pool: every CPU, minus CPUs the kubelet's static policy pinned (pods that are neither
  LS nor BE and have no Koordinator cpuset), minus the cpusets the scheduler recorded in
  ``resource-status``, minus the node's reserved CPUs, minus exclusive system-QoS CPUs;
* BE pool: the same, but of the recorded cpusets only those of LSE pods are removed.

Each sync also sets ``koordlet_cpuset_share_pool_cpu_cores`` and
``koordlet_cpuset_be_share_pool_cpu_cores`` to the number of CPUs in the pools it
computed (upstream counts them when the cpuset hook reads the NodeResourceTopology).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from koordinator.api.cpuset import CPUSetError, cpus_or_empty, format_cpuset, parse_cpuset
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.node import get_node_reservation
from koordinator.api.extension.numa import get_resource_status
from koordinator.api.extension.qos import QoSClass
from koordinator.api.extension.topology import (
    ANNOTATION_BE_CPU_SHARED_POOLS,
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_SHARED_POOLS,
    ANNOTATION_CPU_TOPOLOGY,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_POD_CPU_ALLOCS,
    get_system_qos_resource,
)
from koordinator.api.jsonutil import marshal
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import ConflictError, NotFoundError
from koordlet.metrics import KoordletMetrics
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.topology import NodeCPUInfo, NUMANodeInfo

log = logging.getLogger(__name__)

MANAGED_BY = {"app.kubernetes.io/managed-by": "Koordinator"}
MANAGED_ANNOTATIONS = (
    ANNOTATION_CPU_BASIC_INFO,
    ANNOTATION_CPU_TOPOLOGY,
    ANNOTATION_CPU_SHARED_POOLS,
    ANNOTATION_BE_CPU_SHARED_POOLS,
    ANNOTATION_KUBELET_CPU_MANAGER_POLICY,
    ANNOTATION_POD_CPU_ALLOCS,
)


@dataclass(frozen=True)
class KubeletCPUState:
    """The kubelet's CPU manager: policy, reserved CPUs and static assignments by pod UID."""

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


def share_pools(
    cpu_info: NodeCPUInfo,
    pods: list[PodMeta],
    node_annotations: Mapping[str, Any],
    kubelet: KubeletCPUState,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The LS and BE share pools as annotation values."""
    all_cpus = set(cpu_info.topology.cpus())
    # the two node annotations are read independently, as upstream: one malformed still
    # leaves the other's CPUs out of the pools
    reserved: set[int] = set()
    try:
        reservation = get_node_reservation(node_annotations)
    except (AnnotationError, ValueError) as err:
        log.warning("node annotation ignored for share pools: %s", err)
    else:
        if reservation is not None:
            reserved |= cpus_or_empty(reservation.reserved_cpus)
    try:
        system = get_system_qos_resource(node_annotations)
    except (AnnotationError, ValueError) as err:
        log.warning("node annotation ignored for share pools: %s", err)
    else:
        if system is not None and system.cpuset_exclusive is not False:
            reserved |= cpus_or_empty(system.cpuset)
    kubelet_pinned: set[int] = set()
    koord_pinned: set[int] = set()
    lse_pinned: set[int] = set()
    for pod in pods:
        try:
            cpuset = cpus_or_empty(get_resource_status(pod.annotations).cpuset)
        except (AnnotationError, ValueError):
            cpuset = set()
        if cpuset:
            koord_pinned |= cpuset
            if pod.qos is QoSClass.LSE:
                lse_pinned |= cpuset
        elif pod.qos not in (QoSClass.LS, QoSClass.BE) and pod.uid in kubelet.assignments:
            kubelet_pinned |= kubelet.assignments[pod.uid]
    ls = all_cpus - kubelet_pinned - koord_pinned - reserved
    be = all_cpus - kubelet_pinned - lse_pinned - reserved
    return _by_numa(cpu_info, ls), _by_numa(cpu_info, be)


def pool_cpus(annotation: str) -> int:
    """The number of CPUs in a share-pools annotation (``[{socket, node, cpuset}]``)."""
    try:
        pools = orjson.loads(annotation)
    except orjson.JSONDecodeError:
        return 0
    return sum(len(cpus_or_empty(str(pool.get("cpuset", "")))) for pool in pools if isinstance(pool, dict))


def _by_numa(cpu_info: NodeCPUInfo, cpus: set[int]) -> list[dict[str, Any]]:
    groups: dict[tuple[int, int], list[int]] = {}
    for p in cpu_info.topology.processors:
        if p.cpu in cpus:
            groups.setdefault((p.socket, p.node), []).append(p.cpu)
    return [
        {"socket": socket, "node": node, "cpuset": format_cpuset(members)}
        for (socket, node), members in sorted(groups.items(), key=lambda kv: (kv[0][0] << 32) | kv[0][1])
    ]


def topology_annotations(
    cpu_info: NodeCPUInfo,
    pods: list[PodMeta],
    node_annotations: Mapping[str, Any],
    kubelet: KubeletCPUState,
) -> dict[str, str]:
    basic = cpu_info.basic
    ls_pools, be_pools = share_pools(cpu_info, pods, node_annotations, kubelet)
    detail = [
        {"id": p.cpu, "core": p.core, "socket": p.socket, "node": p.node}
        for p in sorted(cpu_info.topology.processors, key=lambda p: p.cpu)
    ]
    pod_allocs = [
        {
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
            "cpuset": format_cpuset(kubelet.assignments[pod.uid]),
            "managedByKubelet": True,
        }
        for pod in sorted(pods, key=lambda p: p.uid)
        if kubelet.assignments.get(pod.uid)
    ]
    return {
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
        ANNOTATION_CPU_SHARED_POOLS: marshal(ls_pools),
        ANNOTATION_BE_CPU_SHARED_POOLS: marshal(be_pools),
        ANNOTATION_KUBELET_CPU_MANAGER_POLICY: marshal(
            {
                "policy": kubelet.policy,
                "options": dict(kubelet.options),
                "reservedCPUs": kubelet.reserved_cpus,
            }
        ),
        ANNOTATION_POD_CPU_ALLOCS: marshal(pod_allocs),
    }


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


class NodeTopologyReporter:
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
        self.current: dict[str, Any] | None = None

    def compute(self) -> dict[str, Any] | None:
        """The desired NRT (annotations, zones, policies), or None before the node info exists."""
        cpu_info = self.cpu_info()
        if cpu_info is None:
            return None
        node = self.states.get_node() or {}
        annotations = topology_annotations(
            cpu_info,
            self.states.get_all_pods(),
            (node.get("metadata") or {}).get("annotations") or {},
            self.kubelet_state(),
        )
        return {
            "annotations": annotations,
            "zones": zones(cpu_info, self.numa_info() or []),
            "topologyPolicies": ["None"],
        }

    async def sync(self) -> bool:
        desired = self.compute()
        if desired is None:
            return False
        if self.metrics is not None:
            annotations = desired["annotations"]
            node = self.metrics.node
            ls, be = annotations[ANNOTATION_CPU_SHARED_POOLS], annotations[ANNOTATION_BE_CPU_SHARED_POOLS]
            self.metrics.cpuset_share_pool_cpu_cores.labels(node).set(pool_cpus(ls))
            self.metrics.cpuset_be_share_pool_cpu_cores.labels(node).set(pool_cpus(be))
        if desired != self.current:
            self.current = desired
            if self.on_change is not None:
                self.on_change()
        if self.report:
            await self._write(desired)
        return True

    async def _write(self, desired: dict[str, Any]) -> None:
        assert self.client is not None
        name = self.states.node_name
        for _ in range(3):
            try:
                existing = await self.client.get(res.NODE_RESOURCE_TOPOLOGIES, name)
            except NotFoundError:
                await self.client.create(res.NODE_RESOURCE_TOPOLOGIES, self._new_object(desired))
                return
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
                return
            updated = {
                **existing,
                "metadata": {**metadata, "annotations": annotations, "labels": labels},
                "zones": zones,
                "topologyPolicies": desired["topologyPolicies"],
            }
            try:
                await self.client.replace(res.NODE_RESOURCE_TOPOLOGIES, updated)
                return
            except ConflictError:
                continue

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
