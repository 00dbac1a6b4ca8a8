"""Resource summary gauges: the batch and mid resources of the node and its containers.

Upstream's ``resource_summary.go``, recorded by the states informer:

* ``koordlet_node_resource_allocatable{resource,unit}``: the Node's allocatable
  ``kubernetes.io/{batch,mid}-{cpu,memory}`` (0 when absent), each time the Node is seen;
* ``koordlet_container_resource_requests`` / ``_limits``: the same resources as each
  container with a status asks for them, after each pods sync; the series of containers
  no longer listed (or that no longer ask) are removed, as upstream resets the vectors.

Values are the quantities' integer values: batch and mid CPU in milli-cores (unit
``integer``), memory in bytes (unit ``byte``). Upstream labels some container series with
the other unit (a slip in its recording code); here each resource keeps one unit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from koordinator.api.extension.resources import BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY
from koordinator.api.quantity import Quantity, QuantityError
from koordlet.metrics import BYTE, INTEGER, KoordletMetrics, prune
from koordlet.statesinformer.podmeta import PodMeta

log = logging.getLogger(__name__)

#: the resources koordinator updates, with the unit of their values
RESOURCES = ((BATCH_CPU, INTEGER), (BATCH_MEMORY, BYTE), (MID_CPU, INTEGER), (MID_MEMORY, BYTE))


def _value(text: Any) -> float | None:
    try:
        return float(Quantity.parse(str(text)).value())
    except QuantityError:
        return None


def record_node_allocatable(metrics: KoordletMetrics, node: Mapping[str, Any] | None) -> None:
    """``node_resource_allocatable`` of the batch and mid resources; nothing for a Node
    without ``status.allocatable``."""
    allocatable = ((node or {}).get("status") or {}).get("allocatable")
    if not allocatable:
        return
    for resource, unit in RESOURCES:
        value = _value(allocatable[resource]) if resource in allocatable else 0.0
        if value is None:
            log.warning("node allocatable %s=%r is not a quantity", resource, allocatable[resource])
            continue
        metrics.node_resource_allocatable.labels(metrics.node, resource, unit).set(value)


def record_container_resources(metrics: KoordletMetrics, pods: Iterable[PodMeta]) -> None:
    """``container_resource_requests`` and ``_limits`` of every container (with a status)
    that asks for a batch or mid resource; all other series are removed."""
    node = metrics.node
    requests: dict[tuple[str, ...], float] = {}
    limits: dict[tuple[str, ...], float] = {}
    for pod in pods:
        statuses = {
            str(s.get("name", "")): s for s in (pod.pod.get("status") or {}).get("containerStatuses") or ()
        }
        for container in (pod.pod.get("spec") or {}).get("containers") or ():
            status = statuses.get(str(container.get("name", "")))
            if status is None:
                continue
            owner = (
                pod.uid,
                pod.name,
                pod.namespace,
                str(status.get("containerID") or ""),
                status.get("name", ""),
            )
            resources = container.get("resources") or {}
            for field_name, out in (("requests", requests), ("limits", limits)):
                asked = resources.get(field_name) or {}
                for resource, unit in RESOURCES:
                    if resource not in asked:
                        continue
                    value = _value(asked[resource])
                    if value is not None:
                        out[(node, resource, unit, *owner)] = value
    for gauge, series in (
        (metrics.container_resource_requests, requests),
        (metrics.container_resource_limits, limits),
    ):
        for labels, value in series.items():
            gauge.labels(*labels).set(value)
        prune(gauge, set(series))
