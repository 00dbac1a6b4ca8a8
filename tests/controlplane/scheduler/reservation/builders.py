"""Builders for the reservation tests: Reservations and pods as the API returns them.

``make_reservation("r1").requests(cpu="4", memory="8Gi").available("n1").build()``
``make_pod("p1").requests(cpu="2").labels(app="web").build()``
"""

from __future__ import annotations

import copy
import json
from typing import Any

from controlplane.scheduler.reservation.info import ReservationInfo
from koordinator.api.extension.reservation import (
    ANNOTATION_RESERVATION_AFFINITY,
    ANNOTATION_RESERVATION_ALLOCATED,
)
from koordinator.kube.timeutil import parse_time

Obj = dict[str, Any]

#: every builder's creation time, and the epoch seconds tests count from
CREATED = "2024-01-01T00:00:00Z"
T0 = parse_time(CREATED)


class ReservationBuilder:
    def __init__(self, name: str, uid: str | None = None) -> None:
        self._r: Obj = {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": name, "uid": uid or f"uid-{name}", "creationTimestamp": CREATED},
            "spec": {
                "template": {"spec": {"containers": [{"name": "main", "resources": {"requests": {}}}]}},
                "owners": [{}],
            },
        }

    @property
    def _spec(self) -> Obj:
        spec: Obj = self._r["spec"]
        return spec

    def requests(self, resources: dict[str, str] | None = None, **named: str) -> ReservationBuilder:
        """Template requests (``requests(cpu="4")`` or ``requests({"nvidia.com/gpu": "1"})``)."""
        self._spec["template"]["spec"]["containers"][0]["resources"]["requests"] = {
            **(resources or {}),
            **named,
        }
        return self

    def template(self, metadata: Obj | None = None, **spec: Any) -> ReservationBuilder:
        if metadata is not None:
            self._spec["template"]["metadata"] = metadata
        self._spec["template"]["spec"].update(spec)
        return self

    def no_template(self) -> ReservationBuilder:
        del self._spec["template"]
        return self

    def owners(self, *owners: Obj) -> ReservationBuilder:
        self._spec["owners"] = list(owners)
        return self

    def labels(self, **labels: str) -> ReservationBuilder:
        self._r["metadata"].setdefault("labels", {}).update(labels)
        return self

    def annotations(self, annotations: dict[str, str]) -> ReservationBuilder:
        self._r["metadata"].setdefault("annotations", {}).update(annotations)
        return self

    def order(self, order: str) -> ReservationBuilder:
        return self.labels(**{"scheduling.koordinator.sh/reservation-order": order})

    def spec(self, **fields: Any) -> ReservationBuilder:
        """Other spec fields: ``allocatePolicy``, ``allocateOnce``, ``ttl``, ``expires`` ..."""
        self._spec.update(fields)
        return self

    def status(self, **fields: Any) -> ReservationBuilder:
        self._r.setdefault("status", {}).update(fields)
        return self

    def available(self, node: str, allocatable: dict[str, str] | None = None) -> ReservationBuilder:
        """Bound to ``node``; allocatable defaults to the template's requests."""
        requests = self._spec["template"]["spec"]["containers"][0]["resources"]["requests"]
        return self.status(phase="Available", nodeName=node, allocatable=dict(allocatable or requests))

    def build(self) -> Obj:
        return copy.deepcopy(self._r)

    def info(self, *owner_pods: Obj) -> ReservationInfo:
        rinfo = ReservationInfo.from_reservation(self.build())
        for pod in owner_pods:
            rinfo.add_assigned_pod(pod)
        return rinfo


def make_reservation(name: str = "r1", uid: str | None = None) -> ReservationBuilder:
    return ReservationBuilder(name, uid)


class PodBuilder:
    def __init__(self, name: str, namespace: str) -> None:
        self._pod: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": "main", "resources": {"requests": {}}}]},
        }

    @property
    def _meta(self) -> Obj:
        meta: Obj = self._pod["metadata"]
        return meta

    def requests(self, resources: dict[str, str] | None = None, **named: str) -> PodBuilder:
        self._pod["spec"]["containers"][0]["resources"]["requests"] = {**(resources or {}), **named}
        return self

    def labels(self, **labels: str) -> PodBuilder:
        self._meta.setdefault("labels", {}).update(labels)
        return self

    def label(self, key: str, value: str) -> PodBuilder:
        return self.labels(**{key: value})

    def annotation(self, key: str, value: str) -> PodBuilder:
        self._meta.setdefault("annotations", {})[key] = value
        return self

    def affinity(self, affinity: Obj | None = None) -> PodBuilder:
        return self.annotation(ANNOTATION_RESERVATION_AFFINITY, json.dumps(affinity or {}))

    def allocated_from(self, name: str, uid: str) -> PodBuilder:
        return self.annotation(ANNOTATION_RESERVATION_ALLOCATED, json.dumps({"name": name, "uid": uid}))

    def owned_by(
        self, kind: str, name: str, *, controller: bool | None = True, api_version: str = "apps/v1"
    ) -> PodBuilder:
        ref: Obj = {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{name}"}
        if controller is not None:
            ref["controller"] = controller
        self._meta.setdefault("ownerReferences", []).append(ref)
        return self

    def on(self, node: str) -> PodBuilder:
        self._pod["spec"]["nodeName"] = node
        return self

    def build(self) -> Obj:
        return copy.deepcopy(self._pod)


def make_pod(name: str = "p1", namespace: str = "default") -> PodBuilder:
    return PodBuilder(name, namespace)
