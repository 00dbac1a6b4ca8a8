"""What a pod says about other pods, parsed once when its record is made: label selectors,
pod (anti-)affinity terms and topology spread constraints, as PodTopologySpread and
InterPodAffinity read them (upstream's ``framework.PodInfo`` terms and the plug-ins'
internal constraint types).

Label selectors follow ``metav1.LabelSelectorAsSelector``: no selector (``None``) selects
nothing, ``{}`` selects everything, ``matchLabels`` and ``matchExpressions`` (``In``,
``NotIn``, ``Exists``, ``DoesNotExist``) are ANDed. The apiserver refuses a malformed
selector, so one that still arrives here (a hand-written ``simulate`` input) selects
nothing instead of failing the pod's record.

An affinity term's namespaces are upstream's ``getNamespacesFromPodAffinityTerm``: its
``namespaces``, or the pod's own namespace when it names neither namespaces nor a
``namespaceSelector``; the term matches a pod in one of them, or in a namespace whose
labels its ``namespaceSelector`` selects (``{}``: every namespace).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

IN, NOT_IN, EXISTS, DOES_NOT_EXIST = "In", "NotIn", "Exists", "DoesNotExist"
_OPERATORS = frozenset({IN, NOT_IN, EXISTS, DOES_NOT_EXIST})
#: the label every namespace carries with its name (set by the apiserver since 1.21)
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True, slots=True)
class LabelRequirement:
    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == IN:
            return labels.get(self.key) in self.values
        if op == NOT_IN:
            return labels.get(self.key) not in self.values
        if op == EXISTS:
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True, slots=True)
class Selector:
    """A label selector that selects something: its requirements are ANDed (none: every
    pod). ``controller``, when set, also asks for that controller UID (the selector
    PodTopologySpread's default constraints derive from the pod's owner)."""

    requirements: tuple[LabelRequirement, ...] = ()
    controller: str = ""

    def matches(self, labels: Mapping[str, str], controller: str = "") -> bool:
        if self.controller and controller != self.controller:
            return False
        return all(r.matches(labels) for r in self.requirements)

    def with_labels(self, labels: Mapping[str, str]) -> Selector:
        """This selector ANDed with ``key = value`` for each of ``labels`` (upstream's
        ``mergeLabelSetWithSelector``)."""
        extra = tuple(LabelRequirement(k, IN, frozenset({v})) for k, v in sorted(labels.items()))
        return Selector(extra + self.requirements, self.controller)


def label_selector(raw: Any) -> Selector | None:
    """A ``metav1.LabelSelector``; None when it selects nothing (absent or malformed)."""
    if not isinstance(raw, Mapping):
        return None
    requirements: list[LabelRequirement] = []
    match_labels = raw.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        return None
    for key, value in sorted(match_labels.items()):
        requirements.append(LabelRequirement(str(key), IN, frozenset({str(value)})))
    for expr in raw.get("matchExpressions") or ():
        if not isinstance(expr, Mapping) or not expr.get("key") or expr.get("operator") not in _OPERATORS:
            return None
        values = frozenset(str(v) for v in expr.get("values") or ())
        operator = str(expr["operator"])
        if (operator in (IN, NOT_IN)) != bool(values):
            return None
        requirements.append(LabelRequirement(str(expr["key"]), operator, values))
    return Selector(tuple(requirements))


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """Upstream's ``fwk.AffinityTerm``: the pods it selects and its topology key."""

    namespaces: frozenset[str]
    selector: Selector | None
    topology_key: str
    #: None selects no namespace; ``Selector()`` every namespace
    namespace_selector: Selector | None = None

    def matches(self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str]) -> bool:
        """Whether a pod in ``namespace`` with ``labels`` is one of the term's pods
        (``namespace_labels``: the labels of that namespace, for the namespace selector)."""
        if self.selector is None:
            return False
        if namespace not in self.namespaces and (
            self.namespace_selector is None or not self.namespace_selector.matches(namespace_labels)
        ):
            return False
        return self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """``spec.affinity.podAffinity`` and ``podAntiAffinity``, required and preferred."""

    required: tuple[AffinityTerm, ...] = ()
    required_anti: tuple[AffinityTerm, ...] = ()
    preferred: tuple[WeightedTerm, ...] = ()
    preferred_anti: tuple[WeightedTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One ``spec.topologySpreadConstraints`` entry as written (defaults applied by the plug-in)."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    selector: Selector | None
    match_label_keys: tuple[str, ...] = ()
    min_domains: int | None = None
    node_affinity_policy: str | None = None
    node_taints_policy: str | None = None


@dataclass(frozen=True, slots=True)
class Controller:
    """The pod's controlling owner reference."""

    api_version: str
    kind: str
    uid: str
    #: the owner's name (a Reservation's owner may name its controller)
    name: str = ""


def _term(namespace: str, raw: Mapping[str, Any]) -> AffinityTerm:
    names = raw.get("namespaces") or ()
    ns_selector = raw.get("namespaceSelector")
    if not names and ns_selector is None:
        namespaces = frozenset({namespace})
    else:
        namespaces = frozenset(str(n) for n in names)
    return AffinityTerm(
        namespaces,
        label_selector(raw.get("labelSelector")),
        str(raw.get("topologyKey") or ""),
        label_selector(ns_selector) if ns_selector is not None else None,
    )


def _terms(namespace: str, raw: Any) -> tuple[AffinityTerm, ...]:
    return tuple(_term(namespace, t) for t in raw or () if isinstance(t, Mapping))


def _weighted(namespace: str, raw: Any) -> tuple[WeightedTerm, ...]:
    return tuple(
        WeightedTerm(int(t.get("weight") or 0), _term(namespace, t.get("podAffinityTerm") or {}))
        for t in raw or ()
        if isinstance(t, Mapping)
    )


def pod_affinity(namespace: str, affinity: Any) -> PodAffinity | None:
    """A pod's inter-pod affinity (None when it has no term)."""
    if not isinstance(affinity, Mapping):
        return None
    pod = affinity.get("podAffinity") or {}
    anti = affinity.get("podAntiAffinity") or {}
    required = "requiredDuringSchedulingIgnoredDuringExecution"
    preferred = "preferredDuringSchedulingIgnoredDuringExecution"
    out = PodAffinity(
        _terms(namespace, pod.get(required)),
        _terms(namespace, anti.get(required)),
        _weighted(namespace, pod.get(preferred)),
        _weighted(namespace, anti.get(preferred)),
    )
    return out if out.required or out.required_anti or out.preferred or out.preferred_anti else None


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def spread_constraint(raw: Mapping[str, Any], *, with_selector: bool = True) -> SpreadConstraint:
    """One ``TopologySpreadConstraint`` (``with_selector=False``: a default constraint, whose
    selector the plug-in derives per pod)."""
    return SpreadConstraint(
        max_skew=int(raw.get("maxSkew") or 0),
        topology_key=str(raw.get("topologyKey") or ""),
        when_unsatisfiable=str(raw.get("whenUnsatisfiable") or ""),
        selector=label_selector(raw.get("labelSelector")) if with_selector else None,
        match_label_keys=tuple(str(k) for k in raw.get("matchLabelKeys") or ()),
        min_domains=_optional_int(raw.get("minDomains")),
        node_affinity_policy=raw.get("nodeAffinityPolicy"),
        node_taints_policy=raw.get("nodeTaintsPolicy"),
    )


def spread_constraints(raw: Any) -> tuple[SpreadConstraint, ...]:
    return tuple(spread_constraint(c) for c in raw or () if isinstance(c, Mapping))


def controller(meta: Mapping[str, Any]) -> Controller | None:
    """``metav1.GetControllerOf``: the owner reference with ``controller: true``."""
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller"):
            return Controller(
                str(ref.get("apiVersion") or ""),
                str(ref.get("kind") or ""),
                str(ref.get("uid") or ""),
                str(ref.get("name") or ""),
            )
    return None


@dataclass(frozen=True, slots=True)
class OwnerReference:
    """An owner reference of the pod other than its controlling one (a Reservation's
    ``owners[].controller`` may name any of them, as upstream's
    ``MatchReservationControllerReference``)."""

    api_version: str
    kind: str
    uid: str
    name: str
    #: the reference's ``controller`` flag (None: not set)
    controller: bool | None = None


def other_owner_references(meta: Mapping[str, Any]) -> tuple[OwnerReference, ...]:
    """Every owner reference but the one :func:`controller` returns, in order (most pods
    have none: their only reference is their controller)."""
    refs = meta.get("ownerReferences") or ()
    if not refs:
        return ()
    out = []
    skipped = False
    for ref in refs:
        if not isinstance(ref, Mapping):
            continue
        if ref.get("controller") and not skipped:
            skipped = True  # the controlling reference, kept as :class:`Controller`
            continue
        flag = ref.get("controller")
        out.append(
            OwnerReference(
                str(ref.get("apiVersion") or ""),
                str(ref.get("kind") or ""),
                str(ref.get("uid") or ""),
                str(ref.get("name") or ""),
                None if flag is None else bool(flag),
            )
        )
    return tuple(out)
