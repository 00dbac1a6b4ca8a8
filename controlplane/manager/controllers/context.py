"""What every manager controller shares: API client, informers, config, metrics, events, time,
feature gates and the noderesource plug-in selection."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from controlplane.manager.controllers.colocationprofile.settings import (
    ColocationProfileSettings,
    ProfileRules,
)
from controlplane.manager.controllers.metrics import SLOControllerMetrics
from controlplane.manager.controllers.recommendation.settings import RecommendationSettings
from controlplane.manager.controllers.sloconfig import SLOConfigCache
from controlplane.reactor import Controller, ReactorMetrics, Reconciler
from koordinator.api.features import CONTROL_PLANE_FEATURES, FeatureGates
from koordinator.kube.client import ApiClient
from koordinator.kube.clock import SYSTEM_CLOCK, Clock
from koordinator.kube.events import EventRecorder
from koordinator.kube.informer import InformerFactory

__all__ = ["FIELD_MANAGER", "ControllerContext"]

#: fieldManager of every write the controllers make
FIELD_MANAGER = "koord-manager"


@dataclass
class ControllerContext:
    client: ApiClient
    factory: InformerFactory
    config: SLOConfigCache
    metrics: SLOControllerMetrics
    reactor_metrics: ReactorMetrics
    recorder: EventRecorder
    clock: Clock = SYSTEM_CLOCK
    #: concurrent reconciles per controller
    workers: int = 4
    #: seconds reconciles in progress may take to finish on a graceful stop
    drain_timeout: float = 10.0
    gates: FeatureGates = field(default_factory=lambda: FeatureGates(CONTROL_PLANE_FEATURES))
    #: the noderesource plug-ins to run (``--noderesource-plugins``); ``None``: every built one
    noderesource_plugins: Collection[str] | None = None
    #: the colocationprofile controller's flags, and the webhook's profile rules it runs
    colocation_profile: ColocationProfileSettings = field(default_factory=ColocationProfileSettings)
    profile_rules: ProfileRules | None = None
    #: the recommendation controller's flags
    recommendation: RecommendationSettings = field(default_factory=RecommendationSettings)

    def controller(
        self, name: str, reconcile: Reconciler, recorder: EventRecorder | None = None
    ) -> Controller:
        """A reactor controller with this context's workers, drain timeout, clock, metrics and
        events (``recorder`` names another component in them)."""
        return Controller(
            name,
            reconcile,
            workers=self.workers,
            clock=self.clock,
            metrics=self.reactor_metrics,
            recorder=recorder or self.recorder,
            drain_timeout=self.drain_timeout,
        )
