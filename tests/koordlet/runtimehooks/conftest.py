"""Node facts for hook tests: a fake host, NodeSLO, gates and topology annotations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from koordinator.api.features import KOORDLET_FEATURES, FeatureGates
from koordinator.api.sloconfig.nodeslo import merge_node_slo_spec
from koordinator.api.types.slo import NodeSLOSpec
from koordlet.runtimehooks.protocol import NodeFacts
from koordlet.statesinformer.podmeta import PodMeta, pod_meta
from koordlet.system.cgroup.cgroupfs import CgroupFS
from tests.fakes.host import FakeHost


def facts(
    host: FakeHost,
    *,
    slo: dict[str, Any] | None = None,
    gates: Mapping[str, bool] | None = None,
    node: Mapping[str, Any] | None = None,
    topology: Mapping[str, str] | None = None,
    kubelet_cpu_policy: str = "none",
) -> NodeFacts:
    return NodeFacts(
        cgroups=CgroupFS.detect(host.paths),
        node=node if node is not None else {"metadata": {"name": "node-1", "annotations": {}}},
        node_slo=merge_node_slo_spec(NodeSLOSpec.from_dict(slo) if slo is not None else None),
        gates=FeatureGates(KOORDLET_FEATURES, dict(gates or {})),
        topology_annotations=dict(topology or {}),
        kubelet_cpu_policy=kubelet_cpu_policy,
        proc_root=host.paths.proc_root,
    )


def meta(host: FakeHost, pod: dict[str, Any]) -> PodMeta:
    found = pod_meta(pod, host.layout)
    assert found is not None
    return found


@pytest.fixture(
    params=[("v1", "systemd"), ("v1", "cgroupfs"), ("v2", "systemd"), ("v2", "cgroupfs")], ids="-".join
)
def any_host(request, tmp_path) -> FakeHost:
    version, driver = request.param
    return FakeHost(tmp_path, version, driver=driver, features={"cpu.idle"})
