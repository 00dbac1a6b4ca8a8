"""The PodGroup status phase machine of upstream's PodGroup controller, as pure functions:
:func:`should_sync` (which PodGroup events the controller acts on) and
:func:`pod_group_status` (the merge patch that brings ``status`` up to date, or None).

From the PodGroup's phase and its member pods (the gang cache's children):

* ``""`` -> ``Pending``.
* ``Pending`` -> ``PreScheduling`` once there are at least ``minMember`` (> 0) pods;
  ``occupiedBy`` is set from the first pod's owners (``<namespace>/<owner>``, sorted, joined
  by ``,``). Upstream takes the first pod of a Go map walk, i.e. any pod; here it is the
  first by name, so the result does not change from one sync to the next.
* any later phase: back to ``Pending`` when no pod is left; else the counters are recounted
  (``running``/``succeeded``/``failed`` by pod phase, ``scheduled`` = bound members) and the
  phase is ``Scheduling`` while scheduled < min (``scheduleStartTime`` is stamped the first
  time), else ``Scheduled``; ``Running`` when scheduled and running + succeeded >= min;
  ``Failed`` when some failed and failed + running + succeeded >= min; ``Finished`` when
  succeeded >= min (the later rule wins).

The patch is ``{"status": {...}}`` with only the fields that changed (absent counters read
as 0), written as ``sigs.k8s.io`` PodGroups name them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from controlplane.scheduler.gang.member import GangMember
from koordinator.kube.timeutil import format_time, parse_time

__all__ = [
    "FAILED",
    "FINISHED",
    "PENDING",
    "PRE_SCHEDULING",
    "RUNNING",
    "SCHEDULED",
    "SCHEDULING",
    "pod_group_status",
    "should_sync",
]

PENDING = "Pending"
PRE_SCHEDULING = "PreScheduling"
SCHEDULING = "Scheduling"
SCHEDULED = "Scheduled"
RUNNING = "Running"
FINISHED = "Finished"
FAILED = "Failed"
#: upstream's ``maxGCTime``: a group scheduled this long after creation and not running is
#: left alone (its pods may have been garbage-collected)
MAX_GC_TIME_S = 48 * 3600.0

_COUNTERS = ("scheduled", "running", "succeeded", "failed")
_POD_RUNNING, _POD_SUCCEEDED, _POD_FAILED = "Running", "Succeeded", "Failed"


def _status(pod_group: Mapping[str, Any]) -> dict[str, Any]:
    raw: Mapping[str, Any] = pod_group.get("status") or {}
    status: dict[str, Any] = {
        "phase": str(raw.get("phase") or ""),
        "occupiedBy": str(raw.get("occupiedBy") or ""),
        "scheduleStartTime": raw.get("scheduleStartTime") or None,
    }
    for name in _COUNTERS:
        value = raw.get(name)
        status[name] = value if isinstance(value, int) and not isinstance(value, bool) else 0
    return status


def _min_member(pod_group: Mapping[str, Any]) -> int:
    value = (pod_group.get("spec") or {}).get("minMember")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _epoch(text: Any) -> float | None:
    if not text:
        return None
    try:
        return parse_time(str(text))
    except ValueError:
        return None


def should_sync(pod_group: Mapping[str, Any]) -> bool:
    """Whether an add/update of this PodGroup (or of one of its pods) is worth a sync:
    not once it is Finished or Failed, nor when it was scheduled in full more than 48 h
    after its creation and nothing runs."""
    status = _status(pod_group)
    if status["phase"] in (FINISHED, FAILED):
        return False
    started = _epoch(status["scheduleStartTime"])
    created = _epoch((pod_group.get("metadata") or {}).get("creationTimestamp"))
    return not (
        status["scheduled"] == _min_member(pod_group)
        and status["running"] == 0
        and started is not None
        and started - (created or 0.0) > MAX_GC_TIME_S
    )


def _occupied_by(pod: GangMember) -> str:
    return ",".join(sorted(f"{pod.namespace}/{owner}" for owner in pod.owners))


def pod_group_status(
    pod_group: Mapping[str, Any],
    pods: Iterable[GangMember],
    now: float,
    *,
    scheduled: int | None = None,
) -> dict[str, Any] | None:
    """The merge patch moving the PodGroup's status on, or None when nothing changes.

    ``pods`` are the group's members; ``scheduled`` overrides their bound count (the
    controller passes the gang cache's count, which PostBind raises before the pod
    informer catches up); ``now`` is epoch seconds."""
    members = sorted(pods, key=lambda p: p.key)
    minimum = _min_member(pod_group)
    old = _status(pod_group)
    new = dict(old)
    phase = old["phase"]
    if phase == "":
        new["phase"] = PENDING
    elif phase == PENDING:
        if minimum > 0 and len(members) >= minimum:
            new["phase"] = PRE_SCHEDULING
            if members[0].owners:
                new["occupiedBy"] = _occupied_by(members[0])
    elif not members:
        new["phase"] = PENDING
    else:
        new["running"] = sum(1 for p in members if p.phase == _POD_RUNNING)
        new["succeeded"] = sum(1 for p in members if p.phase == _POD_SUCCEEDED)
        new["failed"] = sum(1 for p in members if p.phase == _POD_FAILED)
        new["scheduled"] = scheduled if scheduled is not None else sum(1 for p in members if p.bound)
        if new["scheduled"] < minimum:
            new["phase"] = SCHEDULING
            if _epoch(old["scheduleStartTime"]) is None:
                new["scheduleStartTime"] = format_time(now)
        else:
            new["phase"] = SCHEDULED
        if new["phase"] == SCHEDULED and new["succeeded"] + new["running"] >= minimum:
            new["phase"] = RUNNING
        if new["failed"] and new["failed"] + new["running"] + new["succeeded"] >= minimum:
            new["phase"] = FAILED
        if new["succeeded"] >= minimum:
            new["phase"] = FINISHED
    changed = {key: value for key, value in new.items() if value != old[key]}
    return {"status": changed} if changed else None
