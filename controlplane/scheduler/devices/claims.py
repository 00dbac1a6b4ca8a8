"""A pod's device claim: its normalized requests plus the hint and joint-allocation annotations.

This is what DeviceShare's PreFilter works out once per pod: the per-type
:class:`~.requests.DeviceRequest`, the ``device-allocate-hint`` annotation (selectors checked
up front), and the ``device-joint-allocate`` annotation reduced to the device types that
take part (types the pod does not request, and types whose hint is ``ApplyForAll``, drop out).
"""

from __future__ import annotations

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.devices.errors import UNSCHEDULABLE_AND_UNRESOLVABLE, DeviceShareError
from controlplane.scheduler.devices.requests import DeviceRequest, normalize_device_requests
from koordinator.api.extension.annotations import AnnotationError, get_model
from koordinator.api.extension.device import (
    ANNOTATION_DEVICE_JOINT_ALLOCATE,
    DEVICE_TYPE_GPU,
    DeviceHint,
    get_device_allocate_hints,
)
from koordinator.api.model import Model, field
from koordinator.api.selectors import SelectorError, label_selector_matches, validate_label_selector

__all__ = [
    "APPLY_FOR_ALL",
    "DEVICE_LEVEL_EXCLUSIVE",
    "PCIE_LEVEL_EXCLUSIVE",
    "REQUESTS_AS_COUNT",
    "SAME_PCIE",
    "TOPOLOGY_SCOPE_LEVELS",
    "DeviceClaim",
    "DeviceJointAllocate",
    "build_claim",
    "selector_matches",
]

APPLY_FOR_ALL = "ApplyForAll"
REQUESTS_AS_COUNT = "RequestsAsCount"
DEVICE_LEVEL_EXCLUSIVE = "DeviceLevel"
PCIE_LEVEL_EXCLUSIVE = "PCIeLevel"
#: ``requiredScope`` of a joint allocation: the secondary devices sit on the primary's PCIe switches.
SAME_PCIE = "SamePCIe"
#: ``requiredTopologyScope`` -> depth in the GPU topology tree (node 1, NUMA node 2, PCIe 3, device 4).
TOPOLOGY_SCOPE_LEVELS = {"Device": 4, "PCIe": 3, "NUMANode": 2, "Node": 1}


@dataclass
class DeviceJointAllocate(Model):
    """``scheduling.koordinator.sh/device-joint-allocate``: device types allocated together."""

    device_types: list[str] = field("deviceTypes", factory=list)
    required_scope: str = field("requiredScope", default="")


Selector = Mapping[str, Any]


def selector_matches(selector: Selector | None, labels: Mapping[str, str] | None) -> bool:
    """Whether a hint selector admits ``labels``; no selector admits everything."""
    return selector is None or label_selector_matches(selector, labels)


@dataclass(frozen=True)
class DeviceClaim:
    """Everything about a pod that device allocation needs, node-independent."""

    requests: dict[str, DeviceRequest]
    hints: dict[str, DeviceHint]
    #: Device type -> (device selector, VF selector), as selector dicts (``None`` when unset).
    selectors: dict[str, tuple[Selector | None, Selector | None]]
    #: Joint-allocated types, primary first; empty when there is no joint allocation.
    joint_types: tuple[str, ...] = ()
    joint_scope: str = ""

    @property
    def primary_device_type(self) -> str:
        return self.joint_types[0] if self.joint_types else ""

    @property
    def gpu_required_scope(self) -> str:
        hint = self.hints.get(DEVICE_TYPE_GPU)
        return hint.required_topology_scope if hint is not None else ""

    @property
    def gpu_required_scope_level(self) -> int:
        return TOPOLOGY_SCOPE_LEVELS.get(self.gpu_required_scope, 0)

    def hint(self, device_type: str) -> DeviceHint | None:
        return self.hints.get(device_type)

    def device_selector(self, device_type: str) -> Selector | None:
        return self.selectors.get(device_type, (None, None))[0]

    def vf_selector(self, device_type: str) -> Selector | None:
        return self.selectors.get(device_type, (None, None))[1]

    def must_allocate_vf(self, device_type: str) -> bool:
        """A VF selector in the hint means every device of the type comes with one VF."""
        hint = self.hints.get(device_type)
        return hint is not None and hint.vf_selector is not None


def _compile(device_type: str, hint: DeviceHint) -> tuple[Selector | None, Selector | None]:
    compiled: list[Selector | None] = []
    for what, selector in (("Selector", hint.selector), ("VFSelector", hint.vf_selector)):
        if selector is None:
            compiled.append(None)
            continue
        as_dict = selector.to_dict()
        try:
            validate_label_selector(as_dict)
        except SelectorError as exc:
            raise DeviceShareError(
                UNSCHEDULABLE_AND_UNRESOLVABLE,
                f"invalid {what} of DeviceHint, deviceType: {device_type}, err: {exc}",
            ) from None
        compiled.append(as_dict)
    return compiled[0], compiled[1]


def build_claim(requests: Mapping[str, int], annotations: Mapping[str, str] | None) -> DeviceClaim | None:
    """The pod's claim, or ``None`` when it asks for no device (DeviceShare skips it).

    ``requests`` is the pod's summed requests. Raises :class:`DeviceShareError`
    (unresolvable) for an invalid request combination or a malformed annotation.
    """
    device_requests = normalize_device_requests(requests)
    if not device_requests:
        return None
    try:
        hints = get_device_allocate_hints(annotations)
    except AnnotationError as exc:
        raise DeviceShareError(
            UNSCHEDULABLE_AND_UNRESOLVABLE, f"invalid DeviceAllocateHint annotation, err: {exc}"
        ) from None
    selectors = {device_type: _compile(device_type, hint) for device_type, hint in hints.items()}
    try:
        joint = get_model(annotations, ANNOTATION_DEVICE_JOINT_ALLOCATE, DeviceJointAllocate)
    except AnnotationError as exc:
        raise DeviceShareError(
            UNSCHEDULABLE_AND_UNRESOLVABLE, f"invalid DeviceJointAllocate annotation, err: {exc}"
        ) from None
    joint_types: tuple[str, ...] = ()
    joint_scope = ""
    if joint is not None:
        joint_scope = joint.required_scope
        joint_types = tuple(
            device_type
            for device_type in joint.device_types
            if not (device_type in hints and hints[device_type].allocate_strategy == APPLY_FOR_ALL)
            and device_type in device_requests
        )
    return DeviceClaim(device_requests, hints, selectors, joint_types, joint_scope)
