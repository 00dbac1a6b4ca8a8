"""What the real apiserver adds to a pod on create: defaulting, admission and strategy.

Defaulting (container termination message path/policy, image pull policy, requests copied
from limits, restart/DNS policy, grace period, scheduler name, service links, empty
security context), the ``DefaultTolerationSeconds`` and ``Priority`` admission plug-ins,
and the pod strategy's initial status (``Pending`` plus the QoS class).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

Obj = dict[str, Any]

_SUFFIX = {
    "Ki": Decimal(1024),
    "Mi": Decimal(1024**2),
    "Gi": Decimal(1024**3),
    "Ti": Decimal(1024**4),
    "Pi": Decimal(1024**5),
    "Ei": Decimal(1024**6),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([A-Za-z]*)$")
SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
_DEFAULT_TOLERATIONS = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)


def quantity(text: Any) -> Decimal:
    """The value of a resource quantity (``500m``, ``1Gi``, ``2e3``)."""
    match = _QUANTITY.match(str(text).strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"invalid quantity {text!r}")
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except InvalidOperation as exc:
        raise ValueError(f"invalid quantity {text!r}") from exc


def _image_pull_policy(image: str) -> str:
    name = image.rsplit("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else ""
    return "Always" if "@" not in image and tag in ("", "latest") else "IfNotPresent"


def _default_container(container: Obj) -> None:
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    if "image" in container:
        container.setdefault("imagePullPolicy", _image_pull_policy(str(container["image"])))
    for port in container.get("ports") or ():
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def qos_class(spec: Obj) -> str:
    """Guaranteed, Burstable or BestEffort, from the containers' requests and limits."""
    containers = [
        c for f in ("containers", "initContainers") for c in spec.get(f) or () if isinstance(c, dict)
    ]
    any_set = False
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        requests = resources.get("requests") or {}
        limits = resources.get("limits") or {}
        tracked = {k for k in (*requests, *limits) if k in ("cpu", "memory")}
        if tracked:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or quantity(requests.get(name, limits[name])) != quantity(limits[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def prepare_pod(pod: Obj, priority_of: Callable[[str], int | None]) -> None:
    """Default a new pod in place; raises ``LookupError`` for an unknown priority class."""
    spec = pod.setdefault("spec", {})
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or ():
            if isinstance(container, dict):
                _default_container(container)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    # admission: DefaultTolerationSeconds
    tolerations = spec.get("tolerations") or []
    for default in _DEFAULT_TOLERATIONS:
        if not any(
            t.get("key") == default["key"] and t.get("effect") in ("NoExecute", None, "") for t in tolerations
        ):
            tolerations.append(dict(default))
    spec["tolerations"] = tolerations
    # admission: Priority
    class_name = spec.get("priorityClassName")
    if class_name:
        value = SYSTEM_PRIORITY_CLASSES.get(class_name)
        if value is None:
            value = priority_of(class_name)
        if value is None:
            raise LookupError(f"no PriorityClass with name {class_name} was found")
        spec["priority"] = value
    else:
        spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    # strategy: PrepareForCreate
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
