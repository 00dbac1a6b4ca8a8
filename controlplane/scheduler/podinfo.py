"""What the scheduler keeps of a pod: a compact record, never the decoded object it came from.

Upstream's scheduler holds full pod objects; a Python process holding tens of thousands of
decoded dicts pays 23 KiB each and slows every GC pass (design spec §2.2), so the pod
informer's transform turns an object into a :class:`PodInfo` with the fields the
framework and its plug-ins read, and the dict is dropped.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler import podterms
from controlplane.scheduler.gang.member import GangMember, gang_member
from controlplane.scheduler.podterms import Controller, OwnerReference, PodAffinity, SpreadConstraint
from controlplane.scheduler.specdigest import spec_digest
from koordinator.api import resourcelist
from koordinator.api.extension.priority import get_pod_priority_class_with_default
from koordinator.api.quantity import Quantity

DEFAULT_SCHEDULER_NAME = "default-scheduler"
#: pods that can no longer be scheduled or run are not watched (upstream's pod informer)
POD_FIELD_SELECTOR = "status.phase!=Succeeded,status.phase!=Failed"
CPU = "cpu"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        """Upstream's ``ToleratesTaint``."""
        if self.effect and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("Equal", "") and self.value == value


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node selector requirement: ``key``, ``operator`` (In, NotIn, Exists,
    DoesNotExist, Gt, Lt) and ``values``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Term:
    """A node selector term: every expression (on labels) and field (``metadata.name``) holds."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()


def _requirements(raw: Any) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(
            str(r.get("key") or ""),
            str(r.get("operator") or ""),
            tuple(str(v) for v in r.get("values") or ()),
        )
        for r in raw or ()
        if isinstance(r, Mapping)
    )


def node_selector_terms(selector: Any) -> tuple[Term, ...] | None:
    """A ``NodeSelector``'s terms (None when there is no selector at all)."""
    if not isinstance(selector, Mapping):
        return None
    return tuple(
        Term(_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
        for t in selector.get("nodeSelectorTerms") or ()
        if isinstance(t, Mapping)
    )


#: (protocol, host IP, port); the IP "0.0.0.0" stands for every address
HostPort = tuple[str, str, int]
ANY_IP = "0.0.0.0"


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """Upstream's ``GetContainerPorts`` with a host port: every container's, init ones too."""
    out = []
    for container in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ())):
        for port in container.get("ports") or ():
            host_port = port.get("hostPort") or 0
            if host_port:
                out.append(
                    (str(port.get("protocol") or "TCP"), str(port.get("hostIP") or ANY_IP), int(host_port))
                )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PodVolume:
    """A volume backed by a PersistentVolumeClaim of the pod's namespace: a
    ``persistentVolumeClaim`` volume, or a generic ephemeral one (its claim is named
    ``<pod>-<volume>`` and must be controlled by the pod)."""

    claim: str
    ephemeral: bool = False


def _claim_volumes(name: str, spec: Mapping[str, Any]) -> tuple[PodVolume, ...]:
    out = []
    for volume in spec.get("volumes") or ():
        if not isinstance(volume, Mapping):
            continue
        if isinstance(volume.get("persistentVolumeClaim"), Mapping):
            out.append(PodVolume(str(volume["persistentVolumeClaim"].get("claimName") or "")))
        elif isinstance(volume.get("ephemeral"), Mapping):
            out.append(PodVolume(f"{name}-{volume.get('name') or ''}", ephemeral=True))
    return tuple(out)


def _images(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """Every container's image, init containers first (interned: pods share few images)."""
    return tuple(
        sys.intern(str(c.get("image") or ""))
        for c in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ()))
        if isinstance(c, Mapping)
    )


@dataclass(frozen=True, slots=True)
class PodInfo:
    namespace: str
    name: str
    uid: str
    scheduler_name: str
    node_name: str
    priority: int
    creation: str
    #: effective requests: CPU in milli-cores, everything else in units
    requests: Mapping[str, int]
    tolerations: tuple[Toleration, ...]
    #: ``spec.nodeSelector``
    node_selector: tuple[tuple[str, str], ...] = ()
    #: required node affinity terms (None: no required node affinity)
    required_terms: tuple[Term, ...] | None = None
    #: preferred node affinity terms with their weights
    preferred_terms: tuple[tuple[int, Term], ...] = ()
    #: host ports the containers ask for: (protocol, host IP, port)
    host_ports: tuple[HostPort, ...] = ()
    #: ``spec.preemptionPolicy``: PreemptLowerPriority (the default) or Never
    preemption_policy: str = "PreemptLowerPriority"
    #: ``status.nominatedNodeName`` (set when it preempted pods there)
    nominated_node: str = ""
    #: being deleted (``metadata.deletionTimestamp``)
    terminating: bool = False
    #: ``spec.schedulingGates`` names: the pod waits until they are all removed
    scheduling_gates: tuple[str, ...] = ()
    #: a reserve pod: not a Pod object but the stand-in of a Koordinator Reservation of
    #: this name, scheduled like a pod and bound by the plug-in owning reservations
    reservation: str = ""
    #: ``metadata.labels`` (PodDisruptionBudget selectors, pod affinity)
    labels: Mapping[str, str] = field(default_factory=dict)
    #: container images, init containers first (ImageLocality)
    images: tuple[str, ...] = ()
    #: the volumes backed by a PersistentVolumeClaim, in ``spec.volumes`` order
    #: (VolumeBinding, NodeVolumeLimits)
    volumes: tuple[PodVolume, ...] = ()
    #: ``spec.affinity`` podAffinity and podAntiAffinity terms (None: none; InterPodAffinity)
    affinity: PodAffinity | None = None
    #: ``spec.topologySpreadConstraints`` (PodTopologySpread)
    spread: tuple[SpreadConstraint, ...] = ()
    #: the controlling owner reference (PodTopologySpread's default constraints)
    controller: Controller | None = None
    #: the other owner references (Reservation owners may name any reference)
    owner_refs: tuple[OwnerReference, ...] = ()
    #: effective limits, as ``requests`` (LoadAwareScheduling's estimate)
    limits: Mapping[str, int] = field(default_factory=dict)
    #: Koordinator's priority class (``koord-prod`` ... or ``""``), with the QoS default
    priority_class: str = ""
    #: the annotations Koordinator's plug-ins read (its own and the PodGroup ones)
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: ``lastTransitionTime`` of the PodScheduled and Initialized conditions ("" when absent)
    scheduled_at: str = ""
    initialized_at: str = ""
    #: the pod's gang, when it names one (Coscheduling)
    gang: GangMember | None = None
    #: what the spec-derived fields were built from (:func:`spec_digest`; None: not known)
    spec_digest: int | None = field(default=None, repr=False, compare=False)
    #: ``namespace/name``: the pod's key everywhere in the scheduler (set from the two)
    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")


def _value(name: str, quantity: Quantity) -> int:
    return quantity.milli_value() if name == CPU else quantity.value()


@functools.lru_cache(maxsize=4096)
def _parsed(name: str, text: str) -> int:
    return _value(name, Quantity.from_json(text))


def _requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The pod's effective requests. Pods with only regular containers (nearly all) are summed
    here from cached parses; init containers, sidecars and overhead take the full rules of
    :func:`koordinator.api.resourcelist.pod_requests`."""
    spec = pod.get("spec") or {}
    if spec.get("initContainers") or spec.get("overhead"):
        totals = resourcelist.pod_requests(pod)
        return {name: v for name, q in totals.items() if (v := _value(name, q))}
    out: dict[str, int] = {}
    for container in spec.get("containers") or ():
        for name, raw in ((container.get("resources") or {}).get("requests") or {}).items():
            value = _parsed(name, raw) if isinstance(raw, str) else _value(name, Quantity.from_json(raw))
            if value:
                out[name] = out.get(name, 0) + value
    return out


def _limits(pod: Mapping[str, Any]) -> dict[str, int]:
    """The pod's effective limits (:func:`koordinator.api.resourcelist.pod_limits`); a
    pod with only regular containers is summed from cached parses."""
    spec = pod.get("spec") or {}
    if spec.get("initContainers") or spec.get("overhead"):
        totals = resourcelist.pod_limits(pod)
        return {name: v for name, q in totals.items() if (v := _value(name, q))}
    out: dict[str, int] = {}
    for container in spec.get("containers") or ():
        for name, raw in ((container.get("resources") or {}).get("limits") or {}).items():
            value = _parsed(name, raw) if isinstance(raw, str) else _value(name, Quantity.from_json(raw))
            if value:
                out[name] = out.get(name, 0) + value
    return out


#: annotation keys kept on the record: Koordinator's domains and the PodGroup label's
_KEPT_ANNOTATIONS = ("koordinator.sh/", "scheduling.sigs.k8s.io", "scheduling.x-k8s.io")


def _annotations(meta: Mapping[str, Any]) -> dict[str, str]:
    raw = meta.get("annotations")
    if not raw:
        return {}
    return {str(k): str(v) for k, v in raw.items() if any(part in k for part in _KEPT_ANNOTATIONS)}


def _condition_times(status: Mapping[str, Any]) -> tuple[str, str]:
    scheduled = initialized = ""
    for condition in status.get("conditions") or ():
        if not isinstance(condition, Mapping) or condition.get("status") != "True":
            continue
        kind = condition.get("type")
        if kind == "PodScheduled":
            scheduled = str(condition.get("lastTransitionTime") or "")
        elif kind == "Initialized":
            initialized = str(condition.get("lastTransitionTime") or "")
    return scheduled, initialized


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """The record of a pod object; ValueError (QuantityError, ResourceListError) for requests
    that do not parse."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    requests = _requests(pod)
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    return PodInfo(
        **_meta_fields(pod, meta, spec),
        uid=meta.get("uid") or "",
        scheduler_name=spec.get("schedulerName") or DEFAULT_SCHEDULER_NAME,
        priority=int(spec.get("priority") or 0),
        creation=meta.get("creationTimestamp") or "",
        requests=requests,
        tolerations=tuple(
            Toleration(
                str(t.get("key") or ""),
                str(t.get("operator") or "Equal"),
                str(t.get("value") or ""),
                str(t.get("effect") or ""),
            )
            for t in spec.get("tolerations") or ()
        ),
        node_selector=tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items())),
        required_terms=node_selector_terms(
            node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        ),
        preferred_terms=tuple(
            (
                int(p.get("weight") or 0),
                Term(
                    _requirements((p.get("preference") or {}).get("matchExpressions")),
                    _requirements((p.get("preference") or {}).get("matchFields")),
                ),
            )
            for p in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
            if isinstance(p, Mapping)
        ),
        host_ports=_host_ports(spec),
        preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
        scheduling_gates=tuple(
            str(g.get("name") or "") for g in spec.get("schedulingGates") or () if isinstance(g, Mapping)
        ),
        images=_images(spec),
        volumes=_claim_volumes(meta.get("name") or "", spec),
        affinity=podterms.pod_affinity(meta.get("namespace") or "default", spec.get("affinity")),
        spread=podterms.spread_constraints(spec.get("topologySpreadConstraints")),
        limits=_limits(pod),
        priority_class=get_pod_priority_class_with_default(pod).value,
        spec_digest=spec_digest(spec),
    )


def _meta_fields(pod: Mapping[str, Any], meta: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a change of metadata, status or ``nodeName`` (a binding) may move."""
    status = pod.get("status") or {}
    scheduled, initialized = _condition_times(status)
    return {
        "namespace": meta.get("namespace") or "default",
        "name": meta.get("name") or "",
        "node_name": spec.get("nodeName") or "",
        "nominated_node": str(status.get("nominatedNodeName") or ""),
        "terminating": bool(meta.get("deletionTimestamp")),
        "labels": {str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        "controller": podterms.controller(meta),
        "owner_refs": podterms.other_owner_references(meta),
        "annotations": _annotations(meta),
        "scheduled_at": scheduled,
        "initialized_at": initialized,
        "gang": gang_member(pod),
    }


#: the fields :func:`refresh_pod_info` takes from the stored record: all but those
#: :func:`_meta_fields` reads again
_SPEC_FIELDS = tuple(
    f.name for f in dataclasses.fields(PodInfo) if f.init and f.name not in _meta_fields({}, {}, {})
)


def refresh_pod_info(pod: Mapping[str, Any], previous: PodInfo) -> PodInfo:
    """:func:`pod_info` of a changed pod whose stored record is ``previous``.

    A pod's spec barely changes after creation, and a binding (the change every scheduled
    pod sees) only sets ``nodeName``: when the spec's digest and the UID are those of
    ``previous``, the spec-derived fields are taken from it and only the metadata and status
    ones are read again. The Koordinator priority class also depends on the labels, so it is
    read again when they changed.
    """
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    digest = spec_digest(spec)
    if digest is None or digest != previous.spec_digest or (meta.get("uid") or "") != previous.uid:
        return pod_info(pod)
    fields = {name: getattr(previous, name) for name in _SPEC_FIELDS}
    fields.update(_meta_fields(pod, meta, spec))
    if fields["labels"] != previous.labels:
        fields["priority_class"] = get_pod_priority_class_with_default(pod).value
    return PodInfo(**fields)


def pod_object(pod: PodInfo) -> dict[str, Any]:
    """The parts of a pod object the Koordinator cores read from a record (they take API
    dicts): identity, labels, Koordinator's annotations, the owner references (the
    controlling one first), priority, node and the requests (one container)."""
    meta: dict[str, Any] = {
        "name": pod.name,
        "namespace": pod.namespace,
        "uid": pod.uid,
        "labels": dict(pod.labels),
        "annotations": dict(pod.annotations),
    }
    refs: list[dict[str, Any]] = []
    if pod.controller is not None:
        refs.append(
            {
                "apiVersion": pod.controller.api_version,
                "kind": pod.controller.kind,
                "name": pod.controller.name,
                "uid": pod.controller.uid,
                "controller": True,
            }
        )
    for owner in pod.owner_refs:
        ref: dict[str, Any] = {
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "name": owner.name,
            "uid": owner.uid,
        }
        if owner.controller is not None:
            ref["controller"] = owner.controller
        refs.append(ref)
    if refs:
        meta["ownerReferences"] = refs
    requests = {name: f"{value}m" if name == CPU else str(value) for name, value in pod.requests.items()}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "priority": pod.priority,
            "nodeName": pod.node_name,
            "tolerations": [],
            "containers": [{"name": "c", "resources": {"requests": requests}}],
        },
    }
