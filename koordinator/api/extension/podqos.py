"""Per-pod overrides of the NodeSLO QoS configuration, read by the koordlet.

* ``koordinator.sh/cpuBurst``: a CPUBurstConfig merged over the node's cpu burst strategy.
* ``koordinator.sh/cpuQOS``: CPU QoS of an LS pod (``enable: false`` means group identity 0).
* ``koordinator.sh/memoryQOS``: ``policy`` (``default``, ``none`` or ``auto``) plus memory QoS fields.
* ``koordinator.sh/blkioQOS``: block I/O limits of the pod's volumes (``{"blocks": [...]}``).
* ``koordinator.sh/networkQOS``: ingress/egress request and limit (``"10M"`` strings or percents).
"""

from __future__ import annotations

# field() returns a dataclasses.Field, exactly like dataclasses.field().
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from koordinator.api.extension.annotations import get_model
from koordinator.api.extension.constants import (
    ANNOTATION_NETWORK_QOS,
    ANNOTATION_POD_BLKIO_QOS,
    ANNOTATION_POD_CPU_BURST,
    ANNOTATION_POD_CPU_QOS,
    ANNOTATION_POD_MEMORY_QOS,
)
from koordinator.api.model import field
from koordinator.api.types.slo import BlkIOQOS, CPUBurstConfig, CPUQOSCfg, MemoryQOS, NetworkQOS

__all__ = [
    "MEMORY_QOS_POLICIES",
    "PodMemoryQOSConfig",
    "get_pod_blkio_qos",
    "get_pod_cpu_burst",
    "get_pod_cpu_qos",
    "get_pod_memory_qos",
    "get_pod_network_qos",
]

#: ``default`` follows the class config, ``none`` turns memory QoS off, ``auto`` uses the recommended config.
MEMORY_QOS_POLICIES = ("default", "none", "auto")


@dataclass
class PodMemoryQOSConfig(MemoryQOS):
    policy: str = field("policy", default="", enum=MEMORY_QOS_POLICIES)


def get_pod_cpu_burst(annotations: Mapping[str, Any] | None) -> CPUBurstConfig | None:
    return get_model(annotations, ANNOTATION_POD_CPU_BURST, CPUBurstConfig)


def get_pod_cpu_qos(annotations: Mapping[str, Any] | None) -> CPUQOSCfg | None:
    return get_model(annotations, ANNOTATION_POD_CPU_QOS, CPUQOSCfg)


def get_pod_memory_qos(annotations: Mapping[str, Any] | None) -> PodMemoryQOSConfig | None:
    return get_model(annotations, ANNOTATION_POD_MEMORY_QOS, PodMemoryQOSConfig)


def get_pod_blkio_qos(annotations: Mapping[str, Any] | None) -> BlkIOQOS | None:
    return get_model(annotations, ANNOTATION_POD_BLKIO_QOS, BlkIOQOS)


def get_pod_network_qos(annotations: Mapping[str, Any] | None) -> NetworkQOS | None:
    return get_model(annotations, ANNOTATION_NETWORK_QOS, NetworkQOS)
