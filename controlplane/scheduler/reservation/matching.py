"""Which pods a Reservation serves, and which Reservations a pod asks for.

Owners (``spec.owners``) are a disjunction of entries; inside one entry the ``object``
reference, the ``controller`` reference and the ``labelSelector`` must all hold (a field
left out holds trivially, so ``[{}]`` matches every pod and ``[]`` none):

* ``object``: each non-empty of uid, name, namespace, apiVersion equals the pod's.
* ``controller``: its ``namespace`` (when set) is the pod's, and some ``ownerReference`` of
  the pod agrees on each non-empty of uid, name, kind, apiVersion, and on ``controller``
  when the entry sets it (the pod's reference must then set it to the same value).
* ``labelSelector``: the usual label-selector semantics; one that cannot be parsed makes
  the whole owner list unusable (the reservation then matches no pod).

A pod's ``reservation-affinity`` annotation narrows the choice: a ``name`` picks one
reservation outright; otherwise ``reservationSelector`` (equality on every key) and the
required ``reservationSelectorTerms`` (node-selector terms, ORed) are evaluated against
the node's labels overlaid with the reservation's labels, with ``metadata.name`` = the
reservation's name; ``tolerations`` must tolerate the reservation's NoSchedule/NoExecute
``spec.taints``. Without the annotation, reservation taints are not checked at all (as
upstream). ``exact-match-reservation`` lists resources whose pod request must equal the
reservation's allocatable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.reservation.reservepod import ReservationError
from koordinator.api.extension.annotations import AnnotationError, decode_json
from koordinator.api.extension.reservation import (
    ANNOTATION_EXACT_MATCH_RESERVATION,
    ANNOTATION_RESERVATION_AFFINITY,
    get_reservation_affinity,
)
from koordinator.api.quantity import Quantity
from koordinator.api.selectors import (
    METADATA_NAME_FIELD,
    SelectorError,
    label_selector_matches,
    node_selector_term_matches,
    validate_label_selector,
    validate_node_selector_term,
)
from koordinator.api.taints import untolerated_taint

__all__ = [
    "OwnerMatcher",
    "RequiredReservationAffinity",
    "exact_match",
    "exact_match_resources",
    "find_untolerated_taint",
    "match_controller_ref",
    "match_object_ref",
    "match_owners",
    "parse_owner_matchers",
]

Obj = Mapping[str, Any]


def _meta(pod: Obj) -> Obj:
    return pod.get("metadata") or {}


def match_object_ref(pod: Obj, ref: Obj | None) -> bool:
    """An owner's ``object``: uid, name, namespace, apiVersion, each only when set."""
    if ref is None:
        return True
    meta = _meta(pod)
    have = {
        "uid": meta.get("uid") or "",
        "name": meta.get("name") or "",
        "namespace": meta.get("namespace") or "",
        "apiVersion": pod.get("apiVersion") or "",
    }
    return all(not ref.get(key) or ref.get(key) == value for key, value in have.items())


def match_controller_ref(pod: Obj, ref: Obj | None) -> bool:
    """An owner's ``controller``: some ownerReference of the pod agrees with it."""
    if ref is None:
        return True
    meta = _meta(pod)
    if ref.get("namespace") and ref.get("namespace") != (meta.get("namespace") or ""):
        return False
    for owner in meta.get("ownerReferences") or ():
        wanted = ref.get("controller")
        if wanted is not None and (
            owner.get("controller") is None or bool(owner["controller"]) != bool(wanted)
        ):
            continue
        if all(
            not ref.get(key) or ref.get(key) == owner.get(key)
            for key in ("uid", "name", "kind", "apiVersion")
        ):
            return True
    return False


@dataclass(frozen=True)
class OwnerMatcher:
    """One ``spec.owners`` entry, its label selector already checked."""

    object_ref: Obj | None = None
    controller: Obj | None = None
    label_selector: Obj | None = None

    def matches(self, pod: Obj) -> bool:
        labels = _meta(pod).get("labels") or {}
        return (
            match_object_ref(pod, self.object_ref)
            and match_controller_ref(pod, self.controller)
            and (self.label_selector is None or label_selector_matches(self.label_selector, labels))
        )


def parse_owner_matchers(owners: Iterable[Obj] | None) -> list[OwnerMatcher]:
    """``spec.owners`` -> matchers; :class:`ReservationError` lists every unparsable selector."""
    matchers: list[OwnerMatcher] = []
    errors: list[str] = []
    for index, owner in enumerate(owners or ()):
        selector = owner.get("labelSelector")
        if selector is not None:
            try:
                validate_label_selector(selector)
            except SelectorError as exc:
                errors.append(f"owners[{index}]: Invalid value: {exc}")
                continue
        matchers.append(OwnerMatcher(owner.get("object"), owner.get("controller"), selector))
    if errors:
        raise ReservationError("; ".join(errors))
    return matchers


def match_owners(pod: Obj, matchers: Sequence[OwnerMatcher]) -> bool:
    """The DNF: any entry whose fields all hold."""
    return any(matcher.matches(pod) for matcher in matchers)


# ---- reservation affinity ------------------------------------------------------------------


@dataclass(frozen=True)
class RequiredReservationAffinity:
    """A pod's parsed ``reservation-affinity``."""

    name: str = ""
    #: ``reservationSelector``; ``None`` when empty
    selector: Mapping[str, str] | None = None
    #: the required terms; ``None`` when the required part is absent (an empty list matches nothing)
    terms: tuple[Obj, ...] | None = None
    tolerations: tuple[Obj, ...] = ()

    @classmethod
    def from_pod(cls, pod: Obj) -> RequiredReservationAffinity | None:
        """``None`` without the annotation; an empty value is an empty (but present) affinity."""
        annotations = _meta(pod).get("annotations") or {}
        if ANNOTATION_RESERVATION_AFFINITY not in annotations:
            return None
        if annotations[ANNOTATION_RESERVATION_AFFINITY] == "":
            return cls()
        try:
            affinity = get_reservation_affinity(annotations)
        except AnnotationError as exc:
            raise ReservationError(str(exc)) from None
        if affinity is None:
            return cls()
        required = affinity.required_during_scheduling_ignored_during_execution
        terms = None
        if required is not None:
            terms = tuple(term.to_dict() for term in required.reservation_selector_terms)
            for term in terms:
                try:
                    validate_node_selector_term(term)
                except SelectorError as exc:
                    raise ReservationError(str(exc)) from None
        return cls(
            name=affinity.name,
            selector=dict(affinity.reservation_selector) or None,
            terms=terms,
            tolerations=tuple(t.to_dict() for t in affinity.tolerations),
        )

    def match_name(self, reservation_name: str) -> bool:
        return bool(self.name) and self.name == reservation_name

    def match_affinity(
        self, reservation_name: str, reservation_labels: Mapping[str, str], node_labels: Mapping[str, str]
    ) -> bool:
        """Selector and required terms against node labels overlaid with the reservation's."""
        labels = {**node_labels, **reservation_labels}
        if self.selector is not None and any(labels.get(k) != v for k, v in self.selector.items()):
            return False
        if self.terms is None:
            return True
        fields = {METADATA_NAME_FIELD: reservation_name}
        return any(node_selector_term_matches(term, labels, fields) for term in self.terms)

    def untolerated_taint(self, taints: Iterable[Obj]) -> Obj | None:
        """The first NoSchedule/NoExecute taint no toleration tolerates."""
        return untolerated_taint(self.tolerations, taints)


def find_untolerated_taint(affinity: RequiredReservationAffinity | None, taints: Iterable[Obj]) -> Obj | None:
    """Upstream checks reservation taints only for pods that declare reservation affinity."""
    return None if affinity is None else affinity.untolerated_taint(taints)


# ---- exact match ---------------------------------------------------------------------------


def exact_match_resources(pod: Obj) -> list[str] | None:
    """``exact-match-reservation``'s ``resourceNames`` (``None`` when absent or empty)."""
    annotations = _meta(pod).get("annotations") or {}
    if not annotations.get(ANNOTATION_EXACT_MATCH_RESERVATION):
        return None
    try:
        data = decode_json(annotations, ANNOTATION_EXACT_MATCH_RESERVATION)
    except AnnotationError as exc:
        raise ReservationError(str(exc)) from None
    if not isinstance(data, Mapping):
        raise ReservationError(f"invalid {ANNOTATION_EXACT_MATCH_RESERVATION}: not an object")
    names = data.get("resourceNames") or []
    return [str(name) for name in names] or None


def exact_match(
    pod_requests: Mapping[str, Quantity], allocatable: Mapping[str, Quantity], names: Sequence[str] | None
) -> bool:
    """``ExactMatchReservation``: each listed resource requested exactly as reserved.

    As upstream, a listed resource that neither side has ends the check with a match
    (the resources after it are not looked at); one side only is a mismatch.
    """
    for name in names or ():
        in_reservation, in_pod = name in allocatable, name in pod_requests
        if not in_reservation or not in_pod:
            return not in_reservation and not in_pod
        if allocatable[name] != pod_requests[name]:
            return False
    return True
