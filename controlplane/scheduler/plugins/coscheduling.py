"""Coscheduling: all-or-nothing gangs (Koordinator's ``plugins/coscheduling``), the
scheduler's side of :mod:`controlplane.scheduler.gang`.

Gangs come from PodGroup objects (``scheduling.sigs.k8s.io/v1alpha1``, an informer only
profiles enabling the plug-in start) and from their pods' annotations. A gang's pod:

* **PreEnqueue / PreFilter**: waits until its gang and every gang of its group exist and
  have their minimum of members (upstream's basic check and message);
* **Permit**: waits, assumed on its node, until enough of its group wait too (by the match
  policy), then the whole group is allowed at once; the wait ends at the gang's waiting
  time (``waiting-time`` or ``scheduleTimeoutSeconds``, else ``defaultTimeout``);
* **PostFilter / Unreserve**: a member that fits nowhere, is rejected or times out takes
  its Strict gang group's waiting members with it (NonStrict ones keep waiting);
* **PreBind** writes the ``bind-gang-group-id`` and ``bind-gang-member-count`` annotations
  and **PostBind** counts the member bound.

The PodGroup status controller (:meth:`Coscheduling.controller`, run by the leading
scheduler) moves each PodGroup's ``status`` through upstream's phases.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from controlplane.scheduler.cluster import Cluster
from controlplane.scheduler.gang import (
    CoschedulingArgs,
    GangMember,
    PodGroupManager,
    Rejection,
    coscheduling_args,
    pod_group_status,
    pod_key,
    should_sync,
)
from controlplane.scheduler.gang import args as gang_args
from controlplane.scheduler.plugins.args import ArgsError
from controlplane.scheduler.plugins.interface import (
    ALLOW,
    REJECT,
    WAIT,
    CycleState,
    Handle,
    PermitResult,
    PodPatch,
    PreFilterResult,
    QueueNotifier,
)
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.queue import ClusterEvent
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.errors import KubeError, NotFoundError
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.informer.informer import Tombstone

log = logging.getLogger(__name__)

NAME = gang_args.NAME
#: a gang gained or lost members, or its PodGroup changed: the pods it held back may go on
GANG_CHANGE = ClusterEvent("PodGroup", "*")
#: how often the status controller writes the PodGroups that changed
STATUS_INTERVAL_S = 1.0
#: and how often it looks at every PodGroup again (upstream's resync)
STATUS_RESYNC_S = 30.0

Obj = Mapping[str, Any]


def args(raw: Mapping[str, Any] | None, path: str = NAME) -> CoschedulingArgs:
    """CoschedulingArgs; network-topology-aware placement is refused (not built)."""
    parsed = coscheduling_args(raw, path)
    if parsed.aware_network_topology:
        raise ArgsError(
            f"{path}.awareNetworkTopology: network-topology-aware gang placement is not supported"
        )
    return parsed


class Coscheduling:
    NAME = NAME
    reverse = False

    def __init__(self, args: CoschedulingArgs | None = None) -> None:
        self.args = args or coscheduling_args(None)
        self.manager = PodGroupManager(self.args)
        self.cache = self.manager.cache
        self._handle: Handle | None = None
        #: gang id -> its PodGroup object (the status controller's input)
        self.pod_groups: dict[str, Obj] = {}
        #: PodGroups whose status may have to move on
        self._dirty: set[str] = set()
        self._notifier = QueueNotifier(GANG_CHANGE)

    # --- wiring ----------------------------------------------------------------------------

    def bind_handle(self, handle: Handle) -> None:
        self._handle = handle
        self._notifier.handle = handle

    def attach(self, factory: InformerFactory, name: str) -> None:
        """Follow the PodGroups (``name`` tells this profile's consumer apart)."""
        factory.informer(res.POD_GROUPS).add_consumer(
            name=name,
            on_add=self.on_pod_group,
            on_update=lambda _, new: self.on_pod_group(new),
            on_delete=self.on_pod_group_deleted,
        )

    def on_pod_group(self, pod_group: Obj) -> None:
        meta = pod_group.get("metadata") or {}
        gang_id = pod_key(str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        if gang_id in self.pod_groups:
            self.cache.on_pod_group_update(pod_group)
        else:
            self.cache.on_pod_group_add(pod_group)
        self.pod_groups[gang_id] = pod_group
        self._changed(gang_id)

    def take_object(self, obj: Obj) -> None:
        """An object ``simulate`` was given: PodGroups define gangs."""
        if obj.get("kind") == "PodGroup":
            self.on_pod_group(obj)

    def describe(self, pod: PodInfo) -> tuple[str, Any] | None:
        """``simulate``'s report of the pod's gang (upstream's GangSummary)."""
        if pod.gang is None:
            return None
        gang = self.cache.gang_of(pod.gang)
        return (
            "gang",
            gang.summary() if gang is not None else {"name": pod.gang.gang_id, "hasGangInit": False},
        )

    def on_pod_group_deleted(self, pod_group: Obj | Tombstone[Obj]) -> None:
        if isinstance(pod_group, Tombstone):
            namespace, _, name = pod_group.key.rpartition("/")
        else:
            meta = pod_group.get("metadata") or {}
            namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        self.pod_groups.pop(pod_key(namespace, name), None)
        self.cache.on_pod_group_delete(namespace, name)
        self._changed(pod_key(namespace, name))

    def on_pod(self, old: PodInfo | None, new: PodInfo | None) -> None:
        """Keep the gang cache on the pods: members join, move on, and leave."""
        before = old.gang if old is not None else None
        after = new.gang if new is not None else None
        if before is None and after is None:
            return
        if after is None:
            assert before is not None
            self.cache.on_pod_delete(before)
            self._changed(before.gang_id)
            return
        if before is not None and before.gang_id != after.gang_id:
            self.cache.on_pod_delete(before)
            self._changed(before.gang_id)
            before = None
        if before is None:
            self.cache.on_pod_add(after)
        elif before != after:
            self.cache.on_pod_update(after)
        else:
            return
        self._changed(after.gang_id)

    def _changed(self, gang_id: str) -> None:
        """Note the gang for the status controller and tell the queue: the pods it held
        back are asked again."""
        self._dirty.add(gang_id)
        self._notifier.notify()

    # --- before a node is chosen ----------------------------------------------------------

    def pre_enqueue(self, pod: PodInfo) -> str | None:
        return self.manager.pre_enqueue(pod.gang) if pod.gang is not None else None

    def pre_filter(self, pod: PodInfo, cluster: Cluster) -> PreFilterResult | None:
        if pod.gang is None:
            return None
        message = self.manager.pre_filter(pod.gang)
        return PreFilterResult(message=message) if message is not None else None

    def post_filter(self, pod: PodInfo, fit_error: str) -> str:
        if pod.gang is None:
            return ""
        outcome = self.manager.post_filter(pod.gang, fit_error)
        if outcome.rejection is not None:
            self._reject(outcome.rejection)
        return outcome.message

    def extra(self, pod: PodInfo, cluster: Cluster, weight: int) -> None:
        """Upstream scores only with network-topology awareness (refused by :func:`args`):
        every node scores 0 here."""
        return

    def raw_score(self, pod: PodInfo, node: object) -> int:
        return 0

    # --- after -------------------------------------------------------------------------------

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> str | None:
        """Nothing to claim: a member counts as waiting from Permit on."""
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        if pod.gang is None:
            return
        rejection = self.manager.unreserve(pod.gang)
        if rejection is not None:
            self._reject(rejection)
        self._changed(pod.gang.gang_id)

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> PermitResult:
        if pod.gang is None:
            return PermitResult()
        decision = self.manager.permit(pod.gang)
        if decision.status == REJECT:
            return PermitResult(REJECT, message=decision.message)
        if decision.status == ALLOW:
            for member in decision.release:
                waiting = self._handle.waiting.get(member.uid) if self._handle is not None else None
                if waiting is not None:
                    waiting.allow(NAME)
            return PermitResult()
        return PermitResult(WAIT, timeout=decision.wait_s)

    def modify(self, state: CycleState, pod: PodInfo, node: str, patch: PodPatch) -> str | None:
        if pod.gang is None:
            return None
        for key, value in self.manager.pre_bind(pod.gang).items():
            if value is not None or key in pod.annotations:  # remove only what is there
                patch.annotations[key] = value
        return None

    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        if pod.gang is not None:
            self.manager.post_bind(pod.gang)
            self._changed(pod.gang.gang_id)

    def _reject(self, rejection: Rejection) -> None:
        if self._handle is None:
            return
        for member in rejection.pods:
            waiting = self._handle.waiting.get(member.uid)
            if waiting is not None:
                waiting.reject(NAME, rejection.message)

    # --- the PodGroup status controller --------------------------------------------------

    def status_patch(self, gang_id: str, now: float) -> dict[str, Any] | None:
        """The status merge patch the gang's PodGroup needs now (None: none, or no PodGroup)."""
        pod_group = self.pod_groups.get(gang_id)
        if pod_group is None or not should_sync(pod_group):
            return None
        members: list[GangMember] = list(self.cache.members(gang_id))
        return pod_group_status(pod_group, members, now, scheduled=self.cache.bound_count(gang_id))

    async def controller(self, client: ApiClient) -> None:
        """Write the PodGroups' status as their gangs move (until cancelled)."""
        last_resync = time.monotonic()
        while True:
            await asyncio.sleep(STATUS_INTERVAL_S)
            if time.monotonic() - last_resync >= STATUS_RESYNC_S:
                self._dirty.update(self.pod_groups)
                last_resync = time.monotonic()
            dirty, self._dirty = self._dirty, set()
            for gang_id in sorted(dirty):
                patch = self.status_patch(gang_id, time.time())
                if patch is None:
                    continue
                namespace, _, name = gang_id.partition("/")
                try:
                    # the PodGroup CRD has no status subresource: the object itself is patched
                    await client.patch(res.POD_GROUPS, name, patch, namespace)
                except NotFoundError:
                    continue
                except KubeError as err:
                    log.warning("PodGroup %s status not written: %s", gang_id, err)
                    self._dirty.add(gang_id)
