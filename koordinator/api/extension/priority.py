"""Koordinator priority classes: from the ``koordinator.sh/priority-class`` label or ``spec.priority``.

* ``koord-prod``: 9000-9999 (default value 9500)
* ``koord-mid``: 7000-7999 (7500)
* ``koord-batch``: 5000-5999 (5500)
* ``koord-free``: 3000-3999 (3500)
* none: anything else, or no priority (0)

The sub-priority label ``koordinator.sh/priority`` is parsed like Go's
``strconv.ParseInt(s, 0, 32)`` (so ``"0x10"`` is 16 and ``"010"`` is 8).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from koordinator.api.extension.annotations import AnnotationError, labels_of
from koordinator.api.extension.constants import DOMAIN_PREFIX
from koordinator.api.extension.qos import QoSClass, get_pod_qos_class_with_default
from koordinator.api.goparse import GoParseError, parse_int

__all__ = [
    "DEFAULT_PRIORITY_VALUE",
    "LABEL_POD_PRIORITY",
    "LABEL_POD_PRIORITY_CLASS",
    "PRIORITY_CLASS_OBJECTS",
    "PRIORITY_RANGES",
    "PriorityClass",
    "get_pod_priority_class_raw",
    "get_pod_priority_class_with_default",
    "get_pod_sub_priority",
    "priority_class_by_name",
    "priority_class_of_value",
    "priority_class_with_qos",
]

#: Sub-priority inside a priority class (int32).
LABEL_POD_PRIORITY = DOMAIN_PREFIX + "priority"
#: Explicit priority class; overrides ``spec.priority``.
LABEL_POD_PRIORITY_CLASS = DOMAIN_PREFIX + "priority-class"


class PriorityClass(StrEnum):
    PROD = "koord-prod"
    MID = "koord-mid"
    BATCH = "koord-batch"
    FREE = "koord-free"
    NONE = ""


#: Inclusive ``spec.priority`` range of each class.
PRIORITY_RANGES: dict[PriorityClass, tuple[int, int]] = {
    PriorityClass.PROD: (9000, 9999),
    PriorityClass.MID: (7000, 7999),
    PriorityClass.BATCH: (5000, 5999),
    PriorityClass.FREE: (3000, 3999),
}
#: The priority value used when only the class is known.
DEFAULT_PRIORITY_VALUE: dict[PriorityClass, int] = {
    PriorityClass.PROD: 9500,
    PriorityClass.MID: 7500,
    PriorityClass.BATCH: 5500,
    PriorityClass.FREE: 3500,
    PriorityClass.NONE: 0,
}
#: The PriorityClass objects Koordinator installs: name -> (value, preemptionPolicy).
PRIORITY_CLASS_OBJECTS: dict[str, tuple[int, str]] = {
    "koord-prod": (9000, "PreemptLowerPriority"),
    "koord-mid": (7000, "PreemptLowerPriority"),
    "koord-batch": (5000, "PreemptLowerPriority"),
    "koord-free": (3000, "PreemptLowerPriority"),
}

_KNOWN = {c.value: c for c in PriorityClass if c is not PriorityClass.NONE}


def priority_class_by_name(name: str | None) -> PriorityClass:
    """The class named exactly ``name``; anything else is :attr:`PriorityClass.NONE`."""
    return _KNOWN.get(name or "", PriorityClass.NONE)


def priority_class_of_value(priority: int | None) -> PriorityClass:
    """The class whose range holds ``priority`` (``GetPriorityClass``)."""
    if priority is None:
        return PriorityClass.NONE
    for cls, (low, high) in PRIORITY_RANGES.items():
        if low <= priority <= high:
            return cls
    return PriorityClass.NONE


def get_pod_priority_class_raw(pod: Mapping[str, Any] | None) -> PriorityClass:
    """The label when present (an unknown value is none), else the ``spec.priority`` range."""
    if not pod:
        return PriorityClass.NONE
    labels = labels_of(pod)
    if LABEL_POD_PRIORITY_CLASS in labels:
        return priority_class_by_name(labels[LABEL_POD_PRIORITY_CLASS])
    priority = (pod.get("spec") or {}).get("priority")
    return priority_class_of_value(priority if isinstance(priority, int) else None)


def priority_class_with_qos(qos: QoSClass) -> PriorityClass:
    """SYSTEM/LSE/LSR/LS -> prod, BE -> batch, none -> none."""
    if qos in (QoSClass.SYSTEM, QoSClass.LSE, QoSClass.LSR, QoSClass.LS):
        return PriorityClass.PROD
    if qos is QoSClass.BE:
        return PriorityClass.BATCH
    return PriorityClass.NONE


def get_pod_priority_class_with_default(pod: Mapping[str, Any]) -> PriorityClass:
    """The raw class, else the one implied by the pod's QoS class (with its default)."""
    raw = get_pod_priority_class_raw(pod)
    if raw is not PriorityClass.NONE:
        return raw
    return priority_class_with_qos(get_pod_qos_class_with_default(pod))


def get_pod_sub_priority(labels: Mapping[str, str] | None) -> int:
    """``koordinator.sh/priority`` as an int32 (0 when absent); raises :class:`AnnotationError`."""
    raw = (labels or {}).get(LABEL_POD_PRIORITY)
    if raw is None:
        return 0
    try:
        return parse_int(raw, 0, 32)
    except GoParseError as exc:
        raise AnnotationError(LABEL_POD_PRIORITY, str(exc)) from None
