"""The extension points of a profile after a node is chosen, as upstream's framework runs
them: Reserve (in order; on a failure every reserve plug-in is unreserved, in reverse),
Permit (allow, wait with a timeout, or reject), PreBind (Koordinator's form: plug-ins change
an in-memory copy of the pod's metadata, sent as one merge patch, then those that write
other objects), Bind (the first plug-in that does not skip binds), PostBind, and
Koordinator's ForgetPod hooks.

The scheduler calls these around its assume and its binding task; ``simulate`` calls
Reserve and Permit, which never touch the API.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.scheduler.plugins.defaultprebind import PodDeletingError
from controlplane.scheduler.plugins.interface import (
    MAX_PERMIT_TIMEOUT_S,
    REJECT,
    RESERVE_POD_PATCH,
    WAIT,
    BindPlugin,
    CallingPreBindPlugin,
    CycleState,
    ForgetPodPlugin,
    ModifyingPreBindPlugin,
    PatchApplier,
    PermitPlugin,
    PodPatch,
    PostBindPlugin,
    PreEnqueuePlugin,
    ReservePlugin,
)
from controlplane.scheduler.podinfo import PodInfo
from controlplane.scheduler.registry import BIND, PERMIT, POST_BIND, PRE_BIND, PRE_ENQUEUE, RESERVE
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient

NO_BINDER = "no bind plug-in bound the pod"
#: (extension point, status, seconds): how a caller records a point's duration
Observer = Callable[[str, str, float], None]


class PointError(Exception):
    """A plug-in refused the pod at a point: ``plugin`` and its message."""

    def __init__(self, plugin: str, message: str) -> None:
        super().__init__(f"{plugin}: {message}")
        self.plugin = plugin
        self.message = message


@dataclass(frozen=True)
class Permit:
    #: (plug-in, message) when a plug-in rejected the pod
    rejected: tuple[str, str] | None = None
    #: plug-in -> seconds, for each plug-in that asks the pod to wait
    waits: Mapping[str, float] | None = None


class BindingPoints:
    """One profile's plug-ins at the points around binding, from its plug-in objects."""

    def __init__(self, points: Mapping[str, Iterable[str]], objects: Mapping[str, Any]) -> None:
        def serving(point: str, method: str) -> list[Any]:
            return [
                objects[name]
                for name in points.get(point, ())
                if name in objects and callable(getattr(objects[name], method, None))
            ]

        self.pre_enqueue: list[PreEnqueuePlugin] = serving(PRE_ENQUEUE, "pre_enqueue")
        self.reserve_plugins: list[ReservePlugin] = serving(RESERVE, "reserve")
        self.permit_plugins: list[PermitPlugin] = serving(PERMIT, "permit")
        self.modifiers: list[ModifyingPreBindPlugin] = serving(PRE_BIND, "modify")
        self.callers: list[CallingPreBindPlugin] = serving(PRE_BIND, "pre_bind")
        self.binders: list[BindPlugin] = serving(BIND, "bind")
        self.post_binders: list[PostBindPlugin] = serving(POST_BIND, "post_bind")
        #: DefaultPreBind, when the profile runs it: sends the one patch
        self.patcher: PatchApplier | None = next(iter(serving(PRE_BIND, "apply_patch")), None)
        #: ForgetPod hooks: every plug-in of the profile that has one
        self.forgetters: list[ForgetPodPlugin] = [
            p for p in objects.values() if callable(getattr(p, "forget_pod", None))
        ]

    def gate(self, pod: PodInfo) -> tuple[str, str] | None:
        """PreEnqueue: the first plug-in holding the pod back, with why."""
        for plugin in self.pre_enqueue:
            message = plugin.pre_enqueue(pod)
            if message is not None:
                return plugin.NAME, message
        return None

    def reserve(self, state: CycleState, pod: PodInfo, node: str) -> PointError | None:
        """Reserve in order; on a failure every reserve plug-in is unreserved."""
        for plugin in self.reserve_plugins:
            message = plugin.reserve(state, pod, node)
            if message is not None:
                self.unreserve(state, pod, node)
                return PointError(plugin.NAME, message)
        return None

    def unreserve(self, state: CycleState, pod: PodInfo, node: str) -> None:
        for plugin in reversed(self.reserve_plugins):
            plugin.unreserve(state, pod, node)

    def reserve_and_permit(
        self, state: CycleState, pod: PodInfo, node: str, observe: Observer | None = None
    ) -> tuple[PointError | None, Permit]:
        """Reserve, then Permit, as the scheduling cycle runs them: the plug-in refusing the
        pod (everything reserved is unreserved then), and Permit's answer. ``observe`` gets
        each point's status and duration."""
        started = time.perf_counter()
        refused = self.reserve(state, pod, node)
        if observe is not None:
            observe(
                "Reserve", "Success" if refused is None else "Unschedulable", time.perf_counter() - started
            )
        if refused is not None:
            return refused, Permit()
        started = time.perf_counter()
        permit = self.permit(state, pod, node)
        if observe is not None:
            status = "Success" if permit.rejected is None else "Unschedulable"
            observe("Permit", status, time.perf_counter() - started)
        if permit.rejected is None:
            return None, permit
        self.unreserve(state, pod, node)
        return PointError(*permit.rejected), permit

    def permit(self, state: CycleState, pod: PodInfo, node: str) -> Permit:
        """Permit: the first rejection wins; else the plug-ins that ask to wait, capped at
        upstream's 15 minutes."""
        waits: dict[str, float] = {}
        for plugin in self.permit_plugins:
            result = plugin.permit(state, pod, node)
            if result.status == REJECT:
                return Permit(rejected=(plugin.NAME, result.message))
            if result.status == WAIT:
                waits[plugin.NAME] = min(max(result.timeout, 0.0), MAX_PERMIT_TIMEOUT_S)
        return Permit(waits=waits or None)

    async def pre_bind(self, client: ApiClient, state: CycleState, pod: PodInfo, node: str) -> None:
        """The modifying plug-ins change one in-memory copy, sent as one patch; then the
        plug-ins writing other objects run. PointError or KubeError stop the binding."""
        patch = PodPatch()
        for modifier in self.modifiers:
            message = modifier.modify(state, pod, node, patch)
            if message is not None:
                raise PointError(modifier.NAME, message)
        body = patch.body()
        if body is not None and pod.reservation:
            state[RESERVE_POD_PATCH] = body  # no Pod object: the reservation's binder applies it
        elif body is not None and self.patcher is not None:
            try:
                await self.patcher.apply_patch(client, pod, body)
            except PodDeletingError as err:
                raise PointError(self.patcher.NAME, str(err)) from None
        elif body is not None:
            await client.patch(res.PODS, pod.name, body, pod.namespace)
        for caller in self.callers:
            await caller.pre_bind(client, pod, node)

    async def bind(self, client: ApiClient, state: CycleState, pod: PodInfo, node: str) -> str:
        """The first bind plug-in that does not skip binds the pod; its name."""
        for binder in self.binders:
            if await binder.bind(client, state, pod, node):
                return binder.NAME
        raise PointError(BIND, NO_BINDER)

    def post_bind(self, state: CycleState, pod: PodInfo, node: str) -> None:
        for plugin in self.post_binders:
            plugin.post_bind(state, pod, node)

    def forget(self, pod: PodInfo, node: str) -> None:
        for plugin in self.forgetters:
            plugin.forget_pod(pod, node)
