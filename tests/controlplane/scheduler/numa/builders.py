"""Builders for the NUMA tests: pods and NodeResourceTopology objects as the API returns them,
and the two machines most cases use.

``make_pod("p").qos("LSR").prod().requests(cpu="4")``
``make_nrt(TOPO_2S4N).zone(0, cpu="8", memory="16Gi").annotate(KEY, value).build()``
"""

from __future__ import annotations

import json
from typing import Any

from controlplane.scheduler.numa.topology import NodeCPUTopology
from koordinator.api.extension.numa import (
    ANNOTATION_NUMA_TOPOLOGY_SPEC,
    ANNOTATION_RESOURCE_SPEC,
    ANNOTATION_RESOURCE_STATUS,
)
from koordinator.api.extension.priority import LABEL_POD_PRIORITY_CLASS
from koordinator.api.extension.qos import LABEL_POD_QOS
from koordinator.api.extension.topology import ANNOTATION_CPU_TOPOLOGY

Obj = dict[str, Any]

#: 2 sockets x 2 NUMA nodes x 4 cores x 2 threads; NUMA node n holds CPUs 8n..8n+7, the
#: threads of a core are consecutive (core 0 = CPUs 0,1).
TOPO_2S4N = NodeCPUTopology.uniform(2, 2, 4, 2)


def linux_ht_topology(cores: int) -> NodeCPUTopology:
    """1 socket, 1 NUMA node, ``cores`` cores with 2 threads numbered as Linux does: core c
    holds CPUs c and c + cores."""
    infos = [(0, 0, core, core) for core in range(cores)] + [
        (0, 0, core, core + cores) for core in range(cores)
    ]
    return NodeCPUTopology.from_cpu_infos(infos)


#: 1 socket, 8 cores with hyper-threads, siblings c and c+8
TOPO_1S8C_HT = linux_ht_topology(8)


def cpu_topology_annotation(topology: NodeCPUTopology) -> str:
    """The koordlet's ``cpu-topology`` JSON for ``topology`` (core ids per socket, as reported)."""
    detail = [
        {"id": d.cpu, "core": d.core & 0xFFFF, "socket": d.socket, "node": d.node}
        for d in sorted(topology.details.values(), key=lambda d: d.cpu)
    ]
    return json.dumps({"detail": detail})


class NRTBuilder:
    def __init__(self, topology: NodeCPUTopology | None, name: str) -> None:
        annotations: dict[str, str] = {}
        if topology is not None:
            annotations[ANNOTATION_CPU_TOPOLOGY] = cpu_topology_annotation(topology)
        self._nrt: Obj = {
            "apiVersion": "topology.node.k8s.io/v1alpha1",
            "kind": "NodeResourceTopology",
            "metadata": {"name": name, "annotations": annotations},
            "topologyPolicies": ["None"],
            "zones": [],
        }

    def annotate(self, key: str, value: Any) -> NRTBuilder:
        self._nrt["metadata"]["annotations"][key] = value if isinstance(value, str) else json.dumps(value)
        return self

    def policies(self, *policies: str) -> NRTBuilder:
        self._nrt["topologyPolicies"] = list(policies)
        return self

    def zone(self, node: int | str, zone_type: str = "Node", **allocatable: str) -> NRTBuilder:
        name = node if isinstance(node, str) else f"node-{node}"
        resources = [
            {"name": key.replace("_", "-"), "capacity": value, "allocatable": value, "available": value}
            for key, value in allocatable.items()
        ]
        self._nrt["zones"].append({"name": name, "type": zone_type, "resources": resources})
        return self

    def build(self) -> Obj:
        return self._nrt


def make_nrt(topology: NodeCPUTopology | None = TOPO_2S4N, name: str = "node-1") -> NRTBuilder:
    return NRTBuilder(topology, name)


class PodBuilder:
    def __init__(self, name: str) -> None:
        self._pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": "default",
                "uid": f"uid-{name}",
                "labels": {},
                "annotations": {},
            },
            "spec": {"containers": [{"name": "main", "resources": {"requests": {}}}]},
        }

    def qos(self, qos: str) -> PodBuilder:
        self._pod["metadata"]["labels"][LABEL_POD_QOS] = qos
        return self

    def priority_class(self, name: str) -> PodBuilder:
        self._pod["metadata"]["labels"][LABEL_POD_PRIORITY_CLASS] = name
        return self

    def prod(self) -> PodBuilder:
        return self.priority_class("koord-prod")

    def priority(self, value: int) -> PodBuilder:
        self._pod["spec"]["priority"] = value
        return self

    def requests(self, **resources: str) -> PodBuilder:
        self._pod["spec"]["containers"][0]["resources"]["requests"] = resources
        return self

    def resource_spec(self, **spec: str) -> PodBuilder:
        return self.annotate(ANNOTATION_RESOURCE_SPEC, json.dumps(spec))

    def numa_spec(self, **spec: str) -> PodBuilder:
        return self.annotate(ANNOTATION_NUMA_TOPOLOGY_SPEC, json.dumps(spec))

    def resource_status(self, status: Obj | str) -> PodBuilder:
        return self.annotate(
            ANNOTATION_RESOURCE_STATUS, status if isinstance(status, str) else json.dumps(status)
        )

    def annotate(self, key: str, value: str) -> PodBuilder:
        self._pod["metadata"]["annotations"][key] = value
        return self

    def on(self, node: str) -> PodBuilder:
        self._pod["spec"]["nodeName"] = node
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._pod["status"] = {"phase": phase}
        return self

    def build(self) -> Obj:
        return self._pod


def make_pod(name: str = "p") -> PodBuilder:
    return PodBuilder(name)
