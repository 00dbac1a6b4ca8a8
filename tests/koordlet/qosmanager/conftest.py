"""Snapshots for strategy tests: a fake host, pods, NodeSLO and metric samples."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.metriccache import MetricCache, Sample
from koordlet.qosmanager.framework import CgroupView, HostFacts, MetricsView, NodeView, Snapshot
from koordlet.statesinformer.podmeta import pod_meta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from koordlet.system.topology import NodeCPUInfo, read_cpu_basic_info, read_cpu_topology
from tests.fakes.host import FakeHost

NOW = 1_000_000.0


def node(
    cpu: str = "8", memory: str = "16Gi", *, allocatable_cpu: str | None = None, **annotations: str
) -> dict[str, Any]:
    return {
        "metadata": {"name": "node-1", "annotations": dict(annotations)},
        "status": {
            "capacity": {"cpu": cpu, "memory": memory},
            "allocatable": {"cpu": allocatable_cpu or cpu, "memory": memory},
        },
    }


def snapshot(
    host: FakeHost,
    *,
    pods: list[dict[str, Any]] = (),  # type: ignore[assignment]
    node_obj: Mapping[str, Any] | None = None,
    slo: dict[str, Any] | None = None,
    samples: list[Sample] = (),  # type: ignore[assignment]
    gates: Mapping[str, bool] | None = None,
    kubelet_cpu_policy: str = "none",
    topology: bool = True,
    unevictable: frozenset[str] = frozenset(),
) -> Snapshot:
    cgroups = CgroupFS.detect(host.paths)
    cache = MetricCache()
    cache.append(samples)
    cpu_info = None
    if topology:
        topo = read_cpu_topology(host.paths)
        cpu_info = NodeCPUInfo(topo, read_cpu_basic_info(host.paths, topo), "")
    metas = [m for m in (pod_meta(p, cgroups.layout) for p in pods) if m is not None]
    return Snapshot(
        now=NOW,
        node=NodeView.decode(node_obj if node_obj is not None else node()),
        node_slo=merge_node_slo_spec(NodeSLOSpec.from_dict(slo) if slo is not None else None),
        pods=metas,
        metrics=MetricsView(cache),
        host=HostFacts(cgroups.version, cgroups.layout, cpu_info, kubelet_cpu_policy),
        cgroups=CgroupView(cgroups),
        gates=FeatureGates(KOORDLET_FEATURES, dict(gates or {})),
        unevictable=unevictable,
    )
