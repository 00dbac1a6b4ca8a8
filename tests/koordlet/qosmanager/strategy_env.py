"""Snapshots for the CPUBurst, CPUEvict, Resctrl, BlkIO, CgroupReconcile and SystemConfig tests.

:func:`build_snapshot` puts a fake host, pods (as the kubelet reports them), a NodeSLO
merged onto the defaults, metric samples and feature gates into a
:class:`~koordlet.qosmanager.framework.Snapshot` at a fixed time, as the agent would.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.executor import CgroupUpdate, Update
from koordlet.metriccache import MetricCache, Sample
from koordlet.qosmanager.framework import CgroupView, HostFacts, MetricsView, NodeView, Plan, Snapshot
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.errors import HostError
from koordlet.system.topology import NodeCPUInfo, read_cpu_basic_info, read_cpu_topology
from tests.fakes.host import FakeHost

NOW = 1_000_000.0


def running(pod: dict[str, Any]) -> dict[str, Any]:
    """Mark every container status of a built pod as running (the builder leaves state out)."""
    for status in pod["status"].get("containerStatuses", []):
        status["state"] = {"running": {"startedAt": "2024-01-01T00:00:00Z"}}
    return pod


def node_obj(
    cpu: str = "8",
    memory: str = "16Gi",
    *,
    allocatable: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "node-1", "annotations": dict(annotations or {})},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory},
            "allocatable": dict(allocatable) if allocatable is not None else {"cpu": cpu, "memory": memory},
        },
    }


def build_snapshot(
    host: FakeHost,
    *,
    pods: Iterable[Mapping[str, Any]] = (),
    node: Mapping[str, Any] | None = None,
    slo: Mapping[str, Any] | None = None,
    samples: Iterable[Sample] = (),
    gates: Mapping[str, bool] | None = None,
    kubelet_cpu_policy: str = "none",
    cbm_mask: str = "",
    now: float = NOW,
    collect_interval: float = 1.0,
) -> Snapshot:
    cgroups = CgroupFS.detect(host.paths)
    cache = MetricCache()
    cache.append(list(samples))
    cpu_info: NodeCPUInfo | None
    try:
        topology = read_cpu_topology(host.paths)
        cpu_info = NodeCPUInfo(topology, read_cpu_basic_info(host.paths, topology), cbm_mask)
    except (OSError, HostError):
        cpu_info = None
    metas = [m for m in (pod_meta(p, cgroups.layout) for p in pods) if m is not None]
    spec = NodeSLOSpec.from_dict(dict(slo)) if slo is not None else None
    return Snapshot(
        now=now,
        node=NodeView.decode(node if node is not None else node_obj()),
        node_slo=merge_node_slo_spec(spec),
        pods=metas,
        metrics=MetricsView(cache),
        host=HostFacts(cgroups.version, cgroups.layout, cpu_info, kubelet_cpu_policy),
        cgroups=CgroupView(cgroups),
        gates=FeatureGates(KOORDLET_FEATURES, dict(gates or {})),
        collect_interval=collect_interval,
    )


def meta(snapshot: Snapshot, name: str) -> PodMeta:
    return next(p for p in snapshot.pods if p.name == name)


def cgroup_writes(updates: Sequence[Update]) -> list[tuple[str, str, object]]:
    """(key, relative, value) of the cgroup updates, in order."""
    return [(u.key, u.relative, u.value) for u in updates if isinstance(u, CgroupUpdate)]


def leveled_writes(plan: Plan) -> list[list[list[tuple[str, str, object]]]]:
    return [[cgroup_writes(level) for level in batch] for batch in plan.leveled]
