"""DeviceShare: GPUs (whole or shared), RDMA NICs and FPGAs from each node's ``Device`` object
(Koordinator's ``plugins/deviceshare``), the scheduler's side of
:mod:`controlplane.scheduler.devices`.

A pod asking for devices (``nvidia.com/gpu``, ``koordinator.sh/gpu-core``,
``gpu-memory``, ``gpu-memory-ratio``, ``gpu.shared``, ``koordinator.sh/rdma``, ``fpga`` ...):

* **PreFilter**: an invalid combination of device requests, or a malformed hint annotation,
  is refused on every node with upstream's message;
* **Filter**: a node passes when a trial allocation on its healthy devices succeeds (a node
  without a Device object has no devices);
* **Score**: LeastAllocated (or MostAllocated) over ``scoringStrategy.resources`` on the
  devices the pod would get, normalized over the nodes scored;
* **Reserve / Unreserve**: the allocation is booked on the node's devices, and released;
* **PreBind**: ``scheduling.koordinator.sh/device-allocated`` on the pod (GPUs with both
  ``gpu-memory`` and ``gpu-memory-ratio``, RDMA with its virtual functions).

Pods bound with that annotation are booked from it (a restarted scheduler knows what each
device holds). Not built: NUMA alignment with NodeNUMAResource (each plug-in places on its
own), GPU partition tables, shared-resource templates, and preemption for devices (a node
short of devices is not a preemption candidate).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.devices.allocator import allocate, score
from controlplane.scheduler.devices.claims import DeviceClaim, build_claim
from controlplane.scheduler.devices.errors import DeviceShareError
from controlplane.scheduler.devices.inventory import NodeDevices
from controlplane.scheduler.devices.requests import DEVICE_REQUEST_NAMES
from controlplane.scheduler.devices.scoring import DEFAULT_SCORING_RESOURCES, DeviceScorer, ScoringStrategy
from controlplane.scheduler.kernel.twin import Extra
from controlplane.scheduler.plugins.args import ArgsError, boolean, resource_weights
from controlplane.scheduler.plugins.interface import (
    CycleState,
    Handle,
    PodPatch,
    PreFilterResult,
    QueueNotifier,
    follow,
    reasons_by_node,
    row_scores,
)
from controlplane.scheduler.plugins.rowverdicts import PodShapes, RowVerdicts, Verdict
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.queue import ClusterEvent
from koordinator.api.extension.annotations import AnnotationError
from koordinator.api.extension.device import (
    ANNOTATION_DEVICE_ALLOCATE_HINT,
    ANNOTATION_DEVICE_ALLOCATED,
    ANNOTATION_DEVICE_JOINT_ALLOCATE,
    DeviceAllocation,
    get_device_allocations,
    set_device_allocations,
)
from koordinator.kube import resources as res
from koordinator.kube.informer.factory import InformerFactory

log = logging.getLogger(__name__)

NAME = "DeviceShare"
#: a Device object came, changed or went: pods short of devices may fit now
DEVICE_CHANGE = ClusterEvent("Device", "*")
NO_DEVICES = "node(s) Insufficient devices"
_STATE_KEY = "DeviceShare/allocation"

Obj = Mapping[str, Any]
Allocations = dict[str, list[DeviceAllocation]]
#: a pod's device shape: its device requests and its hint and joint-allocation annotations
Shape = tuple[tuple[tuple[str, int], ...], str, str]


@dataclass(frozen=True)
class DeviceShareArgs:
    strategy: ScoringStrategy = ScoringStrategy.LEAST_ALLOCATED
    weights: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_SCORING_RESOURCES))
    disable_numa_alignment: bool = False


_ARGS_FIELDS = {
    "apiVersion",
    "kind",
    "allocator",
    "scoringStrategy",
    "disableDeviceNUMATopologyAlignment",
    "gpuSharedResourceTemplatesConfig",
    "gpuShareUnsupportedModels",
}


def device_share_args(raw: Mapping[str, Any] | None, path: str = NAME) -> DeviceShareArgs:
    """DeviceShareArgs with upstream's defaults (LeastAllocated over gpu-memory-ratio,
    gpu-memory, rdma and fpga, weight 1 each). ``allocator`` (deprecated) and the GPU
    shared-resource templates are accepted and have nothing to act on here."""
    raw = raw or {}
    unknown = set(raw) - _ARGS_FIELDS
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {sorted(unknown)}")
    strategy = raw.get("scoringStrategy") or {}
    if not isinstance(strategy, Mapping):
        raise ArgsError(f"{path}.scoringStrategy: must be an object")
    kind = strategy.get("type") or ScoringStrategy.LEAST_ALLOCATED.value
    if kind not in {s.value for s in ScoringStrategy}:
        raise ArgsError(
            f"{path}.scoringStrategy.type: Unsupported value: {kind!r}: "
            f"supported values: {', '.join(s.value for s in ScoringStrategy)}"
        )
    weights = (
        resource_weights(strategy["resources"], f"{path}.scoringStrategy.resources")
        if strategy.get("resources")
        else dict(DEFAULT_SCORING_RESOURCES)
    )
    return DeviceShareArgs(
        ScoringStrategy(kind), weights, boolean(raw, "disableDeviceNUMATopologyAlignment", path)
    )


def _shape(pod: PodInfo) -> Shape:
    requests = tuple(sorted((k, v) for k, v in pod.requests.items() if k in DEVICE_REQUEST_NAMES and v))
    annotations = pod.annotations
    return (
        requests,
        annotations.get(ANNOTATION_DEVICE_ALLOCATE_HINT, ""),
        annotations.get(ANNOTATION_DEVICE_JOINT_ALLOCATE, ""),
    )


class DeviceShare:
    NAME = NAME
    PREEMPTION_HELPS = False
    reverse = False

    def __init__(self, args: DeviceShareArgs | None = None) -> None:
        self.args = args or device_share_args(None)
        self.scorer = DeviceScorer(self.args.strategy, dict(self.args.weights))
        #: node -> its devices and the allocations booked on them
        self.nodes: dict[str, NodeDevices] = {}
        #: pod UID -> (node, its allocations): every pod booked, so that a Device object
        #: arriving after its pods (or again) gets them booked
        self.booked: dict[str, tuple[str, Allocations]] = {}
        # a node's device verdicts change with its devices and their bookings only
        self._verdicts: RowVerdicts[Shape] = RowVerdicts(follow_pods=False)
        self._claims: PodShapes[Shape, DeviceClaim | DeviceShareError | None] = PodShapes(_shape, self._parse)
        self._notifier = QueueNotifier(DEVICE_CHANGE)

    # --- wiring ----------------------------------------------------------------------------

    def bind_handle(self, handle: Handle) -> None:
        self._notifier.handle = handle

    def attach(self, factory: InformerFactory, name: str) -> None:
        follow(factory, res.DEVICES, name, self.on_device, self.on_device_deleted)

    def take_object(self, obj: Obj) -> None:
        """An object ``simulate`` was given: Device objects are the nodes' inventories."""
        if obj.get("kind") == "Device":
            self.on_device(obj)

    def on_device(self, device: Obj) -> None:
        node = str((device.get("metadata") or {}).get("name") or "")
        try:
            devices = self.nodes.get(node)
            if devices is None:
                devices = NodeDevices.from_device(device)
                self.nodes[node] = devices
                for uid, (where, allocations) in self.booked.items():
                    if where == node:
                        devices.add_pod(uid, allocations)
            else:
                devices.update_device(device)
        except (ValueError, AnnotationError) as err:
            log.warning("Device %s ignored: %s", node, err)
            return
        self._verdicts.touch(node)
        self._notifier.notify()

    def on_device_deleted(self, node: str) -> None:
        if self.nodes.pop(node, None) is not None:
            self._verdicts.touch(node)

    def on_pod(self, old: PodInfo | None, new: PodInfo | None) -> None:
        """Pods bound with a ``device-allocated`` annotation are booked; deleted ones released."""
        if new is None:
            if old is not None:
                self._release(old.uid)
            return
        if not new.node_name or ANNOTATION_DEVICE_ALLOCATED not in new.annotations:
            return
        if new.uid in self.booked:
            return  # booked by our Reserve (or already restored)
        try:
            allocations = get_device_allocations(new.annotations)
        except AnnotationError as err:
            log.warning("pod %s: devices not booked: %s", new.key, err)
            return
        if allocations:
            self._book(new.uid, new.node_name, allocations)

    def _book(self, uid: str, node: str, allocations: Allocations) -> None:
        self.booked[uid] = (node, allocations)
        devices = self.nodes.get(node)
        if devices is not None:
            devices.add_pod(uid, allocations)
            self._verdicts.touch(node)

    def _release(self, uid: str) -> None:
        found = self.booked.pop(uid, None)
        if found is None:
            return
        devices = self.nodes.get(found[0])
        if devices is not None:
            devices.remove_pod(uid)
            self._verdicts.touch(found[0])
            self._notifier.notify()

    # --- a pod's claim ---------------------------------------------------------------------

    def _claim(self, pod: PodInfo) -> tuple[Shape, DeviceClaim | DeviceShareError | None]:
        return self._claims.get(pod)

    @staticmethod
    def _parse(pod: PodInfo, shape: Shape) -> DeviceClaim | DeviceShareError | None:
        if not shape[0]:
            return None
        try:
            return build_claim(dict(shape[0]), pod.annotations)
        except DeviceShareError as err:
            return err

    def _verdict(self, claim: DeviceClaim) -> Callable[[NodeInfo], Verdict]:
        def verdict(info: NodeInfo) -> Verdict:
            devices = self.nodes.get(info.name)
            if devices is None:
                return False, 0
            try:
                allocate(devices, claim, reserve=False)
            except DeviceShareError:
                return False, 0
            return True, score(devices, claim, self.scorer)

        return verdict

    def _why(self, claim: DeviceClaim, node: str) -> str | None:
        devices = self.nodes.get(node)
        if devices is None:
            return NO_DEVICES
        try:
            allocate(devices, claim, reserve=False)
        except DeviceShareError as err:
            return "; ".join(err.reasons) or NO_DEVICES
        return None

    # --- the points ------------------------------------------------------------------------

    def pre_filter(self, pod: PodInfo, cluster: Cluster) -> PreFilterResult | None:
        _, claim = self._claim(pod)
        if isinstance(claim, DeviceShareError):
            return PreFilterResult(message=str(claim))
        return None

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        shape, claim = self._claim(pod)
        if not isinstance(claim, DeviceClaim):
            return None
        mask, _ = self._verdicts.get(cluster, shape, self._verdict(claim))
        return bytes(mask)

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        _, claim = self._claim(pod)
        if not isinstance(claim, DeviceClaim):
            return {}
        return reasons_by_node(cluster, rejected, lambda info: self._why(claim, info.name) or NO_DEVICES)

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        _, claim = self._claim(pod)
        return self._why(claim, node.name) if isinstance(claim, DeviceClaim) else None

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        shape, claim = self._claim(pod)
        if not isinstance(claim, DeviceClaim):
            return None  # upstream's PreScore skips pods without devices
        _, scores = self._verdicts.get(cluster, shape, self._verdict(claim))
        return row_scores(self.NAME, weight, scores)

    def raw_score(self, pod: PodInfo, node: NodeInfo) -> int:
        _, claim = self._claim(pod)
        devices = self.nodes.get(node.name)
        if not isinstance(claim, DeviceClaim) or devices is None:
            return 0
        return score(devices, claim, self.scorer)

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        _, claim = self._claim(pod)
        if not isinstance(claim, DeviceClaim):
            return None
        devices = self.nodes.get(node)
        if devices is None:
            return NO_DEVICES
        try:
            allocations = allocate(devices, claim, scorer=self.scorer, reserve=True)
        except DeviceShareError as err:
            return "; ".join(err.reasons) or NO_DEVICES
        self._book(pod.uid, node, allocations)
        state[_STATE_KEY] = allocations
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        if state.pop(_STATE_KEY, None) is not None:
            self._release(pod.uid)

    def forget_pod(self, pod: PodInfo, node: str) -> None:
        self._release(pod.uid)

    def modify(self, state: CycleState, pod: PodInfo, node: str, patch: PodPatch) -> str | None:
        allocations = state.get(_STATE_KEY)
        if isinstance(allocations, dict) and allocations:
            annotations: dict[str, str] = {}
            set_device_allocations(annotations, allocations)
            patch.annotations.update(annotations)
        return None

    def describe(self, pod: PodInfo) -> tuple[str, Any] | None:
        """``simulate``'s report of the devices the pod got."""
        found = self.booked.get(pod.uid)
        if found is None:
            return None
        return "devices", {t: [a.to_dict() for a in found[1][t]] for t in sorted(found[1])}
