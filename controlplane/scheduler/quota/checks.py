"""The PreFilter check: may a pod's quota take its request now?

:func:`pre_filter` follows upstream's ``PreFilter`` step by step and returns a
:class:`QuotaCheck` whose message is upstream's text:

1. a pod no quota manages is skipped (``Skip``);
2. the pod's request, masked to the keys of its quota's ``max``, added to the quota's
   used, must fit the used limit (its runtime, or its ``max`` when ``enableRuntimeQuota`` is
   off): ``Insufficient quotas, quotaName: .., runtime: .., used: .., pod's request: ..,
   exceedDimensions: [..]``;
3. a non-preemptible pod must also fit the quota's ``min`` with the other non-preemptible
   pods: ``Insufficient non-preemptible quotas, quotaName: .., min: .., nonPreemptibleUsed:
   .., pod's request: .., exceedDimensions: [..]``;
4. with ``enableCheckParentQuota`` every ancestor (up to, not including, the root quota)
   must fit it too, each on the resources the pod requests: ``Insufficient quotas,
   quotaNameTopo: [..], runtime: .., used: .., pod's request: .., exceedDimensions: [..]``.

Resource lists print as ``cpu:2,memory:1Gi`` (sorted; ``<empty>`` when empty) and the
exceeded dimensions sorted, where Go's map order would make them random.

The :class:`PostFilterState` a check returns is what preemption's dry run adjusts
(upstream's ``AddPod``/``RemovePod`` on the cycle state) and asks :meth:`PostFilterState.fits`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum

from controlplane.scheduler.quota.args import ElasticQuotaArgs
from controlplane.scheduler.quota.forest import QuotaForest, QuotaRef
from controlplane.scheduler.quota.pods import QuotaPod
from controlplane.scheduler.quota.quantities import go_names, print_resource_list
from controlplane.scheduler.quota.tree import QuotaTree
from koordinator.api.extension.quota import ROOT_QUOTA_NAME
from koordinator.api.resourcelist import (
    ResourceList,
    add,
    less_than_or_equal,
    mask,
    subtract_non_negative,
)

__all__ = ["Code", "PostFilterState", "QuotaCheck", "check_parents", "pre_filter"]


class Code(StrEnum):
    SUCCESS = "Success"
    SKIP = "Skip"
    UNSCHEDULABLE = "Unschedulable"
    ERROR = "Error"


@dataclass
class PostFilterState:
    """The quota figures one scheduling cycle works with (upstream's ``PostFilterState``).

    ``used`` is a copy the dry run adjusts; membership is asked of the live tree, as
    upstream asks its live quota info.
    """

    skip: bool = True
    quota: QuotaRef | None = None
    used: ResourceList = field(default_factory=dict)
    non_preemptible_used: ResourceList = field(default_factory=dict)
    used_limit: ResourceList = field(default_factory=dict)
    #: the keys of the quota's max: what of a pod's request counts
    resource_names: tuple[str, ...] = ()
    tree: QuotaTree | None = field(default=None, repr=False, compare=False)

    def _counted(self, pod: QuotaPod) -> ResourceList | None:
        if self.skip or self.tree is None or self.quota is None:
            return None
        if not self.tree.contains_pod(self.quota.name, pod.key):
            return None
        return mask(pod.request, self.resource_names)

    def add_pod(self, pod: QuotaPod) -> None:
        """Dry run: ``pod`` is back on its node (``AddPod``); counts only the quota's own pods."""
        counted = self._counted(pod)
        if counted is not None:
            self.used = add(self.used, counted)

    def remove_pod(self, pod: QuotaPod) -> None:
        """Dry run: ``pod`` is evicted (``RemovePod``)."""
        counted = self._counted(pod)
        if counted is not None:
            self.used = subtract_non_negative(self.used, counted)

    def fits(self, pod: QuotaPod) -> bool:
        """Whether ``pod``'s request fits the used limit with the current (dry-run) used."""
        if self.skip:
            return True
        fits, _ = less_than_or_equal(add(self.used, mask(pod.request, self.resource_names)), self.used_limit)
        return fits

    def clone(self) -> PostFilterState:
        """A copy for one node's dry run (the cycle state's ``Clone``)."""
        return replace(self, used=dict(self.used))


@dataclass(frozen=True)
class QuotaCheck:
    code: Code
    message: str = ""
    state: PostFilterState = field(default_factory=PostFilterState)

    @property
    def ok(self) -> bool:
        return self.code in (Code.SUCCESS, Code.SKIP)


def _message(head: str, *fields: tuple[str, str]) -> str:
    """``head, name: value, name: value`` as upstream's ``fmt.Sprintf`` formats these messages."""
    return ", ".join([head, *(f"{name}: {value}" for name, value in fields)])


def _used_limit(tree: QuotaTree, quota: str, args: ElasticQuotaArgs) -> ResourceList:
    if args.enable_runtime_quota:
        return tree.runtime(quota)
    spec = tree.spec(quota)
    return dict(spec.max) if spec is not None else {}


def pre_filter(forest: QuotaForest, pod: QuotaPod, args: ElasticQuotaArgs | None = None) -> QuotaCheck:
    """Upstream's ElasticQuota ``PreFilter`` for ``pod`` against the forest's current state."""
    args = args or forest.args
    ref = forest.resolve(pod)
    if ref is None:
        return QuotaCheck(Code.SKIP)
    tree = forest.tree(ref.tree_id)
    if tree is None:
        return QuotaCheck(
            Code.ERROR,
            f"Could not find the specified ElasticQuotaManager for quota: {ref.name}, tree: {ref.tree_id}",
        )
    spec = tree.spec(ref.name)
    if spec is None:
        return QuotaCheck(Code.ERROR, "Could not find the specified ElasticQuota")
    state = PostFilterState(
        skip=False,
        quota=ref,
        used=tree.used(ref.name),
        non_preemptible_used=tree.non_preemptible_used(ref.name),
        used_limit=_used_limit(tree, ref.name, args),
        resource_names=tuple(spec.max),
        tree=tree,
    )
    request = mask(pod.request, spec.max)
    fits, exceeded = less_than_or_equal(add(request, state.used), state.used_limit)
    if not fits:
        return QuotaCheck(
            Code.UNSCHEDULABLE,
            _message(
                "Insufficient quotas",
                ("quotaName", ref.name),
                ("runtime", print_resource_list(state.used_limit)),
                ("used", print_resource_list(state.used)),
                ("pod's request", print_resource_list(request)),
                ("exceedDimensions", go_names(exceeded)),
            ),
            state,
        )
    if pod.non_preemptible:
        fits, exceeded = less_than_or_equal(add(request, state.non_preemptible_used), spec.min)
        if not fits:
            return QuotaCheck(
                Code.UNSCHEDULABLE,
                _message(
                    "Insufficient non-preemptible quotas",
                    ("quotaName", ref.name),
                    ("min", print_resource_list(spec.min)),
                    ("nonPreemptibleUsed", print_resource_list(state.non_preemptible_used)),
                    ("pod's request", print_resource_list(request)),
                    ("exceedDimensions", go_names(exceeded)),
                ),
                state,
            )
    if args.enable_check_parent_quota:
        failed = check_parents(tree, ref.name, request, args)
        if failed is not None:
            return QuotaCheck(failed.code, failed.message, state)
    return QuotaCheck(Code.SUCCESS, "", state)


def check_parents(
    tree: QuotaTree, quota: str, request: ResourceList, args: ElasticQuotaArgs
) -> QuotaCheck | None:
    """``checkQuotaRecursive`` from ``quota``'s parent upwards; None when every ancestor fits."""
    spec = tree.spec(quota)
    current = spec.parent if spec is not None else ROOT_QUOTA_NAME
    topology: Sequence[str] = [current, quota]
    while current != ROOT_QUOTA_NAME:
        parent_spec = tree.spec(current)
        if parent_spec is None:
            return QuotaCheck(
                Code.ERROR, f"Could not find the elasticQuota {current}, quotaNameTopo: {go_names(topology)}"
            )
        used = tree.used(current)
        limit = _used_limit(tree, current, args)
        fits, exceeded = less_than_or_equal(mask(add(request, used), request), limit)
        if not fits:
            return QuotaCheck(
                Code.UNSCHEDULABLE,
                _message(
                    "Insufficient quotas",
                    ("quotaNameTopo", go_names(topology)),
                    ("runtime", print_resource_list(limit)),
                    ("used", print_resource_list(used)),
                    ("pod's request", print_resource_list(request)),
                    ("exceedDimensions", go_names(exceeded)),
                ),
            )
        current = parent_spec.parent
        if current in topology:
            break  # a loop of parents: nothing more to check
        topology = [current, *topology]
    return None
