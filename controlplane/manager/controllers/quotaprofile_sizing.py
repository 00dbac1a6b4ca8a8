"""The pure core of the quotaprofile controller: the root ElasticQuota an ElasticQuotaProfile asks for.

Upstream's ``pkg/quota-controller/profile``, as functions of the profile and its nodes:

* tree id: FNV-1a (64 bit) of ``namespace/name``, in decimal (:func:`tree_id`);
* ``total`` = the ``status.allocatable`` of every node the profile's ``nodeSelector``
  matches, summed; ``unschedulable`` = the same over those nodes that are cordoned or not
  Ready. When ``spec.resourceRatio`` is set both are scaled by it (a ratio that does not
  parse or is not in ``(0, 1]`` counts as 1): CPU in milli-cores, everything else in whole
  units, each truncated; memory comes out in binary units, the rest in decimal ones;
* ``min[r]`` = ``total[r]`` (0 when no node has ``r``) and ``max[r]`` = ``MaxInt64/2000``
  for the keys of the profile's ``quota.scheduling.koordinator.sh/resource-keys``
  annotation (a JSON list, default ``["cpu", "memory"]``);
* labels ``profile`` (the profile's name), then ``spec.quotaLabels``, then ``tree-id`` and
  ``is-root: "true"``; annotations ``total-resource`` and ``unschedulable-resource`` (JSON
  ResourceLists, Go's encoding). Labels and annotations of the quota not named here are kept.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from koordinator.api import resourcelist
from koordinator.api.extension.annotations import annotations_of, labels_of
from koordinator.api.extension.quota import (
    ANNOTATION_RESOURCE_KEYS,
    ANNOTATION_TOTAL_RESOURCE,
    ANNOTATION_UNSCHEDULABLE_RESOURCE,
    LABEL_QUOTA_IS_ROOT,
    LABEL_QUOTA_PROFILE,
    LABEL_QUOTA_TREE_ID,
)
from koordinator.api.goparse import GoParseError, parse_float
from koordinator.api.jsonutil import JSONError, marshal, unmarshal
from koordinator.api.quantity import Format, Quantity
from koordinator.api.resourcelist import ResourceList, ResourceListError

__all__ = [
    "DEFAULT_RESOURCE_KEYS",
    "QUOTA_MAX",
    "NodeRecord",
    "ProfileQuota",
    "node_record",
    "profile_quota",
    "resource_keys",
    "resource_ratio",
    "scale",
    "tree_id",
]

log = logging.getLogger(__name__)

Obj = dict[str, Any]

DEFAULT_RESOURCE_KEYS = ("cpu", "memory")
#: every key's ``max``: ``math.MaxInt64 / 2000``
QUOTA_MAX = Quantity.from_int((2**63 - 1) // 2000)
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = 2**64 - 1


def tree_id(namespace: str, name: str) -> str:
    """The quota tree id of a profile: FNV-1a 64 of ``namespace/name``, decimal."""
    value = _FNV_OFFSET
    for byte in f"{namespace}/{name}".encode():
        value = ((value ^ byte) * _FNV_PRIME) & _MASK
    return str(value)


class NodeRecord(NamedTuple):
    """What the controller keeps of a Node."""

    name: str
    labels: Mapping[str, str]
    allocatable: ResourceList
    #: neither cordoned nor NotReady
    schedulable: bool


def _ready(node: Mapping[str, Any]) -> bool:
    for condition in (node.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def node_record(node: Obj) -> NodeRecord:
    """The informer transform of a Node; an unreadable ``allocatable`` counts as empty."""
    meta = node.get("metadata") or {}
    name = str(meta.get("name") or "")
    try:
        allocatable = resourcelist.parse((node.get("status") or {}).get("allocatable"), path="allocatable")
    except ResourceListError as exc:
        log.warning("quotaprofile: node %s: %s; counted as empty", name, exc)
        allocatable = {}
    unschedulable = (node.get("spec") or {}).get("unschedulable") is True
    return NodeRecord(name, dict(meta.get("labels") or {}), allocatable, not unschedulable and _ready(node))


def resource_ratio(profile: Mapping[str, Any]) -> float | None:
    """``spec.resourceRatio`` as a factor; ``None`` when unset, 1 when it is not in ``(0, 1]``."""
    raw = (profile.get("spec") or {}).get("resourceRatio")
    if raw is None:
        return None
    try:
        value = parse_float(str(raw))
    except GoParseError:
        return 1.0
    return value if 0 < value <= 1.0 else 1.0


def scale(value: Quantity, name: str, ratio: float) -> Quantity:
    """``MultiplyQuantity``: CPU by milli-cores, memory in binary units, others whole units."""
    if name == "cpu":
        return Quantity.from_milli(math.trunc(value.milli_value() * ratio))
    if name == "memory":
        return Quantity.from_int(math.trunc(value.value() * ratio), Format.BINARY_SI)
    return Quantity.from_int(math.trunc(value.value() * ratio))


def resource_keys(profile: Mapping[str, Any]) -> list[str]:
    """The profile's ``resource-keys`` annotation (a JSON list of names); the default when
    absent or unreadable, none for ``null`` (as Go's decoder leaves it)."""
    annotations = annotations_of(profile)
    if ANNOTATION_RESOURCE_KEYS not in annotations:
        return list(DEFAULT_RESOURCE_KEYS)
    raw = annotations[ANNOTATION_RESOURCE_KEYS]
    try:
        keys = unmarshal(raw)
    except JSONError:
        keys = DEFAULT_RESOURCE_KEYS  # not a list: reported below
    if keys is None:
        return []
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        log.warning("quotaprofile: failed to read %s %r; using cpu and memory", ANNOTATION_RESOURCE_KEYS, raw)
        return list(DEFAULT_RESOURCE_KEYS)
    return list(keys)


@dataclass(frozen=True)
class ProfileQuota:
    """The quota fields a profile owns."""

    min: ResourceList
    max: ResourceList
    labels: Mapping[str, str]
    annotations: Mapping[str, str]

    def spec(self) -> Obj:
        return {"min": resourcelist.to_json(self.min), "max": resourcelist.to_json(self.max)}

    def new_quota(self, namespace: str, name: str) -> Obj:
        """The ElasticQuota to create."""
        return {
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": dict(self.labels),
                "annotations": dict(self.annotations),
            },
            "spec": self.spec(),
        }

    def updated(self, quota: Mapping[str, Any]) -> Obj | None:
        """``quota`` with these fields, or ``None`` when it already has them."""
        labels = {**labels_of(quota), **self.labels}
        annotations = {**annotations_of(quota), **self.annotations}
        spec = quota.get("spec") or {}
        try:
            same_spec = resourcelist.equal(
                resourcelist.parse(spec.get("min"), path="spec.min"), self.min
            ) and resourcelist.equal(resourcelist.parse(spec.get("max"), path="spec.max"), self.max)
        except ResourceListError:
            same_spec = False
        if same_spec and labels == labels_of(quota) and annotations == annotations_of(quota):
            return None
        result: Obj = copy.deepcopy(dict(quota))
        result["metadata"]["labels"] = labels
        result["metadata"]["annotations"] = annotations
        result["spec"] = {**spec, **self.spec()}
        return result


def _sum(nodes: Sequence[NodeRecord]) -> ResourceList:
    total: ResourceList = {}
    for node in nodes:
        total = resourcelist.add(total, node.allocatable)
    return total


def profile_quota(
    profile: Mapping[str, Any], quota_tree_id: str, nodes: Sequence[NodeRecord]
) -> ProfileQuota:
    """What the quota of ``profile`` should hold, given the nodes its selector matched."""
    total = _sum(nodes)
    unschedulable = _sum([node for node in nodes if not node.schedulable])
    ratio = resource_ratio(profile)
    if ratio is not None:
        total = {name: scale(value, name, ratio) for name, value in total.items()}
        unschedulable = {name: scale(value, name, ratio) for name, value in unschedulable.items()}
    keys = resource_keys(profile)
    minimum = {key: total.get(key, Quantity()) for key in keys}
    maximum = dict.fromkeys(keys, QUOTA_MAX)
    labels = {LABEL_QUOTA_PROFILE: str((profile.get("metadata") or {}).get("name") or "")}
    quota_labels = (profile.get("spec") or {}).get("quotaLabels")
    if isinstance(quota_labels, Mapping):
        labels.update({str(k): str(v) for k, v in quota_labels.items()})
    labels[LABEL_QUOTA_TREE_ID] = quota_tree_id
    labels[LABEL_QUOTA_IS_ROOT] = "true"
    annotations = {
        ANNOTATION_TOTAL_RESOURCE: marshal(resourcelist.to_json(total)),
        ANNOTATION_UNSCHEDULABLE_RESOURCE: marshal(resourcelist.to_json(unschedulable)),
    }
    return ProfileQuota(minimum, maximum, labels, annotations)
