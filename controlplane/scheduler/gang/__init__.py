"""Coscheduling (gang scheduling) core of koord-scheduler, as a library: no framework
imports and no I/O.

It is fed PodGroup objects (``scheduling.sigs.k8s.io/v1alpha1`` dicts, as the API returns
them) and :class:`GangMember` records built from pods by :func:`gang_member`, keeps every
gang in a :class:`GangCache`, and answers the scheduler's questions through
:class:`PodGroupManager` (PreEnqueue, PreFilter, PostFilter, Permit, Unreserve, PreBind,
PostBind). :func:`pod_group_status` is the PodGroup status controller's phase machine.

Modules: :mod:`.args` (CoschedulingArgs), :mod:`.member` (pod records), :mod:`.spec` (gang
definitions), :mod:`.gangs` (gang and gang-group state), :mod:`.cache` (event handling),
:mod:`.manager` (the extension-point decisions), :mod:`.status` (PodGroup status),
:mod:`.messages` (upstream's wording).
"""

from controlplane.scheduler.gang.args import NAME, CoschedulingArgs, coscheduling_args
from controlplane.scheduler.gang.cache import GangCache
from controlplane.scheduler.gang.gangs import Gang, GangGroup
from controlplane.scheduler.gang.manager import (
    ALLOW,
    MAX_PERMIT_WAIT_S,
    REJECT,
    WAIT,
    PermitDecision,
    PodGroupManager,
    PostFilterOutcome,
    Rejection,
)
from controlplane.scheduler.gang.member import GangMember, gang_member, pod_key
from controlplane.scheduler.gang.spec import GangSpec, group_id, spec_from_member, spec_from_pod_group
from controlplane.scheduler.gang.status import pod_group_status, should_sync

__all__ = [
    "ALLOW",
    "MAX_PERMIT_WAIT_S",
    "NAME",
    "REJECT",
    "WAIT",
    "CoschedulingArgs",
    "Gang",
    "GangCache",
    "GangGroup",
    "GangMember",
    "GangSpec",
    "PermitDecision",
    "PodGroupManager",
    "PostFilterOutcome",
    "Rejection",
    "coscheduling_args",
    "gang_member",
    "group_id",
    "pod_group_status",
    "pod_key",
    "should_sync",
    "spec_from_member",
    "spec_from_pod_group",
]
