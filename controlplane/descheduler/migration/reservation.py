"""The Reservation a ReservationFirst job creates for its pod (upstream's
``migration/reservation`` ``CreateOrUpdateReservationOptions``).

The job's ``spec.reservationOptions.template`` (a ReservationTemplateSpec), when set, is the
starting point: its metadata (name, labels, annotations...) and spec (``ttl``/``expires``,
taints, ...) are kept, and only what it leaves out is filled in from the pod. Then:

* name: the template's, else the job's UID; labels ``app.kubernetes.io/created-by:
  koord-descheduler`` and ``scheduling.koordinator.sh/reservation-order`` (now, in Unix
  milliseconds: the scheduler prefers lower orders) over the template's;
* ``spec.template``: the template's, else the pod's metadata and spec; either way with
  ``nodeName`` cleared and, for a pod on a node, a required node affinity
  ``metadata.name NotIn [its node]`` added to every term (or as the only term);
* ``spec.owners``: the template's, else the pod itself when it is Pending and unschedulable,
  else its controller (with its namespace); a pod with neither gets none, and the apiserver
  refuses the Reservation;
* ``spec.allocateOnce: true`` always, and ``spec.ttl`` the job's TTL (when it has one) unless
  the template sets ``ttl`` or ``expires``.
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
    affinity = _child(spec, "affinity")
    node_affinity = _child(affinity, "nodeAffinity")
    required = _child(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        required["nodeSelectorTerms"] = [{"matchFields": [requirement]}]
        return
    for term in terms:
        term["matchFields"] = [*(term.get("matchFields") or ()), dict(requirement, values=[node])]


def _child(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """``parent[key]``, made an empty object when it is missing or null."""
    child = parent.get(key)
    if not isinstance(child, dict):
        child = parent[key] = {}
    return child


def _owners(pod: Obj) -> list[dict[str, Any]]:
    """Upstream's ``GenerateReserveResourceOwners``."""
    meta = pod.get("metadata") or {}
    if _unschedulable(pod):
        return [
            {
                "object": {
                    "uid": meta.get("uid"),
                    "kind": "Pod",
                    "name": meta.get("name"),
                    "namespace": meta.get("namespace"),
                }
            }
        ]
    workload = controller_of(pod)
    if workload is None:
        return []
    ref = next(r for r in meta.get("ownerReferences") or () if isinstance(r, Mapping) and r.get("controller"))
    return [{"controller": {**copy.deepcopy(dict(ref)), "namespace": workload.namespace}}]


def _pod_template(pod: Obj) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    return {
        "metadata": {k: copy.deepcopy(meta[k]) for k in _TEMPLATE_META if k in meta},
        "spec": copy.deepcopy(dict(pod.get("spec") or {})),
    }


def reservation_for(
    pod: Obj, job_uid: str, ttl_s: float | None, now_ms: int, template: Obj | None = None
) -> dict[str, Any]:
    """The Reservation for ``pod``; ``template`` is the job's
    ``spec.reservationOptions.template`` (None: none)."""
    given: Obj = template if isinstance(template, Mapping) else {}
    given_meta = given.get("metadata")
    given_spec = given.get("spec")
    meta = copy.deepcopy(dict(given_meta)) if isinstance(given_meta, Mapping) else {}
    spec = copy.deepcopy(dict(given_spec)) if isinstance(given_spec, Mapping) else {}
    if not meta.get("name"):
        meta["name"] = job_uid
    if not isinstance(spec.get("template"), dict):
        spec["template"] = _pod_template(pod)
    if not spec.get("owners"):
        spec["owners"] = _owners(pod)
    # a migration's Reservation is not reused once consumed
    spec["allocateOnce"] = True
    # the replacement must be placed anew
    pod_spec = _child(spec["template"], "spec")
    pod_spec.pop("nodeName", None)
    labels = meta.get("labels")
    meta["labels"] = {
        **(labels if isinstance(labels, Mapping) else {}),
        LABEL_CREATED_BY: CREATED_BY,
        LABEL_RESERVATION_ORDER: str(now_ms),
    }
    if spec.get("ttl") is None and spec.get("expires") is None and ttl_s:
        spec["ttl"] = format_duration(round(ttl_s * 1e9))
    node = str((pod.get("spec") or {}).get("nodeName") or "")
    if node:
        _exclude_node(pod_spec, node)
    return {
        "apiVersion": "scheduling.koordinator.sh/v1alpha1",
        "kind": "Reservation",
        "metadata": meta,
        "spec": spec,
    }
