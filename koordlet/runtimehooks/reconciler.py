"""The reconciler transport: hooks applied to running pods' cgroups, on every node.

It runs the hooks for the three kube-QoS cgroups, every pod (pod level), every started
container (container level; init containers too, kata pods skipped) and the node-wide
level, and writes what they ask through the executor: the kube-QoS cgroups (and the node
switches hooks ask for there, such as group identity's sysctl) first, then for each pod
one leveled batch (the pod cgroup, then its containers), so a quota or cpuset that grows
reaches the parent first and one that shrinks the children first. A hook that fails is
logged and the pass goes on with the other hooks and pods whatever
``--runtime-hooks-plugin-failure-policy`` says (upstream's reconciler; the policy is the
runtime's answer to a failed NRI or proxy call).

It reconciles when the pods change (the states informer's AllPods callback, about every
10 s), when the NodeSLO, the topology or the node's labels and annotations change, and at
least every ``--runtime-hooks-reconcile-interval`` (10 s). Writes are cached by the
executor, so a reconcile that changes nothing writes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from koordinator.api.kubeqos import KubeQOSClass
from koordlet.executor import CgroupUpdate, ResourceUpdateExecutor, Update
from koordlet.executor.executor import Outcome
from koordlet.metrics import KoordletMetrics
from koordlet.runtimehooks.framework import HookManager
from koordlet.runtimehooks.protocol import ContainerContext, NodeFacts, PodContext, QOSContext, Stage
from koordlet.statesinformer.podmeta import PodMeta
from koordlet.system.errors import CgroupVanishedError, UnsupportedResourceError

log = logging.getLogger(__name__)


def _skip(pod: PodMeta) -> bool:
    if pod.is_terminated:
        return True
    runtime_class = str((pod.pod.get("spec") or {}).get("runtimeClassName") or "")
    return runtime_class.startswith("kata")


class Reconciler:
    def __init__(
        self,
        manager: HookManager,
        facts: Callable[[], NodeFacts],
        pods: Callable[[], Sequence[PodMeta]],
        executor: ResourceUpdateExecutor,
        metrics: KoordletMetrics | None = None,
        *,
        interval: float = 10.0,
    ) -> None:
        self.manager = manager
        self.facts = facts
        self.pods = pods
        self.executor = executor
        self.metrics = metrics
        self.interval = interval
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.runs = 0

    # --- planning --------------------------------------------------------------------------

    def plan_pod(self, pod: PodMeta, node: NodeFacts) -> tuple[list[list[CgroupUpdate]], list[Update]]:
        """(levels for the pod and its containers, other updates) the hooks ask for."""
        pod_ctx = self.manager.run_pod(PodContext(pod, node), Stage.PRE_RUN_POD_SANDBOX, runtime=False)
        owner = f"pod {pod.key}"
        levels = [pod_ctx.response.resources.updates(pod.cgroup_dir, owner), []]
        extra = list(pod_ctx.response.extra)
        for container in pod.containers:
            ctx = self.manager.run_container(
                ContainerContext(pod, container, node), Stage.PRE_UPDATE_CONTAINER_RESOURCES, runtime=False
            )
            levels[1] += ctx.response.resources.updates(container.cgroup_dir, f"{owner} {container.name}")
            extra += ctx.response.extra
        return levels, extra

    def plan_kube_qos(self, node: NodeFacts) -> list[Update]:
        updates: list[Update] = []
        for qos in KubeQOSClass:
            ctx = self.manager.run_kube_qos(QOSContext(qos, node))
            updates += ctx.response.resources.updates(ctx.cgroup_parent, f"kube-qos {qos}")
            updates += ctx.response.extra
        return updates

    # --- applying --------------------------------------------------------------------------

    def _observe(self, level: str, outcomes: Sequence[Outcome], started: float) -> None:
        if self.metrics is None:
            return
        expected = (CgroupVanishedError, UnsupportedResourceError)
        failed = any(o.error is not None and not isinstance(o.error, expected) for o in outcomes)
        elapsed = (time.monotonic() - started) * 1000
        labels = (self.metrics.node, level, "cgroup", "failed" if failed else "succeeded")
        self.metrics.runtime_hook_reconciler_invoked_duration_milliseconds.labels(*labels).observe(elapsed)

    def reconcile(self) -> list[Outcome]:
        """One pass over the node (blocking I/O: run it in a worker thread)."""
        node = self.facts()
        pods = [p for p in self.pods() if not _skip(p)]
        # parents first: the kube-QoS cgroups and the node switches hooks need before the pods
        started = time.monotonic()
        qos = self.executor.update_batch(self.plan_kube_qos(node))
        self._observe("kubeqos", qos, started)
        outcomes: list[Outcome] = []
        started = time.monotonic()
        for pod in pods:
            try:
                levels, extra = self.plan_pod(pod, node)
                outcomes += self.executor.leveled(levels)
                outcomes += self.executor.update_batch(extra)
            except Exception:  # one pod's trouble must not stop the pass (hooks' are caught already)
                log.exception("runtime hooks reconcile of pod %s failed", pod.key)
        self._observe("pod", outcomes, started)
        started = time.monotonic()
        node_wide = self.executor.update_batch(self.manager.run_all_pods(pods, node), cacheable=False)
        self._observe("allpods", node_wide, started)
        self.runs += 1
        return qos + outcomes + node_wide

    def trigger(self, *_: object) -> None:
        """Reconcile soon (a states-informer callback)."""
        self._wake.set()

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._wake.clear()
            try:
                await loop.run_in_executor(None, self.reconcile)
            except Exception:
                log.exception("runtime hooks reconcile failed")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.interval):
                    await self._wake.wait()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="runtime-hooks-reconciler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
