"""Every quota tree of the scheduler, and which quota each pod belongs to.

:class:`QuotaForest` is the state the ElasticQuota plug-in keeps: it is fed ElasticQuota
objects, the cluster's allocatable total and pod records, and places every pod in one
quota of one :class:`~.tree.QuotaTree`.

**Trees.** Without ``MultiQuotaTree`` there is one tree, id ``""``. With it, a quota
labelled ``tree-id`` lives in that tree; the tree's total is the ``total-resource``
annotation of its root quota (labelled ``is-root=true``), and that total is taken out of
the default tree's total unless the root quota is labelled ``ignore-default-tree=true``.
The default tree's total is the cluster total the caller sets (Σ node allocatable) less
those. A quota stays in the tree it was first seen in. When a tree's root quota is deleted
the tree keeps its quotas but its total drops to nothing (upstream forgets the whole tree
and then cannot schedule the pods left in it).

**Pods** (``getPodAssociateQuotaNameAndTreeID``): the ``quota.scheduling.koordinator.sh/name``
label; without it, a quota named like the pod's namespace in that namespace, else the first
(by name) quota whose ``namespaces`` annotation lists the namespace, else the default
quota. A name no tree knows falls back to the default quota. Under ``DisableDefaultQuota``
only the label counts, and a pod with no known quota is not quota-managed. The pods'
``tree-id`` label (written by the manager's webhook) is not read: upstream's scheduler does
not read it either.

A pod bound to a node counts as used; the scheduler's Reserve assigns a pod before it is
bound (:meth:`QuotaForest.reserve`), Unreserve undoes it. Terminated pods (Succeeded,
Failed) are dropped, as the scheduler's pod informer does not list them; terminating pods
are dropped as the ``ElasticQuota*IgnoreTerminatingPod`` gates say, judged at each event.

When quotas come and go, pods are moved at once: pods of the default quota (and pods not
quota-managed) to a quota that now claims them (upstream does this every second), pods of
a deleted quota to wherever they now resolve. A moved pod keeps its assigned state.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.quota.args import ElasticQuotaArgs
from controlplane.scheduler.quota.gates import QuotaGates
from controlplane.scheduler.quota.pods import QuotaPod, is_ignored, quota_pod
from controlplane.scheduler.quota.spec import QuotaSpec, quota_spec
from controlplane.scheduler.quota.tree import SPECIAL_QUOTAS, QuotaSummary, QuotaTree
from koordinator.api.extension.quota import DEFAULT_QUOTA_NAME, ROOT_QUOTA_NAME
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import ResourceList, add, subtract
from koordinator.kube.clock import Now

__all__ = ["QuotaForest", "QuotaRef"]


@dataclass(frozen=True)
class QuotaRef:
    """A quota and the tree it lives in."""

    name: str
    tree_id: str = ""


class QuotaForest:
    """The default quota tree, the ``MultiQuotaTree`` trees, and where every pod is counted."""

    def __init__(
        self, args: ElasticQuotaArgs | None = None, gates: QuotaGates | None = None, now: Now = time.time
    ) -> None:
        self.args = args or ElasticQuotaArgs()
        self.gates = gates or QuotaGates()
        self._now = now
        self._trees: dict[str, QuotaTree] = {"": QuotaTree("", args=self.args, gates=self.gates)}
        self._quota_tree: dict[str, str] = dict.fromkeys((*SPECIAL_QUOTAS, ROOT_QUOTA_NAME), "")
        self._specs: dict[str, QuotaSpec] = {}
        #: tree root quota -> (tree id, its total-resource, counted against the default tree)
        self._tree_roots: dict[str, tuple[str, ResourceList, bool]] = {}
        self._cluster_total: ResourceList = {}
        self._pods: dict[str, QuotaPod] = {}
        self._placement: dict[str, QuotaRef] = {}

    # ---- quotas ---------------------------------------------------------------------------
    def upsert_quota(self, quota: Mapping[str, Any]) -> QuotaRef | None:
        """An ElasticQuota was added or changed; the tree it is counted in (None: ignored).

        Objects being deleted are ignored, as is the root quota's own object.
        Raises :class:`~.spec.QuotaSpecError` when ``spec.min``/``spec.max`` are unreadable.
        """
        spec = quota_spec(quota, guarantee_usage=self.gates.guarantee_usage)
        if spec.deleting or not spec.name:
            return None
        before = self._specs.get(spec.name)
        self._specs[spec.name] = spec
        if spec.name == ROOT_QUOTA_NAME:
            return QuotaRef(ROOT_QUOTA_NAME, "")
        tree_id = self._quota_tree.get(spec.name)
        if tree_id is None:
            tree_id = spec.tree_id if self.gates.multi_quota_tree else ""
            self._quota_tree[spec.name] = tree_id
        tree = self._trees.get(tree_id)
        if tree is None:
            tree = self._trees[tree_id] = QuotaTree(tree_id, args=self.args, gates=self.gates)
        if self.gates.multi_quota_tree and spec.is_tree_root and tree_id and spec.total_resource is not None:
            self._tree_roots[spec.name] = (tree_id, spec.total_resource, not spec.ignore_default_tree)
            tree.set_total(spec.total_resource)
            self._update_default_total()
        tree.upsert(spec)
        if before is None or (before.namespace, before.namespaces) != (spec.namespace, spec.namespaces):
            # only a new quota, or one claiming other namespaces, can claim pods
            self._move_pods(self._movable_pods())
        return QuotaRef(spec.name, tree_id)

    def delete_quota(self, name: str) -> bool:
        """An ElasticQuota was deleted; its pods move to where they now resolve."""
        self._specs.pop(name, None)
        tree_id = self._quota_tree.get(name)
        if name in SPECIAL_QUOTAS or name == ROOT_QUOTA_NAME or tree_id is None:
            return False
        del self._quota_tree[name]
        tree = self._trees[tree_id]
        stranded = {
            key: tree.is_assigned(name, key) for key, ref in self._placement.items() if ref.name == name
        }
        tree.delete(name)
        for key in stranded:
            del self._placement[key]
        root = self._tree_roots.pop(name, None)
        if root is not None:
            tree.set_total({})
            self._update_default_total()
        if tree_id and not tree.quota_names():
            del self._trees[tree_id]
        self._move_pods(sorted(stranded), stranded)
        return True

    def replace_quotas(self, quotas: Iterable[Mapping[str, Any]]) -> None:
        """A relist: forget quotas absent from ``quotas`` and upsert the others."""
        quotas = list(quotas)
        present = {str((quota.get("metadata") or {}).get("name") or "") for quota in quotas}
        for name in sorted(set(self._quota_tree) - present - SPECIAL_QUOTAS - {ROOT_QUOTA_NAME}):
            self.delete_quota(name)
        for quota in quotas:
            self.upsert_quota(quota)

    def set_cluster_total(self, total: Mapping[str, Quantity]) -> None:
        """Σ allocatable of the cluster's nodes (the default tree's total before deductions)."""
        self._cluster_total = dict(total)
        self._update_default_total()

    def _update_default_total(self) -> None:
        deducted: ResourceList = {}
        for name in sorted(self._tree_roots):
            _, total, counted = self._tree_roots[name]
            if counted:
                deducted = add(deducted, total)
        self._trees[""].set_total(
            subtract(self._cluster_total, deducted) if deducted else self._cluster_total
        )

    # ---- lookups --------------------------------------------------------------------------
    def tree(self, tree_id: str = "") -> QuotaTree | None:
        return self._trees.get(tree_id)

    def trees(self) -> list[QuotaTree]:
        return [self._trees[tree_id] for tree_id in sorted(self._trees)]

    def tree_of(self, quota: str) -> QuotaTree | None:
        """The tree counting ``quota`` (the root quota: the default tree)."""
        tree_id = self._quota_tree.get(quota)
        return self._trees.get(tree_id) if tree_id is not None else None

    def quota_names(self) -> list[str]:
        """Every quota of every tree (special quotas included, the root excluded), sorted."""
        return sorted(name for name in self._quota_tree if name != ROOT_QUOTA_NAME)

    def summary(self, quota: str) -> QuotaSummary | None:
        tree = self.tree_of(quota)
        return tree.summary(quota) if tree is not None else None

    def pod_record(self, pod: Mapping[str, Any]) -> QuotaPod:
        """The :class:`~.pods.QuotaPod` of a pod dict, overhead per ``ElasticQuotaIgnorePodOverhead``."""
        return quota_pod(pod, ignore_overhead=self.gates.ignore_pod_overhead)

    def quota_name_of(self, pod: QuotaPod) -> str:
        """Upstream's ``GetQuotaName``: the quota a pod asks for, before checking it exists."""
        if pod.quota_label or self.gates.disable_default_quota:
            return pod.quota_label
        own = self._specs.get(pod.namespace)
        if own is not None and own.namespace == pod.namespace:
            return own.name
        for name in sorted(self._specs):
            if pod.namespace in self._specs[name].namespaces:
                return name
        return DEFAULT_QUOTA_NAME

    def resolve(self, pod: QuotaPod) -> QuotaRef | None:
        """The quota counting ``pod`` (None: the pod is not quota-managed)."""
        name = self.quota_name_of(pod)
        if not name:
            return None
        tree_id = self._quota_tree.get(name)
        if tree_id is not None and name != ROOT_QUOTA_NAME:
            return QuotaRef(name, tree_id)
        if self.gates.disable_default_quota:
            return None
        return QuotaRef(DEFAULT_QUOTA_NAME, "")

    def placement(self, key: str) -> QuotaRef | None:
        """Where the pod ``namespace/name`` is counted now (None: nowhere)."""
        return self._placement.get(key)

    # ---- pods -----------------------------------------------------------------------------
    def add_pod(self, pod: QuotaPod) -> QuotaRef | None:
        """A pod appeared (informer add); the quota counting it, if any."""
        if pod.key in self._pods:
            return self.update_pod(pod)
        if pod.terminated or is_ignored(pod, self.gates, self._now()):
            return None
        self._pods[pod.key] = pod
        return self._place(pod, assigned=bool(pod.node_name))

    def update_pod(self, pod: QuotaPod) -> QuotaRef | None:
        """A pod changed (informer update); it may move between quotas or stop counting."""
        if pod.terminated or is_ignored(pod, self.gates, self._now()):
            self.remove_pod(pod.key)
            return None
        was = self._placement.get(pod.key)
        assigned = bool(pod.node_name)
        if was is not None:
            assigned = assigned or self._trees[was.tree_id].is_assigned(was.name, pod.key)
        self._pods[pod.key] = pod
        ref = self.resolve(pod)
        if (
            was is not None
            and ref == was
            and self._trees[was.tree_id].update_pod(was.name, pod, assigned=assigned)
        ):
            return was
        if was is not None:
            self._trees[was.tree_id].remove_pod(was.name, pod.key)
            del self._placement[pod.key]
        return self._place(pod, assigned=assigned)

    def remove_pod(self, key: str) -> QuotaPod | None:
        """A pod was deleted (or terminated); the record forgotten, if any."""
        pod = self._pods.pop(key, None)
        ref = self._placement.pop(key, None)
        if ref is not None:
            self._trees[ref.tree_id].remove_pod(ref.name, key)
        return pod

    def reserve(self, pod: QuotaPod) -> QuotaRef | None:
        """Reserve: count the pod as used in its quota (idempotent); the quota, if any.

        A pod the informer has not delivered yet is added first. Upstream adds the used a
        second time when Reserve runs twice for one pod; here a second call changes nothing.
        """
        ref = self._placement.get(pod.key)
        if ref is None:
            if pod.terminated:
                return None
            self._pods[pod.key] = pod
            ref = self._place(pod, assigned=False)
            if ref is None:
                return None
        self._trees[ref.tree_id].set_assigned(ref.name, pod.key, True)
        return ref

    def unreserve(self, pod: QuotaPod) -> QuotaRef | None:
        """Unreserve: the pod no longer counts as used (idempotent)."""
        ref = self._placement.get(pod.key)
        if ref is not None:
            self._trees[ref.tree_id].set_assigned(ref.name, pod.key, False)
        return ref

    def _place(self, pod: QuotaPod, *, assigned: bool) -> QuotaRef | None:
        ref = self.resolve(pod)
        if ref is None:
            return None
        tree = self._trees.get(ref.tree_id)
        if tree is None or not tree.has_quota(ref.name):
            return None
        tree.add_pod(ref.name, pod, assigned=assigned)
        self._placement[pod.key] = ref
        return ref

    def _movable_pods(self) -> list[str]:
        """Pods a new quota may claim: the default quota's and the unmanaged ones."""
        return [
            key
            for key in sorted(self._pods)
            if (ref := self._placement.get(key)) is None or ref.name == DEFAULT_QUOTA_NAME
        ]

    def _move_pods(self, keys: Iterable[str], assigned_before: Mapping[str, bool] | None = None) -> None:
        for key in keys:
            pod = self._pods.get(key)
            if pod is None:
                continue
            was = self._placement.get(key)
            ref = self.resolve(pod)
            if ref == was and was is not None:
                continue
            assigned = bool(pod.node_name) or bool(assigned_before and assigned_before.get(key))
            if was is not None:
                tree = self._trees[was.tree_id]
                assigned = assigned or tree.is_assigned(was.name, key)
                tree.remove_pod(was.name, key)
                del self._placement[key]
            self._place(pod, assigned=assigned)
