"""Taints and tolerations on plain objects (``k8s.io/api/core/v1`` helpers).

``tolerates`` is ``Toleration.ToleratesTaint``; :func:`untolerated_taint` finds the first
taint with a scheduling effect (``NoSchedule``/``NoExecute``) that none of the tolerations
tolerates, as the scheduler's TaintToleration filter and the descheduler's node-fit check
ask it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["DO_NOT_SCHEDULE", "tolerates", "untolerated_taint"]

Obj = Mapping[str, Any]

#: the effects that keep a pod off a node at scheduling time
DO_NOT_SCHEDULE = ("NoSchedule", "NoExecute")


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """Effect and key when set; ``Equal`` (the default operator) compares values too."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return operator == "Exists"


def untolerated_taint(
    tolerations: Iterable[Obj], taints: Iterable[Obj], effects: tuple[str, ...] = DO_NOT_SCHEDULE
) -> Obj | None:
    """The first taint of ``effects`` that no toleration tolerates (None: all tolerated)."""
    tolerations = list(tolerations)
    for taint in taints:
        if taint.get("effect") not in effects:
            continue
        if not any(tolerates(toleration, taint) for toleration in tolerations):
            return taint
    return None
