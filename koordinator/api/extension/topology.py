"""NodeResourceTopology annotations the koordlet writes and the scheduler reads: CPU topology,
share pools, kubelet CPU allocations, CPU basic info, system-QoS CPUs, kubelet CPU manager policy,
plus the per-pod resctrl annotation.
"""

from __future__ import annotations

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.extension.annotations import AnnotationError, decode_json, get_model
from koordinator.api.extension.constants import KUBELET_DOMAIN_PREFIX, NODE_DOMAIN_PREFIX
from koordinator.api.model import Model, ModelError, field

__all__ = [
    "ANNOTATION_BE_CPU_SHARED_POOLS",
    "ANNOTATION_CPU_BASIC_INFO",
    "ANNOTATION_CPU_SHARED_POOLS",
    "ANNOTATION_CPU_TOPOLOGY",
    "ANNOTATION_KUBELET_CPU_MANAGER_POLICY",
    "ANNOTATION_NODE_SYSTEM_QOS_RESOURCE",
    "ANNOTATION_POD_CPU_ALLOCS",
    "ANNOTATION_RESCTRL",
    "CPUBasicInfo",
    "CPUInfo",
    "CPUSharedPool",
    "CPUTopology",
    "KubeletCPUManagerPolicy",
    "PodCPUAlloc",
    "Resctrl",
    "ResctrlSchemata",
    "ResctrlSchemataPerCache",
    "ResctrlSpec",
    "SystemQOSResource",
    "get_cpu_basic_info",
    "get_cpu_shared_pools",
    "get_cpu_topology",
    "get_kubelet_cpu_manager_policy",
    "get_pod_cpu_allocs",
    "get_resctrl",
    "get_system_qos_resource",
]

_P = NODE_DOMAIN_PREFIX + "/"
ANNOTATION_CPU_TOPOLOGY = _P + "cpu-topology"
ANNOTATION_POD_CPU_ALLOCS = _P + "pod-cpu-allocs"
ANNOTATION_CPU_SHARED_POOLS = _P + "cpu-shared-pools"
ANNOTATION_BE_CPU_SHARED_POOLS = _P + "be-cpu-shared-pools"
ANNOTATION_CPU_BASIC_INFO = _P + "cpu-basic-info"
ANNOTATION_NODE_SYSTEM_QOS_RESOURCE = _P + "system-qos-resource"
#: Pod annotation: a dedicated resctrl group for the pod.
ANNOTATION_RESCTRL = _P + "resctrl"
ANNOTATION_KUBELET_CPU_MANAGER_POLICY = KUBELET_DOMAIN_PREFIX + "/cpu-manager-policy"


@dataclass
class CPUInfo(Model):
    id: int = field("id", default=0, omitempty=False)
    core: int = field("core", default=0, omitempty=False)
    socket: int = field("socket", default=0, omitempty=False)
    node: int = field("node", default=0, omitempty=False)


@dataclass
class CPUTopology(Model):
    detail: list[CPUInfo] = field("detail", factory=list)


@dataclass
class PodCPUAlloc(Model):
    namespace: str = field("namespace", default="")
    name: str = field("name", default="")
    uid: str = field("uid", default="")
    cpuset: str = field("cpuset", default="")
    managed_by_kubelet: bool = field("managedByKubelet", default=False)


@dataclass
class CPUSharedPool(Model):
    socket: int = field("socket", default=0, omitempty=False)
    node: int = field("node", default=0, omitempty=False)
    cpuset: str = field("cpuset", default="")


@dataclass
class CPUBasicInfo(Model):
    cpu_model: str = field("cpuModel", default="")
    hyper_thread_enabled: bool = field("hyperThreadEnabled", default=False)
    turbo_enabled: bool = field("turboEnabled", default=False)
    cat_l3_cbm_mask: str = field("catL3CbmMask", default="")
    vendor_id: str = field("vendorID", default="")


@dataclass
class SystemQOSResource(Model):
    cpuset: str = field("cpuset", default="")
    cpuset_exclusive: bool | None = field("cpusetExclusive")

    def is_cpuset_exclusive(self) -> bool:
        """Exclusive unless explicitly false."""
        return self.cpuset_exclusive is not False


@dataclass
class KubeletCPUManagerPolicy(Model):
    policy: str = field("policy", default="")
    options: dict[str, str] = field("options", factory=dict)
    reserved_cpus: str = field("reservedCPUs", default="")


@dataclass
class ResctrlSchemata(Model):
    range: list[int] = field("range", factory=list)
    percent: int = field("percent", default=0)


@dataclass
class ResctrlSchemataPerCache(Model):
    cache_id: int = field("cacheid", default=0, omitempty=False)
    range: list[int] = field("range", factory=list)
    percent: int = field("percent", default=0)


@dataclass
class ResctrlSpec(Model):
    schemata: ResctrlSchemata | None = field("schemata")
    schemata_per_cache: list[ResctrlSchemataPerCache] = field("schemataPerCache", factory=list)


@dataclass
class Resctrl(Model):
    """Pod annotation ``node.koordinator.sh/resctrl``: LLC ways and memory bandwidth of the pod's group."""

    llc: ResctrlSpec | None = field("llc")
    mb: ResctrlSpec | None = field("mb")


def _list_of(annotations: Mapping[str, Any] | None, key: str, model: type[Any]) -> list[Any]:
    data = decode_json(annotations, key)
    if data is None:
        return []
    if not isinstance(data, list):
        raise AnnotationError(key, "expected a JSON array")
    try:
        return [model.from_dict(item, path=f"[{i}]") for i, item in enumerate(data)]
    except ModelError as exc:
        raise AnnotationError(key, str(exc)) from None


def get_cpu_topology(annotations: Mapping[str, Any] | None) -> CPUTopology | None:
    return get_model(annotations, ANNOTATION_CPU_TOPOLOGY, CPUTopology)


def get_pod_cpu_allocs(annotations: Mapping[str, Any] | None) -> list[PodCPUAlloc]:
    return _list_of(annotations, ANNOTATION_POD_CPU_ALLOCS, PodCPUAlloc)


def get_cpu_shared_pools(annotations: Mapping[str, Any] | None, *, be: bool = False) -> list[CPUSharedPool]:
    """LS share pools, or the BE ones with ``be=True``."""
    key = ANNOTATION_BE_CPU_SHARED_POOLS if be else ANNOTATION_CPU_SHARED_POOLS
    return _list_of(annotations, key, CPUSharedPool)


def get_cpu_basic_info(annotations: Mapping[str, Any] | None) -> CPUBasicInfo | None:
    return get_model(annotations, ANNOTATION_CPU_BASIC_INFO, CPUBasicInfo)


def get_system_qos_resource(annotations: Mapping[str, Any] | None) -> SystemQOSResource | None:
    return get_model(annotations, ANNOTATION_NODE_SYSTEM_QOS_RESOURCE, SystemQOSResource)


def get_kubelet_cpu_manager_policy(annotations: Mapping[str, Any] | None) -> KubeletCPUManagerPolicy | None:
    return get_model(annotations, ANNOTATION_KUBELET_CPU_MANAGER_POLICY, KubeletCPUManagerPolicy)


def get_resctrl(annotations: Mapping[str, Any] | None) -> Resctrl | None:
    return get_model(annotations, ANNOTATION_RESCTRL, Resctrl)
