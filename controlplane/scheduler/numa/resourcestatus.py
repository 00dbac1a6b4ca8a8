"""The ``scheduling.koordinator.sh/resource-status`` annotation both ways: written by PreBind
from an allocation (upstream ``preBindObject``), read back from bound pods to restore the
node's bookkeeping (upstream ``pod_eventhandler.go``).

Written as Go marshals ``ResourceStatus``: ``{"cpuset":"0-3","numaNodeResources":[{"node":0,
"resources":{"cpu":"4","memory":"8Gi"}}]}`` with the cpuset in canonical list form, empty
fields omitted, resource names sorted and quantities canonical.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.scheduler.numa.allocation import PodAllocation
from koordinator.api.cpuset import CPUSetError, format_cpuset, parse_cpuset
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.numa import (
    NUMANodeResource,
    ResourceStatus,
    get_resource_spec,
    get_resource_status,
)

__all__ = ["allocation_from_pod", "pod_is_terminated", "resource_status", "resource_status_json"]


def resource_status(allocation: PodAllocation) -> ResourceStatus:
    """The annotation's value for ``allocation``."""
    return ResourceStatus(
        cpuset=format_cpuset(allocation.cpuset),
        numa_node_resources=[
            NUMANodeResource(node=zone.node, resources=dict(zone.resources))
            for zone in allocation.numa_node_resources
        ],
    )


def resource_status_json(allocation: PodAllocation) -> str:
    """The annotation's text for ``allocation``, byte for byte as upstream writes it."""
    return resource_status(allocation).to_json()


def pod_is_terminated(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed: its allocation is to be released."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def allocation_from_pod(pod: Mapping[str, Any]) -> PodAllocation | None:
    """What a bound pod holds according to its annotations; ``None`` when it is not bound, holds
    nothing, or its ``resource-status``/``resource-spec``/cpuset does not parse (upstream then
    ignores the pod). The exclusive policy comes from ``resource-spec``."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return None
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    try:
        status = get_resource_status(annotations)
        spec = get_resource_spec(annotations)
        cpus = frozenset(parse_cpuset(status.cpuset))
    except (AnnotationError, CPUSetError):
        return None
    if not status.numa_node_resources and not cpus:
        return None
    return PodAllocation(
        uid=str(metadata.get("uid", "")),
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        cpuset=cpus,
        cpu_exclusive_policy=spec.preferred_cpu_exclusive_policy,
        numa_node_resources=tuple(
            NUMANodeResource(node=zone.node, resources=dict(zone.resources))
            for zone in status.numa_node_resources
        ),
    )
