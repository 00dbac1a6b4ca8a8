"""``scheduling.koordinator.sh/v1alpha1``: Reservation, PodMigrationJob, Device, ClusterNetworkTopology,
ScheduleExplanation.

Reservation ``ttl`` carries no schema default: the apiserver applies defaults before it
evaluates validation rules, so a ``"24h"`` default would make every Reservation that sets only
``expires`` fail the ttl/expires exclusivity rule. Consumers use :meth:`ReservationSpec.ttl_nanos`,
which gives the upstream default of 24h when neither field is set.
"""

# field() returns a dataclasses.Field, exactly like dataclasses.field().
# ruff: noqa: RUF009

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from koordinator.api.goparse import parse_duration
from koordinator.api.model import JSON, Model, Rule, field
from koordinator.api.types.core import (
    DATE_TIME,
    DURATION_PATTERN,
    Condition,
    DeleteOptions,
    LabelSelector,
    ObjectReference,
    OwnerReference,
    Resource,
    ResourceList,
    Taint,
)

__all__ = [
    "DEFAULT_RESERVATION_TTL",
    "ClusterNetworkTopology",
    "ClusterNetworkTopologySpec",
    "ClusterNetworkTopologyStatus",
    "Device",
    "DeviceAllocation",
    "DeviceAllocationItem",
    "DeviceInfo",
    "DeviceSpec",
    "DeviceStatus",
    "DeviceTopology",
    "NetworkTopologyDetailStatus",
    "NetworkTopologySpec",
    "PodMigrateReservationOptions",
    "PodMigrationJob",
    "PodMigrationJobCondition",
    "PodMigrationJobPreemptedReservation",
    "PodMigrationJobPreemptionOptions",
    "PodMigrationJobSpec",
    "PodMigrationJobStatus",
    "Reservation",
    "ReservationCondition",
    "ReservationControllerReference",
    "ReservationOwner",
    "ReservationPreAllocationPolicy",
    "ReservationSpec",
    "ReservationStatus",
    "ReservationTemplateSpec",
    "ScheduleExplanation",
    "TopologyInfo",
    "VirtualFunction",
    "VirtualFunctionGroup",
]

GROUP = "scheduling.koordinator.sh"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

#: Upstream's default ``spec.ttl`` of a Reservation.
DEFAULT_RESERVATION_TTL = "24h"

# ---- Reservation ------------------------------------------------------------------------------


@dataclass
class ReservationControllerReference(OwnerReference):
    namespace: str = field("namespace", default="", description="Namespace of the controller.")


@dataclass
class ReservationOwner(Model):
    __api_description__ = (
        "Who may use the reserved resources. The fields set in one entry are ANDed; "
        "entries of the owners list are ORed."
    )

    object: ObjectReference | None = field("object", description="A specific object (usually a pod).")
    controller: ReservationControllerReference | None = field(
        "controller", description="Pods controlled by this owner reference."
    )
    label_selector: LabelSelector | None = field("labelSelector", description="Pods whose labels match.")


@dataclass
class ReservationPreAllocationPolicy(Model):
    mode: str = field(
        "mode",
        default="",
        enum=("Default", "Cluster"),
        description="How pre-allocatable pods are found: Default or Cluster.",
    )
    enable_multiple: bool = field(
        "enableMultiple", default=False, description="Allow pre-allocating several pods to one reservation."
    )


@dataclass
class ReservationSpec(Model):
    __api_rules__ = (
        Rule("!(has(self.ttl) && has(self.expires))", message="ttl and expires are mutually exclusive"),
    )

    template: JSON | None = field(
        "template",
        omitempty=False,
        required=True,
        schemaless=True,
        description=(
            "A pod template describing what to reserve (resources, affinity, tolerations ...); the scheduler "
            "places it like a pod. template.spec.nodeName pins the reservation to that node."
        ),
    )
    owners: list[ReservationOwner] = field(
        "owners",
        factory=list,
        omitempty=False,
        required=True,
        min_items=1,
        description="Owners allowed to allocate the reserved resources (at least one).",
    )
    ttl: str | None = field(
        "ttl",
        pattern=DURATION_PATTERN,
        description=(
            "How long the reservation lives after creation, as a Go duration (24h when neither ttl nor "
            "expires is set; 0 means never expire). Mutually exclusive with expires."
        ),
    )
    expires: str | None = field(
        "expires",
        format=DATE_TIME,
        description="Absolute expiry time. Mutually exclusive with ttl.",
    )
    pre_allocation: bool = field(
        "preAllocation",
        default=False,
        description="Skip the node free-resource check; the reservation waits until resources free up.",
    )
    allocate_once: bool | None = field(
        "allocateOnce",
        schema_default=True,
        description="Only the first owner that allocates may use the reservation (default true).",
    )
    allocate_policy: str = field(
        "allocatePolicy",
        default="",
        enum=("Aligned", "Restricted"),
        description=(
            "Aligned: take from the reservation first, then the node. Restricted: resources the reservation "
            "declares may only come from it."
        ),
    )
    unschedulable: bool = field(
        "unschedulable", default=False, description="Stop new pods from allocating this reservation."
    )
    taints: list[Taint] = field(
        "taints", factory=list, description="Taints that pods must tolerate to use it."
    )
    pre_allocation_policy: ReservationPreAllocationPolicy | None = field("preAllocationPolicy")

    def ttl_nanos(self) -> int | None:
        """The effective TTL in nanoseconds: ``None`` when ``expires`` governs, 0 for never."""
        if self.ttl is not None:
            return parse_duration(self.ttl)
        if self.expires is not None:
            return None
        return parse_duration(DEFAULT_RESERVATION_TTL)

    def allocate_once_or_default(self) -> bool:
        return True if self.allocate_once is None else self.allocate_once


@dataclass
class ReservationCondition(Model):
    type: str = field("type", default="", description="Scheduled or Ready.")
    status: str = field("status", default="", description="True, False or Unknown.")
    reason: str = field("reason", default="")
    message: str = field("message", default="")
    last_probe_time: str | None = field("lastProbeTime", format=DATE_TIME)
    last_transition_time: str | None = field("lastTransitionTime", format=DATE_TIME)


@dataclass
class ReservationStatus(Model):
    phase: str = field(
        "phase",
        default="",
        enum=("Pending", "Available", "Succeeded", "Waiting", "Failed"),
        description="Pending, Available (scheduled), Waiting (pre-allocation), Succeeded or Failed.",
    )
    conditions: list[ReservationCondition] = field("conditions", factory=list)
    current_owners: list[ObjectReference] = field(
        "currentOwners", factory=list, description="Owners that have allocated from the reservation."
    )
    node_name: str = field("nodeName", default="", description="The node the reservation is placed on.")
    allocatable: ResourceList = field("allocatable", factory=dict, description="Resources reserved.")
    allocated: ResourceList = field("allocated", factory=dict, description="Resources allocated by owners.")


@dataclass
class Reservation(Resource):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Reservation"
    __api_description__ = "Resources reserved on a node for pods that match its owners."

    spec: ReservationSpec | None = field("spec", required=True)
    status: ReservationStatus | None = field("status")


# ---- PodMigrationJob ---------------------------------------------------------------------------


@dataclass
class ReservationTemplateSpec(Model):
    metadata: JSON | None = field("metadata", schemaless=True)
    spec: ReservationSpec | None = field("spec", required=True)


@dataclass
class PodMigrationJobPreemptionOptions(Model):
    __api_description__ = "Preemption options (reserved for future use)."


@dataclass
class PodMigrateReservationOptions(Model):
    reservation_ref: ObjectReference | None = field(
        "reservationRef", description="An existing Reservation to use; created from the template when empty."
    )
    template: ReservationTemplateSpec | None = field("template", description="The Reservation to create.")
    preemption_options: PodMigrationJobPreemptionOptions | None = field("preemptionOptions")


@dataclass
class PodMigrationJobSpec(Model):
    paused: bool = field("paused", default=False, description="Stop processing the job while true.")
    ttl: str | None = field(
        "ttl", pattern=DURATION_PATTERN, description="Timeout of the job as a Go duration."
    )
    mode: str = field(
        "mode",
        default="",
        enum=("ReservationFirst", "EvictDirectly"),
        description="ReservationFirst (default) reserves a new place before evicting; EvictDirectly evicts.",
    )
    pod_ref: ObjectReference | None = field(
        "podRef", omitempty=False, required=True, description="The pod to migrate."
    )
    reservation_options: PodMigrateReservationOptions | None = field("reservationOptions")
    delete_options: DeleteOptions | None = field("deleteOptions")


@dataclass
class PodMigrationJobCondition(Model):
    type: str = field("type", omitempty=False, required=True)
    status: str = field("status", omitempty=False, required=True)
    last_probe_time: str | None = field("lastProbeTime", format=DATE_TIME)
    last_transition_time: str | None = field("lastTransitionTime", format=DATE_TIME)
    reason: str = field("reason", default="")
    message: str = field("message", default="")


@dataclass
class PodMigrationJobPreemptedReservation(Model):
    namespace: str = field("namespace", default="")
    name: str = field("name", default="")
    node_name: str = field("nodeName", default="")
    phase: str = field("phase", default="")
    preempted_pod_ref: ObjectReference | None = field("preemptedPodRef")
    pods_ref: list[ObjectReference] = field("podsRef", factory=list)


@dataclass
class PodMigrationJobStatus(Model):
    phase: str = field(
        "phase",
        default="",
        enum=("Pending", "Running", "Succeeded", "Failed", "Aborted"),
        description="Pending, Running, Succeeded, Failed or Aborted.",
    )
    status: str = field("status", default="", description="Current step, e.g. ReservationCreated.")
    reason: str = field("reason", default="")
    message: str = field("message", default="")
    conditions: list[PodMigrationJobCondition] = field("conditions", factory=list)
    node_name: str = field("nodeName", default="", description="The node the pod migrates to.")
    pod_ref: ObjectReference | None = field("podRef", description="The replacement pod.")
    preempted_pods_ref: list[ObjectReference] = field("preemptedPodsRef", factory=list)
    preempted_pods_reservation: list[PodMigrationJobPreemptedReservation] = field(
        "preemptedPodsReservation", factory=list
    )


@dataclass
class PodMigrationJob(Resource):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "PodMigrationJob"
    __api_description__ = "A request to move one pod, optionally reserving its new place first."

    spec: PodMigrationJobSpec | None = field("spec", required=True)
    status: PodMigrationJobStatus | None = field("status")


# ---- Device ------------------------------------------------------------------------------------


@dataclass
class DeviceTopology(Model):
    socket_id: int = field("socketID", default=0, omitempty=False, required=True, format="int32")
    node_id: int = field("nodeID", default=0, omitempty=False, required=True, format="int32")
    pcie_id: str = field("pcieID", default="", omitempty=False, required=True)
    bus_id: str = field("busID", default="")


@dataclass
class VirtualFunction(Model):
    minor: int = field("minor", default=0, omitempty=False, required=True, format="int32")
    bus_id: str = field("busID", default="")


@dataclass
class VirtualFunctionGroup(Model):
    labels: dict[str, str] = field("labels", factory=dict)
    vfs: list[VirtualFunction] = field("vfs", factory=list)


@dataclass
class DeviceInfo(Model):
    type: str = field("type", default="", description="gpu, fpga, rdma or xpu.")
    labels: dict[str, str] = field("labels", factory=dict)
    uuid: str = field("id", default="", description="The device's UUID (or PCI address for RDMA).")
    minor: int | None = field("minor", format="int32", description="Minor number, from 0.")
    module_id: int | None = field("moduleID", format="int32", description="Physical id of the device.")
    health: bool = field(
        "health",
        default=False,
        omitempty=False,
        schema_default=False,
        description="Whether the device works.",
    )
    resources: ResourceList = field("resources", factory=dict)
    topology: DeviceTopology | None = field("topology")
    vf_groups: list[VirtualFunctionGroup] = field("vfGroups", factory=list)
    conditions: list[Condition] = field("conditions", factory=list)


@dataclass
class DeviceSpec(Model):
    devices: list[DeviceInfo] = field("devices", factory=list, omitempty=False)


@dataclass
class DeviceAllocationItem(Model):
    name: str = field("name", default="", omitempty=False, required=True)
    namespace: str = field("namespace", default="", omitempty=False, required=True)
    uuid: str = field("uuid", default="", omitempty=False, required=True)
    minors: list[int] = field("minors", factory=list, omitempty=False, required=True)


@dataclass
class DeviceAllocation(Model):
    type: str = field("type", default="")
    entries: list[DeviceAllocationItem] = field("entries", factory=list)


@dataclass
class DeviceStatus(Model):
    allocations: list[DeviceAllocation] = field("allocations", factory=list)


@dataclass
class Device(Resource):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "Device"
    __api_description__ = "The devices (GPU, RDMA, FPGA ...) of one node, named after the node."

    spec: DeviceSpec | None = field("spec")
    status: DeviceStatus | None = field("status")


# ---- ClusterNetworkTopology --------------------------------------------------------------------


@dataclass
class NetworkTopologySpec(Model):
    label_key: list[str] = field(
        "labelKey", factory=list, description="Node label keys that name this layer."
    )
    parent_topology_layer: str = field("parentTopologyLayer", default="")
    topology_layer: str = field("topologyLayer", default="")


@dataclass
class ClusterNetworkTopologySpec(Model):
    network_topology_spec: list[NetworkTopologySpec] = field("networkTopologySpec", factory=list)


@dataclass
class TopologyInfo(Model):
    topology_layer: str = field("topologyLayer", default="", omitempty=False, required=True)
    topology_name: str = field("topologyName", default="", omitempty=False, required=True)


@dataclass
class NetworkTopologyDetailStatus(Model):
    topology_info: TopologyInfo | None = field("topologyInfo")
    parent_topology_info: TopologyInfo | None = field("parentTopologyInfo")
    child_topology_layer: str = field("childTopologyLayer", default="")
    child_topology_names: list[str] = field("childTopologyNames", factory=list)
    node_num: int = field("nodeNum", default=0, format="int32")


@dataclass
class ClusterNetworkTopologyStatus(Model):
    detail_status: list[NetworkTopologyDetailStatus] = field("detailStatus", factory=list)


@dataclass
class ClusterNetworkTopology(Resource):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ClusterNetworkTopology"
    __api_description__ = "The layers of the cluster network (node, switch, spine ...) and their members."

    spec: ClusterNetworkTopologySpec | None = field("spec")
    status: ClusterNetworkTopologyStatus | None = field("status")


# ---- ScheduleExplanation -----------------------------------------------------------------------


@dataclass
class ScheduleExplanation(Resource):
    API_VERSION: ClassVar[str] = API_VERSION
    KIND: ClassVar[str] = "ScheduleExplanation"
    __api_description__ = "Why the scheduler placed, or could not place, a pod; written by the scheduler."

    spec: JSON | None = field("spec", schemaless=True)
    status: JSON | None = field("status", schemaless=True)
