"""Koordinator QoS classes (``koordinator.sh/qosClass``) and how a pod's class is determined.

The raw class comes from the label; any other value means "none". With the default
(``GetPodQoSClassWithDefault``) a pod without a class gets one from its Kubernetes QoS:
Guaranteed -> LSR, Burstable -> LS, BestEffort -> BE.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from koordinator.api.extension.annotations import labels_of
from koordinator.api.extension.constants import DOMAIN_PREFIX
from koordinator.api.kubeqos import KubeQOSClass, get_pod_qos

__all__ = [
    "LABEL_POD_QOS",
    "QoSClass",
    "get_pod_qos_class_raw",
    "get_pod_qos_class_with_default",
    "qos_class_by_name",
    "qos_class_from_kube_qos",
]

LABEL_POD_QOS = DOMAIN_PREFIX + "qosClass"


class QoSClass(StrEnum):
    LSE = "LSE"
    LSR = "LSR"
    LS = "LS"
    BE = "BE"
    SYSTEM = "SYSTEM"
    NONE = ""


_KNOWN = {c.value: c for c in QoSClass if c is not QoSClass.NONE}


def qos_class_by_name(name: str | None) -> QoSClass:
    """The class named exactly ``name``; anything else is :attr:`QoSClass.NONE`."""
    return _KNOWN.get(name or "", QoSClass.NONE)


_FROM_KUBE_QOS = {
    KubeQOSClass.GUARANTEED.value: QoSClass.LSR,
    KubeQOSClass.BURSTABLE.value: QoSClass.LS,
    KubeQOSClass.BEST_EFFORT.value: QoSClass.BE,
}


def qos_class_from_kube_qos(kube_qos: str) -> QoSClass:
    """Guaranteed -> LSR, Burstable -> LS, BestEffort -> BE; anything else -> none."""
    return _FROM_KUBE_QOS.get(str(kube_qos), QoSClass.NONE)


def get_pod_qos_class_raw(pod: Mapping[str, Any] | None) -> QoSClass:
    """The class from the pod's ``koordinator.sh/qosClass`` label (``GetPodQoSClassRaw``)."""
    if not pod:
        return QoSClass.NONE
    return qos_class_by_name(labels_of(pod).get(LABEL_POD_QOS))


def get_pod_qos_class_with_default(pod: Mapping[str, Any]) -> QoSClass:
    """The raw class, else the one derived from the Kubernetes QoS (``GetPodQoSClassWithDefault``)."""
    raw = get_pod_qos_class_raw(pod)
    if raw is not QoSClass.NONE:
        return raw
    return qos_class_from_kube_qos(get_pod_qos(pod))
