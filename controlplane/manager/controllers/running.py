"""Running the enabled controllers: caches first, then workers; stopping them gracefully or at once.

:class:`ControllerSet` is what the leader runs. On start it creates a fresh informer
factory (a follower holds no controller caches), registers the slo-controller-config cache
and every enabled controller, waits for the initial sync of all caches -- a reconcile that
ran before the NodeMetric cache is filled would see every node degraded -- and only then
starts the workers. Keys enqueued during the sync wait in the queues.

Cancellation stops the workers: with ``graceful`` (a shutdown) reconciles in progress may
finish, without it (leadership lost: another replica may be writing already) they are
cancelled at once. The caches are stopped last.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from controlplane.manager.controllers.colocationprofile.controller import ColocationProfileController
from controlplane.manager.controllers.colocationprofile.settings import (
    ColocationProfileSettings,
    ProfileRules,
)
from controlplane.manager.controllers.context import ControllerContext
from controlplane.manager.controllers.metrics import SLOControllerMetrics
from controlplane.manager.controllers.nodemetric import NodeMetricController
from controlplane.manager.controllers.noderesource.controller import NodeResourceController
from controlplane.manager.controllers.nodeslo import NodeSLOController
from controlplane.manager.controllers.quotaprofile import QuotaProfileController
from controlplane.manager.controllers.recommendation.controller import RecommendationController
from controlplane.manager.controllers.recommendation.settings import RecommendationSettings
from controlplane.manager.controllers.sloconfig import SLOConfigCache
from controlplane.reactor import Controller, ReactorMetrics, cancel_and_wait
from koordinator.api.features import CONTROL_PLANE_FEATURES, FeatureGates
from koordinator.api.sloconfig.config import CONFIG_NAME, CONFIG_NAMESPACE
from koordinator.kube.client import ApiClient
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer import InformerFactory

__all__ = [
    "CONTROLLERS",
    "CONTROLLER_GATES",
    "DEFAULT_CONTROLLERS",
    "OFF_BY_DEFAULT",
    "UNIMPLEMENTED",
    "ControllerSet",
    "ControllerSettings",
]

log = logging.getLogger(__name__)


class RunningController(Protocol):
    reactor: Controller

    def enqueue_all(self) -> None:
        """Queue every object the controller looks after (a resync)."""
        ...

    async def run(self) -> None: ...


#: name -> constructor, in the order they start
CONTROLLERS: dict[str, Callable[[ControllerContext], RunningController]] = {
    "colocationprofile": ColocationProfileController,
    "nodemetric": NodeMetricController,
    "noderesource": NodeResourceController,
    "nodeslo": NodeSLOController,
    "quotaprofile": QuotaProfileController,
    "recommendation": RecommendationController,
}
#: not run unless named (``*`` leaves them out): upstream has no recommendation controller,
#: and its informer needs the Recommendation CRD installed
OFF_BY_DEFAULT = frozenset({"recommendation"})
DEFAULT_CONTROLLERS = tuple(name for name in CONTROLLERS if name not in OFF_BY_DEFAULT)
#: enabled controllers that run only while this feature gate is on (upstream's ``Add``)
CONTROLLER_GATES = {"colocationprofile": "ColocationProfileController"}
#: upstream controllers this release does not have, and what is missing without them
UNIMPLEMENTED: dict[str, str] = {}


@dataclass(frozen=True)
class ControllerSettings:
    controllers: Sequence[str] = DEFAULT_CONTROLLERS
    config_namespace: str = CONFIG_NAMESPACE
    config_name: str = CONFIG_NAME
    node_strategy_name_need_check: bool = False
    workers: int = 4
    cache_sync_timeout_s: float = 120.0
    drain_timeout_s: float = 10.0
    #: who writes, as Events show it
    component: str = "slo-controller"
    host: str = ""
    gates: FeatureGates = field(default_factory=lambda: FeatureGates(CONTROL_PLANE_FEATURES))
    #: the noderesource plug-ins to run; ``None``: every built one
    noderesource_plugins: Sequence[str] | None = None
    colocation_profile: ColocationProfileSettings = field(default_factory=ColocationProfileSettings)
    #: the webhook's profile rules (:mod:`controlplane.manager.profilerules`); the colocationprofile
    #: controller needs them
    profile_rules: ProfileRules | None = None
    recommendation: RecommendationSettings = field(default_factory=RecommendationSettings)


class ControllerSet:
    """The enabled controllers with their caches; :meth:`run` is the leader's work."""

    def __init__(
        self,
        client: ApiClient,
        settings: ControllerSettings,
        *,
        metrics: SLOControllerMetrics,
        reactor_metrics: ReactorMetrics,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        unknown = [n for n in settings.controllers if n not in CONTROLLERS]
        if unknown:
            raise ValueError(f"unknown controllers: {', '.join(unknown)}")
        self.client = client
        self.settings = settings
        self.metrics = metrics
        self.reactor_metrics = reactor_metrics
        self.clock = clock
        self.graceful = True
        self.controllers: dict[str, RunningController] = {}
        self.factory: InformerFactory | None = None
        self.config: SLOConfigCache | None = None
        self.started = asyncio.Event()

    def build(self) -> ControllerContext:
        """Create the caches and controllers (a fresh set each time leadership is won)."""
        settings = self.settings
        # after the initial sync the caches move to the collector's permanent generation, so the
        # NodeMetric reports decoded every minute do not make collections rescan 150000 pod records
        factory = InformerFactory(self.client, freeze_after_sync=True)
        recorder = EventRecorder(self.client, settings.component, settings.host)
        config = SLOConfigCache(
            settings.config_namespace,
            settings.config_name,
            require_names=settings.node_strategy_name_need_check,
            recorder=recorder,
        )
        config.watch(factory)
        ctx = ControllerContext(
            client=self.client,
            factory=factory,
            config=config,
            metrics=self.metrics,
            reactor_metrics=self.reactor_metrics,
            recorder=recorder,
            clock=self.clock,
            workers=settings.workers,
            drain_timeout=settings.drain_timeout_s,
            gates=settings.gates,
            noderesource_plugins=settings.noderesource_plugins,
            colocation_profile=settings.colocation_profile,
            profile_rules=settings.profile_rules,
            recommendation=settings.recommendation,
        )
        self.factory = factory
        self.config = config
        self.controllers = {}
        for name in CONTROLLERS:
            if name not in settings.controllers:
                continue
            gate = CONTROLLER_GATES.get(name)
            if gate and not settings.gates.enabled(gate):
                log.info("controller %s not started: feature gate %s is disabled", name, gate)
                continue
            self.controllers[name] = CONTROLLERS[name](ctx)
        return ctx

    async def run(self) -> None:
        """Sync the caches, then run every controller until cancelled."""
        ctx = self.build()
        factory, config = ctx.factory, ctx.config
        tasks: list[asyncio.Task[None]] = []
        try:
            factory.start()
            async with asyncio.timeout(self.settings.cache_sync_timeout_s):
                await factory.wait_for_sync()
            config.mark_synced()
            tasks = [
                asyncio.create_task(controller.run(), name=f"controller-{name}")
                for name, controller in self.controllers.items()
            ]
            log.info("controllers started: %s", ", ".join(self.controllers))
            self.started.set()
            if not tasks:  # every enabled controller is behind a disabled gate: nothing to run
                await asyncio.Event().wait()
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()
        except asyncio.CancelledError:
            for controller in self.controllers.values():
                controller.reactor.drain_on_cancel = self.graceful
            raise
        except TimeoutError:
            raise RuntimeError(
                f"controller caches did not sync within {self.settings.cache_sync_timeout_s:.0f}s"
            ) from None
        finally:
            await cancel_and_wait(tasks)
            await config.close()
            self.started.clear()
            await factory.stop()
