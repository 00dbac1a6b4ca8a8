"""The scheduler's compact view of storage: PersistentVolumes, PersistentVolumeClaims,
StorageClasses and CSINodes as small records (the informers' transforms; never the decoded
objects), what VolumeBinding assumed between its Reserve and the informers' next word, and
the CSI volumes the placed pods use on each node (NodeVolumeLimits).

* **Records** keep what the volume plug-ins read: a claim's class (the beta annotation
  before ``spec.storageClassName``, as upstream's ``GetPersistentVolumeClaimClass``), its
  request, access modes, volume mode, attributes class, selector, bound volume and
  ``selected-node`` annotation; a volume's class, capacity, claim reference, phase, labels,
  required node affinity and CSI source; a class's provisioner, binding mode and allowed
  topologies; a CSINode's attach limit per driver (``spec.drivers[].allocatable.count``).
* **Assumed records** (upstream's assume cache): VolumeBinding's Reserve puts a volume
  pre-bound to its claim, or a claim with its selected node, in front of the informer's
  record; the next informer record of that object (or Unreserve) drops it.
* **Attached volumes**: each claim a placed pod uses resolves, as upstream's
  ``CSILimits.getCSIDriverInfo``, to a CSI driver and a unique volume name (the bound PV's
  ``driver/volumeHandle``; an unbound claim, or one whose PV is missing, counts as its own
  volume of its class's provisioner). Per node and driver the distinct volumes are kept,
  and per driver the rows of the nodes with an attach limit are grouped by their free slots
  (limit minus attached), so NodeVolumeLimits finds the rows that cannot take ``n`` more
  volumes with a few big-integer ORs. Resolutions are redone when a claim, its volume or its
  class changes. In-tree volumes (and their CSI migration) are not counted.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from controlplane.scheduler.podinfo import PodInfo, PodVolume, Term, node_selector_terms
from koordinator.api.quantity import Quantity, QuantityError

#: upstream's annotations (``k8s.io/component-helpers/storage/volume``)
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
NOT_SUPPORTED_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
IMMEDIATE = "Immediate"
FILESYSTEM = "Filesystem"
#: PersistentVolume phases and the lost claim phase
VOLUME_AVAILABLE = "Available"
CLAIM_LOST = "Lost"


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class PVRecord:
    name: str
    resource_version: str
    #: the beta annotation, else ``spec.storageClassName`` ("" for none)
    storage_class: str
    #: ``spec.capacity.storage`` in nano-units (exact), 0 when absent
    capacity: int
    access_modes: frozenset[str]
    volume_mode: str
    attributes_class: str
    claim_ref: ClaimRef | None
    phase: str
    terminating: bool
    labels: Mapping[str, str]
    #: ``spec.nodeAffinity.required`` terms (None: no required node affinity)
    node_affinity: tuple[Term, ...] | None
    #: ``spec.csi`` driver and volume handle ("" for an in-tree volume)
    csi_driver: str = ""
    csi_handle: str = ""
    #: carries ``pv.kubernetes.io/bound-by-controller``
    bound_by_controller: bool = False

    def bound_to(self, claim: PVCRecord) -> bool:
        """Upstream's ``IsVolumeBoundToClaim``: the claim reference names the claim (and
        its UID, when the reference has one)."""
        ref = self.claim_ref
        if ref is None or ref.name != claim.name or ref.namespace != claim.namespace:
            return False
        return not ref.uid or ref.uid == claim.uid


@dataclass(frozen=True, slots=True)
class PVCRecord:
    namespace: str
    name: str
    uid: str
    resource_version: str
    storage_class: str
    volume_name: str
    #: carries ``pv.kubernetes.io/bind-completed`` (the PV controller finished binding it)
    bind_completed: bool
    #: the ``volume.kubernetes.io/selected-node`` annotation (None: absent)
    selected_node: str | None
    #: ``spec.resources.requests.storage`` in nano-units, 0 when absent
    request: int
    access_modes: frozenset[str]
    volume_mode: str
    attributes_class: str
    #: ``spec.selector`` (a ``metav1.LabelSelector``; None: none)
    selector: Mapping[str, Any] | None
    lost: bool
    terminating: bool
    #: the UID of the owner reference with ``controller: true`` ("" for none)
    controller_uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def fully_bound(self) -> bool:
        """Upstream's ``isPVCFullyBound``: a volume name and the bind-completed annotation."""
        return bool(self.volume_name) and self.bind_completed


@dataclass(frozen=True, slots=True)
class StorageClassRecord:
    name: str
    provisioner: str
    binding_mode: str
    #: ``allowedTopologies``: terms of (label key, values) requirements (empty: anywhere)
    allowed_topologies: tuple[tuple[tuple[str, tuple[str, ...]], ...], ...] = ()


@dataclass(frozen=True, slots=True)
class CSINodeRecord:
    name: str
    #: driver -> ``allocatable.count`` (drivers without a count are unlimited)
    limits: Mapping[str, int] = field(default_factory=dict)


def _nanos(value: Any) -> int:
    try:
        return Quantity.from_json(value).nanos
    except QuantityError:
        return 0


def _modes(raw: Any) -> frozenset[str]:
    return frozenset(str(m) for m in raw or () if isinstance(m, str))


def _class(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    annotations = meta.get("annotations") or {}
    if BETA_STORAGE_CLASS in annotations:
        return str(annotations[BETA_STORAGE_CLASS])
    return str(spec.get("storageClassName") or "")


def pv_record(obj: Mapping[str, Any]) -> PVRecord:
    """The record of a PersistentVolume object."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    ref = spec.get("claimRef")
    csi = spec.get("csi") or {}
    required = (spec.get("nodeAffinity") or {}).get("required")
    return PVRecord(
        name=str(meta.get("name") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        storage_class=_class(meta, spec),
        capacity=_nanos((spec.get("capacity") or {}).get("storage")),
        access_modes=_modes(spec.get("accessModes")),
        volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
        attributes_class=str(spec.get("volumeAttributesClassName") or ""),
        claim_ref=(
            ClaimRef(str(ref.get("namespace") or ""), str(ref.get("name") or ""), str(ref.get("uid") or ""))
            if isinstance(ref, Mapping)
            else None
        ),
        phase=str((obj.get("status") or {}).get("phase") or ""),
        terminating=bool(meta.get("deletionTimestamp")),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        node_affinity=node_selector_terms(required),
        csi_driver=str(csi.get("driver") or "") if isinstance(csi, Mapping) else "",
        csi_handle=str(csi.get("volumeHandle") or "") if isinstance(csi, Mapping) else "",
        bound_by_controller=ANN_BOUND_BY_CONTROLLER in (meta.get("annotations") or {}),
    )


def pvc_record(obj: Mapping[str, Any]) -> PVCRecord:
    """The record of a PersistentVolumeClaim object."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    annotations = meta.get("annotations") or {}
    selector = spec.get("selector")
    controller = next(
        (
            str(ref.get("uid") or "")
            for ref in meta.get("ownerReferences") or ()
            if isinstance(ref, Mapping) and ref.get("controller") is True
        ),
        "",
    )
    return PVCRecord(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        storage_class=_class(meta, spec),
        volume_name=str(spec.get("volumeName") or ""),
        bind_completed=ANN_BIND_COMPLETED in annotations,
        selected_node=str(annotations[ANN_SELECTED_NODE]) if ANN_SELECTED_NODE in annotations else None,
        request=_nanos(((spec.get("resources") or {}).get("requests") or {}).get("storage")),
        access_modes=_modes(spec.get("accessModes")),
        volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
        attributes_class=str(spec.get("volumeAttributesClassName") or ""),
        selector=selector if isinstance(selector, Mapping) else None,
        lost=(obj.get("status") or {}).get("phase") == CLAIM_LOST,
        terminating=bool(meta.get("deletionTimestamp")),
        controller_uid=controller,
    )


def storage_class_record(obj: Mapping[str, Any]) -> StorageClassRecord:
    """The record of a StorageClass object (``volumeBindingMode`` defaults to Immediate, as
    the apiserver defaults it)."""
    terms = []
    for term in obj.get("allowedTopologies") or ():
        if not isinstance(term, Mapping):
            continue
        terms.append(
            tuple(
                (str(req.get("key") or ""), tuple(str(v) for v in req.get("values") or ()))
                for req in term.get("matchLabelExpressions") or ()
                if isinstance(req, Mapping)
            )
        )
    return StorageClassRecord(
        name=str((obj.get("metadata") or {}).get("name") or ""),
        provisioner=str(obj.get("provisioner") or ""),
        binding_mode=str(obj.get("volumeBindingMode") or IMMEDIATE),
        allowed_topologies=tuple(terms),
    )


def csi_node_record(obj: Mapping[str, Any]) -> CSINodeRecord:
    """The record of a CSINode object: the drivers that report an attach limit."""
    limits: dict[str, int] = {}
    for driver in (obj.get("spec") or {}).get("drivers") or ():
        if not isinstance(driver, Mapping):
            continue
        count = (driver.get("allocatable") or {}).get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            limits[str(driver.get("name") or "")] = count
    return CSINodeRecord(str((obj.get("metadata") or {}).get("name") or ""), limits)


#: a claim's CSI volume for attach limits: (driver, unique volume name)
Attachment = tuple[str, str]


class ClaimError(Exception):
    """A new pod's claim cannot be counted: upstream's Filter error text."""


class Volumes:
    def __init__(self) -> None:
        self.pvs: dict[str, PVRecord] = {}
        #: namespace/name -> record
        self.pvcs: dict[str, PVCRecord] = {}
        self.classes: dict[str, StorageClassRecord] = {}
        self.csi_nodes: dict[str, CSINodeRecord] = {}
        #: bumped when a node arrives, changes or goes (caches of rows per volume)
        self.node_generation = 0
        #: class -> the volumes of that class (an ordered set), upstream's ``ListPVs``
        self._by_class: dict[str, dict[str, None]] = {}
        #: what VolumeBinding's Reserve put in front of the informer's records
        self._assumed_pvs: dict[str, PVRecord] = {}
        self._assumed_pvcs: dict[str, PVCRecord] = {}
        #: volume name -> the claims naming it in ``spec.volumeName``
        self._claims_of_pv: dict[str, set[str]] = {}
        #: node -> row, for the nodes the cluster knows
        self._rows: dict[str, int] = {}
        #: claim key -> node -> how many placed pods there use it
        self._users: dict[str, dict[str, int]] = {}
        #: claim key -> what it counts as (None: not a CSI volume)
        self._resolved: dict[str, Attachment | None] = {}
        #: node -> driver -> unique volume -> how many used claims resolve to it
        self._attached: dict[str, dict[str, dict[str, int]]] = {}
        #: unique volume -> the nodes it is attached to
        self._nodes_of: dict[str, set[str]] = {}
        #: driver -> free slots -> the rows of nodes with a limit for it (bit sets)
        self._free: dict[str, dict[int, int]] = {}
        #: node -> driver -> (row, free slots) as indexed in ``_free``
        self._indexed: dict[str, dict[str, tuple[int, int]]] = {}
        #: upstream's random prefix of the volume an unbound claim counts as
        self._unbound_prefix = secrets.token_hex(16)

    # --- informer side -------------------------------------------------------------------

    def set_pv(self, pv: PVRecord) -> None:
        old = self.pvs.get(pv.name)
        if old is not None and old.storage_class != pv.storage_class:
            self._unindex_class(old)
        self.pvs[pv.name] = pv
        self._by_class.setdefault(pv.storage_class, {})[pv.name] = None
        self._assumed_pvs.pop(pv.name, None)
        self._reresolve(self._claims_of_pv.get(pv.name, ()))

    def delete_pv(self, name: str) -> None:
        old = self.pvs.pop(name, None)
        if old is not None:
            self._unindex_class(old)
        self._assumed_pvs.pop(name, None)
        self._reresolve(self._claims_of_pv.get(name, ()))

    def _unindex_class(self, pv: PVRecord) -> None:
        names = self._by_class.get(pv.storage_class)
        if names is not None:
            names.pop(pv.name, None)
            if not names:
                del self._by_class[pv.storage_class]

    def set_pvc(self, pvc: PVCRecord) -> None:
        key = pvc.key
        old = self.pvcs.get(key)
        if old is not None and old.volume_name != pvc.volume_name:
            self._unindex_claim(old)
        self.pvcs[key] = pvc
        if pvc.volume_name:
            self._claims_of_pv.setdefault(pvc.volume_name, set()).add(key)
        self._assumed_pvcs.pop(key, None)
        self._reresolve((key,))

    def delete_pvc(self, key: str) -> None:
        old = self.pvcs.pop(key, None)
        if old is not None:
            self._unindex_claim(old)
        self._assumed_pvcs.pop(key, None)
        self._reresolve((key,))

    def _unindex_claim(self, pvc: PVCRecord) -> None:
        keys = self._claims_of_pv.get(pvc.volume_name)
        if keys is not None:
            keys.discard(pvc.key)
            if not keys:
                del self._claims_of_pv[pvc.volume_name]

    def set_class(self, cls: StorageClassRecord) -> None:
        self.classes[cls.name] = cls
        self._reresolve_class(cls.name)

    def delete_class(self, name: str) -> None:
        self.classes.pop(name, None)
        self._reresolve_class(name)

    def _reresolve_class(self, name: str) -> None:
        self._reresolve([k for k in self._users if (pvc := self.pvcs.get(k)) and pvc.storage_class == name])

    def set_csi_node(self, csi_node: CSINodeRecord) -> None:
        self.csi_nodes[csi_node.name] = csi_node
        self._refresh(csi_node.name)

    def delete_csi_node(self, name: str) -> None:
        self.csi_nodes.pop(name, None)
        self._refresh(name)

    def add_object(self, obj: Mapping[str, Any]) -> bool:
        """Keep a PersistentVolume, claim, StorageClass or CSINode object (``simulate``'s
        input); False for any other kind."""
        kind = obj.get("kind")
        if kind == "PersistentVolume":
            self.set_pv(pv_record(obj))
        elif kind == "PersistentVolumeClaim":
            self.set_pvc(pvc_record(obj))
        elif kind == "StorageClass":
            self.set_class(storage_class_record(obj))
        elif kind == "CSINode":
            self.set_csi_node(csi_node_record(obj))
        else:
            return False
        return True

    # --- what the plug-ins read ----------------------------------------------------------

    def pv(self, name: str) -> PVRecord | None:
        """A volume, as assumed when VolumeBinding assumed it (upstream's ``GetPV``)."""
        return self._assumed_pvs.get(name) or self.pvs.get(name)

    def pvc(self, key: str) -> PVCRecord | None:
        """A claim (namespace/name), as assumed when VolumeBinding assumed it."""
        return self._assumed_pvcs.get(key) or self.pvcs.get(key)

    def pvs_of_class(self, name: str) -> list[PVRecord]:
        """The volumes of a class, assumed ones as assumed (upstream's ``ListPVs``)."""
        out = []
        for pv_name in self._by_class.get(name, ()):
            pv = self.pv(pv_name)
            if pv is not None:
                out.append(pv)
        return out

    # --- VolumeBinding's assumptions -----------------------------------------------------

    def assume_pv(self, pv: PVRecord) -> None:
        self._assumed_pvs[pv.name] = pv

    def assume_pvc(self, pvc: PVCRecord) -> None:
        self._assumed_pvcs[pvc.key] = pvc

    def restore_pv(self, name: str) -> None:
        self._assumed_pvs.pop(name, None)

    def restore_pvc(self, key: str) -> None:
        self._assumed_pvcs.pop(key, None)

    # --- nodes and placed pods (the cluster calls these) ---------------------------------

    def node_set(self, name: str, row: int) -> None:
        self._rows[name] = row
        self.node_generation += 1
        self._refresh(name)

    def node_removed(self, name: str) -> None:
        self._rows.pop(name, None)
        self.node_generation += 1
        self._refresh(name)

    def pod_placed(self, pod: PodInfo, node: str) -> None:
        self._use(pod, node, 1)

    def pod_unplaced(self, pod: PodInfo, node: str) -> None:
        self._use(pod, node, -1)

    def _use(self, pod: PodInfo, node: str, sign: int) -> None:
        if not pod.volumes:
            return
        changed = False
        for key in {f"{pod.namespace}/{v.claim}" for v in pod.volumes}:
            users = self._users.setdefault(key, {})
            count = users.get(node, 0) + sign
            if count > 0:
                users[node] = count
                if count == 1:
                    self._attach(node, self._resolution(key), 1)
                    changed = True
                continue
            if users.pop(node, None) is not None:
                self._attach(node, self._resolved.get(key), -1)
                changed = True
            if not users:
                del self._users[key]
                self._resolved.pop(key, None)
        if changed:
            self._refresh(node)

    # --- attach limits -------------------------------------------------------------------

    def resolve(self, pvc: PVCRecord) -> Attachment | None:
        """Upstream's ``getCSIDriverInfo``: the bound PV's CSI driver and volume, else (no
        volume name, or the PV is missing) the class's provisioner and a volume of the
        claim's own; None when it is no CSI volume (in-tree, no class, unknown class)."""
        pv = self.pvs.get(pvc.volume_name) if pvc.volume_name else None
        if pv is not None:
            if not pv.csi_driver or not pv.csi_handle:
                return None
            return pv.csi_driver, f"{pv.csi_driver}/{pv.csi_handle}"
        cls = self.classes.get(pvc.storage_class) if pvc.storage_class else None
        if cls is None or not cls.provisioner:
            return None
        return cls.provisioner, f"{cls.provisioner}/{self._unbound_prefix}-{pvc.namespace}/{pvc.name}"

    def new_attachments(self, pod: PodInfo) -> dict[str, str]:
        """The pod's CSI volumes, unique volume -> driver (upstream's
        ``filterAttachableVolumes`` for a new pod); ClaimError when a claim is missing or
        an ephemeral one is not the pod's."""
        out: dict[str, str] = {}
        for volume in pod.volumes:
            pvc = self.claim_of(pod, volume)
            found = self.resolve(pvc)
            if found is not None:
                out[found[1]] = found[0]
        return out

    def claim_of(self, pod: PodInfo, volume: PodVolume) -> PVCRecord:
        """The informer's claim of a pod's volume; ClaimError as upstream's lookup says it."""
        pvc = self.pvcs.get(f"{pod.namespace}/{volume.claim}")
        if pvc is None:
            raise ClaimError(
                f"looking up PVC {pod.namespace}/{volume.claim}: "
                f'persistentvolumeclaim "{volume.claim}" not found'
            )
        if volume.ephemeral and pvc.controller_uid != pod.uid:
            raise ClaimError(not_for_pod(pvc, pod))
        return pvc

    def short_rows(self, driver: str, need: int) -> int:
        """Rows of nodes whose limit for ``driver`` leaves fewer than ``need`` free slots."""
        out = 0
        for free, rows in self._free.get(driver, {}).items():
            if free < need:
                out |= rows
        return out

    def limit(self, node: str, driver: str) -> int | None:
        csi_node = self.csi_nodes.get(node)
        return None if csi_node is None else csi_node.limits.get(driver)

    def attached(self, node: str, driver: str) -> Mapping[str, int]:
        """The distinct volumes of ``driver`` the placed pods use on ``node``."""
        return self._attached.get(node, {}).get(driver, {})

    def nodes_with(self, unique: str) -> set[str]:
        """The nodes a placed pod uses the volume on."""
        return self._nodes_of.get(unique, set())

    def _resolution(self, key: str) -> Attachment | None:
        if key not in self._resolved:
            pvc = self.pvcs.get(key)
            self._resolved[key] = None if pvc is None else self.resolve(pvc)
        return self._resolved[key]

    def _attach(self, node: str, found: Attachment | None, sign: int) -> None:
        if found is None:
            return
        driver, unique = found
        volumes = self._attached.setdefault(node, {}).setdefault(driver, {})
        count = volumes.get(unique, 0) + sign
        if count > 0:
            volumes[unique] = count
            self._nodes_of.setdefault(unique, set()).add(node)
            return
        volumes.pop(unique, None)
        nodes = self._nodes_of.get(unique)
        if nodes is not None:
            nodes.discard(node)
            if not nodes:
                del self._nodes_of[unique]
        if not volumes:
            del self._attached[node][driver]
            if not self._attached[node]:
                del self._attached[node]

    def _reresolve(self, keys: Iterable[str]) -> None:
        for key in list(keys):
            users = self._users.get(key)
            if not users:
                continue
            old = self._resolved.pop(key, None)
            new = self._resolution(key)
            if new == old:
                continue
            for node in users:
                self._attach(node, old, -1)
                self._attach(node, new, 1)
                self._refresh(node)

    def _refresh(self, node: str) -> None:
        """Re-index the node's free slots per driver after its limits, row or volumes changed."""
        for driver, (old_row, free) in self._indexed.pop(node, {}).items():
            buckets = self._free[driver]
            rows = buckets[free] & ~(1 << old_row)
            if rows:
                buckets[free] = rows
            else:
                del buckets[free]
                if not buckets:
                    del self._free[driver]
        row = self._rows.get(node)
        csi_node = self.csi_nodes.get(node)
        if row is None or csi_node is None or not csi_node.limits:
            return
        attached = self._attached.get(node, {})
        indexed = self._indexed[node] = {}
        for driver, limit in csi_node.limits.items():
            free = limit - len(attached.get(driver, ()))
            buckets = self._free.setdefault(driver, {})
            buckets[free] = buckets.get(free, 0) | (1 << row)
            indexed[driver] = (row, free)


def not_for_pod(pvc: PVCRecord, pod: PodInfo) -> str:
    """Upstream's ``ephemeral.VolumeIsForPod`` error."""
    return (
        f"PVC {pvc.namespace}/{pvc.name} was not created for pod "
        f"{pod.namespace}/{pod.name} (pod is not owner)"
    )


def bound_to_claim(pv: PVRecord, pvc: PVCRecord) -> PVRecord:
    """Upstream's ``GetBindVolumeToClaim``: the volume pre-bound to the claim (its claim
    reference set, and marked bound by the controller unless it was bound to it already)."""
    out = pv
    if pv.claim_ref is None or pv.claim_ref != ClaimRef(pvc.namespace, pvc.name, pvc.uid):
        out = replace(out, claim_ref=ClaimRef(pvc.namespace, pvc.name, pvc.uid))
    if not pv.bound_to(pvc) and not pv.bound_by_controller:
        out = replace(out, bound_by_controller=True)
    return out
