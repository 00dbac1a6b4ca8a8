"""A pod's workload and how many replicas it expects (upstream's controller finder).

The workload is the pod's controlling owner. Its expected replicas are ``spec.replicas`` of
a ReplicaSet, StatefulSet or ReplicationController (default 1) and ``spec.parallelism`` of a
Job (default 1); for any other kind, the number of pods it controls.

:func:`max_unavailable` is upstream's ``GetMaxUnavailable`` (also used for the migrating
limit): the int-or-percent scaled down, and when that is 0 (or unset) 10% of the replicas
above 10 replicas, 2 from 4 to 10, else 1; never more than the replicas, never 0 for a
workload with replicas.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.descheduler.migration.args import IntOrPercent

__all__ = ["Workload", "controller_of", "is_ready", "max_unavailable"]

Obj = Mapping[str, Any]

#: kinds whose expected replicas come from the object itself, by (apiVersion group, kind)
REPLICAS_FIELD = {
    ("apps", "ReplicaSet"): "replicas",
    ("apps", "StatefulSet"): "replicas",
    ("", "ReplicationController"): "replicas",
    ("batch", "Job"): "parallelism",
}


@dataclass(frozen=True)
class Workload:
    api_version: str
    kind: str
    name: str
    uid: str
    namespace: str

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0] if "/" in self.api_version else ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def controller_of(pod: Obj) -> Workload | None:
    meta = pod.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return Workload(
                str(ref.get("apiVersion") or ""),
                str(ref.get("kind") or ""),
                str(ref.get("name") or ""),
                str(ref.get("uid") or ""),
                str(meta.get("namespace") or ""),
            )
    return None


def expected_replicas(workload: Workload, owner: Obj | None, pods: int) -> int:
    """From the owner object when its kind is known and it is cached, else the pod count."""
    field_name = REPLICAS_FIELD.get((workload.group, workload.kind))
    if field_name is None or owner is None:
        return pods
    value = (owner.get("spec") or {}).get(field_name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def max_unavailable(replicas: int, value: IntOrPercent | None) -> int:
    n = value.scaled(replicas) if value is not None else 0
    if n <= 0:
        if replicas > 10:
            n = math.floor(replicas * 10 / 100)
        elif replicas >= 4:
            n = 2
        else:
            n = 1
        n = max(1, n)
    return min(n, replicas) if replicas > 0 else 0


def is_ready(pod: Obj) -> bool:
    """Running and not terminating, with the Ready condition True."""
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
        if isinstance(c, Mapping)
    )
