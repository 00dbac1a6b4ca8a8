"""The Reservation a ReservationFirst job creates for its pod (upstream's
``migration/reservation`` ``CreateOrUpdateReservationOptions``).

* name: the job's UID; labels ``app.kubernetes.io/created-by: koord-descheduler`` and
  ``scheduling.koordinator.sh/reservation-order`` (now, in Unix milliseconds: the scheduler
  prefers lower orders);
* ``spec.template``: the pod's metadata and spec with ``nodeName`` cleared, and a required
  node affinity ``metadata.name NotIn [its node]`` added to every term (or as the only term);
* ``spec.owners``: the pod itself when it is Pending and unschedulable, else its controller
  (with its namespace); a pod with neither gets none, and the apiserver refuses the
  Reservation;
* ``spec.allocateOnce: true`` and ``spec.ttl`` the job's TTL (when it has one).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from controlplane.descheduler.migration.workloads import controller_of
from koordinator.api.extension.reservation import LABEL_RESERVATION_ORDER
from koordinator.api.goparse import format_duration

__all__ = ["CREATED_BY", "reservation_for"]

Obj = Mapping[str, Any]

LABEL_CREATED_BY = "app.kubernetes.io/created-by"
CREATED_BY = "koord-descheduler"
#: pod metadata the template keeps
_TEMPLATE_META = ("name", "namespace", "labels", "annotations", "ownerReferences")


def _unschedulable(pod: Obj) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Pending" and any(
        c.get("type") == "PodScheduled" and c.get("status") == "False"
        for c in status.get("conditions") or ()
        if isinstance(c, Mapping)
    )


def _exclude_node(spec: dict[str, Any], node: str) -> None:
    requirement = {"key": "metadata.name", "operator": "NotIn", "values": [node]}
    affinity = spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        required["nodeSelectorTerms"] = [{"matchFields": [requirement]}]
        return
    for term in terms:
        term.setdefault("matchFields", []).append(dict(requirement, values=[node]))


def reservation_for(pod: Obj, job_uid: str, ttl_s: float | None, now_ms: int) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    spec = copy.deepcopy(dict(pod.get("spec") or {}))
    node = str(spec.pop("nodeName", "") or "")
    if node:
        _exclude_node(spec, node)
    template_meta = {k: copy.deepcopy(meta[k]) for k in _TEMPLATE_META if k in meta}
    owners: list[dict[str, Any]] = []
    workload = controller_of(pod)
    if _unschedulable(pod):
        owners.append(
            {
                "object": {
                    "uid": meta.get("uid"),
                    "kind": "Pod",
                    "name": meta.get("name"),
                    "namespace": meta.get("namespace"),
                }
            }
        )
    elif workload is not None:
        ref = next(
            r for r in meta.get("ownerReferences") or () if isinstance(r, Mapping) and r.get("controller")
        )
        owners.append({"controller": {**copy.deepcopy(dict(ref)), "namespace": workload.namespace}})
    reservation_spec: dict[str, Any] = {
        "template": {"metadata": template_meta, "spec": spec},
        "owners": owners,
        "allocateOnce": True,
    }
    if ttl_s:
        reservation_spec["ttl"] = format_duration(round(ttl_s * 1e9))
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": {
            "name": job_uid,
            "labels": {LABEL_CREATED_BY: CREATED_BY, LABEL_RESERVATION_ORDER: str(now_ms)},
        },
        "spec": reservation_spec,
    }
