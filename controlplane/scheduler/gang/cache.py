"""The gang cache: every gang and gang group the scheduler knows, fed by PodGroup and pod
events (upstream's ``GangCache`` event handlers).

* A PodGroup added or updated (re)defines its gang -- a PodGroup overrides whatever a pod's
  annotations said, in either order; an update for a gang the cache does not hold is
  ignored, as upstream (the add event creates it).
* A pod of a gang is recorded as a child. A pod without the ``pod-group.scheduling.sigs.k8s.io``
  label defines its gang from its annotations if the gang is not defined yet (the first
  such pod wins). A pod that has a node counts as bound, which makes its group once
  satisfied. Updates of terminated pods are ignored.
* A gang goes away with its PodGroup, or -- when its pods' annotations defined it -- with
  its last pod. Its group goes once none of the group's gangs is left.

Every gang of a group shares one :class:`~controlplane.scheduler.gang.gangs.GangGroup`,
created when the first of them is initialized.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.scheduler.gang.args import CoschedulingArgs
from controlplane.scheduler.gang.gangs import Gang, GangGroup
from controlplane.scheduler.gang.member import GangMember, pod_key
from controlplane.scheduler.gang.spec import spec_from_member, spec_from_pod_group

__all__ = ["GangCache"]


class GangCache:
    def __init__(self, args: CoschedulingArgs | None = None) -> None:
        self.args = args or CoschedulingArgs()
        self._gangs: dict[str, Gang] = {}
        self._groups: dict[str, GangGroup] = {}

    # --- lookups -------------------------------------------------------------------------

    def get(self, gang_id: str) -> Gang | None:
        return self._gangs.get(gang_id)

    def gang_of(self, member: GangMember) -> Gang | None:
        return self._gangs.get(member.gang_id)

    def gangs(self) -> Mapping[str, Gang]:
        """Every gang by id (a read-only view)."""
        return self._gangs

    def group(self, group_id: str) -> GangGroup | None:
        return self._groups.get(group_id)

    def members(self, gang_id: str) -> tuple[GangMember, ...]:
        """The gang's children, by pod key (empty when the gang is unknown)."""
        gang = self._gangs.get(gang_id)
        if gang is None:
            return ()
        return tuple(gang.children[key] for key in sorted(gang.children))

    def bound_count(self, gang_id: str) -> int:
        """Bound members of the gang (PodGroup ``status.scheduled``)."""
        gang = self._gangs.get(gang_id)
        return len(gang.bound) if gang is not None else 0

    def waiting_members(self, gang_ids: tuple[str, ...]) -> tuple[GangMember, ...]:
        """The members of these gangs waiting at Permit, by pod key."""
        found: dict[str, GangMember] = {}
        for gang_id in gang_ids:
            gang = self._gangs.get(gang_id)
            if gang is not None:
                found.update(gang.waiting)
        return tuple(found[key] for key in sorted(found))

    # --- PodGroup events -----------------------------------------------------------------

    def on_pod_group_add(self, pod_group: Mapping[str, Any]) -> None:
        gang_id = _pod_group_id(pod_group)
        gang = self._gangs.get(gang_id)
        if gang is None:
            gang = self._gangs[gang_id] = Gang(gang_id)
        self._define(gang, pod_group)

    def on_pod_group_update(self, pod_group: Mapping[str, Any]) -> None:
        gang = self._gangs.get(_pod_group_id(pod_group))
        if gang is not None:
            self._define(gang, pod_group)

    def on_pod_group_delete(self, namespace: str, name: str) -> None:
        gang = self._gangs.get(pod_key(namespace, name))
        if gang is None:
            return
        gang.group.remove_waiting(gang.id)
        self._drop(gang)

    def _define(self, gang: Gang, pod_group: Mapping[str, Any]) -> None:
        spec = spec_from_pod_group(pod_group, self.args)
        if spec is not None:
            gang.update(spec)
        self._join_group(gang)

    # --- pod events ----------------------------------------------------------------------

    def on_pod_add(self, member: GangMember) -> None:
        gang = self._gangs.get(member.gang_id)
        if gang is None:
            gang = self._gangs[member.gang_id] = Gang(member.gang_id)
        if not member.in_pod_group:
            spec = spec_from_member(member, self.args)
            if spec is not None:
                gang.init(spec)
            self._join_group(gang)
        gang.set_child(member)
        if member.bound:
            gang.add_bound(member)

    def on_pod_update(self, member: GangMember) -> None:
        if not member.terminated:
            self.on_pod_add(member)

    def on_pod_delete(self, member: GangMember) -> None:
        gang = self._gangs.get(member.gang_id)
        if gang is not None and gang.delete_pod(member):
            self._drop(gang)

    # --- groups --------------------------------------------------------------------------

    def _join_group(self, gang: Gang) -> None:
        """Put an initialized gang in its group, creating the group with its first gang.
        (Upstream also files uninitialized annotation gangs under a one-gang group, which
        then sticks even after a valid pod names a larger group; waiting for the
        definition avoids that.)"""
        if not gang.initialized:
            return
        group = self._groups.get(gang.group_id)
        if group is None:
            group = self._groups[gang.group_id] = GangGroup(gang.gang_ids)
        gang.attach(group)

    def _drop(self, gang: Gang) -> None:
        self._gangs.pop(gang.id, None)
        if gang.group.initialized and not any(g in self._gangs for g in gang.group.gang_ids):
            self._groups.pop(gang.group.id, None)


def _pod_group_id(pod_group: Mapping[str, Any]) -> str:
    metadata: Mapping[str, Any] = pod_group.get("metadata") or {}
    return pod_key(str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
