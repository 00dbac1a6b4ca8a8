"""The plug-in interfaces.

A filter plug-in gives the framework a byte mask over the node table for a pod, the
histogram of its reasons over the rows it rejected, and a per-node explanation for
``koord-scheduler simulate``; it builds the mask from byte columns the cluster keeps (no
loop over nodes in Python); ``None`` means it rejects no node for this pod.

The points after a node is chosen (Reserve, Permit, PreBind, Bind, PostBind), PreEnqueue
and Koordinator's ForgetPod hook are one method each; a plug-in serves those it defines.
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.kernel.table import PodVector
from controlplane.scheduler.kernel.twin import DEFAULT_NORMALIZE, NO_NORMALIZE, Domains, Extra
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.queue import ClusterEvent
from koordinator.kube.client import ApiClient
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.informer.informer import Tombstone
from koordinator.kube.resources import Resource


class MaskFilter(Protocol):
    NAME: str
    #: whether evicting pods from a node can lift this plug-in's rejection (upstream's
    #: Unschedulable, as opposed to UnschedulableAndUnresolvable)
    PREEMPTION_HELPS: bool

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        """One byte per table row: 1 where the node passes."""
        ...

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        """How many of the ``rejected`` rows (1 = rejected by this plug-in) fail for each reason."""
        ...

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        """Why this plug-in rejects ``node`` (None when it passes)."""
        ...


class NormalizedScore(Protocol):
    """A score plug-in scored outside the kernel: its raw score per row as weighted row
    masks (:class:`~controlplane.scheduler.kernel.twin.Extra`), normalized over the window."""

    NAME: str
    #: fewer is better (TaintToleration)
    reverse: bool

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> Extra | None:
        """The plug-in's parts for this pod (None when it skips the pod, as upstream's PreScore)."""
        ...

    def raw_score(self, pod: PodInfo, node: NodeInfo) -> int:
        """The raw score of one node (for ``simulate``)."""
        ...


_identity = array("q")


def final_row_scores(name: str, weight: int, scores: array[int]) -> Extra:
    """A score plug-in's :class:`Extra` from one final score per row (``scores[row]``, 0-100),
    for plug-ins upstream does not normalize (LoadAwareScheduling, NodeResourcesFitPlus)."""
    return row_scores(name, weight, scores, NO_NORMALIZE)


def row_scores(name: str, weight: int, scores: array[int], normalize: int = DEFAULT_NORMALIZE) -> Extra:
    """A score plug-in's :class:`Extra` from one raw score per row, normalized over the
    window by ``normalize`` (upstream's DefaultNormalizeScore unless told otherwise)."""
    global _identity
    if len(_identity) < len(scores):
        _identity = array("q", range(max(len(scores), 2 * len(_identity))))
    return Extra(name, weight, False, normalize=normalize, domains=[Domains(_identity, scores)])


def and_masks(a: bytes, b: bytes) -> bytes:
    """Byte-wise AND of two 0/1 masks of the same length, at C speed."""
    n = len(a)
    return (int.from_bytes(a, "little") & int.from_bytes(b, "little")).to_bytes(n, "little")


def and_not(a: bytes, b: bytes) -> bytes:
    """Rows set in ``a`` and not in ``b`` (0/1 masks)."""
    return (int.from_bytes(a, "little") & ~int.from_bytes(b, "little")).to_bytes(len(a), "little")


def rows_mask(bits: int, n: int) -> bytes:
    """A bit set of rows as a 0/1 byte mask of ``n`` rows, at C speed: its binary digits,
    row 0 first, as ASCII, translated to 0/1 bytes."""
    return format(bits, f"0{n}b")[::-1][:n].encode().translate(_ASCII_TO_MASK)


def passing_mask(rejected: int, n: int) -> bytes:
    """The 0/1 mask of ``n`` rows passing where the bit set ``rejected`` has no bit."""
    return rows_mask(((1 << n) - 1) & ~rejected, n)


def bits_of(mask: bytes) -> int:
    """A 0/1 byte mask as a bit set of rows."""
    return int(mask.translate(_MASK_TO_ASCII)[::-1] or b"0", 2)


def reasons_by_node(
    cluster: Cluster, rejected: bytes, why: Callable[[NodeInfo], str | None]
) -> dict[str, int]:
    """:meth:`MaskFilter.reasons` for a plug-in that says per node why: ``why`` of every
    rejected row's node, counted (a row it finds no reason for is not counted)."""
    out: dict[str, int] = {}
    for info in cluster.nodes.values():
        if rejected[info.row] and (reason := why(info)):
            out[reason] = out.get(reason, 0) + 1
    return out


_ASCII_TO_MASK = bytes.maketrans(b"01", b"\x00\x01")
_MASK_TO_ASCII = bytes.maketrans(b"\x00\x01", b"01")


# --- the points around binding ---------------------------------------------------------
#
# A plug-in object serves a point by having its method; the profile decides which run.
# ``state`` is the pod's cycle state: a dict its plug-ins share from Reserve to PostBind.

CycleState = dict[str, object]
#: where PreBind leaves a reserve pod's metadata changes for the plug-in binding it
RESERVE_POD_PATCH = "koord-scheduler/reserve-pod-patch"

ALLOW, WAIT, REJECT = "Allow", "Wait", "Reject"
#: upstream's cap on a Permit wait
MAX_PERMIT_TIMEOUT_S = 15 * 60.0


@dataclass(frozen=True)
class PermitResult:
    status: str = ALLOW
    #: seconds to wait for an allow (WAIT only; capped at MAX_PERMIT_TIMEOUT_S)
    timeout: float = 0.0
    #: why it rejects (REJECT only)
    message: str = ""


@dataclass
class PodPatch:
    """PreBind's in-memory copy of the pod's metadata: the labels and annotations plug-ins
    set (None removes one), sent as one merge patch before binding."""

    labels: dict[str, str | None] = field(default_factory=dict)
    annotations: dict[str, str | None] = field(default_factory=dict)

    def body(self) -> dict[str, Any] | None:
        meta: dict[str, Any] = {}
        if self.labels:
            meta["labels"] = dict(self.labels)
        if self.annotations:
            meta["annotations"] = dict(self.annotations)
        return {"metadata": meta} if meta else None


@dataclass(frozen=True)
class PreFilterResult:
    """A PreFilter plug-in's outcome for a pod."""

    #: the pod fits no node, and why
    message: str | None = None
    #: the rows left to the filters (None: every row), as a bit set
    rows: int | None = None
    #: the rejection is upstream's Unschedulable (preemption may help: ElasticQuota's, by
    #: evicting pods of the pod's own quota), not UnschedulableAndUnresolvable
    resolvable: bool = False


class PreFilterPlugin(Protocol):
    NAME: str

    def pre_filter(self, pod: PodInfo, cluster: Cluster) -> PreFilterResult | None:
        """None or an empty result when the pod may go on to the filters everywhere."""
        ...


class Restorer(Protocol):
    """A plug-in giving part of some nodes' requests back to one pod while it is scheduled
    (Reservation: the room of the reservations the pod may use)."""

    NAME: str

    def restore(self, pod: PodInfo, cluster: Cluster) -> list[tuple[str, PodVector]]:
        """(node, requests to take off it) for ``pod``; empty for most pods."""
        ...


class PostFilterPlugin(Protocol):
    """A PostFilter plug-in other than DefaultPreemption (which the framework runs itself)."""

    NAME: str

    def post_filter(self, pod: PodInfo, fit_error: str) -> str:
        """The pod fits no node (``fit_error``: the FitError text so far); the message it
        adds to the FitError ("" for none)."""
        ...


class Waiter(Protocol):
    """A pod waiting at Permit, as plug-ins act on it."""

    def allow(self, plugin: str) -> None: ...

    def reject(self, plugin: str, message: str) -> None: ...


class WaitingRegistry(Protocol):
    def get(self, uid: str) -> Waiter | None: ...


class ReservePods(Protocol):
    """Where the plug-in owning reservations hands in their reserve pods."""

    def add_reserve_pod(self, pod: PodInfo) -> None:
        """Queue a reserve pod (no node yet), or place it (``node_name`` set; again to
        change its requests)."""
        ...

    def remove_reserve_pod(self, key: str) -> None: ...


@dataclass(frozen=True)
class Handle:
    """What plug-ins reach of the running scheduler (or of ``simulate``): the pods waiting
    at Permit, the queue, told of a cluster event a plug-in saw (its gang changed), and
    the reserve pods (None: reservations are not scheduled here)."""

    waiting: WaitingRegistry
    on_event: Callable[[ClusterEvent], int]
    reserve_pods: ReservePods | None = None


class QueueNotifier:
    """Tells the queue of a plug-in's cluster event, at most once per turn of the event loop
    (a burst of changes moves the pods they may help once)."""

    def __init__(self, event: ClusterEvent) -> None:
        self.event = event
        self.handle: Handle | None = None
        self._pending = False

    def notify(self) -> None:
        if self.handle is None or self._pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no scheduler running (simulate): no queue to tell
        self._pending = True
        loop.call_soon(self._fire)

    def _fire(self) -> None:
        self._pending = False
        if self.handle is not None:
            self.handle.on_event(self.event)


class PreEnqueuePlugin(Protocol):
    NAME: str

    def pre_enqueue(self, pod: PodInfo) -> str | None:
        """None when the pod may enter activeQ; else why it is held back (gated)."""
        ...


class ReservePlugin(Protocol):
    NAME: str

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        """Claim what the pod will use on ``node``; None, or why it cannot."""
        ...

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        """Undo :meth:`reserve` (the pod will not bind there); must be idempotent."""
        ...


class PermitPlugin(Protocol):
    NAME: str

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> PermitResult: ...


class ModifyingPreBindPlugin(Protocol):
    """PreBind on the in-memory copy: the framework sends every plug-in's changes as one patch."""

    NAME: str

    def modify(self, state: CycleState, pod: PodInfo, node: str, patch: PodPatch) -> str | None:
        """Set labels or annotations on ``patch``; None, or why binding must not go on."""
        ...


class PatchApplier(Protocol):
    """DefaultPreBind: sends the modifying plug-ins' changes as one patch."""

    NAME: str

    async def apply_patch(self, client: ApiClient, pod: PodInfo, body: dict[str, Any]) -> None: ...


class CallingPreBindPlugin(Protocol):
    """PreBind that writes other objects through the API (VolumeBinding's claims)."""

    NAME: str

    async def pre_bind(self, client: ApiClient, pod: PodInfo, node: str) -> None:
        """Raises KubeError when the pod must not be bound."""
        ...


class BindPlugin(Protocol):
    NAME: str

    async def bind(self, client: ApiClient, state: CycleState, pod: PodInfo, node: str) -> bool:
        """Bind the pod (True), or skip it for the next bind plug-in (False); KubeError on failure."""
        ...


class PostBindPlugin(Protocol):
    NAME: str

    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None: ...


class ForgetPodPlugin(Protocol):
    """Koordinator's ForgetPod hook: the scheduler forgot an assumed pod (its binding failed,
    a Permit plug-in rejected it, or it was deleted before binding)."""

    NAME: str

    def forget_pod(self, pod: PodInfo, node: str) -> None: ...


# --- the objects a plug-in follows -----------------------------------------------------

Obj = dict[str, Any]


def follow(
    factory: InformerFactory,
    resource: Resource,
    name: str,
    on_set: Callable[[Obj], None],
    on_deleted: Callable[[str], None],
) -> None:
    """Follow a cluster-scoped collection a plug-in reads (Devices, NodeResourceTopologies,
    Reservations): ``on_set`` with each object added or changed, ``on_deleted`` with the
    name of each one deleted."""
    factory.informer(resource).add_consumer(
        name=name,
        on_add=on_set,
        on_update=lambda _, new: on_set(new),
        on_delete=lambda gone: on_deleted(deleted_name(gone)),
    )


def deleted_name(obj: Mapping[str, Any] | Tombstone[Any]) -> str:
    """The name of a deleted object, or of a tombstone's."""
    if isinstance(obj, Tombstone):
        return obj.key.rpartition("/")[2]
    return str((obj.get("metadata") or {}).get("name") or "")
