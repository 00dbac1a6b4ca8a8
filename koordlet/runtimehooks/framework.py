"""Hook framework: the hook base class and the manager that runs hooks for a stage.

A hook has a ``NAME`` (upstream's), says whether it is enabled (feature gate, NodeSLO,
host support — the reason is logged once when it changes), and implements any of:

* ``pod(ctx)`` — PreRunPodSandbox, and the reconciler's pod level;
* ``container(ctx)`` — PreCreateContainer / PreUpdateContainerResources, and the
  reconciler's container level;
* ``kube_qos(ctx)`` — the reconciler's kube-QoS level (every 10 s);
* ``all_pods(pods, node)`` — the reconciler's node level: state kept across pods (tc
  classes, resctrl groups ...) reconciled with the pods that exist, so what a removed pod
  had is removed;
* ``remove_pod(ctx)`` — PostStopPodSandbox.

Hooks at a stage run in name order. At a runtime stage (NRI, the runtime proxy) the
``Fail`` policy makes the first failure stop the stage; with ``Ignore`` (upstream's default,
``--runtime-hooks-plugin-failure-policy``) it is logged and the next hook runs. The
reconciler runs hooks with ``runtime=False``: as upstream's reconciler, it logs a failure and
goes on whatever the policy (which is the runtime's answer to a failed call), and the
disabled stages (``--runtime-hooks-disable-stages``, hook points the runtime is not asked
for) do not apply. Every invocation is timed in
``koordlet_runtime_hook_invoked_duration_milliseconds{hook,stage,status}``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence

from koordinator.api.runtimehook import FailurePolicy
from koordlet.executor import Update
from koordlet.metrics import KoordletMetrics
from koordlet.runtimehooks.protocol import (
    ContainerContext,
    NodeFacts,
    PodContext,
    QOSContext,
    Stage,
)
from koordlet.statesinformer.podmeta import PodMeta

log = logging.getLogger(__name__)


class HookError(Exception):
    """A hook failed at a stage whose failure policy is Fail."""


class HookBase:
    """Default no-op hook levels; a hook overrides the ones it serves."""

    NAME = ""
    #: the feature gate that switches the hook, or None (always on)
    GATE: str | None = None

    def enabled(self, node: NodeFacts) -> tuple[bool, str]:
        if self.GATE is not None and not node.gates.enabled(self.GATE):
            return False, f"feature gate {self.GATE} is off"
        return True, ""

    def pod(self, ctx: PodContext) -> None:
        return None

    def container(self, ctx: ContainerContext) -> None:
        return None

    def kube_qos(self, ctx: QOSContext) -> None:
        return None

    def all_pods(self, pods: Sequence[PodMeta], node: NodeFacts) -> list[Update]:
        return []

    def remove_pod(self, ctx: PodContext) -> None:
        return None


class HookManager:
    def __init__(
        self,
        hooks: Sequence[HookBase],
        metrics: KoordletMetrics | None = None,
        *,
        failure_policy: FailurePolicy = FailurePolicy.IGNORE,
        disabled_stages: Sequence[Stage] = (),
    ) -> None:
        names = [h.NAME for h in hooks]
        if len(set(names)) != len(names) or "" in names:
            raise ValueError(f"hooks need unique names: {names}")
        self.hooks = sorted(hooks, key=lambda h: h.NAME)
        self.metrics = metrics
        self.failure_policy = failure_policy
        self.disabled_stages = frozenset(disabled_stages)
        self._why: dict[str, str] = {}

    def enabled(self, node: NodeFacts) -> list[HookBase]:
        """The hooks enabled now; each change of a hook's state is logged once, with why."""
        out = []
        for hook in self.hooks:
            ok, why = hook.enabled(node)
            state = "" if ok else why
            if self._why.get(hook.NAME, None) != state:
                if ok:
                    log.info("runtime hook %s enabled", hook.NAME)
                else:
                    log.info("runtime hook %s disabled: %s", hook.NAME, why)
                self._why[hook.NAME] = state
            if ok:
                out.append(hook)
        return out

    def _invoke(
        self, hook: HookBase, stage: str, call: Callable[[], object], *, runtime: bool = False
    ) -> None:
        """Run one hook; a failure raises HookError only at a runtime stage under Fail."""
        started = time.monotonic()
        status = "succeeded"
        try:
            call()
        except Exception as err:
            status = "failed"
            if runtime and self.failure_policy is FailurePolicy.FAIL:
                raise HookError(f"hook {hook.NAME} failed at {stage}: {err}") from err
            log.exception("hook %s failed at %s (ignored)", hook.NAME, stage)
        finally:
            if self.metrics is not None:
                elapsed = (time.monotonic() - started) * 1000
                labels = (self.metrics.node, hook.NAME, stage, status)
                self.metrics.runtime_hook_invoked_duration_milliseconds.labels(*labels).observe(elapsed)

    def run_pod(
        self, ctx: PodContext, stage: Stage = Stage.PRE_RUN_POD_SANDBOX, *, runtime: bool = True
    ) -> PodContext:
        """Pod-level hooks. ``runtime``: a call of the runtime (NRI, proxy), where the failure
        policy and the disabled stages apply; False for the reconciler."""
        if runtime and stage in self.disabled_stages:
            return ctx
        for hook in self.enabled(ctx.node):
            call = hook.remove_pod if stage is Stage.POST_STOP_POD_SANDBOX else hook.pod
            self._invoke(hook, stage, functools.partial(call, ctx), runtime=runtime)
        return ctx

    def run_container(
        self,
        ctx: ContainerContext,
        stage: Stage = Stage.PRE_UPDATE_CONTAINER_RESOURCES,
        *,
        runtime: bool = True,
    ) -> ContainerContext:
        """Container-level hooks; ``runtime`` as for :meth:`run_pod`."""
        if runtime and stage in self.disabled_stages:
            return ctx
        for hook in self.enabled(ctx.node):
            self._invoke(hook, stage, functools.partial(hook.container, ctx), runtime=runtime)
        return ctx

    def run_kube_qos(self, ctx: QOSContext) -> QOSContext:
        for hook in self.enabled(ctx.node):
            self._invoke(hook, "KubeQOS", functools.partial(hook.kube_qos, ctx))
        return ctx

    def run_all_pods(self, pods: Sequence[PodMeta], node: NodeFacts) -> list[Update]:
        updates: list[Update] = []
        for hook in self.hooks:  # also disabled ones: they clean up what they created
            self._invoke(hook, "AllPods", functools.partial(_extend, updates, hook, pods, node))
        return updates


def _extend(updates: list[Update], hook: HookBase, pods: Sequence[PodMeta], node: NodeFacts) -> None:
    updates.extend(hook.all_pods(pods, node))
