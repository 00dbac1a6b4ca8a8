"""Node facts and pod metadata for the TC, resctrl and GPU hook tests (a fake host, NodeSLO,
gates, NodeResourceTopology annotations)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.runtimehooks.protocol import NodeFacts
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from tests.fakes.host import FakeHost


def node_facts(
    host: FakeHost,
    *,
    slo: dict[str, Any] | None = None,
    gates: Mapping[str, bool] | None = None,
    topology: Mapping[str, str] | None = None,
) -> NodeFacts:
    return NodeFacts(
        cgroups=CgroupFS.detect(host.paths),
        node={"metadata": {"name": "node-1", "annotations": {}}},
        node_slo=merge_node_slo_spec(NodeSLOSpec.from_dict(slo) if slo is not None else None),
        gates=FeatureGates(KOORDLET_FEATURES, dict(gates or {})),
        topology_annotations=dict(topology or {}),
        proc_root=host.paths.proc_root,
    )


def pod_of(host: FakeHost, pod: dict[str, Any]) -> PodMeta:
    found = pod_meta(pod, host.layout)
    assert found is not None
    return found
