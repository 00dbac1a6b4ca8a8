"""Choosing a pod's devices on one node, and the node's DeviceShare score (upstream's ``AutopilotAllocator``).

Steps, as upstream takes them:

1. Per device type, the count and per-device request: GPUs from the claim; RDMA/FPGA from
   the request (``N x 100`` = N whole devices) unless the hint says ``ApplyForAll`` (every
   device matching the selector) or ``RequestsAsCount`` (the request is the count; each
   device gives 1, or 100 with ``exclusivePolicy: DeviceLevel``). Secondary types of a joint
   allocation are left to Reserve when the Device says they are well planned.
2. The candidate devices: the hint's selector, the NUMA affinity (a device without topology
   is out; NUMA node -1 is always in), and types with nothing free drop out.
3. Joint allocation (when the pod asks for more than one type): the primary type first, then
   each secondary preferring the primary's PCIe switches (``SamePCIe`` requires exactly
   those switches).
4. GPUs go through the topology tree when the node has one (see :mod:`.gpu_topology`), else
   through the default pass; other types always take the default pass: free devices ordered
   by preferred-first, score (descending), minor, and the first that fit are taken, each
   with one VF when the hint has a VF selector.
5. GPU allocations get both ``gpu-memory`` and ``gpu-memory-ratio`` from the GPU's total
   memory.

Not covered: reservations and preemption (required/preferred minors can be passed in),
GPU partition tables, and GPU shared-resource templates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from controlplane.scheduler.devices.claims import (
    APPLY_FOR_ALL,
    DEVICE_LEVEL_EXCLUSIVE,
    REQUESTS_AS_COUNT,
    SAME_PCIE,
    DeviceClaim,
    selector_matches,
)
from controlplane.scheduler.devices.errors import (
    ERROR,
    UNSCHEDULABLE,
    UNSCHEDULABLE_AND_UNRESOLVABLE,
    DeviceShareError,
)
from controlplane.scheduler.devices.gpu_topology import ScopeRequest, allocate_from_topology
from controlplane.scheduler.devices.inventory import (
    DeviceResources,
    NodeDevices,
    Resources,
    fits,
    is_zero,
    minor_of,
    subtract_non_negative,
)
from controlplane.scheduler.devices.requests import PERCENTAGE_RESOURCE, SCHEDULED_DEVICE_TYPES
from controlplane.scheduler.devices.scoring import DeviceScorer
from koordinator.api.extension.device import (
    DEVICE_TYPE_GPU,
    DeviceAllocation,
    DeviceAllocationExtension,
    VirtualFunction,
)
from koordinator.api.extension.resources import GPU_MEMORY, GPU_MEMORY_RATIO
from koordinator.api.quantity import Format, Quantity

__all__ = [
    "ERR_INSUFFICIENT_GPU_DEVICES",
    "ERR_INSUFFICIENT_TOPOLOGY_SCOPED_GPU_DEVICES",
    "ERR_JOINT_ALLOCATE_VIOLATION",
    "ERR_MISSING_GPU_TOPOLOGY",
    "ERR_UNSUPPORTED_MULTI_SHARED_GPU",
    "allocate",
    "fill_gpu_memory",
    "insufficient",
    "score",
]

ERR_INSUFFICIENT_GPU_DEVICES = "Insufficient GPU Devices"
ERR_INSUFFICIENT_TOPOLOGY_SCOPED_GPU_DEVICES = "Insufficient Topology Scoped GPU Devices"
ERR_MISSING_GPU_TOPOLOGY = "node(s) missing GPU Device Topology Tree"
ERR_UNSUPPORTED_MULTI_SHARED_GPU = "node(s) Unsupported Multi-Shared GPU"
ERR_JOINT_ALLOCATE_VIOLATION = "node(s) Device Joint-Allocate rules violation"


def insufficient(device_type: str) -> str:
    """``Insufficient <type> devices``, the default pass's reason."""
    return f"Insufficient {device_type} devices"


@dataclass(frozen=True)
class _Picked:
    minor: int
    resources: Resources
    vf: VirtualFunction | None = None


@dataclass
class _View:
    """The node seen through the pod's selectors and NUMA affinity (upstream's filtered nodeDevice)."""

    total: dict[str, DeviceResources]
    free: dict[str, DeviceResources]
    used: dict[str, DeviceResources]


@dataclass
class _Context:
    node: NodeDevices
    claim: DeviceClaim
    view: _View
    per_instance: dict[str, Resources]
    counts: dict[str, int]
    scorer: DeviceScorer | None
    required: Mapping[str, AbstractSet[int]]
    preferred: Mapping[str, AbstractSet[int]]


# ---- step 1: counts and per-device requests ----------------------------------------------


def _default_count(node: NodeDevices, claim: DeviceClaim, device_type: str) -> tuple[Resources, int]:
    if not node.total.get(device_type):
        raise DeviceShareError(UNSCHEDULABLE_AND_UNRESOLVABLE, insufficient(device_type))
    request = claim.requests[device_type]
    name = PERCENTAGE_RESOURCE[device_type]
    value = request.resources.get(name, 0)
    if value > 100 and value % 100 == 0:
        return dict(request.per_device), request.count
    hint = claim.hint(device_type)
    if hint is None:
        return dict(request.resources), 1
    if hint.allocate_strategy == APPLY_FOR_ALL:
        count = len(node.total[device_type])
        selector = claim.device_selector(device_type)
        if selector is not None:
            count = sum(
                1 for info in node.infos.get(device_type, []) if selector_matches(selector, info.labels)
            )
        if count == 0:
            raise DeviceShareError(UNSCHEDULABLE_AND_UNRESOLVABLE, insufficient(device_type))
        return dict(request.resources), count
    if hint.allocate_strategy == REQUESTS_AS_COUNT:
        each = 100 if hint.exclusive_policy == DEVICE_LEVEL_EXCLUSIVE else 1
        return {name: each}, value
    return dict(request.resources), 1


def _prepare(
    node: NodeDevices, claim: DeviceClaim, reserve: bool
) -> tuple[dict[str, Resources], dict[str, int]]:
    per_instance: dict[str, Resources] = {}
    counts: dict[str, int] = {}
    primary = claim.primary_device_type
    for device_type in SCHEDULED_DEVICE_TYPES:
        request = claim.requests.get(device_type)
        if request is None or is_zero(request.resources):
            continue
        if primary and device_type != primary and node.secondary_device_well_planned and not reserve:
            continue
        if device_type == DEVICE_TYPE_GPU:
            if not node.total.get(DEVICE_TYPE_GPU):
                raise DeviceShareError(UNSCHEDULABLE_AND_UNRESOLVABLE, insufficient(DEVICE_TYPE_GPU))
            per_instance[device_type], counts[device_type] = dict(request.per_device), request.count
        else:
            per_instance[device_type], counts[device_type] = _default_count(node, claim, device_type)
    for device_type in per_instance:
        if claim.must_allocate_vf(device_type) and not node.has_virtual_functions(device_type):
            raise DeviceShareError(
                UNSCHEDULABLE_AND_UNRESOLVABLE, f"Insufficient {device_type} VirtualFunctions"
            )
    return per_instance, counts


# ---- step 2: candidate devices -----------------------------------------------------------


def _filter(
    node: NodeDevices, claim: DeviceClaim, device_types: Sequence[str], numa_nodes: AbstractSet[int] | None
) -> _View:
    view = _View({}, {}, {})
    for device_type in device_types:
        selector = claim.device_selector(device_type)
        minors: set[int] = set()
        for info in node.infos.get(device_type, []):
            if numa_nodes is not None:
                topology = info.topology
                if topology is None or (topology.node_id != -1 and topology.node_id not in numa_nodes):
                    continue
            if selector_matches(selector, info.labels):
                minors.add(minor_of(info))
        if not minors:
            continue
        free = node.free(device_type)
        if all(is_zero(resources) for resources in free.values()):
            continue
        # Upstream computes the PCIe-level exclusive filter here but drops its result
        # (``minors.Intersection`` returns a new set), so ``exclusivePolicy: PCIeLevel`` has no effect.
        original = node.total.get(device_type, {})
        total = {minor: dict(original.get(minor, {})) for minor in free if minor in minors}
        used = {
            minor: left
            for minor in total
            if not is_zero(left := subtract_non_negative(total[minor], free[minor]))
        }
        view.total[device_type] = total
        view.used[device_type] = used
        view.free[device_type] = {
            minor: subtract_non_negative(resources, used.get(minor, {})) for minor, resources in total.items()
        }
    return view


# ---- step 4: one device type -------------------------------------------------------------


def _allocate_vf(ctx: _Context, device_type: str, minor: int) -> VirtualFunction | None:
    info = ctx.node.info(device_type, minor)
    if info is None:
        return None
    taken = ctx.node.vf_allocated.get(device_type, {}).get(minor, set())
    vf_selector = ctx.claim.vf_selector(device_type)
    remaining = [
        vf
        for group in info.vf_groups
        if selector_matches(vf_selector, group.labels)
        for vf in group.vfs
        if vf.bus_id not in taken
    ]
    if not remaining:
        return None
    chosen = min(remaining, key=lambda vf: vf.bus_id)
    return VirtualFunction(minor=chosen.minor, bus_id=chosen.bus_id)


def _default_pass(
    ctx: _Context,
    device_type: str,
    request: Resources,
    count: int,
    max_count: int,
    preferred_pcies: AbstractSet[str],
) -> list[_Picked]:
    free = ctx.view.free.get(device_type, {})
    total = ctx.view.total.get(device_type, {})
    required = ctx.required.get(device_type, set())
    preferred = ctx.preferred.get(device_type, set())

    def rank(minor: int) -> tuple[bool, int, int]:
        if preferred:
            is_preferred = minor in preferred
        else:
            info = ctx.node.info(device_type, minor)
            is_preferred = (
                info is not None and info.topology is not None and info.topology.pcie_id in preferred_pcies
            )
        device_score = (
            ctx.scorer.score_device(request, total.get(minor, {}), free[minor]) if ctx.scorer else 0
        )
        return (not is_preferred, -device_score, minor)

    picked: list[_Picked] = []
    for minor in sorted(free, key=rank):
        if required and minor not in required:
            continue
        if is_zero(free[minor]) or not fits(request, free[minor]):
            continue
        vf = None
        if ctx.claim.must_allocate_vf(device_type):
            vf = _allocate_vf(ctx, device_type, minor)
            if vf is None:
                continue
        picked.append(_Picked(minor, dict(request), vf))
        if len(picked) == max_count:
            break
    if len(picked) < count:
        raise DeviceShareError(UNSCHEDULABLE, insufficient(device_type))
    return picked


def _gpu_pass(ctx: _Context, count: int, max_count: int) -> list[_Picked]:
    request = ctx.claim.requests.get(DEVICE_TYPE_GPU)
    if request is None:
        raise DeviceShareError(UNSCHEDULABLE, "No GPU Requirements")
    required_scope = ctx.claim.gpu_required_scope
    total = ctx.view.total.get(DEVICE_TYPE_GPU, {})
    root = ctx.node.gpu_topology
    failure: DeviceShareError
    if root is None:
        failure = DeviceShareError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_MISSING_GPU_TOPOLOGY)
    elif request.shared and request.count > 1:
        failure = DeviceShareError(UNSCHEDULABLE_AND_UNRESOLVABLE, ERR_UNSUPPORTED_MULTI_SHARED_GPU)
    else:
        used = {minor for minor in ctx.node.used.get(DEVICE_TYPE_GPU, {}) if minor not in total}
        used.update(ctx.view.used.get(DEVICE_TYPE_GPU, {}))
        minors = allocate_from_topology(
            root,
            ScopeRequest(
                request.count, request.per_device, request.shared, ctx.claim.gpu_required_scope_level
            ),
            free=ctx.view.free.get(DEVICE_TYPE_GPU, {}),
            allocatable={minor for minor, resources in total.items() if not is_zero(resources)},
            used=used,
            score_device=ctx.scorer.score_device if ctx.scorer else None,
        )
        if minors:
            return [_Picked(minor, dict(request.per_device)) for minor in minors]
        reason = (
            ERR_INSUFFICIENT_TOPOLOGY_SCOPED_GPU_DEVICES if required_scope else ERR_INSUFFICIENT_GPU_DEVICES
        )
        raise DeviceShareError(UNSCHEDULABLE, reason)
    if required_scope:
        raise failure
    return _default_pass(ctx, DEVICE_TYPE_GPU, dict(request.per_device), count, max_count, frozenset())


def _allocate_type(
    ctx: _Context, device_type: str, count: int, preferred_pcies: AbstractSet[str] = frozenset()
) -> list[_Picked]:
    max_count = max(count, len(preferred_pcies))
    count = max(count, 1)
    max_count = max(max_count, count)
    if device_type == DEVICE_TYPE_GPU:
        return _gpu_pass(ctx, count, max_count)
    return _default_pass(ctx, device_type, ctx.per_instance[device_type], count, max_count, preferred_pcies)


# ---- step 3: joint allocation ------------------------------------------------------------


def _pcies(node: NodeDevices, device_type: str, picked: Sequence[_Picked]) -> set[str]:
    result: set[str] = set()
    for item in picked:
        for info in node.infos.get(device_type, []):
            if minor_of(info) == item.minor and info.topology is not None:
                result.add(info.topology.pcie_id)
                break
    return result


def _joint(ctx: _Context) -> dict[str, list[_Picked]]:
    types = [t for t in ctx.claim.joint_types if t in ctx.per_instance]
    if not types:
        return {}
    primary, secondaries = types[0], types[1:]
    result = {primary: _allocate_type(ctx, primary, ctx.counts[primary])}
    same_pcie = ctx.claim.joint_scope == SAME_PCIE
    if secondaries:
        pcies = _pcies(ctx.node, primary, result[primary])
        for device_type in secondaries:
            count = ctx.counts[device_type]
            if same_pcie and count < len(pcies):
                count = len(pcies)
            picked = _allocate_type(ctx, device_type, count, pcies)
            if picked:
                result[device_type] = picked
        if same_pcie:
            for device_type in secondaries:
                if _pcies(ctx.node, device_type, result.get(device_type, [])) != pcies:
                    raise DeviceShareError(UNSCHEDULABLE, ERR_JOINT_ALLOCATE_VIOLATION)
    return result


# ---- step 5 and the public entry points ---------------------------------------------------


def _quantity(name: str, value: int) -> Quantity:
    return Quantity.from_int(value, Format.BINARY_SI if name == GPU_MEMORY else Format.DECIMAL_SI)


def _to_model(picked: _Picked) -> DeviceAllocation:
    extension = DeviceAllocationExtension(virtual_functions=[picked.vf]) if picked.vf is not None else None
    resources = {name: _quantity(name, value) for name, value in picked.resources.items()}
    return DeviceAllocation(minor=picked.minor, resources=resources, extension=extension)


def fill_gpu_memory(node: NodeDevices, allocations: Mapping[str, Sequence[DeviceAllocation]]) -> None:
    """Give every GPU allocation both gpu-memory and gpu-memory-ratio (``fillGPUTotalMem``).

    Bytes become ``int(bytes / total x 100)`` in floating point, as upstream computes it; a
    ratio becomes ``ratio x total / 100`` bytes. Raises :class:`DeviceShareError` for a minor
    without a healthy GPU.
    """
    totals = node.total.get(DEVICE_TYPE_GPU)
    if totals is None:
        return
    for item in allocations.get(DEVICE_TYPE_GPU, []):
        device = totals.get(item.minor)
        if not device or is_zero(device):
            raise DeviceShareError(ERROR, f"no healthy gpu device with minor {item.minor} of allocation")
        total_memory = device.get(GPU_MEMORY, 0)
        resources = dict(item.resources)
        if GPU_MEMORY in resources:
            ratio = (
                int(float(resources[GPU_MEMORY].value()) / float(total_memory) * 100) if total_memory else 0
            )
            resources[GPU_MEMORY_RATIO] = Quantity.from_int(ratio)
        else:
            ratio_quantity = resources.get(GPU_MEMORY_RATIO)
            ratio = ratio_quantity.value() if ratio_quantity is not None else 0
            resources[GPU_MEMORY] = Quantity.from_int(ratio * total_memory // 100, Format.BINARY_SI)
        item.resources = resources


def _context(
    node: NodeDevices,
    claim: DeviceClaim,
    scorer: DeviceScorer | None,
    numa_nodes: AbstractSet[int] | None,
    reserve: bool,
    required: Mapping[str, AbstractSet[int]] | None,
    preferred: Mapping[str, AbstractSet[int]] | None,
) -> _Context:
    per_instance, counts = _prepare(node, claim, reserve)
    view = _filter(node, claim, list(per_instance), numa_nodes)
    return _Context(node, claim, view, per_instance, counts, scorer, required or {}, preferred or {})


def allocate(
    node: NodeDevices,
    claim: DeviceClaim,
    *,
    scorer: DeviceScorer | None = None,
    numa_nodes: AbstractSet[int] | None = None,
    reserve: bool = True,
    required: Mapping[str, AbstractSet[int]] | None = None,
    preferred: Mapping[str, AbstractSet[int]] | None = None,
) -> dict[str, list[DeviceAllocation]]:
    """The devices for ``claim`` on ``node``: device type -> allocations, GPU memory filled in.

    ``scorer`` orders devices (upstream's Filter runs without one, Reserve with the
    configured one); ``numa_nodes`` is the pod's NUMA affinity on this node (``None``: any);
    ``reserve`` says whether this is the Reserve phase (secondary devices of a well-planned
    node are only allocated then); ``required`` / ``preferred`` restrict or favour minors per
    type. Raises :class:`DeviceShareError` with upstream's reasons. Books nothing: call
    :meth:`NodeDevices.add_pod` with the result.
    """
    ctx = _context(node, claim, scorer, numa_nodes, reserve, required, preferred)
    picked: dict[str, list[_Picked]] = {}
    if len(ctx.per_instance) > 1:
        picked = _joint(ctx)
    for device_type in ctx.per_instance:
        if device_type in picked:
            continue
        chosen = _allocate_type(ctx, device_type, ctx.counts[device_type])
        if chosen:
            picked[device_type] = chosen
    if not picked:
        raise DeviceShareError(UNSCHEDULABLE, *(insufficient(t) for t in ctx.per_instance))
    result = {
        device_type: [_to_model(item) for item in picked[device_type]]
        for device_type in SCHEDULED_DEVICE_TYPES
        if device_type in picked
    }
    fill_gpu_memory(node, result)
    return result


def score(
    node: NodeDevices,
    claim: DeviceClaim,
    scorer: DeviceScorer,
    *,
    numa_nodes: AbstractSet[int] | None = None,
    reserve: bool = False,
) -> int:
    """The node's DeviceShare score: per device type the scorer over the candidate devices, summed."""
    ctx = _context(node, claim, scorer, numa_nodes, reserve, None, None)
    result = 0
    for device_type, request in ctx.per_instance.items():
        if is_zero(request):
            continue
        totals = ctx.view.total.get(device_type)
        if totals:
            result += scorer.score_node(request, totals, ctx.view.free.get(device_type, {}))
    return result
