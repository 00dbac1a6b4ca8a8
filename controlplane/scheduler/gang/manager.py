"""The scheduler's questions about gangs, answered from the gang cache (upstream's
``PodGroupManager``). Each method is one extension point; none does I/O -- the plug-in
wiring turns the answers into statuses, Allow/Reject calls on waiting pods and patches.

=================  =====================================================================
point              method and answer
=================  =====================================================================
PreEnqueue         :meth:`~PodGroupManager.pre_enqueue`: None, or why the pod is held back
PreFilter          :meth:`~PodGroupManager.pre_filter`: None, or the rejection
                   (UnschedulableAndUnresolvable)
PostFilter         :meth:`~PodGroupManager.post_filter`: the Unschedulable message, and for a
                   Strict gang the waiting members of its group to reject
Permit             :meth:`~PodGroupManager.permit`: Allow (with the waiting members to
                   allow), Wait (with the timeout) or Reject
Unreserve          :meth:`~PodGroupManager.unreserve`: for a Strict gang, the waiting
                   members of its group to reject (a Permit timeout arrives here too: the
                   framework rejects the timed-out pod and unreserves it)
PreBind            :meth:`~PodGroupManager.pre_bind`: the bind-gang annotations to set or
                   remove
PostBind           :meth:`~PodGroupManager.post_bind`: records the member as bound
=================  =====================================================================

**Basic check** (PreEnqueue and PreFilter): the pod's gang exists and is initialized; then,
unless it is an ``once-satisfied`` gang whose group was once satisfied, every gang of its
group exists, is initialized and has at least ``minMember`` children. Upstream's
``basicGangRequirementsCheck`` counts the *current* gang's children for every member gang
(``gang`` where ``gangTmp`` was meant) and names the whole group as short; here each member
gang is counted and the short ones are named, as the spec states the rule.

**Permit**: the pod joins its gang's waiting set; when every gang of the group is valid under
its match policy (``only-waiting``: waiting >= min; ``waiting-and-running``: waiting + bound
>= min; ``once-satisfied``: waiting >= min or the group was once satisfied) the group goes:
Allow, and every other waiting member of the group is allowed; the waiting members become
the group's *binding members*. Otherwise Wait for the gang's wait time, capped at
kube-scheduler's 15-minute Permit limit.

**Rejection** (PostFilter after a member fits nowhere, Unreserve after a member failed or
timed out): nothing happens for an ``once-satisfied`` gang whose group was satisfied, nor
for a NonStrict gang (its other members keep waiting); a Strict gang's group is rejected as
a whole -- every member of the group waiting at Permit. PostFilter skips the rejection when
job-level preemption succeeded (``preempted``).

**PreBind** writes ``internal.scheduling.koordinator.sh/bind-gang-group-id`` (the group id)
and ``.../bind-gang-member-count`` (how many binding members), plus the deprecated
``scheduling.koordinator.sh/`` twins, on a binding member of a group released with more
than one member; on any other pod it removes the four keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.scheduler.gang import messages
from controlplane.scheduler.gang.args import CoschedulingArgs
from controlplane.scheduler.gang.cache import GangCache
from controlplane.scheduler.gang.member import GangMember
from koordinator.api.extension.gang import (
    ANNOTATION_BIND_GANG_GROUP_ID,
    ANNOTATION_BIND_GANG_MEMBER_COUNT,
    DEPRECATED_ANNOTATION_BIND_GANG_GROUP_ID,
    DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT,
)

__all__ = [
    "ALLOW",
    "MAX_PERMIT_WAIT_S",
    "REJECT",
    "WAIT",
    "PermitDecision",
    "PodGroupManager",
    "PostFilterOutcome",
    "Rejection",
]

#: Permit verdicts (the framework's ``PermitResult`` statuses)
ALLOW, WAIT, REJECT = "Allow", "Wait", "Reject"
#: kube-scheduler's cap on a Permit wait (its framework's ``maxTimeout``)
MAX_PERMIT_WAIT_S = 15 * 60.0


@dataclass(frozen=True, slots=True)
class Rejection:
    """Waiting members to reject, each with ``message`` (a member's ``uid`` finds the
    framework's waiting pod; members already gone from it are skipped by the caller)."""

    message: str
    pods: tuple[GangMember, ...]


@dataclass(frozen=True, slots=True)
class PermitDecision:
    """Permit's answer for one pod: :data:`ALLOW`, :data:`WAIT` or :data:`REJECT`."""

    status: str
    #: seconds to wait (WAIT only)
    wait_s: float = 0.0
    #: why it rejects (REJECT only)
    message: str = ""
    #: the group's other waiting members, to allow now (ALLOW only)
    release: tuple[GangMember, ...] = ()


@dataclass(frozen=True, slots=True)
class PostFilterOutcome:
    """PostFilter's answer: always Unschedulable, with ``message`` ("" for none)."""

    message: str = ""
    rejection: Rejection | None = None


class PodGroupManager:
    """Gang scheduling decisions over a :class:`GangCache` (create one per profile)."""

    def __init__(self, args: CoschedulingArgs | None = None, cache: GangCache | None = None) -> None:
        self.args = args or (cache.args if cache is not None else CoschedulingArgs())
        self.cache = cache or GangCache(self.args)

    # --- PreEnqueue / PreFilter ----------------------------------------------------------

    def pre_enqueue(self, member: GangMember) -> str | None:
        """None when the pod may enter the active queue, else why not."""
        return self._basic_check(member)

    def pre_filter(self, member: GangMember) -> str | None:
        """None when the pod may be scheduled now, else the rejection message."""
        return self._basic_check(member)

    def _basic_check(self, member: GangMember) -> str | None:
        gang = self.cache.gang_of(member)
        if gang is None:
            return messages.cannot_find_gang(member.gang_id, member.key)
        if not gang.initialized:
            return messages.gang_not_initialized(gang.id, member.key)
        if gang.satisfied_for_good:
            return None
        missing: list[str] = []
        uninitialized: list[str] = []
        short: list[str] = []
        for gang_id in gang.gang_ids:
            other = self.cache.get(gang_id)
            if other is None:
                missing.append(gang_id)
            elif not other.initialized:
                uninitialized.append(gang_id)
            elif len(other.children) < other.min_member:
                short.append(gang_id)
        return messages.basic_check_failed(gang.gang_ids, missing, uninitialized, short, gang.id, member.key)

    # --- PostFilter ----------------------------------------------------------------------

    def post_filter(
        self, member: GangMember, fit_error: str, *, preempted: bool = False
    ) -> PostFilterOutcome:
        """A member fits on no node (``fit_error``: the framework's FitError text)."""
        gang = self.cache.gang_of(member)
        if gang is None:
            return PostFilterOutcome(messages.pod_missing_gang(member.key, member.gang_name))
        if gang.satisfied_for_good:
            return PostFilterOutcome()
        if not gang.strict or preempted:
            return PostFilterOutcome()
        message = messages.post_filter_rejected(gang.id, member.name, fit_error, len(gang.waiting))
        gang.group.clear_waiting()
        rejection = Rejection(message, self.cache.waiting_members(gang.gang_ids))
        return PostFilterOutcome(messages.post_filter_status(gang.id), rejection)

    # --- Permit --------------------------------------------------------------------------

    def permit(self, member: GangMember) -> PermitDecision:
        gang = self.cache.gang_of(member)
        if gang is None:
            return PermitDecision(REJECT, message=messages.GANG_NOT_FOUND)
        gang.add_waiting(member)
        for gang_id in gang.gang_ids:
            other = self.cache.get(gang_id)
            if other is None or not other.valid_for_permit():
                gang.group.add_waiting()
                return PermitDecision(WAIT, wait_s=min(gang.wait_time_s, MAX_PERMIT_WAIT_S))
        waiting = self.cache.waiting_members(gang.gang_ids)
        if gang.group.binding_members is None:
            gang.group.binding_members = frozenset(m.key for m in waiting)
        return PermitDecision(ALLOW, release=tuple(m for m in waiting if m.key != member.key))

    # --- Unreserve -----------------------------------------------------------------------

    def unreserve(self, member: GangMember) -> Rejection | None:
        """The member left Permit (rejected, timed out, or its binding failed); for a Strict
        gang not yet satisfied for good, the group's waiting members to reject."""
        gang = self.cache.gang_of(member)
        if gang is None:
            return None
        gang.remove_waiting(member)
        if gang.satisfied_for_good or not gang.strict:
            return None
        pods = self.cache.waiting_members(gang.gang_ids)
        if not pods:
            return None
        return Rejection(messages.unreserve_rejected(gang.id, member.name), pods)

    # --- PreBind / PostBind --------------------------------------------------------------

    def binding_info(self, member: GangMember) -> tuple[str, int] | None:
        """(group id, binding member count) for a binding member of a group released with
        more than one member; None otherwise."""
        gang = self.cache.gang_of(member)
        if gang is None:
            return None
        members = gang.group.binding_members
        if not members or len(members) <= 1 or member.key not in members:
            return None
        return gang.group_id, len(members)

    def pre_bind(self, member: GangMember) -> dict[str, str | None]:
        """The pod annotations PreBind sets (a value) or removes (None)."""
        info = self.binding_info(member)
        if info is None:
            return dict.fromkeys(_BIND_KEYS)
        group_id, count = info
        return {
            ANNOTATION_BIND_GANG_GROUP_ID: group_id,
            ANNOTATION_BIND_GANG_MEMBER_COUNT: str(count),
            DEPRECATED_ANNOTATION_BIND_GANG_GROUP_ID: group_id,
            DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT: str(count),
        }

    def post_bind(self, member: GangMember) -> None:
        """The member is bound: counted in ``status.scheduled``; its group is once satisfied."""
        gang = self.cache.gang_of(member)
        if gang is not None:
            gang.add_bound(member)


_BIND_KEYS = (
    ANNOTATION_BIND_GANG_GROUP_ID,
    ANNOTATION_BIND_GANG_MEMBER_COUNT,
    DEPRECATED_ANNOTATION_BIND_GANG_GROUP_ID,
    DEPRECATED_ANNOTATION_BIND_GANG_MEMBER_COUNT,
)
