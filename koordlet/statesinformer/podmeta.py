"""PodMeta: a pod as the kubelet reports it, with its cgroup directories resolved.

Upstream's ``PodMeta{Pod, CgroupDir}``: the pod cgroup comes from the pod's Kubernetes QoS
class (``status.qosClass``, else computed from the spec) and its UID through the node's
kubepods layout; each started container's cgroup from its ``containerID``. Containers
without an ID (not created yet) have no cgroup and are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_with_default
from koordinator.api.kubeqos import KubeQOSClass, get_pod_qos
from koordlet.system.cgroup.layout import ContainerIDError, KubepodsLayout


@dataclass(frozen=True, slots=True)
class ContainerMeta:
    name: str
    #: ``<runtime>://<id>`` as in the container status
    container_id: str
    #: relative to a controller root, like the pod's
    cgroup_dir: str
    init: bool = False


@dataclass(frozen=True, slots=True)
class PodMeta:
    pod: Mapping[str, Any]
    uid: str
    namespace: str
    name: str
    kube_qos: KubeQOSClass
    #: the Koordinator QoS class, with the Kubernetes-QoS default
    qos: QoSClass
    cgroup_dir: str
    containers: tuple[ContainerMeta, ...]

    @property
    def phase(self) -> str:
        return str((self.pod.get("status") or {}).get("phase", ""))

    @property
    def is_running(self) -> bool:
        return self.phase == "Running"

    @property
    def is_terminated(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def labels(self) -> Mapping[str, str]:
        return (self.pod.get("metadata") or {}).get("labels") or {}

    @property
    def annotations(self) -> Mapping[str, str]:
        return (self.pod.get("metadata") or {}).get("annotations") or {}

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _containers(
    pod: Mapping[str, Any], layout: KubepodsLayout, qos: KubeQOSClass, uid: str
) -> tuple[ContainerMeta, ...]:
    status = pod.get("status") or {}
    out = []
    for field, init in (("initContainerStatuses", True), ("containerStatuses", False)):
        for container in status.get(field) or ():
            container_id = container.get("containerID") or ""
            if not container_id:
                continue
            try:
                cgroup_dir = layout.container_dir(qos, uid, container_id)
            except ContainerIDError:
                continue
            out.append(ContainerMeta(str(container.get("name", "")), container_id, cgroup_dir, init))
    return tuple(out)


def pod_uid(pod: Mapping[str, Any]) -> str:
    """The pod object's UID; empty when it has none (malformed)."""
    return str((pod.get("metadata") or {}).get("uid") or "")


def pod_meta(pod: Mapping[str, Any], layout: KubepodsLayout) -> PodMeta | None:
    """The PodMeta of a pod object, or None when it has no UID (malformed)."""
    uid = pod_uid(pod)
    return meta_with_uid(pod, layout, uid) if uid else None


def meta_with_uid(pod: Mapping[str, Any], layout: KubepodsLayout, uid: str) -> PodMeta:
    """The PodMeta of a pod object for ``uid`` (a runtime transport names the pod by its sandbox)."""
    metadata = pod.get("metadata") or {}
    kube_qos = get_pod_qos(pod)
    return PodMeta(
        pod=pod,
        uid=uid,
        namespace=str(metadata.get("namespace", "")),
        name=str(metadata.get("name", "")),
        kube_qos=kube_qos,
        qos=get_pod_qos_class_with_default(pod),
        cgroup_dir=layout.pod_dir(kube_qos, uid),
        containers=_containers(pod, layout, kube_qos, uid),
    )
