"""The descheduling loop: every ``deschedulingInterval`` one round over the Ready nodes the
configuration's ``nodeSelector`` matches -- every profile's Deschedule plug-ins, then every
profile's Balance plug-ins -- with the framework's eviction limits reset at the start of the
round (upstream's ``descheduler.go``). A cluster of one node or none has no round ("eviction
causes service disruption or degradation"). MigrationController, the default Evict and
Filter plug-in, runs its PodMigrationJob controller beside the loop.

:class:`ClusterView` is the :class:`~controlplane.descheduler.framework.Handle` over the
informers; ``koord-descheduler explain`` builds the same plug-ins over objects read from
files (:mod:`.explain`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controlplane.descheduler.config import DeschedulerConfig, Profile
from controlplane.descheduler.framework import (
    BalancePlugin,
    DeschedulePlugin,
    EvictFilterPlugin,
    EvictionLimiter,
    Evictor,
    EvictPlugin,
    FilterPlugin,
    ProfileEvictor,
)
from controlplane.descheduler.lownodeload.args import NAME as LOW_NODE_LOAD
from controlplane.descheduler.lownodeload.plugin import LowNodeLoad
from controlplane.descheduler.metrics import DeschedulerMetrics
from controlplane.descheduler.migration.args import NAME as MIGRATION_CONTROLLER
from controlplane.descheduler.migration.controller import MigrationController
from controlplane.reactor.tasks import cancel_and_wait
from koordinator.api.selectors import label_selector_matches
from koordinator.kube import resources as res
from koordinator.kube.client import ApiClient
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer import Consumer
from koordinator.kube.informer.factory import InformerFactory
from koordinator.kube.informer.store import index_by_node_name
from koordinator.nodemetrics import NodeMetricRecord, node_metric_record_or_none

__all__ = ["ClusterView", "Descheduler", "ProfileRuntime", "is_ready_node"]

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


def is_ready_node(node: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or ()
        if isinstance(c, Mapping)
    )


def round_nodes(config: DeschedulerConfig, nodes: Sequence[Obj]) -> list[Obj]:
    """The Ready nodes the configuration's ``nodeSelector`` matches, by name."""
    selector = config.node_selector
    chosen = [
        n
        for n in nodes
        if is_ready_node(n)
        and (
            selector is None
            or label_selector_matches(selector, (n.get("metadata") or {}).get("labels") or {})
        )
    ]
    return sorted(chosen, key=lambda n: str((n.get("metadata") or {}).get("name") or ""))


@dataclass
class ClusterView:
    """What plug-ins read: pods by node, NodeMetrics, the time, and the profile's evictor."""

    pods_by_node: Callable[[str], Sequence[Obj]]
    metrics_by_node: Callable[[], Mapping[str, NodeMetricRecord]]
    clock: Clock = SYSTEM_CLOCK
    profile_evictor: Evictor | None = None

    def pods_on_node(self, node: str) -> Sequence[Obj]:
        return self.pods_by_node(node)

    def node_metrics(self) -> Mapping[str, NodeMetricRecord]:
        return self.metrics_by_node()

    def now(self) -> float:
        return self.clock.time()

    @property
    def evictor(self) -> Evictor:
        assert self.profile_evictor is not None
        return self.profile_evictor


@dataclass
class ProfileRuntime:
    """One profile's plug-ins."""

    name: str
    evictor: ProfileEvictor
    deschedule: list[DeschedulePlugin] = field(default_factory=list)
    balance: list[BalancePlugin] = field(default_factory=list)


def build_profile(
    profile: Profile,
    view_for: Callable[[], ClusterView],
    limiter: EvictionLimiter,
    migration: Callable[[Profile], EvictFilterPlugin],
    clock: Clock,
    *,
    dry_run: bool = False,
    on_evicted: Callable[[Obj, str, str], None] | None = None,
) -> ProfileRuntime:
    """The profile's plug-ins over a fresh view whose evictor is the profile's."""
    filters: list[FilterPlugin] = []
    evict_plugin: EvictPlugin | None = None
    if MIGRATION_CONTROLLER in profile.enabled("filter") or MIGRATION_CONTROLLER in profile.enabled("evict"):
        controller = migration(profile)
        if MIGRATION_CONTROLLER in profile.enabled("filter"):
            filters.append(controller)
        if profile.enabled("evict") == [MIGRATION_CONTROLLER]:
            evict_plugin = controller
    evictor = ProfileEvictor(filters, evict_plugin, limiter, dry_run, on_evicted)
    view = view_for()
    view.profile_evictor = evictor
    runtime = ProfileRuntime(profile.name, evictor)
    if LOW_NODE_LOAD in profile.enabled("balance"):
        runtime.balance.append(LowNodeLoad(profile.args[LOW_NODE_LOAD], view, clock))
    return runtime


class Descheduler:
    def __init__(
        self,
        config: DeschedulerConfig,
        client: ApiClient,
        factory: InformerFactory,
        *,
        recorder: EventRecorder,
        metrics: DeschedulerMetrics,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config
        self.clock = clock
        self.nodes: Consumer[Obj] = factory.informer(res.NODES).add_consumer(name="descheduler-nodes")
        self.pods: Consumer[Obj] = factory.informer(res.PODS).add_consumer(
            name="descheduler-pods", indexers={"node": index_by_node_name}
        )
        self.node_metrics: Consumer[NodeMetricRecord | None] | None = None
        if LOW_NODE_LOAD in config.plugin_names():
            self.node_metrics = factory.informer(res.NODE_METRICS).add_consumer(
                node_metric_record_or_none, name="descheduler-nodemetrics"
            )
        self.limiter = EvictionLimiter(
            config.max_pods_to_evict_per_node,
            config.max_pods_to_evict_per_namespace,
            config.max_pods_to_evict_total,
        )
        self.controllers: dict[str, MigrationController] = {}

        def migration(profile: Profile) -> MigrationController:
            controller = MigrationController(
                profile.args[MIGRATION_CONTROLLER],
                client,
                factory,
                recorder=recorder,
                metrics=metrics,
                clock=clock,
            )
            self.controllers[profile.name] = controller
            return controller

        self.profiles = [
            build_profile(p, self._view, self.limiter, migration, clock, dry_run=config.dry_run)
            for p in config.profiles
        ]
        self._tasks: list[asyncio.Task[None]] = []

    def _metrics(self) -> dict[str, NodeMetricRecord]:
        if self.node_metrics is None:
            return {}
        return {r.node: r for r in self.node_metrics.store.values() if r is not None}

    def _view(self) -> ClusterView:
        return ClusterView(lambda node: self.pods.store.by_index("node", node), self._metrics, self.clock)

    async def run_once(self) -> None:
        """One descheduling round."""
        nodes = round_nodes(self.config, self.nodes.store.values())
        if len(nodes) <= 1:
            log.error(
                "the cluster size is 0 or 1 meaning eviction causes service disruption or degradation: "
                "no descheduling round"
            )
            return
        self.limiter.reset()
        for profile in self.profiles:
            for deschedule in profile.deschedule:
                await deschedule.deschedule(nodes)
        for profile in self.profiles:
            for balance in profile.balance:
                await balance.balance(nodes)

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("descheduling round failed")
            if self.config.descheduling_interval_s <= 0:
                return
            await self.clock.sleep(self.config.descheduling_interval_s)

    async def run(self) -> None:
        """The rounds and the migration controllers, until cancelled."""
        self._tasks = [asyncio.create_task(self._loop())]
        self._tasks += [asyncio.create_task(c.run()) for c in self.controllers.values()]
        try:
            await asyncio.gather(*self._tasks)
        finally:
            await cancel_and_wait(self._tasks)
