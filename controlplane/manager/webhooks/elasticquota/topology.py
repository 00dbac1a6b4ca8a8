"""The ElasticQuota tree the quota webhooks validate against, fed by an informer.

Quota names are global (the webhook and the scheduler treat them as unique across
namespaces). The tree hangs under the implicit ``koordinator-root-quota``; each quota names
its parent with the ``parent`` label. :class:`QuotaTopology` keeps:

* the *confirmed* quotas, as the informer last saw them;
* an *admitted* overlay: a quota this webhook just allowed to be created, changed or
  deleted counts immediately, so two concurrent requests cannot both pass a sum check
  (upstream mutates its map on admission for the same reason). Upstream never forgets such
  an entry, so a create refused later in the chain (another webhook, a conflict) blocks the
  name for good; here an overlay entry the informer has not confirmed within
  ``pending_ttl`` seconds is dropped, and dry-run requests leave no overlay at all.

Validation (:func:`validate_quota_self`, :func:`validate_topology`) is pure: it reads a
:class:`QuotaView` snapshot and returns an error message or ``None``. Messages keep
upstream's wording; resource names in them are sorted (Go prints maps in random order).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from koordinator.api import resourcelist
from koordinator.api.extension.annotations import AnnotationError, annotations_of, get_string_list, labels_of
from koordinator.api.extension.quota import (
    ANNOTATION_GUARANTEED,
    ANNOTATION_MAX_STRICT_CHECK_RESOURCE_KEYS,
    ANNOTATION_NAMESPACES,
    ANNOTATION_SHARED_WEIGHT,
    DEFAULT_QUOTA_NAME,
    LABEL_ALLOW_FORCE_UPDATE,
    LABEL_QUOTA_IS_PARENT,
    LABEL_QUOTA_IS_ROOT,
    LABEL_QUOTA_NAME,
    LABEL_QUOTA_PARENT,
    LABEL_QUOTA_TREE_ID,
    ROOT_QUOTA_NAME,
    SYSTEM_QUOTA_NAME,
)
from koordinator.api.jsonutil import JSONError, unmarshal
from koordinator.api.quantity import Quantity
from koordinator.api.resourcelist import ResourceList, ResourceListError
from koordinator.kube.clock import SYSTEM_CLOCK, Now

__all__ = [
    "QuotaError",
    "QuotaInfo",
    "QuotaTopology",
    "QuotaView",
    "validate_delete",
    "validate_quota_self",
    "validate_topology",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PROTECTED_QUOTAS = (SYSTEM_QUOTA_NAME, ROOT_QUOTA_NAME, DEFAULT_QUOTA_NAME)


class QuotaError(ValueError):
    """An ElasticQuota whose spec, labels or annotations cannot be read."""


def _names(keys: Iterable[str]) -> str:
    """Go's ``%v`` of a ``[]ResourceName``: ``[cpu memory]``."""
    return "[" + " ".join(sorted(keys)) + "]"


def _go_map(resources: Mapping[str, Quantity]) -> str:
    """Go's ``%v`` of a map, keys sorted: ``map[cpu:2 memory:1Gi]``."""
    return "map[" + " ".join(f"{name}:{resources[name]}" for name in sorted(resources)) + "]"


def annotation_resources(quota: Mapping[str, Any], key: str) -> ResourceList | None:
    raw = annotations_of(quota).get(key)
    if not raw:
        return None
    try:
        data = unmarshal(raw)
        if not isinstance(data, dict):
            raise QuotaError(
                f"quota.Annotation[{key}]'s value is invalid: expected a JSON object of quantities"
            )
        return resourcelist.parse(data, path=key)
    except (JSONError, ResourceListError) as exc:
        raise QuotaError(f"quota.Annotation[{key}]'s value is invalid: {exc}") from None


@dataclass(frozen=True, slots=True)
class QuotaInfo:
    """What the tree checks need to know about one quota."""

    name: str
    namespace: str = ""
    parent: str = ROOT_QUOTA_NAME
    is_parent: bool = False
    tree_id: str = ""
    is_tree_root: bool = False
    allow_force_update: bool = False
    min: ResourceList = field(default_factory=dict)
    max: ResourceList = field(default_factory=dict)
    guaranteed: ResourceList = field(default_factory=dict)
    shared_weight: ResourceList = field(default_factory=dict)
    namespaces: tuple[str, ...] = ()

    @classmethod
    def from_labels(cls, quota: Mapping[str, Any]) -> QuotaInfo:
        """What an ElasticQuota dict's name, namespace and labels say (no quantities)."""
        meta = quota.get("metadata") or {}
        labels = labels_of(quota)
        return cls(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            parent=labels.get(LABEL_QUOTA_PARENT) or ROOT_QUOTA_NAME,
            is_parent=labels.get(LABEL_QUOTA_IS_PARENT) == "true",
            tree_id=labels.get(LABEL_QUOTA_TREE_ID, ""),
            is_tree_root=labels.get(LABEL_QUOTA_IS_ROOT) == "true",
            allow_force_update=labels.get(LABEL_ALLOW_FORCE_UPDATE) == "true",
        )

    @classmethod
    def from_quota(cls, quota: Mapping[str, Any]) -> QuotaInfo:
        """Read an ElasticQuota dict; raises :class:`QuotaError` for unreadable ``min``,
        ``max`` or ``shared-weight``.

        The ``namespaces`` and ``guaranteed`` annotations are read as upstream reads them:
        one that does not parse counts as absent (upstream's ``GetAnnotationQuotaNamespaces``
        and ``GetGuaranteed`` errors are ignored), so such a quota is neither refused nor
        tracked without its tree data."""
        spec = quota.get("spec") or {}
        try:
            minimum = resourcelist.parse(spec.get("min"), path="spec.min")
            maximum = resourcelist.parse(spec.get("max"), path="spec.max")
        except ResourceListError as exc:
            raise QuotaError(str(exc)) from None
        try:
            namespaces = tuple(get_string_list(annotations_of(quota), ANNOTATION_NAMESPACES) or ())
        except AnnotationError:
            namespaces = ()
        try:
            guaranteed = annotation_resources(quota, ANNOTATION_GUARANTEED) or {}
        except QuotaError:
            guaranteed = {}
        weight = annotation_resources(quota, ANNOTATION_SHARED_WEIGHT)
        return replace(
            cls.from_labels(quota),
            min=minimum,
            max=maximum,
            guaranteed=guaranteed,
            shared_weight=weight if weight is not None else maximum,
            namespaces=namespaces,
        )


@dataclass(frozen=True)
class QuotaView:
    """A consistent snapshot of the tree: quotas by name and children by parent."""

    infos: Mapping[str, QuotaInfo]
    children: Mapping[str, frozenset[str]]

    @classmethod
    def of(cls, infos: Mapping[str, QuotaInfo]) -> QuotaView:
        children: dict[str, set[str]] = {ROOT_QUOTA_NAME: set()}
        for info in infos.values():
            children.setdefault(info.name, set())
            children.setdefault(info.parent, set()).add(info.name)
        return cls(dict(infos), {name: frozenset(kids) for name, kids in children.items()})

    def children_of(self, name: str) -> frozenset[str]:
        return self.children.get(name, frozenset())

    def quota_for_namespace(self, namespace: str) -> str | None:
        """The quota bound to a namespace: one named like it in it, else one listing it."""
        same = self.infos.get(namespace)
        if same is not None and same.namespace == namespace:
            return same.name
        for name in sorted(self.infos):
            if namespace in self.infos[name].namespaces:
                return name
        return None

    def quota_name_for_pod(self, pod: Mapping[str, Any], namespace: str, *, by_namespace: bool = True) -> str:
        """Label, else (``by_namespace``) the namespace's quota; unknown names fall back to the default quota.

        ``by_namespace=False`` is upstream's ``DisableDefaultQuota``: only the label names a quota.
        """
        name = labels_of(pod).get(LABEL_QUOTA_NAME) or ""
        if not name and by_namespace:
            name = self.quota_for_namespace(namespace) or ""
        return name if name in self.infos else DEFAULT_QUOTA_NAME


# ---- checks ------------------------------------------------------------------------------------


def _less_equal_completely(a: Mapping[str, Quantity], b: Mapping[str, Quantity]) -> bool:
    """Every value of ``a`` is at most the value in ``b`` (a key missing from ``b`` is zero)."""
    zero = Quantity()
    return all(value <= b.get(name, zero) for name, value in a.items())


def _negative(resources: Mapping[str, Quantity]) -> list[str]:
    return [name for name, value in resources.items() if value.sign() < 0]


def validate_quota_self(quota: Mapping[str, Any]) -> str | None:
    """The checks of one quota on its own (``validateQuotaSelfItem``)."""
    name = str((quota.get("metadata") or {}).get("name") or "")
    try:
        info = QuotaInfo.from_quota(quota)
    except QuotaError as exc:
        return f"{name} {exc}"
    if negative := _negative(info.max):
        return f"{name} quota.Spec.Max's value < 0, in dimensions :{_names(negative)}"
    if negative := _negative(info.min):
        return f"{name} quota.Spec.Min's value < 0, in dimensions :{_names(negative)}"
    if negative := _negative(info.shared_weight):
        key = ANNOTATION_SHARED_WEIGHT
        return f"{name} quota.Annotation[{key}]'s value < 0, in dimension :{_names(negative)}"
    for key in sorted(info.min):
        if key not in info.max:
            return f"resourceKey {key} of quota {name} is included in min, which is not included in max"
        if info.max[key] < info.min[key]:
            # Upstream prints both lists with %v, which shows each Quantity's internal struct
            # ({{2 0} {<nil>}  DecimalSI}); the same words here, with the quantities readable.
            return f"resourceKey {key} of quota {name} min :{_go_map(info.min)} > max,{_go_map(info.max)}"
    try:
        strict = get_string_list(annotations_of(quota), ANNOTATION_MAX_STRICT_CHECK_RESOURCE_KEYS) or []
        used = resourcelist.parse(((quota.get("status") or {}).get("used")), path="status.used")
    except (AnnotationError, ResourceListError) as exc:
        return (
            f"{name} quota.Annotation[{ANNOTATION_MAX_STRICT_CHECK_RESOURCE_KEYS}]'s value is invalid: {exc}"
        )
    for key in strict:
        if key not in used:
            continue
        if key not in info.max:
            return (
                f"resourceKey {key} of quota {name} is included in used, which is not included in max "
                "but should check max >= used"
            )
        if info.max[key] < used[key]:
            return f"resourceKey {key} of quota {name} max {info.max[key]} < used {used[key]}"
    return None


def _check_tree_id(view: QuotaView, old: QuotaInfo | None, new: QuotaInfo) -> str | None:
    if old is not None and old.tree_id != new.tree_id:
        return f"{new.name} tree id changed [{old.tree_id}] vs [{new.tree_id}]"
    if new.parent != ROOT_QUOTA_NAME:
        parent = view.infos.get(new.parent)
        if parent is not None and parent.tree_id != new.tree_id:
            return (
                f"{new.name} tree id is different from parent {parent.name}, "
                f"[{new.tree_id}] vs [{parent.tree_id}]"
            )
    for child_name in sorted(view.children_of(new.name)):
        child = view.infos.get(child_name)
        if child is not None and child.tree_id != new.tree_id:
            return (
                f"{new.name} tree id is different from child {child.name}, "
                f"[{new.tree_id}] vs [{child.tree_id}]"
            )
    return None


def _check_keys(view: QuotaView, new: QuotaInfo, update_resource_key: bool) -> str | None:
    prefix = "failed to check sub and parent group quotaKey, err: checkSubAndParentGroupQuotaKey failed: "
    if new.parent != ROOT_QUOTA_NAME:
        parent = view.infos[new.parent]
        if update_resource_key:
            if not set(new.max) <= set(parent.max):
                return f"{prefix}{new.name}'s max keys are not all included in {parent.name}'s"
        elif set(new.max) != set(parent.max):
            return f"{prefix}{parent.name}'s max keys are not the same with {new.name}'s"
        if not set(new.min) <= set(parent.min):
            return f"{prefix}{new.name}'s min keys are not all included in {parent.name}'s"
    for child_name in sorted(view.children_of(new.name)):
        child = view.infos.get(child_name)
        if child is None:
            return f"internal error: quotaInfoMap and quotaTree information out of sync, losed :{child_name}"
        if update_resource_key:
            if not set(child.max) <= set(new.max):
                return f"{prefix}{child_name}'s max keys are not all included in {new.name}'s"
        elif set(child.max) != set(new.max):
            return f"{prefix}{child_name}'s max keys are not the same with {new.name}'s"
        if not set(child.min) <= set(new.min):
            return f"{prefix}{child_name}'s min keys are not all included in {new.name}'s"
    return None


def _children_min(view: QuotaView, parent: str, skip: str) -> ResourceList:
    total: ResourceList = {}
    for child in view.children_of(parent):
        if child != skip and child in view.infos:
            total = resourcelist.add(total, view.infos[child].min)
    return total


def _check_min(view: QuotaView, new: QuotaInfo) -> str | None:
    if new.allow_force_update or new.is_tree_root:
        return None
    if new.parent != ROOT_QUOTA_NAME:
        siblings = resourcelist.add(_children_min(view, new.parent, new.name), new.min)
        if not _less_equal_completely(siblings, view.infos[new.parent].min):
            return f"checkMinQuotaSum all brothers' MinQuota > parent MinQuota, parent: {new.parent}"
    children = view.children_of(new.name)
    if children and not _less_equal_completely(_children_min(view, new.name, ""), new.min):
        return f"checkMinQuotaSum all children's MinQuota > current MinQuota, current: {new.name}"
    return None


def _check_parent_guaranteed(
    view: QuotaView, guarantee: ResourceList, own: str, parent_name: str
) -> str | None:
    seen: set[str] = set()
    while True:
        if parent_name == ROOT_QUOTA_NAME:
            return f"tree root quota {own} can't guarantee for min"
        if parent_name in seen:
            return f"quota tree has a cycle at {parent_name}"
        seen.add(parent_name)
        parent = view.infos.get(parent_name)
        if parent is None:
            return f"parent {parent_name} not found"
        total = dict(guarantee)
        for child in view.children_of(parent_name):
            if child != own and child in view.infos:
                total = resourcelist.add(total, view.infos[child].guaranteed)
        needed = resourcelist.max_of(parent.min, total)
        if _less_equal_completely(needed, parent.guaranteed):
            return None
        guarantee, own, parent_name = needed, parent.name, parent.parent


def _check_guaranteed(view: QuotaView, new: QuotaInfo) -> str | None:
    if new.allow_force_update or not new.tree_id or new.is_tree_root:
        return None
    if _less_equal_completely(new.min, new.guaranteed):
        return None
    problem = _check_parent_guaranteed(
        view, resourcelist.max_of(new.min, new.guaranteed), new.name, new.parent
    )
    return f"{problem} {new.name}" if problem else None


def validate_topology(
    view: QuotaView,
    old: QuotaInfo | None,
    new: QuotaInfo,
    *,
    has_bound_pods: bool = False,
    update_resource_key: bool = False,
    guarantee_usage: bool = False,
) -> str | None:
    """The checks of a quota against its parent and children (``validateQuotaTopology``).

    ``old`` is ``None`` on create. ``has_bound_pods`` says whether pods use the quota; it
    only matters when ``is-parent`` turns true.
    """
    if new.name == ROOT_QUOTA_NAME:
        return None
    if old is not None and old.is_parent != new.is_parent:
        if not new.is_parent and view.children_of(old.name):
            return f"quota has children, isParent is forbidden to modify as false, quotaName:{old.name}"
        if new.is_parent and has_bound_pods:
            return f"quota has bound pods, isParent is forbidden to modify as true, quotaName: {old.name}"
    if problem := _check_tree_id(view, old, new):
        return problem
    if new.parent == ROOT_QUOTA_NAME and not new.is_parent:
        return None
    if new.parent != ROOT_QUOTA_NAME:
        parent = view.infos.get(new.parent)
        if parent is None:
            return f"{new.name} has parentName {new.parent} but not find parentInfo in quotaInfoMap"
        if not parent.is_parent:
            return f"{new.name} has parentName {new.parent} but the parentQuotaInfo's IsParent is false"
        if new.parent == new.name:
            return f"{new.name} can not be its own parent"
    if problem := _check_keys(view, new, update_resource_key):
        return problem
    if problem := _check_min(view, new):
        return problem
    if guarantee_usage:
        return _check_guaranteed(view, new)
    return None


def validate_delete(view: QuotaView, name: str) -> str | None:
    if name in PROTECTED_QUOTAS:
        return f"can not delete quotaGroup :{name}"
    if name not in view.infos:
        return f"not found quota:{name}"
    if children := view.children_of(name):
        return f"delete quota failed, quota {name} has {len(children)} child quotas"
    return None


# ---- the live tree ------------------------------------------------------------------------------


class QuotaTopology:
    """Confirmed quotas from the informer plus the overlay of recent admissions."""

    def __init__(
        self,
        *,
        pending_ttl: float = 30.0,
        clock: Now = SYSTEM_CLOCK.monotonic,
        on_change: Callable[[QuotaInfo | None, QuotaInfo | None], None] | None = None,
    ) -> None:
        self._confirmed: dict[str, QuotaInfo] = {}
        self._overlay: dict[str, tuple[QuotaInfo | None, float]] = {}
        self._pending_ttl = pending_ttl
        self._clock = clock
        self._on_change = on_change
        self._view: QuotaView | None = None

    # -- informer feed --
    def upsert(self, quota: Mapping[str, Any]) -> None:
        """An ElasticQuota as the informer delivered it (malformed ones are logged and kept with defaults)."""
        try:
            info = QuotaInfo.from_quota(quota)
        except QuotaError as exc:
            name = str((quota.get("metadata") or {}).get("name") or "")
            log.warning("ElasticQuota %s has unreadable fields, tracking it without them: %s", name, exc)
            info = QuotaInfo.from_labels(quota)  # its place in the tree stays known
        if not info.name:
            return
        previous = self._confirmed.get(info.name)
        self._confirmed[info.name] = info
        self._overlay.pop(info.name, None)
        self._view = None
        if self._on_change is not None:
            self._on_change(previous, info)

    def remove(self, name: str) -> None:
        previous = self._confirmed.pop(name, None)
        self._overlay.pop(name, None)
        self._view = None
        if previous is not None and self._on_change is not None:
            self._on_change(previous, None)

    def replace_all(self, quotas: Iterable[Mapping[str, Any]]) -> None:
        for quota in quotas:
            self.upsert(quota)

    # -- admissions --
    def admit(self, name: str, info: QuotaInfo | None) -> None:
        """Count an admitted create/update (``info``) or delete (``None``) until the informer confirms it."""
        self._overlay[name] = (info, self._clock() + self._pending_ttl)
        self._view = None

    # -- reading --
    def view(self) -> QuotaView:
        now = self._clock()
        expired = [name for name, (_, deadline) in self._overlay.items() if deadline <= now]
        for name in expired:
            del self._overlay[name]
            self._view = None
        if self._view is None:
            infos = dict(self._confirmed)
            for name, (info, _) in self._overlay.items():
                if info is None:
                    infos.pop(name, None)
                else:
                    infos[name] = info
            self._view = QuotaView.of(infos)
        return self._view

    def summary(self) -> dict[str, Any]:
        """The tree as JSON (the ``/elasticQuota`` debug endpoint)."""
        view = self.view()

        def describe(info: QuotaInfo) -> dict[str, Any]:
            return {
                "name": info.name,
                "namespace": info.namespace,
                "parentName": info.parent,
                "isParent": info.is_parent,
                "treeID": info.tree_id,
                "min": resourcelist.to_json(info.min),
                "max": resourcelist.to_json(info.max),
                "sharedWeight": resourcelist.to_json(info.shared_weight),
                "namespaces": list(info.namespaces),
            }

        return {
            "quotaInfoMap": {name: describe(view.infos[name]) for name in sorted(view.infos)},
            "quotaHierarchyInfo": {name: sorted(kids) for name, kids in sorted(view.children.items())},
        }
