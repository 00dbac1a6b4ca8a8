"""The state of one gang (:class:`Gang`) and of one gang group (:class:`GangGroup`), as
upstream's ``Gang`` and ``GangGroupInfo`` keep it.

A gang's pods are its *children*; of those, *pending* ones wait to be scheduled, *waiting*
ones passed Permit's Wait (assumed on a node, waiting for the rest of the group), *bound*
ones have a node. A gang is *initialized* once it has a :class:`GangSpec`; before that it
only collects children and fails every check.

The group keeps what its gangs share: whether the group was **once satisfied** (a member
got bound; irreversible), which gangs have members waiting at Permit, and the *binding
members* -- the waiting pods at the moment Permit let the group go, which PreBind reports in
the bind-gang annotations until every gang of the group has finished binding.

The scheduler runs on one event loop, so none of this takes a lock (upstream's mutexes guard
goroutines).
"""

from __future__ import annotations

from typing import Any

from controlplane.scheduler.gang.member import GangMember
from controlplane.scheduler.gang.spec import FROM_POD_ANNOTATION, GangSpec, group_id
from koordinator.api.extension.gang import (
    GANG_MODE_STRICT,
    MATCH_POLICY_ONCE_SATISFIED,
    MATCH_POLICY_ONLY_WAITING,
    MATCH_POLICY_WAITING_AND_RUNNING,
)

__all__ = ["Gang", "GangGroup"]


class GangGroup:
    """State shared by the gangs of one group (upstream's ``GangGroupInfo``)."""

    def __init__(self, gang_ids: tuple[str, ...], *, initialized: bool = True) -> None:
        self.gang_ids = gang_ids
        self.id = group_id(gang_ids)
        #: False only for the placeholder a gang holds until it is initialized
        self.initialized = initialized
        #: a member was bound once; never reset
        self.once_satisfied = False
        #: the gangs of the group with members waiting at Permit
        self.waiting_gangs: set[str] = set()
        #: pod keys of the members released together by the last Permit success
        self.binding_members: frozenset[str] | None = None

    def add_waiting(self) -> None:
        """A member was told to wait: the whole group counts as waiting."""
        self.waiting_gangs.update(self.gang_ids)

    def remove_waiting(self, gang_id: str) -> None:
        """``gang_id`` has no waiting member left; once no gang has, binding is over."""
        self.waiting_gangs.discard(gang_id)
        if not self.waiting_gangs:
            self.binding_members = None

    def clear_waiting(self) -> None:
        """The group was rejected: nothing waits and nothing is binding any more."""
        self.waiting_gangs.clear()
        self.binding_members = None


class Gang:
    """One gang: its spec (None until initialized), its children by pod key, and its group."""

    def __init__(self, gang_id: str) -> None:
        self.id = gang_id
        self.spec: GangSpec | None = None
        self.group = GangGroup((), initialized=False)
        self.children: dict[str, GangMember] = {}
        self.pending: dict[str, GangMember] = {}
        self.waiting: dict[str, GangMember] = {}
        self.bound: dict[str, GangMember] = {}

    # --- definition ----------------------------------------------------------------------

    @property
    def initialized(self) -> bool:
        return self.spec is not None

    @property
    def gang_ids(self) -> tuple[str, ...]:
        """The gang ids of its group (the gang alone until initialized)."""
        return self.spec.groups if self.spec is not None else (self.id,)

    @property
    def group_id(self) -> str:
        return group_id(self.gang_ids)

    @property
    def min_member(self) -> int:
        return self.spec.min_member if self.spec is not None else 0

    @property
    def mode(self) -> str:
        return self.spec.mode if self.spec is not None else GANG_MODE_STRICT

    @property
    def strict(self) -> bool:
        return self.mode == GANG_MODE_STRICT

    @property
    def match_policy(self) -> str:
        return self.spec.match_policy if self.spec is not None else MATCH_POLICY_ONCE_SATISFIED

    @property
    def wait_time_s(self) -> float:
        return self.spec.wait_time_s if self.spec is not None else 0.0

    @property
    def source(self) -> str:
        return self.spec.source if self.spec is not None else FROM_POD_ANNOTATION

    def init(self, spec: GangSpec) -> bool:
        """Initialize from ``spec`` unless already initialized (a pod's annotations never
        override a definition); whether it took."""
        if self.spec is not None:
            return False
        self.spec = spec
        return True

    def update(self, spec: GangSpec) -> None:
        """Take ``spec`` whatever came before (a PodGroup overrides pod annotations)."""
        self.spec = spec

    def attach(self, group: GangGroup) -> None:
        """Join ``group`` unless already in an initialized one (the first group sticks, as
        upstream's ``SetGangGroupInfo``). A bound member seen before the group existed
        still counts: the placeholder's once-satisfied mark carries over, where upstream
        drops it with the placeholder."""
        if self.group.initialized:
            return
        if self.group.once_satisfied:
            group.once_satisfied = True
        self.group = group

    # --- members -------------------------------------------------------------------------

    def set_child(self, member: GangMember) -> None:
        """Record (or refresh) a child; unplaced ones not waiting at Permit are pending."""
        self.children[member.key] = member
        if not member.bound and member.key not in self.waiting:
            self.pending[member.key] = member

    def add_waiting(self, member: GangMember) -> None:
        """Permit: the member is assumed and waits for its group."""
        self.waiting.setdefault(member.key, member)
        self.pending.pop(member.key, None)

    def remove_waiting(self, member: GangMember) -> None:
        """Unreserve: the member leaves Permit and is pending again."""
        if self.waiting.pop(member.key, None) is None:
            return
        child = self.children.get(member.key)
        if child is not None:
            self.pending[member.key] = child
        if not self.waiting:
            self.group.remove_waiting(self.id)

    def add_bound(self, member: GangMember) -> None:
        """The member got a node: bound, and the group is once satisfied for good."""
        self.waiting.pop(member.key, None)
        if not self.waiting:
            self.group.remove_waiting(self.id)
        self.pending.pop(member.key, None)
        self.bound[member.key] = member
        self.group.once_satisfied = True

    def delete_pod(self, member: GangMember) -> bool:
        """Forget a deleted pod; True when the gang should go too (an annotation-defined
        gang whose last pod left)."""
        self.children.pop(member.key, None)
        self.pending.pop(member.key, None)
        self.waiting.pop(member.key, None)
        if not self.waiting:
            self.group.remove_waiting(self.id)
        self.bound.pop(member.key, None)
        return self.source == FROM_POD_ANNOTATION and not self.children

    # --- questions -----------------------------------------------------------------------

    @property
    def once_satisfied(self) -> bool:
        return self.group.once_satisfied

    @property
    def satisfied_for_good(self) -> bool:
        """An ``once-satisfied`` gang whose group was satisfied: checks and rejections stop."""
        return self.match_policy == MATCH_POLICY_ONCE_SATISFIED and self.group.once_satisfied

    def valid_for_permit(self) -> bool:
        """Whether the gang lets its group through Permit under its match policy."""
        if self.spec is None:
            return False
        if self.match_policy == MATCH_POLICY_ONLY_WAITING:
            return len(self.waiting) >= self.min_member
        if self.match_policy == MATCH_POLICY_WAITING_AND_RUNNING:
            return len(self.waiting) + len(self.bound) >= self.min_member
        return len(self.waiting) >= self.min_member or self.group.once_satisfied

    def summary(self) -> dict[str, Any]:
        """The gang as upstream's ``GangSummary`` (a JSON-ready dict, pod keys sorted)."""
        return {
            "name": self.id,
            "waitTime": self.wait_time_s,
            "createTime": self.spec.created_at if self.spec is not None else 0.0,
            "mode": self.mode,
            "gangMatchPolicy": self.match_policy,
            "minRequiredNumber": self.min_member,
            "totalChildrenNum": self.spec.total_member if self.spec is not None else 0,
            "gangGroup": list(self.gang_ids),
            "children": sorted(self.children),
            "waitingForBindChildren": sorted(self.waiting),
            "boundChildren": sorted(self.bound),
            "onceResourceSatisfied": self.group.once_satisfied,
            "gangGroupId": self.group.id,
            "gangFrom": self.source,
            "hasGangInit": self.initialized,
        }
