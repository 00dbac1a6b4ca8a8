"""VolumeBinding (filter, reserve, preBind): a pod's PersistentVolumeClaims must be bound to
volumes the node can reach, or bindable on it: to an available volume that matches, or by
provisioning one there.

Upstream's rules (``plugins/volumebinding``, v1.34, and its ``volumeBinder``):

* **PreFilter.** Each claim of the pod must exist (``persistentvolumeclaim "<name>" not
  found``; for a generic ephemeral volume ``waiting for ephemeral volume controller to
  create the persistentvolumeclaim "<name>"``), not be Lost or being deleted, and an
  ephemeral one must be controlled by the pod. A claim is *bound* when it names its volume
  and carries ``pv.kubernetes.io/bind-completed``; an unbound one whose class binds
  ``WaitForFirstConsumer`` and that names no volume waits for this scheduler; any other
  unbound one ("immediate", pre-bound included) makes the pod unschedulable everywhere:
  ``pod has unbound immediate PersistentVolumeClaims``. Bound volumes whose node affinity
  names hosts (``kubernetes.io/hostname In``) narrow the nodes to those hosts; the others
  fail with ``node(s) didn't satisfy plugin(s) [VolumeBinding]``.
* **Filter.** A bound claim's volume must match the node by its required node affinity
  (``node(s) had volume node affinity conflict``; a missing volume: ``node(s) unavailable
  due to one or more pvc(s) bound to non-existent pv(s)``). The waiting claims: one with a
  ``volume.kubernetes.io/selected-node`` fits only that node; the others, smallest request
  first, each take the smallest available volume of their class that fits (capacity,
  volume mode, attributes class, selector, access modes, node affinity; a volume pre-bound
  to the claim wins outright) and that no earlier claim took on that node; a claim left
  over must be provisionable there (its class has a provisioner, its allowed topologies
  match the node); else ``node(s) didn't find available persistent volumes to bind``.
* **Reserve** assumes the choice for the node: each matched volume pre-bound to its claim
  (``spec.claimRef``, ``pv.kubernetes.io/bound-by-controller``), each claim to provision
  annotated with the selected node, so the next pods see them; **Unreserve** drops that.
* **PreBind** writes them: the volumes' claim references, then the claims' selected-node
  annotation, each conditional on the resourceVersion it was assumed from (a conflict is a
  KubeError and the pod is tried again). The PV controller binds the claims from there.

Over the rows: a volume's node affinity is a bit set from the cluster's label index
(cached per volume until nodes change), the greedy volume choice is one sweep per claim
over its candidates in size order, each taking the rows where it is the smallest left, and
provisioning is a bit set per class, so the filter never loops over nodes in Python.

Not built: the score (off by default upstream; StorageCapacityScoring), storage capacity
(CSIStorageCapacity) checks, in-tree volume CSI migration, and upstream's wait in PreBind
until the PV controller finished binding (the pod is bound once the writes succeed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.cluster import Cluster, NodeInfo
from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.plugins.interface import PreFilterResult, bits_of, passing_mask
from controlplane.scheduler.plugins.nodeaffinity import term_matches, terms_rows
from controlplane.scheduler.podinfo import PodInfo, Requirement, Term
from controlplane.scheduler.volumes import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    NOT_SUPPORTED_PROVISIONER,
    VOLUME_AVAILABLE,
    WAIT_FOR_FIRST_CONSUMER,
    PVCRecord,
    PVRecord,
    StorageClassRecord,
    Volumes,
    bound_to_claim,
    not_for_pod,
)
from koordinator.api.selectors import SelectorError, label_selector_matches
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import KubeError

NAME = "VolumeBinding"
REASON_BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
REASON_NODE_CONFLICT = "node(s) had volume node affinity conflict"
REASON_PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
#: nodes outside the hosts the bound local volumes name (upstream's PreFilterResult)
NOT_ELIGIBLE = f"node(s) didn't satisfy plugin(s) [{NAME}]"
#: no node is left by the bound local volumes
NO_ELIGIBLE = f"node(s) didn't satisfy plugin {NAME}"
HOSTNAME = "kubernetes.io/hostname"
#: upstream's order of a node's reasons
_ORDER = (REASON_NODE_CONFLICT, REASON_BIND_CONFLICT, REASON_PV_NOT_EXIST)


@dataclass
class PodClaims:
    """A pod's claims as upstream's ``GetPodVolumeClaims`` sorts them."""

    bound: list[PVCRecord]
    #: unbound, WaitForFirstConsumer, naming no volume: this scheduler binds them
    delayed: list[PVCRecord]
    #: any other unbound claim (the PV controller should have bound it)
    immediate: list[PVCRecord]


@dataclass(frozen=True)
class _Binding:
    pv: PVRecord
    pvc: PVCRecord
    #: the assumed volume gained the bound-by-controller annotation
    marks_bound_by_controller: bool


@dataclass
class _Reserved:
    node: str
    bindings: list[_Binding]
    provisions: list[PVCRecord]


def local_volume_node_names(pv: PVRecord) -> set[str]:
    """Upstream's ``GetLocalPersistentVolumeNodeNames``: per term the hosts all its
    ``kubernetes.io/hostname In`` requirements allow, over the terms."""
    out: set[str] = set()
    for term in pv.node_affinity or ():
        nodes: set[str] | None = None
        for req in term.expressions:
            if req.key == HOSTNAME and req.operator == "In":
                nodes = set(req.values) if nodes is None else nodes & set(req.values)
        out |= nodes or set()
    return out


def _field_matches_nameless(req: Requirement) -> bool:
    """A ``matchFields`` requirement on a node that has labels only (upstream checks volume
    node affinity against a Node with no name)."""
    if req.key != "metadata.name" or req.operator not in ("In", "NotIn"):
        return False
    return ("" in req.values) == (req.operator == "In")


def _sorted_by_request(claims: list[PVCRecord]) -> list[PVCRecord]:
    return sorted(claims, key=lambda pvc: pvc.request)


def _candidates(volumes: Volumes, pvc: PVCRecord) -> tuple[PVRecord | None, list[PVRecord]]:
    """The volume pre-bound to the claim (it wins outright), else the volumes the claim may
    take (node affinity apart), smallest first: upstream's ``FindMatchingVolume`` checks."""
    fits = []
    for pv in volumes.pvs_of_class(pvc.storage_class):
        if pv.claim_ref is not None and not pv.bound_to(pvc):
            continue
        if pv.capacity < pvc.request or pv.volume_mode != pvc.volume_mode:
            continue
        if pv.attributes_class != pvc.attributes_class or pv.terminating:
            continue
        if pv.bound_to(pvc):
            return pv, []
        if pv.phase != VOLUME_AVAILABLE or pv.storage_class != pvc.storage_class:
            continue
        if pvc.selector is not None:
            try:
                if not label_selector_matches(pvc.selector, pv.labels):
                    continue
            except SelectorError:
                continue
        if not pvc.access_modes <= pv.access_modes:
            continue
        fits.append(pv)
    fits.sort(key=lambda pv: pv.capacity)  # stable: the first of equals, as upstream
    return None, fits


def _provisioner(cls: StorageClassRecord | None) -> bool:
    return cls is not None and cls.provisioner not in ("", NOT_SUPPORTED_PROVISIONER)


def _topology_matches(cls: StorageClassRecord, labels: Any) -> bool:
    """Upstream's ``MatchTopologySelectorTerms``: no terms match every node; an empty term
    or a requirement without values matches none."""
    if not cls.allowed_topologies:
        return True
    return any(
        term and all(values and labels.get(key) in values for key, values in term)
        for term in cls.allowed_topologies
    )


@dataclass(frozen=True)
class VolumeBindingArgs:
    """VolumeBindingArgs, validated as upstream. ``bindTimeoutSeconds`` bounds upstream's
    wait in PreBind for the PV controller, which is not built here (PreBind returns once
    its writes succeed); ``shape`` belongs to the score behind StorageCapacityScoring,
    also not built. Both are accepted so that upstream's configurations load."""

    bind_timeout_seconds: int = 600
    shape: tuple[tuple[int, int], ...] = ()


def volume_binding_args(raw: Mapping[str, Any] | None, path: str = NAME) -> VolumeBindingArgs:
    raw = raw or {}
    unknown = sorted(set(raw) - {"bindTimeoutSeconds", "shape", "apiVersion", "kind"})
    if unknown:
        raise ArgsError(f"{path}: unknown field(s) {unknown}")
    timeout = raw.get("bindTimeoutSeconds", 600)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
        raise ArgsError(f"{path}.bindTimeoutSeconds: Invalid value: {timeout!r}: must not be negative")
    shape: list[tuple[int, int]] = []
    for i, point in enumerate(raw.get("shape") or ()):
        where = f"{path}.shape[{i}]"
        utilization = point.get("utilization") if isinstance(point, Mapping) else None
        score = point.get("score") if isinstance(point, Mapping) else None
        if not isinstance(utilization, int) or not 0 <= utilization <= 100:
            raise ArgsError(
                f"{where}.utilization: Invalid value: {utilization!r}: not in valid range [0-100]"
            )
        if not isinstance(score, int) or not 0 <= score <= 10:
            raise ArgsError(f"{where}.score: Invalid value: {score!r}: not in valid range [0-10]")
        if shape and utilization <= shape[-1][0]:
            raise ArgsError(f"{where}.utilization: Invalid value: {utilization}: values are not sorted")
        shape.append((utilization, score))
    return VolumeBindingArgs(timeout, tuple(shape))


class VolumeBinding:
    NAME = NAME
    PREEMPTION_HELPS = False

    def __init__(self, args: VolumeBindingArgs | None = None) -> None:
        self.args = args or VolumeBindingArgs()
        #: the cluster the framework filters on (Reserve and PreBind use it)
        self._cluster: Cluster | None = None
        #: volume name -> (node generation, record, its affinity rows)
        self._rows: dict[str, tuple[int, PVRecord, int]] = {}
        #: pod key -> what Reserve assumed for it, until PreBind or Unreserve
        self._reserved: dict[str, _Reserved] = {}

    # --- PreFilter -----------------------------------------------------------------------

    def claims(self, pod: PodInfo, volumes: Volumes) -> PodClaims | str:
        """The pod's claims sorted, or why the pod fits no node (upstream's PreFilter
        checks, in volume order)."""
        for volume in pod.volumes:
            pvc = volumes.pvcs.get(f"{pod.namespace}/{volume.claim}")
            if pvc is None:
                if volume.ephemeral:
                    return (
                        "waiting for ephemeral volume controller to create the "
                        f'persistentvolumeclaim "{volume.claim}"'
                    )
                return f'persistentvolumeclaim "{volume.claim}" not found'
            if pvc.lost:
                return (
                    f'persistentvolumeclaim "{pvc.name}" bound to non-existent '
                    f'persistentvolume "{pvc.volume_name}"'
                )
            if pvc.terminating:
                return f'persistentvolumeclaim "{pvc.name}" is being deleted'
            if volume.ephemeral and pvc.controller_uid != pod.uid:
                return not_for_pod(pvc, pod)
        out = PodClaims([], [], [])
        delayed: set[str] = set()
        for volume in pod.volumes:
            pvc = volumes.pvc(f"{pod.namespace}/{volume.claim}")
            if pvc is None:  # only an assumed claim can shadow the informer's
                return f'persistentvolumeclaim "{volume.claim}" not found'
            if pvc.fully_bound:
                out.bound.append(pvc)
                continue
            cls = volumes.classes.get(pvc.storage_class) if pvc.storage_class else None
            if cls is not None and cls.binding_mode == WAIT_FOR_FIRST_CONSUMER and not pvc.volume_name:
                if pvc.key not in delayed:  # a claim used twice binds once
                    delayed.add(pvc.key)
                    out.delayed.append(pvc)
            else:
                out.immediate.append(pvc)
        return out

    def pre_filter(self, pod: PodInfo, cluster: Cluster) -> PreFilterResult | None:
        """Upstream's PreFilter: None when the pod has no claims (the plug-in skips it)."""
        found = self._pre_filter(pod, cluster)
        return None if found is None else found[0]

    def _pre_filter(self, pod: PodInfo, cluster: Cluster) -> tuple[PreFilterResult, PodClaims] | None:
        self._cluster = cluster
        if not pod.volumes:
            return None
        claims = self.claims(pod, cluster.volumes)
        if isinstance(claims, str):
            return PreFilterResult(message=claims), PodClaims([], [], [])
        if claims.immediate:
            return PreFilterResult(message=UNBOUND_IMMEDIATE), claims
        eligible: set[str] | None = None
        for pvc in claims.bound:
            pv = cluster.volumes.pv(pvc.volume_name)
            if pv is None:
                return PreFilterResult(), claims  # upstream gives up narrowing on a lookup error
            names = local_volume_node_names(pv)
            if names:
                eligible = names if eligible is None else eligible & names
        if eligible is None:
            return PreFilterResult(), claims
        if not eligible:
            return PreFilterResult(message=NO_ELIGIBLE), claims
        rows = 0
        for name in eligible:
            info = cluster.nodes.get(name)
            if info is not None:
                rows |= 1 << info.row
        return PreFilterResult(rows=rows), claims

    # --- Filter over the rows ------------------------------------------------------------

    def _affinity_rows(self, cluster: Cluster, pv: PVRecord, everything: int) -> int:
        if pv.node_affinity is None:
            return everything
        generation = cluster.volumes.node_generation
        cached = self._rows.get(pv.name)
        if cached is not None and cached[0] == generation and cached[1] is pv:
            return cached[2]
        if cached is not None and cached[0] != generation:
            self._rows.clear()
        rows = 0
        for term in pv.node_affinity:
            if not term.expressions and not term.fields:
                continue
            if not all(_field_matches_nameless(r) for r in term.fields):
                continue
            rows |= (
                terms_rows(cluster, (Term(term.expressions),), everything) if term.expressions else everything
            )
        self._rows[pv.name] = (generation, pv, rows)
        return rows

    def _provisionable_rows(self, cluster: Cluster, pvc: PVCRecord, everything: int) -> int:
        cls = cluster.volumes.classes.get(pvc.storage_class)
        if cls is None or not _provisioner(cls):
            return 0
        if not cls.allowed_topologies:
            return everything
        rows = 0
        for term in cls.allowed_topologies:
            if not term or not all(values for _, values in term):
                continue
            term_rows = everything
            for key, values in term:
                allowed = 0
                for value in values:
                    allowed |= cluster.rows_with(key, value)
                term_rows &= allowed
            rows |= term_rows
        return rows

    def _rejections(self, pod: PodInfo, cluster: Cluster) -> dict[str, int] | None:
        """Each reason with the rows it holds for (a row may have several), or None when
        the pod has no claims."""
        found = self._pre_filter(pod, cluster)
        if found is None:
            return None
        pre, claims = found
        everything = (1 << cluster.table.count) - 1
        if pre.message is not None:
            return {pre.message: everything}
        volumes = cluster.volumes
        out: dict[str, int] = {}
        candidates = everything if pre.rows is None else pre.rows
        if pre.rows is not None:
            out[NOT_ELIGIBLE] = everything & ~pre.rows
        # bound claims: the first whose volume is missing stops the check
        conflict = missing = 0
        remaining = candidates
        for pvc in claims.bound:
            pv = volumes.pv(pvc.volume_name)
            if pv is None:
                missing = remaining
                break
            rows = self._affinity_rows(cluster, pv, everything)
            conflict |= remaining & ~rows
            remaining &= rows
        bind = 0
        if claims.delayed:
            # a claim with a selected node fits that node only
            allowed = candidates
            selected = [pvc for pvc in claims.delayed if pvc.selected_node is not None]
            for pvc in selected:
                info = cluster.nodes.get(pvc.selected_node or "")
                allowed &= 0 if info is None else 1 << info.row
            bind = candidates & ~allowed
            # the others take, row by row, the smallest volume left that fits
            used: dict[str, int] = {}
            unmatched: list[tuple[PVCRecord, int]] = []
            for pvc in _sorted_by_request([p for p in claims.delayed if p.selected_node is None]):
                left = allowed
                prebound, fits = _candidates(volumes, pvc)
                for pv in (prebound,) if prebound is not None else fits:
                    if not left:
                        break
                    gain = left & self._affinity_rows(cluster, pv, everything) & ~used.get(pv.name, 0)
                    if gain:
                        used[pv.name] = used.get(pv.name, 0) | gain
                        left &= ~gain
                if left:
                    unmatched.append((pvc, left))
            # the claims to provision: the selected ones, and those left without a volume
            for pvc in selected:
                bind |= allowed & ~self._provisionable_rows(cluster, pvc, everything)
            for pvc, rows in unmatched:
                bind |= rows & ~self._provisionable_rows(cluster, pvc, everything)
        for reason, rows in (
            (REASON_NODE_CONFLICT, conflict),
            (REASON_BIND_CONFLICT, bind),
            (REASON_PV_NOT_EXIST, missing),
        ):
            if rows:
                out[reason] = rows
        return out

    def mask(self, pod: PodInfo, cluster: Cluster) -> bytes | None:
        rejections = self._rejections(pod, cluster)
        if rejections is None:
            return None
        rejected = 0
        for rows in rejections.values():
            rejected |= rows
        n = cluster.table.count
        return passing_mask(rejected, n)

    def reasons(self, pod: PodInfo, cluster: Cluster, rejected: bytes) -> dict[str, int]:
        rejections = self._rejections(pod, cluster) or {}
        rejected_rows = bits_of(rejected)
        counts = {reason: (rows & rejected_rows).bit_count() for reason, rows in rejections.items()}
        return {reason: n for reason, n in counts.items() if n}

    # --- one node: simulate's explanation, and Reserve -----------------------------------

    def _on_node(
        self, cluster: Cluster, claims: PodClaims, node: NodeInfo
    ) -> tuple[list[str], list[tuple[PVCRecord, PVRecord]], list[PVCRecord]]:
        """Upstream's ``FindPodVolumes`` on one node: its reasons, the volumes to bind and
        the claims to provision."""
        volumes = cluster.volumes
        nameless = dataclasses.replace(node, name="")
        reasons: set[str] = set()

        def reaches(pv: PVRecord) -> bool:
            return pv.node_affinity is None or any(term_matches(t, nameless) for t in pv.node_affinity)

        for pvc in claims.bound:
            pv = volumes.pv(pvc.volume_name)
            if pv is None:
                reasons.add(REASON_PV_NOT_EXIST)
                break
            if not reaches(pv):
                reasons.add(REASON_NODE_CONFLICT)
                break
        static: list[tuple[PVCRecord, PVRecord]] = []
        provisions: list[PVCRecord] = []
        if claims.delayed:
            to_provision = [pvc for pvc in claims.delayed if pvc.selected_node is not None]
            if any(pvc.selected_node != node.name for pvc in to_provision):
                reasons.add(REASON_BIND_CONFLICT)
                return [r for r in _ORDER if r in reasons], [], []
            chosen: set[str] = set()
            for pvc in _sorted_by_request([p for p in claims.delayed if p.selected_node is None]):
                prebound, fits = _candidates(volumes, pvc)
                if prebound is not None:
                    match = prebound if reaches(prebound) else None
                else:
                    match = next((pv for pv in fits if pv.name not in chosen and reaches(pv)), None)
                if match is None:
                    to_provision.append(pvc)
                    continue
                chosen.add(match.name)
                static.append((pvc, match))
            for pvc in to_provision:
                cls = volumes.classes.get(pvc.storage_class)
                if cls is None or not _provisioner(cls) or not _topology_matches(cls, node.labels):
                    reasons.add(REASON_BIND_CONFLICT)
                    provisions = []
                    break
                provisions.append(pvc)
        return [r for r in _ORDER if r in reasons], static, provisions

    def explain(self, pod: PodInfo, node: NodeInfo, cluster: Cluster) -> str | None:
        found = self._pre_filter(pod, cluster)
        if found is None:
            return None
        pre, claims = found
        if pre.message is not None:
            return pre.message
        if pre.rows is not None and not pre.rows >> node.row & 1:
            return NOT_ELIGIBLE
        reasons, _, _ = self._on_node(cluster, claims, node)
        return ", ".join(reasons) or None

    # --- Reserve, Unreserve, PreBind -----------------------------------------------------

    def reserve(self, state: dict[str, object], pod: PodInfo, node: str) -> str | None:
        """Assume the node's volume choice (upstream's ``AssumePodVolumes``); None, or why not."""
        self.unreserve(state, pod, node)
        cluster = self._cluster
        if cluster is None or not pod.volumes:
            return None
        claims = self.claims(pod, cluster.volumes)
        if isinstance(claims, str):
            return claims
        if claims.immediate:
            return UNBOUND_IMMEDIATE
        if not claims.delayed:
            return None  # every claim is bound: nothing to do
        info = cluster.nodes.get(node)
        if info is None:
            return f'node "{node}" not found'
        reasons, static, provisions = self._on_node(cluster, claims, info)
        if reasons:
            return ", ".join(reasons)
        volumes = cluster.volumes
        bindings = []
        for pvc, pv in static:
            assumed = bound_to_claim(pv, pvc)
            if assumed != pv:
                volumes.assume_pv(assumed)
            bindings.append(
                _Binding(assumed, pvc, assumed.bound_by_controller and not pv.bound_by_controller)
            )
        provisioned = []
        for pvc in provisions:
            assumed_pvc = dataclasses.replace(pvc, selected_node=node)
            volumes.assume_pvc(assumed_pvc)
            provisioned.append(assumed_pvc)
        self._reserved[pod.key] = _Reserved(node, bindings, provisioned)
        return None

    def unreserve(self, state: dict[str, object], pod: PodInfo, node: str) -> None:
        """Drop what :meth:`reserve` assumed (upstream's ``RevertAssumedPodVolumes``)."""
        reserved = self._reserved.pop(pod.key, None)
        if reserved is None or self._cluster is None:
            return
        self._restore(reserved.bindings, reserved.provisions)

    def _restore(self, bindings: list[_Binding], provisions: list[PVCRecord]) -> None:
        volumes = self._cluster.volumes if self._cluster is not None else None
        if volumes is None:
            return
        for binding in bindings:
            volumes.restore_pv(binding.pv.name)
        for pvc in provisions:
            volumes.restore_pvc(pvc.key)

    async def pre_bind(self, client: ApiClient, pod: PodInfo, node: str) -> None:
        """Write the reserved choice (upstream's ``bindAPIUpdate``): each volume's claim
        reference, then each claim's selected node, conditional on the resourceVersion it
        was assumed from. KubeError stops it; what was not written is no longer assumed."""
        reserved = self._reserved.pop(pod.key, None)
        if reserved is None or reserved.node != node:
            return
        bindings, provisions = reserved.bindings, reserved.provisions
        written = provisioned = 0
        try:
            for binding in bindings:
                await client.patch(res.PERSISTENT_VOLUMES, binding.pv.name, _claim_ref_patch(binding))
                written += 1
            for pvc in provisions:
                body = {
                    "metadata": {
                        "resourceVersion": pvc.resource_version,
                        "annotations": {ANN_SELECTED_NODE: node},
                    }
                }
                await client.patch(res.PERSISTENT_VOLUME_CLAIMS, pvc.name, body, pvc.namespace)
                provisioned += 1
        except KubeError:
            self._restore(bindings[written:], provisions[provisioned:])
            raise


def _claim_ref_patch(binding: _Binding) -> dict[str, Any]:
    pvc = binding.pvc
    meta: dict[str, Any] = {"resourceVersion": binding.pv.resource_version}
    if binding.marks_bound_by_controller:
        meta["annotations"] = {ANN_BOUND_BY_CONTROLLER: "yes"}
    return {
        "metadata": meta,
        "spec": {
            "claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": pvc.namespace,
                "name": pvc.name,
                "uid": pvc.uid,
                "resourceVersion": pvc.resource_version,
            }
        },
    }
